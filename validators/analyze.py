"""The library entry: log lines (or files) in, the validator report out.

Why one entry: the CLI (`python -m efa_validators parse`) and the pre-flight runner (which
streams launcher output) must reach the same verdict from the same text. Files are read
in binary and filtered with efa_validators.scan.linescan (fast, bounded memory); live lines go
through the same filter line by line.
"""

import functools
import gc
import os
import re
import sys
from contextlib import closing, contextmanager
from typing import BinaryIO, Callable, Iterable, Iterator, List, Optional, Sequence

from efa_validators.judge import signatures
from efa_validators.parse.facts import Facts
from efa_validators.parse.nccllog import (
    CHAIN_NEEDLES,
    NEEDLES,
    NET_CHANNEL_CLEAN,
    Event,
    channel_line,
    channel_ranks,
    classify,
    clean_net_tail,
    parse_text,
)
from efa_validators.parse.ranks import EVIDENCE_PER_KIND, NetRun
from efa_validators.report.assemble import build_report
from efa_validators.scan import wrapped
from efa_validators.scan.linescan import MAX_LINE, Region, scan
from efa_validators.scan.parscan import default_workers, scan_prepared
from efa_validators.scan.prefix import COLLECTOR_ENDS, strip_prefix

match_line, holds_line_needle = signatures.match_line, signatures.holds_line_needle
Progress = Callable[[str, int, int], None]  # (path, bytes parsed, its size): efa_validators.scan.progress

# lines nccl-tests prints: comments/headers ('#'), rows (their type column), the binary name
# nccl-tests: '#' lines (header, ranks, footer) and the binary's name; the rows between a table
# header and its footer are passed whole (linescan.Region), as they hold no distinctive substring
# ('busbw' and the footer words find a table and footer pasted without their '#')
NCCLTESTS_NEEDLES = ("#", "_perf", "busbw", "Out of bounds values", "Avg bus bandwidth", "nccl-tests version")
TABLE_MAX_ROWS = 4096


def _table_start(line: bytes) -> bool:
    return b"size" in line and b"count" in line and b"busbw" in line


def _table_end(line: bytes) -> bool:
    return b"Out of bounds" in line or b"Avg bus bandwidth" in line


def _table_stop(header: bytes, line: bytes) -> bool:
    """A region line (no needle) that ends a footerless nccl-tests table.

    Only a line from the header's own emitter (the same launcher prefix, byte for byte: never
    without one, where interleaved output could not be told apart) that starts, after its
    prefixes, with a letter (so no row: `-`/digit; no comment: `#`) and holds no NCCL head and no
    signature text. nccl-tests prints nothing else between its rows.
    """
    at = header.find(b"#")
    lead = header[: at if at >= 0 else header.find(b"size")]  # its launcher prefix (stdout/stderr differ)
    if not lead.strip() or not line.startswith(lead) or len(line) >= MAX_LINE:  # cut: never stops
        return False
    src, text = strip_prefix(line.decode("utf-8", "replace"))
    if src is None:
        return False
    text = text.strip()
    first = text[:1]
    if not ("a" <= first <= "z" or "A" <= first <= "Z") or "NCCL" in text:
        return False
    return not match_line(text)


# WRAP: may be a half of a wrapped message (scan/wrapped.py); CHAIN: may be a line of NCCL's return chain
NCCL, SIGNATURE, TESTS, REPLAY, WRAP, CHAIN = 1, 2, 4, 8, 16, 32


def needles() -> List[str]:
    return sorted(
        set(NEEDLES)
        | set(signatures.needles())
        | set(NCCLTESTS_NEEDLES)
        | set(wrapped.NEEDLES)
        | set(CHAIN_NEEDLES)
    )


def needle_groups() -> List[tuple]:
    """(needle, flag) pairs: which parser a line holding the needle can feed.

    The replay stand-in's mark (efa_validators.replay.REPLAY_MARK, as `validators run` detects it) is
    looked for too, so a saved replay log parsed later is marked REPLAY as the run's report was.
    """
    pairs = (
        [(n, NCCL) for n in NEEDLES]
        + [(n, SIGNATURE) for n in signatures.needles()]
        + [(n, TESTS) for n in NCCLTESTS_NEEDLES]
        + [(n, NCCL | SIGNATURE | WRAP) for n in wrapped.NEEDLES]
        + [(n, CHAIN) for n in CHAIN_NEEDLES]
        + [(_replay_mark(), REPLAY)]
    )
    merged = {}  # type: dict  # a needle named twice is looked for once, with both flags
    for n, f in pairs:
        merged[n] = merged.get(n, 0) | f
    return list(merged.items())


