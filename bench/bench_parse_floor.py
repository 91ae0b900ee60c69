#!/usr/bin/env python3
"""Benchmark: how close to `grep -cE` can any Python parse of real-log content get on this machine?

Why: issue 15 asks `validators parse` for >= 1/3 of grep's speed on the real-log corpus concatenated to
256 MiB. This bench times, on the same file and with the same worker count, programs that each do
strictly less than the parser, so their speed bounds what any parse written in Python can reach here:

  grep    `LC_ALL=C grep -cE <the parser's needles>` (bench_parse_real's reference);
  split   split the bytes into lines, keep those holding `NCCL` (a C-level filter, no bytecode per
          line), split each head from its message and count heads in a dict: the least per-line work;
  filter  split the bytes into lines and keep those holding any of the parser's needles, tested by one
          compiled alternation in C (no bytecode per line): the same lines found the simplest way;
  scan    the parser's own scanner (efa_validators/scan/linescan.py) yielding every needle line (and the rows
          after an nccl-tests table header, as the parse reads them), nothing more;
  shape   that scan, plus the minimal shape of a parse per line: split the head into host, pid and
          device, look the process up, classify the message through a cache, count it per process;
  parse   `python -m efa_validators parse FILE --json OUT`, as bench_parse_real runs it.

Each is a whole process with --workers processes over contiguous line-aligned ranges (`parse` uses its
own split), timed from outside (bench_parse_real.timed), and the contenders run in turn, round after round,
so a busy minute of this shared machine hits them all; the table gives each one's median.

    python bench/bench_parse_floor.py --size-mb 256 --rounds 5
"""

import argparse
import glob
import os
import re
import statistics
import sys
import tempfile
from multiprocessing import Pool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "validators"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_parse_real import _warm, build_corpus, grep_pattern, timed  # noqa: E402

from efa_validators.analyze.needles import _scan_needles, _table_region  # noqa: E402
from efa_validators.scan.linescan import scan  # noqa: E402

NCCL = re.compile(rb"NCCL")


def ranges(path: str, workers: int) -> list:
    """Contiguous byte ranges, each starting on a line."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as fh:
        for i in range(1, workers):
            fh.seek(size * i // workers)
            fh.readline()
            cuts.append(min(fh.tell(), size))
    cuts.append(size)
    return [(path, cuts[i], cuts[i + 1]) for i in range(workers)]


def _split(job) -> int:
    path, start, end = job
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    counts = {}  # type: dict
    get = counts.get
    for line in filter(NCCL.search, data.split(b"\n")):
        head = line.partition(b" NCCL ")[0]
        counts[head] = get(head, 0) + 1
    return len(counts)


def _filter(job) -> int:
    path, start, end = job
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    anyneedle = re.compile(b"|".join(re.escape(n) for n, _flag in _scan_needles()))
    return sum(1 for _ in filter(anyneedle.search, data.split(b"\n")))


def _lines(job):
    path, start, end = job
    fh = open(path, "rb")
    fh.seek(start)
    limited = _Limited(fh, end - start)
    return scan(limited, _scan_needles(), region=_table_region())  # as analyze scans a file


class _Limited:
    """A read-only view of the next `left` bytes of a file (scan reads with read(n))."""

    def __init__(self, fh, left: int) -> None:
        self.fh, self.left = fh, left

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n)
        self.left -= len(data)
        return data


def _scan(job) -> int:
    return sum(1 for _ in _lines(job))


def _kind(msg: str) -> str:
    if msg.startswith(("Channel", "Ring")):
        return "channel"
    return "version" if "ersion" in msg else "other"


def _shape(job) -> int:
    procs = {}  # type: dict
    kinds = {}  # type: dict
    for _no, text, _cut, _flags in _lines(job):
        head, sep, msg = text.partition(" NCCL INFO ")
        if not sep:
            continue
        who, _, _dev = head.rpartition(" [")
        host, _, rest = who.partition(":")
        key = (host, rest.partition(":")[0])
        proc = procs.get(key)
        if proc is None:
            proc = procs[key] = {}
        kind = kinds.get(msg)
        if kind is None:
            kind = kinds[msg] = _kind(msg)
        proc[kind] = proc.get(kind, 0) + 1
    return len(procs)


FLOORS = {"split": _split, "filter": _filter, "scan": _scan, "shape": _shape}
OK_CODES = {"grep": (0, 1), "parse": (0, 1, 3)}  # grep: 1 = no line matched; parse: its verdicts


def run_floor(name: str, path: str, workers: int) -> None:
    """The body of one floor contender's process."""
    with Pool(workers) as pool:
        print(sum(pool.map(FLOORS[name], ranges(path, workers))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--corpus", default=os.path.join(ROOT, "..", "shared", "nccl-logs"))
    ap.add_argument("--floor", choices=sorted(FLOORS), help=argparse.SUPPRESS)  # one contender's process
    ap.add_argument("file", nargs="?", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.floor:
        run_floor(a.floor, a.file, a.workers)
        return 0
    logs = sorted(glob.glob(os.path.join(a.corpus, "*.log")))
    if not logs:
        print(f"no logs in {a.corpus}", file=sys.stderr)
        return 2
    env = dict(os.environ, LC_ALL="C", PYTHONPATH=ROOT + os.pathsep + os.path.join(ROOT, "validators"))
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        path = os.path.join(tmp, "real.log")
        build_corpus(path, logs, a.size_mb << 20)
        _warm(path)
        me = os.path.abspath(__file__)
        argv = {
            "grep": ["grep", "-cE", grep_pattern(), path],
            **{f: [sys.executable, me, "--floor", f, "--workers", str(a.workers), path] for f in FLOORS},
            "parse": [sys.executable, "-m", "efa_validators", "parse", path, "--workers", str(a.workers),
                      "--json", os.path.join(tmp, "r.json")],
        }  # fmt: skip
        times = {k: [] for k in argv}  # type: dict
        for i in range(a.rounds):
            for name, cmd in argv.items():
                t = timed(cmd, env)
                if t["returncode"] not in OK_CODES.get(name, (0,)):
                    print(f"{name} failed ({t['returncode']})", file=sys.stderr)
                    return 1
                times[name].append(t["seconds"])
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr)
    g = statistics.median(times["grep"])
    print(f"{a.size_mb} MiB of real-log content, {a.workers} worker(s), {a.rounds} alternated rounds")
    print()
    print("| contender | median s | all runs s | speed / grep |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        runs = ", ".join(f"{t:.2f}" for t in ts)
        print(f"| {name} | {med:.2f} | {runs} | {g / med:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
