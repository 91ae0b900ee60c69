"""Scan one large log file with several processes, and hand its lines on in order.

Why: the scan is CPU-bound (one C pass per needle), a 1 GiB log takes seconds on one core,
and the nodes a pre-flight runs on have dozens of idle cores. The file is cut into byte
ranges that start on a line; each is scanned alone by `linescan.scan` (whose output for a
range does not depend on where the range starts, only its line numbers, offset here). The
one state that crosses a boundary is an nccl-tests table region still open at a range's end:
the next range is then scanned again here with that region open, so the lines handed on are
exactly those of one serial scan. Few ranges are in flight at a time, so memory stays flat.

Only regular files, only where `fork` exists, and only from a single-threaded process (a
forked copy of a threaded one may hold a lock forever); anything else scans serially. A worker
that dies (the OOM killer, a signal) costs speed, not the report: the parent scans the ranges
left itself.
"""

import io
import math
import os
import pickle
import threading
from array import array
from collections import deque
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from efa_validators.scan.linescan import Region, scan

# One range's result waits in memory until its turn, so the range size (fixed, not a share of the file)
# and the ranges in flight bound the memory; smaller ranges cost more in hand-offs. Lines wait packed (one
# string and an array), at most LINES_IN_FLIGHT ranges of them: the parent parses them, and sets the pace.
# What `prep` made of a range (analyze's fold of it: the parent only merges it) waits pickled, as bytes
# (~2 MiB at 16384 ranks, ~6x less than the objects), at most MAX_IN_FLIGHT: a range per worker and one.
RANGE = 4 << 20
MAX_WORKERS = 8
LINES_IN_FLIGHT = 3
MAX_IN_FLIGHT = MAX_WORKERS + 1

Line = Tuple[int, str, bool, int]


def default_workers(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup CPU quota (a pod's CPU limit,
    which the affinity does not show), at most MAX_WORKERS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus(cgroup_root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, min(cpus, MAX_WORKERS))


def cgroup_cpus(root: str = "/sys/fs/cgroup") -> Optional[float]:
    """CPUs allowed by the cgroup quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`), or None."""

    def read(name: str) -> Optional[str]:
        try:
            with open(os.path.join(root, name)) as fh:
                return fh.read().strip()
        except (OSError, UnicodeDecodeError):
            return None

    v2 = read("cpu.max")
    if v2 is not None:
        parts = v2.split()
        pair = (parts[0], parts[1]) if len(parts) == 2 else None
    else:
        q, p = read("cpu/cpu.cfs_quota_us"), read("cpu/cpu.cfs_period_us")
        pair = (q, p) if q is not None and p is not None else None
    if pair is None:
        return None
    try:
        quota, period = int(pair[0]), int(pair[1])
    except ValueError:  # "max": no limit
        return None
    return quota / period if quota > 0 and period > 0 else None


def _fork_context():
    try:
        import multiprocessing

        return multiprocessing.get_context("fork")
    except (ImportError, ValueError):
        return None


def can_split(size: int, workers: int, range_size: int = RANGE) -> bool:
    return workers > 1 and size >= 2 * range_size and threading.active_count() == 1


def boundaries(
    fh, size: int, range_size: int, ends_no_range: Optional[Callable[[bytes], bool]] = None
) -> List[int]:
    """Range starts: 0, then the start of the first line at or after each multiple of range_size.

    `ends_no_range(line)`: a line after which no range may start (the first half of a message wrapped over
    two lines, scan/wrapped.py): the range then starts after the next line that is not one."""
    starts = [0]
    for nominal in range(range_size, size, range_size):
        pos = max(nominal - 1, starts[-1])
        line_at = None  # where the line that ends at the next newline starts, when known
        while pos < min(size, nominal + range_size):  # no newline within a range: no boundary here
            fh.seek(pos)
            block = fh.read(1 << 16)
            if not block:
                break
            nl = block.find(b"\n")
            if nl < 0:
                pos += len(block)
                continue
            start = pos + nl + 1
            if ends_no_range is not None and ends_no_range(_line_ending(fh, line_at, start)):
                line_at, pos = start, start
                continue
            if starts[-1] < start < size:
                starts.append(start)
            break
    return starts


def _line_ending(fh, at: Optional[int], end: int) -> bytes:
    """The line that ends at byte `end` (after its newline), its first 64 KiB (from `at` when known)."""
    begin = at if at is not None else max(0, end - (1 << 16))
    fh.seek(begin)
    text = fh.read(end - begin)
    if at is None:
        text = text[text.rfind(b"\n", 0, len(text) - 1) + 1 :]
    return text[: 1 << 16]


class _Slice:
    """A file object limited to [start, end): what a range's scan reads (end None: to EOF)."""

    def __init__(self, fh, start: int, end: Optional[int]):
        fh.seek(start)
        self.fh, self.left = fh, None if end is None else end - start

    def read(self, n: int = -1) -> bytes:
        if self.left is None:
            return self.fh.read(n)
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n) if n > 0 else b""
        self.left -= len(data)
        return data


