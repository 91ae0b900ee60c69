"""Which lines each reader wants: the needles a line must hold and the flag each sets, and the nccl-tests
table region (its rows hold no needle, so they pass whole between a header and its footer).

Why apart: the file scan (scan.linescan, in C-speed substring search) and the live-line filter (`_filtered`)
must pass the same lines with the same flags, and the flags tell `prep.prep_line` which parsers to run.
"""

from typing import Iterable, Iterator, List

from efa_validators.judge import signatures
from efa_validators.parse.nccllog import CHAIN_NEEDLES, NEEDLES
from efa_validators.scan import wrapped
from efa_validators.scan.linescan import MAX_LINE, Region
from efa_validators.scan.prefix import strip_prefix

match_line = signatures.match_line

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
