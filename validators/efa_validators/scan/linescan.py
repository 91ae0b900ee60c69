"""Find the few lines worth parsing in a large log, at close to memory speed.

Why: a multi-node log is gigabytes of lines of which a small share carries facts.
Python spends ~1 us per line just looking at it, so instead of a loop over every line
we read big binary chunks and let C (memmem, or `bytes.find`) locate each needle; only the lines
that contain one are cut out, decoded (UTF-8, bad bytes replaced) and handed on.
Line numbers come from counting newlines between hits, also in C. Where a needle is on most
lines (NET on NCCL channel setup), placing each hit from Python costs more than splitting the
chunk into lines and testing each in C, so such a chunk is split. Memory is one chunk (and its
lines) plus one carried partial line, whatever the size of the log.
"""

from itertools import accumulate, chain, compress, count, repeat
from operator import add, and_, contains, eq, methodcaller, rshift, sub
from typing import BinaryIO, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from efa_validators.scan.memsearch import Finder, finder

CHUNK = 4 << 20
MAX_LINE = 1 << 16  # a "line" longer than this is cut: junk or a binary blob
NEAR = 1024  # bytes.find looks this far for the next hit before memmem is called
DENSE = 512  # a needle whose first PROBE lines in a chunk have a hit every DENSE bytes or more often
PROBE = 64  # and across the chunk (_dense) is tested on every line of the chunk (_dense_lines)
SAMPLES, WINDOW = 8, 8192
_DECODE = methodcaller("decode", "utf-8", "replace")

Line = Tuple[int, str, bool, int]


class Region:
    """Pass every line between a start line and an end line (e.g. an nccl-tests table's rows,
    which hold no distinctive substring), at most `max_lines` of them, with `flag`.

    `stop(start_line, line)`, when given, is asked about region lines that hold no needle: True
    closes the region there, that line not passed (a table whose footer never came ends at the
    first line its own emitter prints that cannot belong to it, instead of `max_lines` later).
    `start_flags`, when not 0, are needle flags every start line carries: `start` is asked only
    about lines with one of them.
    """

    def __init__(
        self,
        start: Callable[[bytes], bool],
        end: Callable[[bytes], bool],
        flag: int,
        max_lines: int,
        stop: Optional[Callable[[bytes, bytes], bool]] = None,
        start_flags: int = 0,
    ):
        self.start, self.end, self.flag, self.max_lines = start, end, flag, max_lines
        self.stop, self.start_flags = stop, start_flags
        self.left = 0  # lines still to pass in the open region (0: none open)
        self.head = b""  # the start line of the open region (for `stop`)


def scan(
    stream: BinaryIO,
    needles: Sequence,
    chunk_size: int = CHUNK,
    stats: Optional[dict] = None,
    region: Optional[Region] = None,
) -> Iterator[Line]:
    """Yield (line number from 1, decoded line without EOL, cut, flags) for lines holding a needle.

    `needles` are bytes, or (bytes, flag) pairs: `flags` is the OR of the flags of the needles
    found in the line (1 for plain needles), so callers skip the parsers a line cannot feed.
    `cut` is True for a last line without a newline (the log was truncated there) and for
    lines longer than MAX_LINE; evidence from a cut line is weaker, the fold treats it so.
    A line is its first MAX_LINE bytes everywhere (needles, region tests), so the output does
    not depend on chunk boundaries: a byte range that starts on a line can be scanned alone.
    `stats`, when given, receives "lines" and "bytes" totals when the scan ends.
    The lines of a chunk come out of C iterators (chain, zip, map): no Python frame runs per line.
    """
    return chain.from_iterable(_chunks(stream, needles, chunk_size, stats, region))