def _replay_mark() -> str:
    from efa_validators.report.contract import REPLAY_MARK

    return REPLAY_MARK


def _tests_parser():
    """A fresh nccl-tests reader for each input."""
    from efa_validators.parse.nccltests import NcclTestsParser

    return NcclTestsParser()


def prep_line(lineno: int, raw: str, cut: bool, flags: int) -> Optional[tuple]:
    """The part of a line's work that depends on the line alone, as plain data (a worker can do it):
    (lineno, cut, flags, source, text, events as (kind, head, text, data, cut, spliced), signature ids,
    replay mark seen); None when the line yields nothing."""
    if flags & CHAIN:  # a return-chain needle: NCCL's line only where it returns (` -> `), else nothing
        flags = (flags & ~CHAIN) | (NCCL if " -> " in raw else 0)
        if not flags:
            return None
    if flags & NCCL and raw[-1:] not in _EOL and not raw.endswith(COLLECTOR_ENDS):
        h = _headed(raw)
        if h is not None:  # one INFO head: what _prep_general reads of it, without its search for heads
            replay = bool(flags & REPLAY) and _replay_mark() in raw
            source, text, head, msg, free = h
            ev, err, msg_free = _read_msg(msg)
            if len(ev) == 1 and not err:  # most lines: one event, no tuple built in a loop
                ((kind, data),) = ev
                events = ((kind, head, text, data, False, False),)  # type: tuple
            else:
                events = tuple([(kind, head, text, data, False, False) for kind, data in ev])
                if err:
                    events += (("error", head, text, {"message": msg}, False, False),)
            # no needle in the head nor in the message: none in the line (_SPLIT_DECIDES), no signature
            hits = [] if free and msg_free else match_line(text)
            return lineno, cut, flags, source, text, events, hits, replay
    return _prep_general(lineno, raw, cut, flags)


_MSGS = {}  # type: dict  # a headed line's message -> (classify's events, error line, no signature needle)


def _read_msg(msg: str) -> tuple:
    """`classify(msg)` and whether `msg` holds no signature needle, kept per message (bounded): the same
    message is printed by every rank. In front of classify's own cache so that a headed line costs one
    look-up for both answers; classify's serves the general path (nccllog.parse_text)."""
    hit = _MSGS.get(msg)
    if hit is None:
        ev, err = classify(msg)
        hit = ev, err, _SPLIT_DECIDES and not holds_line_needle(msg)
        if len(_MSGS) >= 4096:
            _MSGS.clear()
        _MSGS[msg] = hit
    return hit


def _prep_general(lineno: int, raw: str, cut: bool, flags: int) -> Optional[tuple]:
    """`prep_line` for any line: its prefixes stripped and its text parsed as nccllog.parse_text does."""
    replay = bool(flags & REPLAY) and _replay_mark() in raw  # a cut last line comes with every flag set
    source, text = strip_prefix(raw)
    if not text:
        return (lineno, cut, flags, source, text, (), [], True) if replay else None
    events = ()  # type: tuple
    if flags & NCCL:
        events = tuple(
            (
                e.kind,
                None if e.host is None else (e.host, e.pid, e.tid, e.dev, e.level),
                e.text,
                e.data,
                e.cut,
                e.spliced,
            )
            for e in parse_text(text, lineno, None, source)
        )
    return lineno, cut, flags, source, text, events, match_line(text), replay


