#!/usr/bin/env python3
"""Benchmark: the parse against grep and the line filter in alternated rounds, medians (issue 33, item 4).

Why beside bench_parse_real.py: that script times each contender's runs in a row, best of --repeat, so on a
machine shared with other work a busy minute can fall on one contender only. Here every round runs each
contender once, in turn (grep, the line filter, this checkout's parse in one process and with the default
workers, and --baseline's the same), and each contender's median over --rounds is reported, with the
ratios taken from the medians. Same inputs as bench_parse_real.py (real logs concatenated to --size-mb, an
N-rank init log with no line repeated); the reports of all parses must be the same bytes.

    python bench/bench_parse_alt.py --baseline DIR --rounds 5
"""

import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))

from bench_parse_real import (  # noqa: E402
    ROOT,
    _warm,
    corpus_log,
    corpus_parser,
    default_workers,
    generate_ranks,
    grep_pattern,
    import_path,
    parse_argv,
    timed,
)


def contenders(path: str, tmp: str, workers: int, baseline: str) -> dict:
    """name -> (argv, env, cwd, report path or None)."""
    pattern = grep_pattern()
    out = {
        "grep": (["grep", "-cE", pattern, path], dict(os.environ, LC_ALL="C"), ROOT, None),
        "filter": (
            [sys.executable, os.path.join(ROOT, "bench", "line_filter.py"), pattern, path],
            None,
            ROOT,
            None,
        ),
    }
    roots = [("", ROOT)] + ([("base ", os.path.abspath(baseline))] if baseline else [])
    for tag, root in roots:
        for w in (1, workers):
            report = os.path.join(tmp, "%sw%d.json" % (tag.strip() or "this", w))
            argv = parse_argv(path, report, w)
            env = dict(os.environ, PYTHONPATH=import_path(root))  # a checkout's own validators, old or new
            out["%sparse w%d" % (tag, w)] = (argv, env, root, report)
    return out


def rounds(path: str, tmp: str, n: int, workers: int, baseline: str) -> dict:
    _warm(path)
    runs = contenders(path, tmp, workers, baseline)
    times = {name: [] for name in runs}
    for _ in range(n):
        for name, (argv, env, cwd, _) in runs.items():
            times[name].append(timed(argv, env or dict(os.environ), cwd)["seconds"])
    reports = set()
    for _, _, _, report in runs.values():
        if report:
            with open(report, "rb") as fh:
                reports.add(fh.read())
    return {
        "median": {k: statistics.median(v) for k, v in times.items()},
        "runs": times,
        "same": len(reports) == 1,
    }


def show(name: str, r: dict, workers: int) -> None:
    m = r["median"]
    print(
        "\n%s: medians of %d alternated rounds (s); reports the same: %s"
        % (name, len(r["runs"]["grep"]), r["same"])
    )
    print("| contender | median s | all runs s | filter / it | grep / it |\n|---|---|---|---|---|")
    for k, v in m.items():
        runs = ", ".join("%.2f" % t for t in r["runs"][k])
        print("| %s | %.2f | %s | %.2f | %.3f |" % (k, v, runs, m["filter"] / v, m["grep"] / v))


def main(argv=None) -> int:
    ap = corpus_parser(__doc__)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--baseline", default="", help="also time the parser of the checkout at this folder")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-parse-alt-")
    try:
        if args.size_mb:
            path = os.path.join(tmp, "corpus.log")
            if not corpus_log(args.corpus, path, args.size_mb << 20):
                return 2
            show(
                "%d MiB of the real logs" % args.size_mb,
                rounds(path, tmp, args.rounds, args.workers, args.baseline),
                args.workers,
            )
            os.unlink(path)
        if args.ranks:
            path = os.path.join(tmp, "ranks.log")
            generate_ranks(path, args.ranks // 8)
            show(
                "%d-rank init" % args.ranks,
                rounds(path, tmp, args.rounds, args.workers, args.baseline),
                args.workers,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