def _chunks(
    stream: BinaryIO, needles: Sequence, chunk_size: int, stats: Optional[dict], region: Optional[Region]
) -> Iterator[Iterable[Line]]:
    """The lines of `scan`, one iterable per chunk."""
    merged = {}  # type: dict
    for n in needles:
        b, f = (n, 1) if isinstance(n, bytes) else n
        merged[b] = merged.get(b, 0) | f
    needles = tuple(sorted(merged.items(), key=lambda kv: len(kv[0]), reverse=True))
    allflags = 0
    for _, f in needles:
        allflags |= f
    lineno = 0  # lines fully consumed so far
    nbytes = 0
    carry = b""
    skipping = False  # inside an over-long line: its head (MAX_LINE + 1 bytes) is the carry
    while True:
        block = stream.read(chunk_size)
        if not block:
            break
        nbytes += len(block)
        if skipping:
            nl = block.find(b"\n")
            if nl < 0:
                continue
            block = block[nl:]  # the head, then this newline: the line as every over-long one is seen
            skipping = False
        end = block.rfind(b"\n") + 1
        if not end:
            buf = carry + block
            if len(buf) > MAX_LINE:
                carry = buf[: MAX_LINE + 1]
                skipping = True
            else:
                carry = buf
            continue
        if carry or end < len(block):  # one copy: the carried head, then the block up to its last newline
            body = b"".join((carry, memoryview(block)[:end]))
        else:
            body = block
        carry = block[end:]
        del block  # memory: one chunk's bytes and lines held at a time, not two
        nlines, lines = _scan_body(body, needles, lineno, region)
        yield lines
        lineno += nlines
        del body, lines
    if carry:
        lineno += 1
        if _has_needle(carry[:MAX_LINE], needles):
            yield ((lineno, _decode(carry[:MAX_LINE]), True, allflags),)
    if stats is not None:
        stats["lines"] = lineno
        stats["bytes"] = nbytes


def _scan_body(
    body: bytes, needles: Tuple, base: int, region: Optional[Region] = None
) -> Tuple[int, Iterable[Line]]:
    """(line count of `body`, which ends with a newline; its lines holding a needle, in order).

    Hot path: one C search pass per needle (_find_lines); Python work is per hit only. A needle
    whose first PROBE lines have a hit every DENSE bytes or more often (NET on NCCL channel setup:
    most lines) is looked for line by line instead, in C (_dense_lines), where the chunk allows it.
    Line numbers, text and flags are then made by C iterators over the sorted lines.
    """
    allflags = 0
    for _, flag in needles:
        allflags |= flag
    if region is not None:
        allflags |= region.flag
    shift = allflags.bit_length()
    mask = (1 << shift) - 1
    hits = {}  # type: dict
    n = len(body)
    far = finder(body)
    dense = []  # (needle, flag, the hit to go on from) of the needles dense here
    for needle, flag in needles:
        first = far(needle, 0, n)
        if first >= 0:
            i = _find_lines(body, far, needle, flag, first, PROBE, hits, shift)
            if i >= 0 and i - first < PROBE * DENSE and _dense(body, needle):
                dense.append((needle, flag, i))
            elif i >= 0:
                _find_lines(body, far, needle, flag, i, -1, hits, shift)
    if dense:
        found = _dense_lines(body, dense, hits, shift, base, region)
        if found is not None:
            return found
        for needle, flag, i in dense:
            _find_lines(body, far, needle, flag, i, -1, hits, shift)
    if region is not None:
        _add_region(body, hits, shift, region)
    if not hits:
        return body.count(b"\n"), ()
    starts = sorted(hits)
    vals = list(map(hits.__getitem__, starts))
    ends = list(map(rshift, vals, repeat(shift)))
    gaps = list(map(body.count, repeat(b"\n"), chain((0,), starts), starts))  # newlines since the last
    total = sum(gaps) + body.count(b"\n", starts[-1])
    gaps[0] += base + 1
    if max(map(sub, ends, starts)) > MAX_LINE:  # an over-long line: cut, one line at a time
        return total, _cut_lines(body, starts, ends, vals, accumulate(gaps), mask)
    if b"\r" in body:  # a CR before the newline is not part of the line (one, as _decode)
        ends = list(map(sub, ends, map(eq, map(body.__getitem__, map(sub, ends, repeat(1))), repeat(13))))
    if body.isascii():  # one decode for the chunk, then str slices
        text = body.decode("ascii")
        texts = map(text.__getitem__, map(slice, starts, ends))  # type: Iterable[str]
    else:
        texts = map(_DECODE, map(body.__getitem__, map(slice, starts, ends)))
    return total, zip(accumulate(gaps), texts, repeat(False), map(and_, vals, repeat(mask)))


