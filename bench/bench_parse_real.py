#!/usr/bin/env python3
"""Benchmark: `validators parse` as a user runs it, on content made from real logs, against `grep -cE`.

Why a second parse bench: bench_parse.py's generated training log is 7 % NCCL lines, which no
pre-flight log is; real NCCL_DEBUG output is almost all NCCL lines (issue 15). Inputs, built in a
temp folder and removed afterwards (the corpus is never copied into the repository):
  corpus  the real logs (--corpus, default ../shared/nccl-logs/*.log from the repository root, as CI
          has them) concatenated over and over to --size-mb;
  ranks   an N-rank init log from bench_runner_scale.generate (real line shapes, no line repeated).
Each contender is a whole process, timed from outside, best of --repeat, back to back on the same
file from the page cache: `LC_ALL=C grep -cE <the parser's needles>` and `python -m efa_validators parse
FILE --json OUT` with the default worker count and with --workers 1. Peak RSS is the largest process
of the parse (the parent or one of its scan workers: wait4's ru_maxrss). --scaling times 16..16384
ranks; --plot draws time and RSS against ranks.

    python bench/bench_parse_real.py --size-mb 256 --ranks 8192 --repeat 2
    python bench/bench_parse_real.py --scaling --plot bench/results-parse-scaling.png
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "validators"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_runner_scale import generate as generate_ranks  # noqa: E402

from efa_validators.analyze.needles import needles  # noqa: E402
from efa_validators.scan.parscan import default_workers  # noqa: E402

SCALING = (16, 64, 256, 1024, 4096, 8192, 16384)


def build_corpus(path: str, logs: list, size: int) -> int:
    """The real logs concatenated (each ending in a newline) until the file holds `size` bytes."""
    blob = b"".join(data if data.endswith(b"\n") else data + b"\n" for data in map(_read, logs))
    written = 0
    with open(path, "wb") as fh:
        while written < size:
            fh.write(blob)
            written += len(blob)
    return written


def corpus_parser(doc: str) -> argparse.ArgumentParser:
    """The benches' argument parser: described by `doc`'s first line, with --corpus, the folder of the real
    logs (../shared/nccl-logs beside the checkout)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    default_corpus = os.path.join(os.path.dirname(ROOT), "shared", "nccl-logs")
    ap.add_argument("--corpus", default=default_corpus, help="folder of real *.log files")
    return ap


def corpus_log(corpus: str, path: str, size: int) -> list:
    """`build_corpus` of the *.log files in `corpus` into `path`: the logs read, or [] (said on stderr,
    nothing written) when the folder holds none."""
    logs = sorted(glob.glob(os.path.join(corpus, "*.log")))
    if not logs:
        print("no *.log in %s" % corpus, file=sys.stderr)
        return []
    build_corpus(path, logs, size)
    return logs


def save_json(path: Optional[str], results: dict) -> None:
    """The figures as JSON at `path` (--json), when one is given."""
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _warm(path: str) -> None:
    with open(path, "rb") as fh:
        while fh.read(16 << 20):
            pass


# Each contender runs under this small wrapper, which times it and reads its rusage: a child started straight
# from the bench counts the bench's own memory in its peak (Linux keeps the peak from before exec in
# ru_maxrss, and subprocess starts children with vfork), which read 74 MiB for a 20 MiB parse once the bench
# had grown. The wrapper is small and its start is not timed.
_WRAP = (
    "import os,subprocess,sys,time\n"
    "t=time.perf_counter();p=subprocess.Popen(sys.argv[2:]);_,s,u=os.wait4(p.pid,0);t=time.perf_counter()-t\n"
    "c=os.waitstatus_to_exitcode(s)\n"
    "open(sys.argv[1],'w').write('%d %r %r %d'%(c,t,u.ru_utime+u.ru_stime,u.ru_maxrss))"
)


def timed(argv: list, env: dict, cwd: str = ROOT) -> dict:
    """Wall and CPU seconds and the peak RSS (MiB) of the largest process of `argv` (it and its workers)."""
    fd, stats = tempfile.mkstemp(prefix="bench-rusage-")
    os.close(fd)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _WRAP, stats, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, cwd=cwd, check=False,
        )  # fmt: skip
        with open(stats) as fh:
            code, seconds, cpu, maxrss = fh.read().split()
    finally:
        os.unlink(stats)
    # CPU: it and its workers (the shared machine's load moves wall time more)
    return {
        "seconds": float(seconds),
        "cpu_s": float(cpu),
        "rss_mib": int(maxrss) / 1024.0,
        "out": proc.stdout,
        "returncode": int(code),
    }