# `host:pid:tid [dev] NCCL INFO ` at the start of a line, behind an optional mpirun tag: a head that
# prefix.strip_prefix and nccllog._split_head read exactly so (a host that starts with a letter and holds
# no space, colon, bracket or bar; digits; a device with no space or bracket), checked in one C match
_HEAD = r"([a-z][^\s:\[\]|]{0,200}):(\d{1,20}):(\d{1,20}) \[([^\s\[\]]{0,64})\] NCCL INFO "
_FAST_HEAD = re.compile(r"(?:\[\d+,\d+\]<(?:stdout|stderr)>:)?" + _HEAD)
_HEADED = re.compile(r"(?:\[\d+,(\d+)\]<(?:stdout|stderr)>:)?" + _HEAD).match  # the tag's rank: the source
_EOL = ("\r", "\n")  # strip_prefix drops these: such a line takes the general path
# the last head _HEADED read: (the line's start, up to 'NCCL INFO ', source, where its host starts, head
# fields), one tuple replaced whole (a thread that parses beside another reads a consistent one)
_LAST = [None]  # type: list
_HEADS = {}  # type: dict  # the heads read (the line's start, up to 'NCCL INFO ') -> their _LAST tuple, bounded


def _headed(raw: str) -> Optional[tuple]:
    """(source, text, head as parse_text gives it, message, no signature needle in the text's head) of a
    line with one INFO head, else None.

    A head is read so whatever follows it (each field ends at a character it cannot hold): a line that
    starts with the last head read has that head (a thread prints its lines in a row) and shares its tuple;
    another head read before (threads and ranks interleave their lines) shares its kept tuple."""
    last = _LAST[0]
    if last is not None and raw.startswith(last[0]):
        head, source, at, fields, free = last
        end = len(head)
    else:
        m = _HEADED(raw)
        if m is None:
            return None
        end = m.end()
        head = raw[:end]
        last = _HEADS.get(head)
        if last is None:
            tag, host, pid, tid, dev = m.groups()
            fields = (host, pid, tid, dev, "INFO")
            last = (
                head,
                None if tag is None else "mpi:" + tag,
                m.start(2),
                fields,
                not holds_line_needle(raw[m.start(2) : end]),
            )
            if len(_HEADS) >= 8192:
                _HEADS.clear()
            _HEADS[head] = last
        _LAST[0] = last
        head, source, at, fields, free = last
    if raw.find(" NCCL ", end) >= 0:  # a second head: parse_text cuts the line there
        return None
    return source, raw[at:], fields, raw[end:], free


# a whole NET channel message with a clean tail, read after a _FAST_HEAD: its groups are the tail's
_NET_MSG = re.compile(NET_CHANNEL_CLEAN).match
_TAILS = {}  # type: dict  # (name, proxy, gdr, pci) as matched -> (net, gdr, proxy, pci), or False: no run
_SIG_NEEDLES = tuple(signatures.line_needles())
# A line read by _FAST_HEAD and _NET_MSG has as free text its host, device and network name; the rest is
# written in these characters and decimal digits. A needle that holds a character outside them, and no
# ':', '[', ']' or '/' (what bounds the free fields), can only lie inside a free field: then a line whose
# host, device and name hold no needle matches no signature (`match_line` is [] without being run).
# Checked here, for any catalog.
_SKELETON = frozenset("ChannelRingsendreceiveviaNETGDRDMAPCISharedNCCLINFO0123456789abcdefABCDEFx:.[]/()-> ")
_FIELDS_DECIDE = all(
    not any(c in n for c in ":[]/\n") and any(c not in _SKELETON and not c.isdecimal() for c in n)
    for n in _SIG_NEEDLES
)
_FREE = {}  # type: dict  # a head's (host, pid, dev) -> no needle in its host and device
# A needle is in a headed line's text (`host:pid:tid [dev] NCCL INFO msg`) iff it is in the head or in the
# message, unless it can lie across the two: a start of it would end the head, which always ends so.
_HEAD_END = "] NCCL INFO "
_SPLIT_DECIDES = not any(
    (_HEAD_END.endswith(n[:k]) if k <= len(_HEAD_END) else n[:k].endswith(_HEAD_END))
    for n in _SIG_NEEDLES
    for k in range(1, len(n))
)


def _holds_needle(*fields: str) -> bool:
    """Whether a signature needle is in one of `fields` (or fields cannot decide, see _FIELDS_DECIDE).
    The fields are tested joined by a newline, which no needle holds (a plain loop: once per rank)."""
    return not _FIELDS_DECIDE or holds_line_needle("\n".join(fields))


def _free(hk: tuple) -> bool:
    """No signature needle in the host and device of a head's (host, pid, dev), kept (a rank's lines
    interleave with other ranks')."""
    free = _FREE.get(hk)
    if free is None:
        free = not _holds_needle(hk[0], hk[2])
        if len(_FREE) >= 8192:
            _FREE.clear()
        _FREE[hk] = free
    return free