def _find_lines(
    body: bytes, far: Finder, needle: bytes, flag: int, i: int, budget: int, hits: dict, shift: int
) -> int:
    """Add the lines holding `needle`, from its hit at `i` on, to `hits`: line start -> (line end
    << shift) | flags. Returns -1 at the end of `body`, or the next hit once `budget` lines are
    added (-1: no budget).

    memmem skips the long stretches without a hit, but a ctypes call costs ~1.5 us, so the next
    hit is first looked for with `bytes.find` within NEAR bytes. A line is its first MAX_LINE bytes:
    a needle further on does not count, so what a line yields does not depend on chunk bounds.
    """
    n = len(body)
    find = body.find
    rfind = body.rfind
    get = hits.get
    over = len(needle) - MAX_LINE  # a hit at i counts if i + over <= its line start
    while i >= 0:
        if not budget:
            return i
        budget -= 1
        ls = rfind(b"\n", 0, i) + 1
        v = get(ls)
        if v is None:
            le = find(b"\n", i)
            if i + over <= ls:
                hits[ls] = (le << shift) | flag
        else:
            le = v >> shift
            if i + over <= ls:
                hits[ls] = v | flag
        i = find(needle, le, le + NEAR)
        if i < 0:
            i = far(needle, le, n)
    return -1


def _dense(body: bytes, needle: bytes) -> bool:
    """Whether `needle` has a hit every DENSE bytes or more often across `body` (its first hits
    may be a cluster): counted in SAMPLES windows of WINDOW bytes spread over it."""
    n = len(body)
    if n <= SAMPLES * WINDOW:
        return body.count(needle) * DENSE >= n
    step = n // SAMPLES
    found = sum(map(body.count, repeat(needle), range(0, n, step), range(WINDOW, n + WINDOW, step)))
    return found * DENSE >= len(range(0, n, step)) * WINDOW