def scan_range(
    path: str,
    start: int,
    end: Optional[int],
    needles: Sequence,
    make_region: Callable[[], Region],
    open_region: Optional[Tuple[int, bytes]] = None,
    pack: bool = False,
    prep: Optional[Callable[[Iterable[Line]], Iterable]] = None,
) -> Tuple[Iterable, int, int, Tuple[int, bytes]]:
    """(lines numbered from the range's first line, its line and byte counts, region state at its end).

    `pack`: the lines as a `Packed` (what a worker sends: a few objects, not one per line).
    `prep`: what `prep(lines)` makes of them instead (a list: the per-line work done in the worker)."""
    region = make_region()
    if open_region is not None:
        region.left, region.head = open_region
    stats = {}  # type: dict
    with open(path, "rb") as fh:
        found = scan(_Slice(fh, start, end), needles, stats=stats, region=region)
        if prep is not None:
            lines = list(prep(found))  # type: Iterable
        else:
            lines = Packed(found) if pack else list(found)
    return lines, stats.get("lines", 0), stats.get("bytes", 0), (region.left, region.head)


class Packed:
    """Lines as one string (joined by newlines, which no line holds) and an array of (number, flags*2+cut).

    Why: a range's lines as tuples of objects cost ~2.5x their text and ~4x more to pickle; the
    parent holds several ranges while it parses, so it holds them in this form and unpacks one at a time.
    """

    def __init__(self, lines: Iterable[Line]) -> None:
        meta = array("q")
        out = io.StringIO()
        first = True
        for lineno, text, cut, flags in lines:
            meta.append(lineno)
            meta.append(flags << 1 | cut)
            if not first:
                out.write("\n")
            out.write(text)
            first = False
        self.text, self.meta = out.getvalue(), meta

    def __iter__(self) -> Iterator[Line]:
        text, meta = self.text, self.meta
        find = text.find
        pos = 0
        for k in range(0, len(meta), 2):
            end = find("\n", pos)
            if end < 0:
                end = len(text)
            v = meta[k + 1]
            yield meta[k], text[pos:end], bool(v & 1), v >> 1
            pos = end + 1


def _task(args):
    lines, n, nbytes, state = scan_range(*args[:5], pack=True, prep=args[5])
    if args[5] is not None:
        lines = _Pickled(pickle.dumps(lines, pickle.HIGHEST_PROTOCOL))
    return lines, n, nbytes, state


class _Pickled(bytes):
    """A worker's prepared items, pickled by the worker: the parent unpickles them at their turn."""


def _worker_init() -> None:
    """Ctrl-C is the parent's to handle (it ends the pool); a worker printing its own traceback is noise."""
    import gc
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # a worker lives for one parse and makes no cycles (analyze.collector_paused)