def _net_channel(raw: str) -> Optional[tuple]:
    """((host, pid, dev), text, (net, gdr, proxy, pci), highest rank named) for a whole NET channel line whose
    only fact is that channel; else None.

    Such a line folds as `Facts.add` would fold its one channel event (no error text, no signature,
    no second head), so a run of them folds without an Event per line (Facts.add_net_run). The lines
    _NET_MSG misses (a tail with more after it, a cut tail) are read here with the general parse."""
    if raw[-1:] == "\r" or raw.endswith(COLLECTOR_ENDS):  # strip_prefix's work: the general reading
        return None
    m = _FAST_HEAD.match(raw)
    if m is None:
        return None
    msg = raw[m.end() :]
    if " NCCL " in msg:
        return None
    d = channel_line(msg)
    if d is None or d.get("transport") != "NET":
        return None
    text = raw[m.start(1) :]
    if match_line(text):
        return None
    return (
        (m.group(1), m.group(2), m.group(4)),
        text,
        (d.get("net"), d.get("gdr"), d.get("proxy"), d.get("pci")),
        max(channel_ranks(msg) or (-1,)),
    )


def _tail_key(groups: tuple):
    """The run tail of a _NET_MSG match's groups; False where the line is no sure run's (an error line,
    a second head or a signature needle inside the network name: the only free text after the head)."""
    key = clean_net_tail(*groups)
    if key is None or " NCCL " in groups[0] or _holds_needle(groups[0]):
        key = False
    if len(_TAILS) >= 4096:
        _TAILS.clear()
    _TAILS[groups] = key
    return key


# `prepare` keeps the items of the last lines it read (_MEMO_LINES lines of at most _MEMO_LINE characters):
# a line printed again (every communicator's init from one thread, a log concatenated or looping) is not read
# again. An item depends on the line's text and flags only (prep_line is pure), and the fold only reads what
# items hold (classify's cache already shares their data among lines).
_MEMO_LINES, _MEMO_LINE = 4096, 512


