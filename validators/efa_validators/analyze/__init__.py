"""The library entry: log lines (or files) in, the validator report out.

Why one entry: the CLI (`python -m efa_validators parse`) and the pre-flight runner (which
streams launcher output) must reach the same verdict from the same text. Files are read
in binary and filtered with efa_validators.scan.linescan (fast, bounded memory); live lines go
through the same filter line by line.
"""

import functools
import gc
import os
import sys
from contextlib import closing, contextmanager
from typing import BinaryIO, Callable, Iterable, Iterator, Optional, Sequence

from efa_validators.analyze.needles import NCCL, SIGNATURE, TESTS, _filtered, _scan_needles, _table_region
from efa_validators.analyze.prep import prep_line, prepare
from efa_validators.parse.facts import Facts
from efa_validators.parse.nccllog import Event
from efa_validators.report.assemble import build_report
from efa_validators.scan import wrapped
from efa_validators.scan.linescan import scan
from efa_validators.scan.parscan import default_workers, scan_prepared

Progress = Callable[[str, int, int], None]  # (path, bytes parsed, its size): efa_validators.scan.progress


def _tests_parser():
    """A fresh nccl-tests reader for each input."""
    from efa_validators.parse.nccltests import NcclTestsParser

    return NcclTestsParser()


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