def scan_file(
    path: str,
    needles: Sequence,
    make_region: Callable[[], Region],
    workers: int,
    stats: dict,
    range_size: Optional[int] = None,
) -> Iterator[Line]:
    """`linescan.scan` of a whole file, split across `workers` processes where that pays.

    `make_region` must be a module-level function (it is sent to the workers by name).
    """
    for base, lines in _ranges(path, needles, make_region, workers, stats, range_size, None):
        for lineno, text, cut, flags in lines:
            yield base + lineno, text, cut, flags


def scan_prepared(
    path: str,
    needles: Sequence,
    make_region: Callable[[], Region],
    workers: int,
    stats: dict,
    prep: Callable[[Iterable[Line]], Iterable],
    range_size: Optional[int] = None,
    serial: Optional[Callable[[Iterable[Line]], Iterable]] = None,
    ends_no_range: Optional[Callable[[bytes], bool]] = None,
) -> Iterator[Tuple[int, object]]:
    """(line number base, item) for each item `prep` makes of the scan's lines, in order: with workers,
    each range's lines are prepared in its worker (the per-line parse leaves the parent; issue 15).
    `prep` must be a module-level function (or a functools.partial of one), must keep the lines' order and
    may number items only by the lines' own numbers, which count from the range's start: add `base`.
    `serial`: what prepares the lines where the file is not split (default `prep`). `ends_no_range`: see
    `boundaries`."""
    for base, items in _ranges(
        path, needles, make_region, workers, stats, range_size, prep, serial, ends_no_range
    ):
        for item in items:
            yield base, item


def _ranges(
    path, needles, make_region, workers, stats, range_size, prep, serial=None, ends_no_range=None
) -> Iterator[Tuple[int, Iterable]]:
    """(line number base, the lines or prepared items of one range) in order; serial: (0, everything),
    prepared by `serial` if given."""
    size = os.path.getsize(path)
    range_size = range_size or RANGE
    ctx = _fork_context() if can_split(size, workers, range_size) else None
    if ctx is None:
        region = make_region()
        with open(path, "rb") as fh:
            lines = scan(fh, needles, stats=stats, region=region)
            prep = serial or prep
            yield 0, (lines if prep is None else prep(lines))
        return
    with open(path, "rb") as fh:
        starts = boundaries(fh, size, range_size, ends_no_range)
    ends = starts[1:] + [None]  # type: List[Optional[int]]
    tasks = [(path, s, e, needles, make_region, prep) for s, e in zip(starts, ends)]
    # here, not at import: multiprocessing costs ~20 ms to import, and most parses never split
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # ranges in flight: bounds what the parent holds
    window = min(workers + 1, LINES_IN_FLIGHT if prep is None else MAX_IN_FLIGHT)
    lines_before = nbytes = 0
    carried = (0, b"")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init)
    pending = deque()  # type: deque
    try:
        pending.extend(pool.submit(_task, t) for t in tasks[:window])
        for k, task in enumerate(tasks):
            result = None
            if pending:
                try:
                    result = pending.popleft().result()
                except BrokenProcessPool:  # a worker died (OOM killer, a signal): the parent goes on alone
                    pending.clear()
            if k + window < len(tasks) and pending:
                try:
                    pending.append(pool.submit(_task, tasks[k + window]))
                except BrokenProcessPool:
                    pending.clear()
            if result is None or carried[0]:
                result = scan_range(*task[:5], open_region=carried if carried[0] else None, prep=prep)
            lines, n, size_k, state = result
            if type(lines) is _Pickled:
                lines = pickle.loads(lines)
            nbytes += size_k
            stats["bytes"] = nbytes  # read as the ranges come: how far the parse is (analyze's progress)
            yield lines_before, lines
            lines_before += n
            carried = state
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True)
    stats["lines"] = lines_before
    stats["bytes"] = nbytes