def prepare(lines: Iterable) -> Iterator[tuple]:
    """Items for `Analysis.apply`, in the lines' order: `prep_line` of each line, except that consecutive
    whole NET channel lines of one rank become one run ((host, pid, dev), ranks.NetRun of them), and a
    message hard-wrapped over two lines is read as one (scan/wrapped.py: one line held).
    Pure and order-keeping."""
    key = clean = None  # the run's rank; the last rank whose host and device hold no signature needle
    run = {}  # type: dict  # the run's lines by tail (ranks.NetRun: the first KEEP as (lineno, text))
    top = None  # type: Optional[tuple]  # the run's highest rank named: (rank, lineno, text)
    head = hk = None  # the last _FAST_HEAD read (the line's start, up to 'NCCL INFO '): its (host, pid, dev)
    at = end = 0  # where its host starts, where it ends
    fast_head, net_msg, tails = _FAST_HEAD.match, _NET_MSG, _TAILS
    keep = EVIDENCE_PER_KIND
    memo = {}  # type: dict  # a line read before -> (its flags, its item less the line number), bounded
    held = None  # type: Optional[tuple]  # a line that may begin a wrapped message (scan/wrapped.py)
    for lineno, raw, cut, flags in lines:
        if flags == CHAIN and " -> " not in raw:  # `.cc:` in another program's line (glog's `file.cc:142]`)
            continue
        if held is not None:  # joined to this line and read in its place, or read as it is (one line held)
            first, held = held, None
            both = None if cut or lineno != first[0] + 1 else wrapped.rejoin(first[1], raw)
            if both is not None:
                lineno, raw, flags = first[0], both, (first[3] | flags) & ~WRAP
            else:
                item = prep_line(*first)
                if item is not None:
                    yield item
        if flags & WRAP and not cut:
            if run:
                yield key, NetRun(run, peer=top)
                key, run, top = None, {}, None
            held = (lineno, raw, cut, flags)
            continue
        if not cut and not flags & REPLAY and "via NET/" in raw:
            # a head is read so whatever follows it (each of its fields ends at a character it cannot hold):
            # a line that starts with the last head read has that head
            if head is None or not raw.startswith(head):
                h = fast_head(raw)
                head = None if h is None else raw[: h.end()]
                if h is not None:
                    hk, at, end = h.group(1, 2, 4), h.start(1), h.end()
            m = None if head is None else net_msg(raw, end)
            if m is not None:
                both = m.groups()
                groups = both[2:]
                tail = tails.get(groups)
                if tail is None:
                    tail = _tail_key(groups)
                if tail and (hk is clean or _free(hk)):
                    clean = hk
                    if hk is not key and hk != key:
                        if run:
                            yield key, NetRun(run, peer=top)
                        key, run, top = hk, {}, None
                    peer = max(int(both[0]), int(both[1]))
                    if top is None or peer > top[0]:
                        top = (peer, lineno, raw[at:])
                    g = run.get(tail)  # per line: a count past the first KEEP lines (no text cut out)
                    if g is None:
                        run[tail] = [(lineno, raw[at:])]
                    elif len(g) < keep:
                        g.append((lineno, raw[at:]))
                    else:
                        g.append(lineno)
                    continue
            fast = _net_channel(raw)  # the general reading (a tail with more after it, a needle in a field)
            if fast is not None:
                k, text, tail, peer = fast
                if k is not key and k != key:
                    if run:
                        yield key, NetRun(run, peer=top)
                    key, run, top = k, {}, None
                if top is None or peer > top[0]:
                    top = (peer, lineno, text)
                g = run.get(tail)
                if g is None:
                    run[tail] = [(lineno, text)]
                elif len(g) < keep:
                    g.append((lineno, text))
                else:
                    g.append(lineno)
                continue
        if run:
            yield key, NetRun(run, peer=top)
            key, run, top = None, {}, None
        seen = memo.get(raw)
        if seen is not None and seen[0] == flags and not cut:  # the line as read before: its item, renumbered
            if seen[1] is not None:
                yield (lineno,) + seen[1]
            continue
        item = prep_line(lineno, raw, cut, flags)
        if not cut and len(raw) <= _MEMO_LINE:
            if len(memo) >= _MEMO_LINES:
                memo.clear()
            memo[raw] = flags, None if item is None else item[1:]
        if item is not None:
            yield item
    if held is not None:
        item = prep_line(*held)
        if item is not None:
            yield item
    if run:
        yield key, NetRun(run, peer=top)


class Partial:
    """What a scan worker makes of its range (`fold_range`): the range's facts (Facts.export of a partial),
    whether a line held the replay mark, and the lines for the nccl-tests reader as (lineno, text): that
    reader stays in the parent, as its tables cross ranges (they are few lines). Line numbers count from
    the range's start; `Analysis.merge` adds it to the fold of the ranges before."""

    __slots__ = ("facts", "replay", "tests")

    def __init__(self, facts: tuple, replay: bool, tests: list) -> None:
        self.facts, self.replay, self.tests = facts, replay, tests


class _TestsLines(list):
    """Stands in for the nccl-tests reader in a worker: keeps what it would be fed, in order."""

    def feed(self, text: str, lineno: int, file: Optional[str]) -> None:
        self.append((lineno, text))


class Kept:
    """The processes the parent keeps, set once it is full (Facts.full): from then on a range's fold spills
    every other process as the parent's merge would, instead of sending it whole (a rank flood)."""

    def __init__(self) -> None:
        self.procs = None  # type: Optional[frozenset]


def fold_range(file: str, lines: Iterable, kept: Optional[Kept] = None) -> Iterator[Partial]:
    """The one Partial of a range's scanned lines: `prepare` and `Analysis.apply` done in the worker."""
    a = Analysis(partial=True)
    if kept is not None and kept.procs is not None:
        a.facts.keep_only(kept.procs)
    a._file = file
    a._parser = tests = _TestsLines()
    apply = a.apply
    for item in prepare(lines):
        apply(0, item)
    yield Partial(a.facts.export(), a.replay, list(tests))


