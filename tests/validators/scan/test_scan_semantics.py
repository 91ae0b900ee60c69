"""The line scan against its contract, written one line at a time (issue 15).

Why: linescan.scan finds lines with C passes, windows and iterators for speed; what it yields must
stay what a plain loop over the lines gives: (number, text, cut, flags) for every line whose head
(first MAX_LINE bytes) holds a needle or that an nccl-tests table region passes, and the same line
and byte counts and region state at the end. Random bodies (needles, near-misses, CR, bad UTF-8,
over-long lines, a last line without a newline), needle sets, regions and chunk sizes, with and
without memmem, and with MAX_LINE and the find window made small so every path is crossed often.
"""

import io
import random
from typing import List, Optional, Tuple

import pytest

from efa_validators.scan import linescan, memsearch
from efa_validators.scan.linescan import Region, scan

POOL = (b"NET", b"NE", b"ET", b"WARN", b"#", b"busbw", b"error", b"\xc3\xa9", b"rank ")
ASCII = tuple(f for f in POOL if f.isascii()) + (
    b"N",
    b"x",
    b"yy",
    b" ",
    b"\n",
    b"\n",
    b"\n",
    b"S",
    b"E!",
    b"q",
)
FRAGMENTS = ASCII + (b"\xc3\xa9", b"\xe2\x82", b"\xed\xa0", b"\xf0\x90\x80", b"\xff")  # bad: cut, surrogate
CR = FRAGMENTS + (b"\r\n", b"\r")
TESTS = 4


def _dec(head: bytes) -> str:
    return (head[:-1] if head.endswith(b"\r") else head).decode("utf-8", "replace")


def reference(data: bytes, needles: List[Tuple[bytes, int]], region: Optional[Region]):
    """What scan yields, line by line: (lines, stats, (region.left, region.head) at the end)."""
    max_line = linescan.MAX_LINE
    allflags = 0
    for _, f in needles:
        allflags |= f
    lines = data.split(b"\n")
    last = lines.pop()  # the bytes after the last newline: a cut line when not empty
    left, head = (region.left, region.head) if region else (0, b"")  # read, never written
    out = []
    for number, line in enumerate(lines, 1):
        h = line[:max_line]
        flags = 0
        for needle, f in needles:
            if needle in h:
                flags |= f
        passed = flags != 0
        if region is not None:
            if left:
                if not flags and region.stop is not None and region.stop(head, h):
                    left = 0
                else:
                    flags |= region.flag
                    passed = True
                    left -= 1
                    if region.end(h):
                        left = 0
            elif flags and (not region.start_flags or flags & region.start_flags) and region.start(h):
                left = region.max_lines
                if region.stop is not None:
                    head = h
        if passed:
            out.append((number, _dec(h), len(line) > max_line, flags))
    if last and any(n in last[:max_line] for n, _ in needles):
        out.append((len(lines) + 1, _dec(last[:max_line]), True, allflags))
    stats = {"lines": len(lines) + (1 if last else 0), "bytes": len(data)}
    return out, stats, (left, head)


def random_body(rng: random.Random) -> bytes:
    """A third ASCII, a third UTF-8 (good and bad) without CR: the line-by-line path takes those."""
    fragments = rng.choice((ASCII, FRAGMENTS, CR))
    long_runs = rng.choice((0, 0.03))
    parts = []
    for _ in range(rng.randrange(0, 300)):
        r = rng.random()
        if r < long_runs:
            parts.append(b"z" * rng.randrange(20, 140))  # over-long at MAX_LINE 48
        elif r < 2 * long_runs:
            parts.append(b"NET" * rng.randrange(5, 40))  # many hits in one line
        else:
            parts.append(rng.choice(fragments))
    return b"".join(parts)


def random_region(rng: random.Random) -> Optional[Region]:
    if rng.random() < 0.3:
        return None
    stop = (lambda head, line: line.startswith(b"q") and head[:1] == line[:1]) if rng.random() < 0.5 else None
    region = Region(
        lambda line: b"S" in line,
        lambda line: b"E!" in line,
        TESTS,
        rng.randrange(1, 6),
        stop,
        start_flags=rng.choice((0, TESTS)),
    )
    if rng.random() < 0.2:  # a region left open by the range before
        region.left, region.head = rng.randrange(1, 4), b"qS"
    return region


def run_scan(data, needles, region, chunk):
    stats = {}  # type: dict
    lines = list(scan(io.BytesIO(data), needles, chunk_size=chunk, stats=stats, region=region))
    return lines, stats, (region.left, region.head) if region else (0, b"")


