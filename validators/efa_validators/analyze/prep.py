"""A line into an item for the fold (`Analysis.apply`): what depends on the line alone, as plain data a
scan worker can make (`prep_line`), and `prepare`, which reads the lines in order and sums up a rank's run
of NET channel lines into one item (parse.ranks.NetRun).

Why apart: this is the per-line hot path (bench/ measures it). Its fast paths (one INFO head read by one
regex match, the last head kept, a NET channel message matched whole) must give exactly what the general
reading (scan.prefix.strip_prefix, parse.nccllog.parse_text) gives: tests/validators/parse/test_net_runs.py
holds them to it.
"""

import re
from typing import Iterable, Iterator, Optional

from efa_validators.analyze.needles import CHAIN, NCCL, REPLAY, WRAP, _replay_mark
from efa_validators.judge import signatures
from efa_validators.parse.nccllog import (
    NET_CHANNEL_CLEAN,
    channel_line,
    channel_ranks,
    classify,
    clean_net_tail,
    parse_text,
)
from efa_validators.parse.ranks import EVIDENCE_PER_KIND, NetRun
from efa_validators.scan import wrapped
from efa_validators.scan.prefix import COLLECTOR_ENDS, strip_prefix

match_line, holds_line_needle = signatures.match_line, signatures.holds_line_needle


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
