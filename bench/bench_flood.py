#!/usr/bin/env python3
"""Benchmark: `validators parse` of a rank flood, far more ranks than any job has (issue 23, item 10).

The flood is made from the real logs' own lines: every communicator init line of ../shared/nccl-logs
(`host:pid:tid [dev] NCCL INFO comm 0x... rank R nranks N ...`, NCCL 2.4 to 2.26 formats, with and without
Open MPI's `[1,R]<stdout>:` tag) is taken as it is and, in turn, printed once per made-up rank i: its host
gets the suffix `-f<i // 8>`, its pid becomes 100000 + i, its rank number i and its world size the flood's.
One line per rank, about 120 bytes: 300,000 ranks is a ~37 MB log (the issue's was 32 MB). Written in a temp
folder and removed afterwards; the corpus is never copied into the repository.

Each parse is a whole process, timed from outside as bench_parse_real times it (wall and CPU of it and its
workers, peak RSS of its largest process: wait4's ru_maxrss through a small wrapper), with the default worker
count and with --workers 1; the report's size, its ranks listed and its `ranks-not-kept` finding are read
back. --baseline DIR runs another checkout's parser (main before the cap) on the same file.

    python bench/bench_flood.py [--ranks 300000] [--repeat 1] [--baseline DIR] [--json FILE]
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "validators"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_parse_real import best, corpus_parser, import_path, parse_argv, save_json  # noqa: E402

from efa_validators.scan.parscan import default_workers  # noqa: E402

# a real communicator init line, in groups:
# (tag)(host):(pid)(:tid [dev] NCCL INFO comm 0x.. rank )(R)( n[rR]anks )(N)(rest)
COMM_LINE = re.compile(
    r"^(\[\d+,)?(\d+)?(\]<std(?:out|err)>:)?([a-z][^\s:\[\]]*):(\d+)"
    r"(:\d+ \[\d+\] NCCL INFO comm 0x[0-9a-f]+ rank )(\d+)( n[rR]anks )(\d+)(.*)$"
)


def comm_lines(logs: list) -> list:
    """The communicator init lines of `logs`, as COMM_LINE matches, in file and line order."""
    out = []
    for path in logs:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = COMM_LINE.match(line.rstrip("\r\n"))
                if m is not None:
                    out.append(m.groups())
    return out


def flood(path: str, ranks: int, logs: list) -> dict:
    """Write a log of `ranks` made-up ranks, one real comm line each (see the module's docstring); returns
    its size in bytes, its lines and the real lines it was made from."""
    templates = comm_lines(logs)
    if not templates:
        raise SystemExit("no communicator init line in %d log(s)" % len(logs))
    nbytes = 0
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(ranks):
            t = templates[i % len(templates)]
            tag = "%s%d%s" % (t[0], i, t[2]) if t[0] else ""
            text = "%s%s-f%d:%d%s%d%s%d%s\n" % (tag, t[3], i // 8, 100000 + i, t[5], i, t[7], ranks, t[9])
            fh.write(text)
            nbytes += len(text)
    return {"bytes": nbytes, "lines": ranks, "templates": len(templates)}


def parse(path: str, repeat: int, workers: int, report: str, root: str = ROOT) -> dict:
    """`python -m efa_validators parse` of `path` by the checkout at `root`: time, CPU, RSS, what it said."""
    env = dict(os.environ, PYTHONPATH=import_path(root))
    argv = parse_argv(path, report, workers)
    res = best(repeat, argv, env, root)
    res["report_mb"] = os.path.getsize(report) / 1e6
    with open(report, encoding="utf-8") as fh:
        rep = json.load(fh)
    os.unlink(report)
    finding = [f for f in rep["findings"] if f["id"] == "ranks-not-kept"]
    res.update(
        verdict=rep["verdict"],
        ranks_listed=len(rep["ranks"]),
        not_kept=finding[0]["not_kept"]["ranks"] if finding else None,
    )
    del res["out"]
    return res


HEADER = (
    "| parser | workers | wall s | CPU s | peak RSS MiB | report MB | ranks listed | not kept | verdict |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def main(argv=None) -> int:
    ap = corpus_parser(__doc__)
    ap.add_argument("--ranks", type=int, default=300000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--baseline", default="", help="also time the parser of the checkout at this folder")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    logs = sorted(glob.glob(os.path.join(args.corpus, "*.log")))
    tmp = tempfile.mkdtemp(prefix="bench-flood-")
    try:
        path = os.path.join(tmp, "flood.log")
        made = flood(path, args.ranks, logs)
        print(
            "flood: %d ranks, %.1f MB, from %d real comm lines of %d logs"
            % (args.ranks, made["bytes"] / 1e6, made["templates"], len(logs))
        )
        print(HEADER)
        results = {"flood": made, "runs": []}
        contenders = [("this checkout", ROOT)]
        if args.baseline:
            contenders.append(("baseline", os.path.abspath(args.baseline)))
        for name, root in contenders:
            for workers in (args.workers, 1):
                r = parse(path, args.repeat, workers, os.path.join(tmp, "report.json"), root)
                r.update(parser=name, workers=workers)
                results["runs"].append(r)
                print(
                    "| %s | %d | %.2f | %.2f | %.1f | %.1f | %d | %s | %s |"
                    % (
                        name,
                        workers,
                        r["seconds"],
                        r["cpu_s"],
                        r["rss_mib"],
                        r["report_mb"],
                        r["ranks_listed"],
                        r["not_kept"],
                        r["verdict"],
                    ),
                    flush=True,
                )
        save_json(args.json, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