class Analysis:
    """Feed lines from one or more inputs, then `report()`; holds only folded facts.

    `partial`: the fold of one range of a file (fold_range), not to be reported: see facts.Facts."""

    def __init__(self, partial: bool = False) -> None:
        self.facts = Facts(partial)
        self.inputs = []  # type: List[dict]
        self.tests = []  # type: List[dict]
        self._parser = None
        self._file = None  # type: Optional[str]
        self.replay = False  # a line held the replay stand-in's mark

    def begin(self, name: str) -> None:
        self._finish_tests()
        self._file = name
        self._parser = _tests_parser()
        self.inputs.append({"file": name, "kind": "log", "lines": 0, "bytes": None})

    def line(self, lineno: int, raw: str, cut: bool = False, flags: int = NCCL | SIGNATURE | TESTS) -> None:
        """One raw line (any prefix) that passed the needle filter; `flags` say which parsers want it."""
        item = prep_line(lineno, raw, cut, flags)
        if item is not None:
            self.apply(0, item)

    def apply(self, base: int, item: tuple) -> None:
        """Fold one item of `prepare` (line numbers count from `base`): the part of a line's work bound
        to the order of lines."""
        if len(item) == 2:
            (host, pid, dev), run = item
            self.facts.add_net_run(host, pid, dev, self._file, base, run)
            return
        lineno, cut, flags, source, text, events, hits, replay = item
        if replay:
            self.replay = True
        if not text:
            return
        lineno += base
        file = self._file
        if events:
            add = self.facts.add
            for kind, head, etext, data, ecut, spliced in events:
                add(Event(kind, head, lineno, source, file, etext, data, ecut, spliced), cut)
        if hits:
            self.facts.add_signature_hits(hits, _Where(file, lineno, text))
        if flags & TESTS:
            parser = self._parser
            if parser is not None and "NCCL INFO" not in text and "NCCL WARN" not in text:
                parser.feed(text, lineno, file)

    def merge(self, base: int, part: Partial) -> None:
        """Add a range's Partial (its line numbers count from `base`), in the order of ranges."""
        self.facts.merge(part.facts, base)
        part.facts = ()  # used up: freed now, not when the next range's fold is unpickled (a flood's is big)
        if part.replay:
            self.replay = True
        parser, file = self._parser, self._file
        if parser is not None:
            for lineno, text in part.tests:
                parser.feed(text, base + lineno, file)

    def end(self, lines: int, nbytes: Optional[int]) -> None:
        if self.inputs:
            self.inputs[-1]["lines"] = lines
            self.inputs[-1]["bytes"] = nbytes
        self._finish_tests()

    def add_tests_json(self, name: str, obj: dict) -> None:
        self.inputs.append({"file": name, "kind": "nccl-tests-json", "lines": None, "bytes": None})
        self.tests.append(obj)

    def _finish_tests(self) -> None:
        if self._parser is not None:
            res = self._parser.result()
            if res is not None:
                self.tests.append(res)
            self._parser = None

    def report(
        self, instance_type: Optional[str] = None, nodes: Optional[int] = None, fabric: Optional[str] = None
    ) -> dict:
        self._finish_tests()
        return build_report(
            self.facts, self.tests, self.inputs, instance_type, nodes, fabric=fabric, replay=self.replay
        )


class _Where:
    __slots__ = ("file", "lineno", "text")

    def __init__(self, file, lineno, text) -> None:
        self.file, self.lineno, self.text = file, lineno, text


def analyze(
    lines: Iterable,
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
    source: str = "<stream>",
    named_json: bool = False,
) -> dict:
    """Report for lines of text (str or bytes, with or without newlines), e.g. live launcher output: filtered
    as a file's lines are (`_filtered`), then read through the same `prepare`.

    named_json: also read the `-J` JSON the table names (read_named_json), as `parse` does: for `run`, whose
    lines end when the command has, so rank 0's file is written by then (the recipes put it at an absolute
    path in their shared folder). Off for lines read away from the node (SageMaker's log, read back)."""
    a = Analysis()
    a.begin(source)
    counted = [0]
    apply = a.apply
    for item in prepare(_filtered(lines, counted)):
        apply(0, item)
    a.end(counted[0], None)
    if named_json:
        read_named_json(a, [])
    return a.report(instance_type, nodes)