def _watch_dense_path(monkeypatch) -> list:
    """A list that gets True each time a chunk takes the split-lines path, False when it declines."""
    dense_lines, taken = linescan._dense_lines, []

    def counted(*args):
        found = dense_lines(*args)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(linescan, "_dense_lines", counted)
    return taken


@pytest.mark.parametrize("memmem", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_scan_is_the_line_by_line_contract(monkeypatch, seed, memmem):
    if not memmem:
        monkeypatch.setattr(memsearch, "_LIB", None)
    monkeypatch.setattr(linescan, "MAX_LINE", 48)
    taken = _watch_dense_path(monkeypatch)
    rng = random.Random(seed)
    for case in range(150):
        monkeypatch.setattr(linescan, "NEAR", rng.choice((1, 4, 16, 1024)))
        monkeypatch.setattr(linescan, "DENSE", rng.choice((1, 16, 512)))
        monkeypatch.setattr(linescan, "PROBE", rng.choice((1, 3, 256)))
        data = random_body(rng)
        needles = [(n, rng.choice((1, 2, TESTS, 8))) for n in rng.sample(POOL, rng.randrange(1, 6))]
        region = random_region(rng)
        state = (region.left, region.head) if region else None
        want = reference(data, needles, region)
        for chunk in (rng.randrange(1, 64), rng.randrange(64, 400), 1 << 20):
            if region is not None:  # each scan starts from the same region state
                region.left, region.head = state
            got = run_scan(data, needles, region, chunk)
            assert got == want, (seed, case, chunk, data, needles)
    assert True in taken and False in taken  # both ways through a dense chunk were crossed


def test_dense_and_sparse_needles_in_one_chunk_at_real_sizes():
    """Real MAX_LINE and window: a channel-dense stretch, a long hitless one, CRLF lines, a cut line."""
    dense = b"".join(
        b"h:1:2 [0] NCCL INFO Channel %02d/0 : 0[0] -> 1[0] via NET/x/0\n" % (k % 32) for k in range(3000)
    )
    sparse = b"plain text line\n" * 5000 + b"h:1:2 [0] NCCL WARN error\r\n" + b"q" * 70000 + b" NET\n"
    sparse += b"NET " + b"w" * 70000 + b"\n"  # cut: its head holds the needle
    data = dense + sparse + dense + b"tail NET"
    needles = [(b"NET", 1), (b"WARN", 1), (b"error", 1), (b"#", TESTS)]
    want = reference(data, needles, None)
    assert len(want[0]) == 6003 and [n for n, _, cut, _ in want[0] if cut] == [8003, 11004]
    for chunk in (4096, 1 << 16, 1 << 22):
        assert run_scan(data, needles, None, chunk) == want, chunk


def test_nccl_dense_utf8_content_with_a_table_goes_line_by_line(monkeypatch):
    """NET on most lines (channel setup), a non-ASCII line and an nccl-tests table in the same chunk:
    the line-by-line path takes it (the speed of issue 15 rests on that) and yields the contract."""
    from efa_validators.analyze.needles import _scan_needles, _table_region

    lines = []
    for r in range(300):
        head = f"[1,{r}]<stdout>:h-{r}:1:2 [0] NCCL INFO "
        lines += [
            head + f"Channel {c:02d}/0 : {r}[0] -> {r + 1}[0] [send] via NET/Libfabric/0/GDRDMA"
            for c in range(32)
        ]
        lines += [head + "NCCL version 2.26.2+cuda12.2", head + "comm 0x1 rank 3 nranks 8 caf\u00e9"]
        if r == 150:
            lines += [
                "[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw"
            ]
            lines += [
                f"[1,0]<stdout>:{8 << k:>12} {2 << k:>13}     float     sum      -1    10.0   1.00   1.88"
                for k in range(9)
            ]
            lines.insert(-4, "[1,0]<stdout>:NET/Plugin x")  # a needle line: the region goes on past it
            lines += ["[1,0]<stdout>:Training starts", "[1,0]<stdout>:# Avg bus bandwidth    : 1.88"]
    data = "\n".join(lines).encode() + b"\n"
    taken = _watch_dense_path(monkeypatch)
    want = reference(data, _scan_needles(), _table_region())
    tests_lines = [n for n, _, _, flags in want[0] if flags & TESTS]
    assert len(tests_lines) == 12  # the header, 9 rows, the NET line among them, the footer
    for chunk in (1 << 16, 1 << 22):
        assert run_scan(data, _scan_needles(), _table_region(), chunk) == want, chunk
    assert taken and all(taken)