def _dense_lines(
    body: bytes, dense: List[tuple], hits: dict, shift: int, base: int, region: Optional[Region]
) -> Optional[Tuple[int, Iterable[Line]]]:
    """`_scan_body`'s answer made from all the chunk's lines, or None where the chunk does not allow it.

    Why: where most lines hold a needle, Python costs ~1 us per hit (three C calls to place it,
    then a count for its number); decoding and splitting the chunk costs ~0.3 us a line, the dense
    needles are then tested on every line by C (`in` through map) and line numbers are list indexes.
    The chunk is decoded whole: UTF-8 decoding (bad bytes replaced) never crosses a newline, and an
    ASCII needle is in a line's text exactly where it is in its bytes. Not for a chunk with a CR or
    a line that may be over MAX_LINE bytes (a char is at most 4), nor a non-ASCII dense needle, nor
    a region start a dense needle could make; regions go by the line starts, as in the other path.
    """
    if region is not None:
        sflags = region.start_flags
        if not sflags or any(flag & sflags for _, flag, _ in dense):
            return None
    if b"\r" in body or not all(needle.isascii() for needle, _, _ in dense):
        return None
    ascii = body.isascii()
    lines = body.decode("utf-8", "replace").split("\n")  # the last is "": body ends with a newline
    if max(map(len, lines)) > (MAX_LINE if ascii else MAX_LINE // 4):
        return None
    if region is not None:
        _add_region(body, hits, shift, region, tuple((needle, flag) for needle, flag, _ in dense))
    flags = {}  # type: dict  # line index -> flags
    for needle, flag, _ in dense:
        _merge(flags, dict.fromkeys(compress(count(), map(contains, lines, repeat(needle.decode()))), flag))
    if hits:  # the other needles' lines, the dense ones' first, region lines: line start -> index
        starts = sorted(hits)
        numbers = accumulate(map(body.count, repeat(b"\n"), chain((0,), starts), starts))
        _merge(flags, dict(zip(numbers, map(and_, map(hits.__getitem__, starts), repeat((1 << shift) - 1)))))
    order = sorted(flags)
    numbers = map(add, order, repeat(base + 1))
    return len(lines) - 1, zip(
        numbers, map(lines.__getitem__, order), repeat(False), map(flags.__getitem__, order)
    )


def _merge(dst: dict, new: dict) -> None:
    """OR the flags of `new` into `dst` (C does the bulk; Python only the keys both hold)."""
    for k in new.keys() & dst.keys():
        new[k] |= dst[k]
    dst.update(new)


def _cut_lines(
    body: bytes, starts: List[int], ends: List[int], vals: List[int], linenos: Iterable[int], mask: int
):
    """The lines of a chunk that holds an over-long one (rare: one Python step per line)."""
    for ls, le, v, lineno in zip(starts, ends, vals, linenos):
        if le - ls > MAX_LINE:
            yield lineno, _decode(body[ls : ls + MAX_LINE]), True, v & mask
        else:
            yield lineno, _decode(body[ls:le]), False, v & mask


def _add_region(body: bytes, hits: dict, shift: int, region: Region, more: Tuple = ()) -> None:
    """Add the lines of regions: from a start line (or this chunk's head, when one is open) to an end line.

    `more`: (needle, flag) of needles whose lines are not in `hits` (_dense_lines): a region line
    holding one is a needle line too (never asked `stop`)."""
    start, end, rflag, stop, sflags = region.start, region.end, region.flag, region.stop, region.start_flags
    # the needle hits that may start a region (with start_flags, picked in C: few on NCCL-dense content)
    marks = sorted(compress(hits, map(and_, hits.values(), repeat(sflags))) if sflags else hits)
    n = len(body)
    find = body.find
    get = hits.get
    pos = 0 if region.left else None
    left = region.left
    k = 0
    nmarks = len(marks)
    while True:
        if pos is None:
            while k < nmarks:
                v = hits[marks[k]]
                if (not sflags or v & sflags) and start(_head(body, marks[k], v >> shift)):
                    break
                k += 1
            if k >= nmarks:
                region.left = left
                return
            pos = (hits[marks[k]] >> shift) + 1
            left = region.max_lines
            if stop is not None:
                region.head = _head(body, marks[k], pos - 1)
        while left and pos < n:
            v = get(pos)
            if v is None:
                le = find(b"\n", pos)
                line = _head(body, pos, le)
                v = (le << shift) | rflag
                held = False
                for needle, flag in more:
                    if needle in line:
                        v |= flag
                        held = True
                if not held and stop is not None and stop(region.head, line):
                    left = 0
                    pos = le + 1
                    break
                hits[pos] = v
            else:
                le = v >> shift
                hits[pos] = v | rflag
            left -= 1
            if end(_head(body, pos, le)):
                left = 0
            pos = le + 1
        if left:
            region.left = left
            return  # the region goes on in the next chunk
        while k < nmarks and marks[k] < pos:
            k += 1
        pos = None


def _head(body: bytes, ls: int, le: int) -> bytes:
    """The line body[ls:le] as the scanner sees it: at most its first MAX_LINE bytes."""
    return body[ls:le] if le - ls <= MAX_LINE else body[ls : ls + MAX_LINE]


def _has_needle(data: bytes, needles: Iterable) -> bool:
    return any(n in data for n, _ in needles)


def _decode(line: bytes) -> str:
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.decode("utf-8", "replace")