def _filtered(lines: Iterable, counted: List[int]) -> Iterator[tuple]:
    """(line number, raw, cut, flags) of the lines that hold a needle (or an nccl-tests table row), as
    linescan.scan gives a file's; the number of lines read is left in counted[0]."""
    groups = needle_groups()
    table_left = 0  # rows still to pass after an nccl-tests table header (see linescan.Region)
    table_head = b""
    count = 0
    for count, raw in enumerate(lines, 1):
        # a line is its first 64 KiB here too, as in the file scan (no line costs more than that)
        if isinstance(raw, bytes):
            raw = raw.rstrip(b"\r\n")
            cut = len(raw) > MAX_LINE
            raw = raw[:MAX_LINE].decode("utf-8", "replace")
        else:
            raw = raw.rstrip("\r\n")
            cut = len(raw) > MAX_LINE
            if cut:
                raw = raw[:MAX_LINE]
        flags = 0
        for n, f in groups:
            if n in raw:
                flags |= f
        if table_left:
            if not flags and _table_stop(table_head, raw.encode("utf-8", "replace")):
                table_left = 0
                continue
            flags |= TESTS
            table_left -= 1
            if "Out of bounds" in raw or "Avg bus bandwidth" in raw:
                table_left = 0
        elif flags & TESTS and _table_start(raw.encode("utf-8", "replace")):
            table_left = TABLE_MAX_ROWS
            table_head = raw.encode("utf-8", "replace")
        if flags:
            yield count, raw, cut, flags
    counted[0] = count


def _table_region() -> Region:
    return Region(_table_start, _table_end, TESTS, TABLE_MAX_ROWS, _table_stop, start_flags=TESTS)


def _scan_needles() -> List[tuple]:
    return [(n.encode(), f) for n, f in needle_groups()]


def analyze_stream(a: Analysis, stream: BinaryIO, name: str) -> None:
    """Add one binary stream (a file, stdin) to an Analysis."""
    a.begin(name)
    stats = {}  # type: dict
    apply = a.apply
    for item in prepare(scan(stream, _scan_needles(), stats=stats, region=_table_region())):
        apply(0, item)
    a.end(stats.get("lines", 0), stats.get("bytes"))


def analyze_file(
    a: Analysis,
    path: str,
    workers: Optional[int] = None,
    range_size: Optional[int] = None,
    progress: Optional[Progress] = None,
) -> None:
    """Add one regular file, its scan split across `workers` processes (default: the CPUs) in ranges of
    `range_size` bytes (default parscan.RANGE). `progress(path, bytes done, size)` is called after each
    range is merged (a split parse only: a file too small to split is quick)."""
    a.begin(path)
    stats = {}  # type: dict
    size = os.path.getsize(path) if progress is not None else 0
    if workers is None:
        workers = default_workers()
    apply, merge = a.apply, a.merge
    # split: each worker parses and folds its range, the parent merges the folds in order (issue 15);
    # serial: the lines are parsed and folded as they are scanned
    kept = Kept()  # sent with each range submitted (pickled then): set once the parent keeps no more
    fold = functools.partial(fold_range, path, kept=kept)
    items = scan_prepared(
        path, _scan_needles(), _table_region, workers, stats, fold, range_size, prepare, wrapped.ends_no_range
    )
    with closing(items):  # on an error too, the workers end now
        for base, item in items:
            if type(item) is Partial:
                merge(base, item)
                if kept.procs is None and a.facts.full():
                    kept.procs = frozenset(a.facts.procs)
                if progress is not None:
                    progress(path, stats.get("bytes", 0), size)
            else:
                apply(base, item)
    a.end(stats.get("lines", 0), stats.get("bytes"))


def looks_like_json(path: str) -> bool:
    """nccl-tests `-J` output: a .json name or a regular file whose first non-blank byte is '{'.

    A pipe (`parse <(kubectl logs ...)`) is never sniffed: what was read could not be read again.
    """
    if path.endswith(".json"):
        return True
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(256).lstrip()
    except OSError:
        return False
    return head[:1] == b"{"


# a `-J` file named inside a log is read only when it is a regular file this size or smaller: the log is
# not the user's word, and its path may name anything (a device, a huge file)
NAMED_JSON_MAX_BYTES = 64 << 20
_KERNEL_FILES = ("/proc/", "/sys/", "/dev/")


