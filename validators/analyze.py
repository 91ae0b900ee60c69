"""The library entry: log lines (or files) in, the validator report out.

Why one entry: the CLI (`python -m validators parse`) and the pre-flight runner (which
streams launcher output) must reach the same verdict from the same text. Files are read
in binary and filtered with validators.linescan (fast, bounded memory); live lines go
through the same filter line by line.
"""

import os
import sys
from typing import BinaryIO, Iterable, List, Optional, Sequence

from validators import signatures
from validators.facts import Facts
from validators.linescan import MAX_LINE, Region, scan
from validators.nccllog import NEEDLES, parse_text
from validators.parscan import default_workers, scan_file
from validators.prefix import strip_prefix
from validators.report import build_report

match_line = signatures.match_line

# lines nccl-tests prints: comments/headers ('#'), rows (their type column), the binary name
# nccl-tests: '#' lines (header, ranks, footer) and the binary's name; the rows between a table
# header and its footer are passed whole (linescan.Region), as they hold no distinctive substring
# ('busbw' and the footer words find a table and footer pasted without their '#')
NCCLTESTS_NEEDLES = ("#", "_perf", "busbw", "Out of bounds values", "Avg bus bandwidth")
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


NCCL, SIGNATURE, TESTS, REPLAY = 1, 2, 4, 8


def needles() -> List[str]:
    return sorted(set(NEEDLES) | set(signatures.needles()) | set(NCCLTESTS_NEEDLES))


def needle_groups() -> List[tuple]:
    """(needle, flag) pairs: which parser a line holding the needle can feed.

    The replay stand-in's mark (validators.runner.REPLAY_MARK, as `validators run` detects it) is
    looked for too, so a saved replay log parsed later is marked REPLAY as the run's report was.
    """
    return (
        [(n, NCCL) for n in NEEDLES]
        + [(n, SIGNATURE) for n in signatures.needles()]
        + [(n, TESTS) for n in NCCLTESTS_NEEDLES]
        + [(_replay_mark(), REPLAY)]
    )


def _replay_mark() -> str:
    from validators.runner import REPLAY_MARK  # here: the runner's imports cost a parse of a small log

    return REPLAY_MARK


def _tests_parser():
    """h3b's nccl-tests reader when present; the NCCL part works without it."""
    try:
        from validators.nccltests import NcclTestsParser
    except ImportError:  # pragma: no cover - only while the module is not there
        return None
    return NcclTestsParser()


class Analysis:
    """Feed lines from one or more inputs, then `report()`; holds only folded facts."""

    def __init__(self) -> None:
        self.facts = Facts()
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
        if flags & REPLAY and _replay_mark() in raw:  # a cut last line comes with every flag set
            self.replay = True
        source, text = strip_prefix(raw)
        if not text:
            return
        file = self._file
        if flags & NCCL:
            add = self.facts.add
            for ev in parse_text(text, lineno, file, source):
                add(ev, cut)
        hits = match_line(text)  # any line: most signature lines hold an NCCL needle
        if hits:
            self.facts.add_signature_hits(hits, _Where(file, lineno, text))
        if flags & TESTS:
            parser = self._parser
            if parser is not None and "NCCL INFO" not in text and "NCCL WARN" not in text:
                parser.feed(text, lineno, file)

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

    def report(self, instance_type: Optional[str] = None, nodes: Optional[int] = None) -> dict:
        self._finish_tests()
        return build_report(self.facts, self.tests, self.inputs, instance_type, nodes)


class _Where:
    __slots__ = ("file", "lineno", "text")

    def __init__(self, file, lineno, text) -> None:
        self.file, self.lineno, self.text = file, lineno, text


def analyze(
    lines: Iterable,
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
    source: str = "<stream>",
) -> dict:
    """Report for lines of text (str or bytes, with or without newlines), e.g. live launcher output."""
    a = Analysis()
    a.begin(source)
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
            a.line(count, raw, cut, flags)
    a.end(count, None)
    return a.report(instance_type, nodes)


def _table_region() -> Region:
    return Region(_table_start, _table_end, TESTS, TABLE_MAX_ROWS, _table_stop, start_flags=TESTS)


def _scan_needles() -> List[tuple]:
    return [(n.encode(), f) for n, f in needle_groups()]


def analyze_stream(a: Analysis, stream: BinaryIO, name: str) -> None:
    """Add one binary stream (a file, stdin) to an Analysis."""
    a.begin(name)
    stats = {}  # type: dict
    for lineno, text, cut, flags in scan(stream, _scan_needles(), stats=stats, region=_table_region()):
        a.line(lineno, text, cut, flags)
    a.end(stats.get("lines", 0), stats.get("bytes"))


def analyze_file(a: Analysis, path: str, workers: Optional[int] = None) -> None:
    """Add one regular file, its scan split across `workers` processes (default: the CPUs)."""
    a.begin(path)
    stats = {}  # type: dict
    if workers is None:
        workers = default_workers()
    for lineno, text, cut, flags in scan_file(path, _scan_needles(), _table_region, workers, stats):
        a.line(lineno, text, cut, flags)
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


def analyze_paths(
    paths: Sequence[str],
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
    workers: Optional[int] = None,
) -> dict:
    """Report for files ('-' is stdin). Raises OSError / ValueError for unreadable inputs.

    Large regular files are scanned by `workers` processes (default: the CPUs; 1: serial);
    the report is the same either way.
    """
    a = Analysis()
    for path in paths:
        if path == "-":
            analyze_stream(a, sys.stdin.buffer, "<stdin>")
            continue
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory", path)
        if looks_like_json(path):
            from validators.nccltests import load_json_output

            a.add_tests_json(path, load_json_output(path))
            continue
        if not os.path.isfile(path):  # a FIFO, a device: read it as a stream
            with open(path, "rb") as fh:
                analyze_stream(a, fh, path)
            continue
        analyze_file(a, path, workers)
    report = a.report(instance_type, nodes)
    if a.replay:  # as `validators run` marks a replay's report (validators.runreport)
        from validators.runreport import replay_finding

        report["findings"] = [replay_finding([])] + list(report.get("findings") or [])
        report["replay"] = True
    return report