def grep_pattern() -> str:
    """The parser's needles as one extended regex: what grep looks for is what the parser looks for."""
    return "|".join(re.escape(p).replace("\\ ", " ") for p in needles())


def grep(path: str, repeat: int) -> dict:
    env = dict(os.environ, LC_ALL="C")
    return best(repeat, ["grep", "-cE", grep_pattern(), path], env)


def line_filter(path: str, repeat: int) -> dict:
    """bench/line_filter.py: a Python line filter that parses nothing (issue 33's second baseline)."""
    script = os.path.join(ROOT, "bench", "line_filter.py")
    res = best(repeat, [sys.executable, script, grep_pattern(), path], dict(os.environ))
    res["lines"] = int(res["out"].strip() or 0)
    return res


def parse_argv(path: str, report: str, workers: int) -> list:
    """`python -m efa_validators parse PATH --json REPORT --workers N`, as every parse bench runs it."""
    cli = [sys.executable, "-m", "efa_validators", "parse"]
    return cli + [path, "--json", report, "--workers", str(workers)]


def import_path(root: str) -> str:
    """Where a checkout's efa_validators imports from: validators/ (its src folder), or the root for a
    baseline from before the src layout (a link there stood in for the package)."""
    src = os.path.join(root, "validators")
    return src if os.path.isdir(os.path.join(src, "efa_validators")) else root


def parse(path: str, repeat: int, workers: int, report: str, root: str = ROOT) -> dict:
    env = dict(os.environ, PYTHONPATH=import_path(root))
    argv = parse_argv(path, report, workers)
    res = best(repeat, argv, env, root)  # run there: `python -m` imports from its working folder first
    with open(report, encoding="utf-8") as fh:
        res["report"] = fh.read()
    return res


def best(repeat: int, argv: list, env: dict, cwd: str = ROOT) -> dict:
    runs = [timed(argv, env, cwd) for _ in range(max(1, repeat))]
    out = min(runs, key=lambda r: r["seconds"])
    out["rss_mib"] = max(r["rss_mib"] for r in runs)
    return out


def contest(path: str, repeat: int, workers: int, tmp: str, baseline: str = "") -> dict:
    """grep, the parser with `workers` and with one process (and `baseline`'s parser with `workers`), on
    one file; the reports must agree."""
    _warm(path)
    g = grep(path, repeat)
    f = line_filter(path, repeat)
    split = parse(path, repeat, workers, os.path.join(tmp, "split.json"))
    one = parse(path, repeat, 1, os.path.join(tmp, "one.json"))
    rep = json.loads(one["report"])
    base = {}
    if baseline:
        b = parse(path, repeat, workers, os.path.join(tmp, "base.json"), os.path.abspath(baseline))
        base = {"base_s": b["seconds"], "base_cpu": b["cpu_s"], "base_rss": b["rss_mib"]}
        base["base_same"] = b["report"] == one["report"]
    return {
        **base,
        "mib": os.path.getsize(path) / float(1 << 20),
        "lines": rep["inputs"][0]["lines"],
        "grep_s": g["seconds"],
        "grep_lines": int(g["out"].strip() or 0),
        "filter_s": f["seconds"],
        "filter_lines": f["lines"],
        "split_s": split["seconds"],
        "split_cpu": split["cpu_s"],
        "one_cpu": one["cpu_s"],
        "grep_cpu": g["cpu_s"],
        "split_rss": split["rss_mib"],
        "one_s": one["seconds"],
        "one_rss": one["rss_mib"],
        "same_report": split["report"] == one["report"],
        "verdict": rep["verdict"],
        "ranks": len(rep["ranks"]),
    }


def row(name: str, r: dict, workers: int) -> str:
    return (
        "| {name} | {mib:.0f} MiB, {lines} lines ({grep_lines} needle lines) | {grep_s:.2f} s | "
        "{split_s:.2f} s, {split_rss:.1f} MiB | {one_s:.2f} s, {one_rss:.1f} MiB | **{split_ratio:.2f}** | "
        "{one_ratio:.2f} | {same} |\n|  | CPU seconds (all processes) | {grep_cpu:.2f} | {split_cpu:.2f} | "
        "{one_cpu:.2f} | {cpu_ratio:.2f} | | |"
    ).format(name=name, same="yes" if r["same_report"] else "**NO**", **_ratios(r))


def _ratios(r: dict) -> dict:
    return dict(
        r,
        split_ratio=r["grep_s"] / r["split_s"],
        one_ratio=r["grep_s"] / r["one_s"],
        cpu_ratio=r["grep_cpu"] / r["split_cpu"],
    )