def read_named_json(a: "Analysis", given: Sequence[str]) -> None:
    """Read the `-J` JSON each table said it writes ("# Writing JSON output to PATH"), where it exists and
    was not given, so the judge checks the table against it (efa_validators.judge.agree).

    PATH is taken as written, then relative to the log's folder (the run's folder is not known here). One
    that is missing is left out (the log is often read away from the node); one that is there but is not a
    regular file, is too big or is not nccl-tests JSON is listed in `inputs` with the reason, never read.
    """
    from efa_validators.parse.nccltests_json import NcclTestsJsonError, json_output_of
    from efa_validators.run.smallfile import NotAFile, read_small

    seen = set()
    for p in given:
        try:
            seen.add(os.path.realpath(p))
        except (OSError, ValueError):
            pass
    for test in list(a.tests):
        named = (test.get("evidence") or {}).get("json_output")
        if not named:
            continue
        path = named["path"]
        log_dir = os.path.dirname(named.get("file") or "")
        tries = [path] if os.path.isabs(path) else [path, os.path.join(log_dir, path)]
        found = next((t for t in tries if os.path.lexists(t)), None)
        if found is None or os.path.realpath(found) in seen:
            continue
        seen.add(os.path.realpath(found))
        entry = {"file": found, "kind": "nccl-tests-json", "lines": None, "bytes": None}
        entry["named_by"] = "{}:{}".format(named.get("file"), named.get("line"))
        try:
            size = os.stat(found).st_size
            real = os.path.realpath(found)
            if not os.path.isfile(found) or size == 0 or real.startswith(_KERNEL_FILES):
                # /proc and /sys files are "regular" with size 0, and some block when read (/proc/kmsg)
                entry["unread"] = "not a regular file with content"
            elif size > NAMED_JSON_MAX_BYTES:
                entry["unread"] = "%d bytes, over the %d read for a named file" % (size, NAMED_JSON_MAX_BYTES)
            else:  # judged again on the open descriptor: the path may name another file by now (a FIFO)
                data = read_small(found, NAMED_JSON_MAX_BYTES)
                obj = json_output_of(data, found)
                entry["bytes"] = len(data)
                a.inputs.append(entry)
                a.tests.append(obj)
                continue
        except NotAFile as err:
            entry["unread"] = str(err).replace(found + ": ", "", 1)
        except (OSError, NcclTestsJsonError) as err:
            entry["unread"] = str(err)
        a.inputs.append(entry)


def analyze_paths(
    paths: Sequence[str],
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
    workers: Optional[int] = None,
    progress: Optional[Progress] = None,
    fabric: Optional[str] = None,
) -> dict:
    """Report for files ('-' is stdin). Raises OSError / ValueError for unreadable inputs.

    Large regular files are scanned by `workers` processes (default: the CPUs; 1: serial);
    the report is the same either way. `progress`: see analyze_file. `fabric`: a declared fabric
    (efa_validators.judge.verdict.judge_provider).
    """
    with collector_paused():
        return _analyze_paths(paths, instance_type, nodes, workers, progress, fabric)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for one parse and its report (`validators parse`: and the writing
    of it), as it was after.

    Why: a parse allocates a few objects per line (items, events, evidence), none in a cycle, so reference
    counting frees them all; the collector, run every few hundred allocations and again and again over the
    growing fold, cost ~10 % of r8192's CPU (issue 15), and half of the unpickling of the workers' folds.
    The scan workers run without it (parscan)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _analyze_paths(
    paths: Sequence[str],
    instance_type: Optional[str],
    nodes: Optional[int],
    workers: Optional[int],
    progress: Optional[Progress],
    fabric: Optional[str] = None,
) -> dict:
    a = Analysis()
    for path in paths:
        if path == "-":
            analyze_stream(a, sys.stdin.buffer, "<stdin>")
            continue
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory", path)
        if looks_like_json(path):
            from efa_validators.parse.nccltests_json import load_json_output

            a.add_tests_json(path, load_json_output(path))
            continue
        if not os.path.isfile(path):  # a FIFO, a device: read it as a stream
            with open(path, "rb") as fh:
                analyze_stream(a, fh, path)
            continue
        analyze_file(a, path, workers, progress=progress)
    read_named_json(a, paths)
    report = a.report(instance_type, nodes, fabric)
    if a.replay:  # as `validators run` marks a replay's report (efa_validators.run.report)
        from efa_validators.run.report import replay_finding

        report["findings"] = [replay_finding([])] + list(report.get("findings") or [])
        report["replay"] = True
    return report