HEADER = (
    "| log | size | grep -cE | parse, %d workers (time, peak RSS) | parse, one process | split/grep | "
    "one/grep | same report |\n|---|---|---|---|---|---|---|---|"
)


def main(argv=None) -> int:
    ap = corpus_parser(__doc__)
    ap.add_argument("--size-mb", type=int, default=256, help="corpus content size (0: skip)")
    ap.add_argument("--ranks", type=int, default=8192, help="generated init log, ranks (0: skip)")
    ap.add_argument("--scaling", action="store_true", help="also time 16..16384 ranks (one process each)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--plot", help="PNG of time and peak RSS against ranks (with --scaling)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--baseline", default="", help="also time the parser of the checkout at this folder")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-parse-real-")
    results = {"workers": args.workers}
    try:
        print(HEADER % args.workers)
        if args.size_mb:
            path = os.path.join(tmp, "corpus.log")
            logs = corpus_log(args.corpus, path, args.size_mb << 20)
            if not logs:
                return 2
            r = results["corpus"] = contest(path, args.repeat, args.workers, tmp, args.baseline)
            print(row("real logs (%d files) concatenated" % len(logs), r, args.workers), flush=True)
            _filter_line(r)
            _base_line(r)
            os.unlink(path)
        if args.ranks:
            path = os.path.join(tmp, "ranks.log")
            generate_ranks(path, args.ranks // 8)
            r = results["ranks"] = contest(path, args.repeat, args.workers, tmp, args.baseline)
            print(row("%d-rank init (generated)" % args.ranks, r, args.workers), flush=True)
            _filter_line(r)
            _base_line(r)
            os.unlink(path)
        if args.scaling:
            results["scaling"] = scaling(tmp, args.repeat, args.workers)
            if args.plot:
                plot(results["scaling"], args.plot, args.workers)
        save_json(args.json, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _filter_line(r: dict) -> None:
    """The Python line filter (bench/line_filter.py) as the second yardstick: parse speed / its speed."""
    print(
        "|  | line filter (Python, the needles, parses nothing; %d lines) | %.2f s | split: **%.2f** of it | "
        "one: %.2f of it | | | |"
        % (r["filter_lines"], r["filter_s"], r["filter_s"] / r["split_s"], r["filter_s"] / r["one_s"]),
        flush=True,
    )
    if "base_s" in r:
        print("|  | baseline parser vs the filter | | %.2f of it | | | | |" % (r["filter_s"] / r["base_s"]))


def _base_line(r: dict) -> None:
    if "base_s" in r:
        print(
            "|  | baseline parser | | %.2f s (CPU %.2f), %.1f MiB | | %.3f | | %s |"
            % (
                r["base_s"],
                r["base_cpu"],
                r["base_rss"],
                r["grep_s"] / r["base_s"],
                "yes" if r["base_same"] else "**NO**",
            ),
            flush=True,
        )


def scaling(tmp: str, repeat: int, workers: int) -> list:
    print()
    head = "| ranks | lines | MiB | grep -cE | parse, %d workers | parse, one process | split/grep |"
    print(head % workers)
    print("|---|---|---|---|---|---|---|")
    out = []
    for ranks in SCALING:
        path = os.path.join(tmp, "scale.log")
        generate_ranks(path, ranks // 8)
        r = contest(path, repeat, workers, tmp)
        r["nranks"] = ranks
        out.append(r)
        print(
            "| {nranks} | {lines} | {mib:.1f} | {grep_s:.3f} s | {split_s:.3f} s, {split_rss:.1f} MiB | "
            "{one_s:.3f} s, {one_rss:.1f} MiB | {split_ratio:.3f} |".format(**_ratios(r)),
            flush=True,
        )
        os.unlink(path)
    return out


def plot(rows: list, target: str, workers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["nranks"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
    a1.plot(xs, [r["split_s"] for r in rows], marker="o", label="parse, %d workers" % workers)
    a1.plot(xs, [r["one_s"] for r in rows], marker="s", label="parse, one process")
    a1.plot(xs, [r["grep_s"] for r in rows], marker="^", label="grep -cE")
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xlabel("ranks (generated init log)")
    a1.set_ylabel("seconds, whole process")
    a1.legend(fontsize=7)
    a2.plot(xs, [r["split_rss"] for r in rows], marker="o", label="parse, %d workers" % workers)
    a2.plot(xs, [r["one_rss"] for r in rows], marker="s", label="parse, one process")
    a2.axhline(100, color="grey", linestyle="--", linewidth=0.8)
    a2.set_xscale("log", base=2)
    a2.set_ylim(0, 120)
    a2.set_xlabel("ranks")
    a2.set_ylabel("peak RSS of the largest process (MiB)")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(target, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
