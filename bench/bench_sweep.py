"""Wall time of the pair sweep against host count, with the replay stand-in as the test (REPLAY: no GPU).

One "test" is the replay stand-in printing a recorded 2-node log after `--start-delay S` (default 1 s):
a pair's test takes S plus the runner. For each host count (8, 32, 256) one host is bad (its pairs replay
the socket-fallback log); the script runs, as whole processes, in one run:
  * `test`: one `python -m efa_validators run` of a single pair, median of 3 (what elimination one pair after
    another pays n times for n hosts);
  * `sweep`: `python -m efa_validators run --pairwise h0 ... h{n-1}` (the adaptive plan);
and reads from the sweep's report each round's wall time, how many tests ran at once, and the host it named.
Ratios are round / test and sweep / test. Goal (issue 22, item 6): the bad host among 256 named in at most
3 rounds, each round one test's time plus under 10 %. Also the CPU the sweep took (its whole process
tree), split into the stand-ins' and the runners', because here the stand-ins run on the same cores as
the sweep, where on a cluster they run on the nodes.

    python bench/bench_sweep.py [--hosts 8 32 256] [--test-seconds 1] [--json F] [--plot bench/sweep.png]

Byte code: this session's environment sets PYTHONDONTWRITEBYTECODE, so every interpreter would compile
the project's modules again; the script lets them cache byte code under a temp PYTHONPYCACHEPREFIX
instead (as an installed image has .pyc files).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOOD = ROOT / "tests" / "fixtures" / "replay" / "good-efa-p5-2node.log"
BAD = ROOT / "tests" / "fixtures" / "replay" / "socket-fallback-p5-2node.log"


def env(cache: str) -> dict:
    e = dict(
        os.environ, PYTHONPATH=str(ROOT) + os.pathsep + str(ROOT / "validators"), PYTHONPYCACHEPREFIX=cache
    )
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    return e


def template(bad: str, delay: float) -> list[str]:
    script = 'case ",{hosts}," in *,%s,*) log=%s;; *) log=%s;; esac; '
    script += 'exec %s -m efa_validators.replay --start-delay %g "$log"'
    return ["sh", "-c", script % (bad, BAD, GOOD, sys.executable, delay)]


def timed(argv: list[str], e: dict) -> tuple[float, float]:
    """(wall s, user+sys CPU s of the whole process tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=e, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[8, 32, 256])
    ap.add_argument("--test-seconds", type=float, default=1.0)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    e = env(str(work / "pyc"))
    runner = [sys.executable, "-m", "efa_validators", "run", "--quiet", "--instance-type", "p5.48xlarge"]
    # warm the byte code cache, then one test alone and the stand-in alone
    timed(
        runner
        + ["--log", str(work / "w.log"), "--", sys.executable, "-m", "efa_validators.replay", str(GOOD)],
        e,
    )
    standin_cpu = timed([sys.executable, "-m", "efa_validators.replay", str(GOOD)], e)[1]
    rows = []
    for n in args.hosts:
        hosts = ["h%d" % i for i in range(n)]
        bad = hosts[n // 2 + 1]  # in the middle: no position is special for the plan
        one = [a.replace("{hosts}", "h0,h1") for a in template(bad, args.test_seconds)]
        alone = sorted(
            timed(runner + ["--nodes", "2", "--log", str(work / "t.log"), "--"] + one, e) for _ in range(3)
        )
        test_wall, test_cpu = alone[1]  # the median of 3
        out = work / ("sweep-%d.json" % n)
        sweep = runner + ["--log", str(work / ("s%d.log" % n)), "--json", str(out), "--pairwise"] + hosts
        wall, cpu = timed(sweep + ["--"] + template(bad, args.test_seconds), e)
        pw = json.loads(out.read_text())["pairwise"]
        tests = sum(len(r["tests"]) for r in pw["rounds"])
        row = {
            "hosts": n,
            "bad": bad,
            "named": pw["implicated"],
            "rounds": [
                {
                    "tests": len(r["tests"]),
                    "wall_s": r["wall_s"],
                    "at_once": r["max_at_once"],
                    "ratio": round(r["wall_s"] / test_wall, 3),
                }
                for r in pw["rounds"]
            ],  # fmt: skip
            "test_s": round(test_wall, 3),
            "sweep_s": round(wall, 3),
            "sweep_ratio": round(wall / test_wall, 3),
            "sequential_s": round((n if n > 2 else 1) * test_wall, 1),
            "cpu_s": round(cpu, 2),
            "standin_cpu_s": round(tests * standin_cpu, 2),
            "tests": tests,
            "test_cpu_s": round(test_cpu, 3),
        }
        rows.append(row)
        print(
            "%4d hosts: named %s in %d rounds; test %.2f s; rounds %s; sweep %.2f s (%.2f x test; one pair "
            "after another: ~%.0f s); CPU %.1f s, of which ~%.1f s the %d stand-ins"
            % (n, row["named"], len(row["rounds"]), test_wall,
               ", ".join("%d tests %.2f s = %.2f x" % (r["tests"], r["wall_s"], r["ratio"])
                         for r in row["rounds"]),
               wall, row["sweep_ratio"], row["sequential_s"], cpu, row["standin_cpu_s"], tests),
            flush=True,
        )  # fmt: skip
    result = {
        "test_seconds": args.test_seconds,
        "cores": os.cpu_count(),
        "standin_cpu_s": round(standin_cpu, 3),
        "rows": rows,
        "replay": True,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.plot:
        plot(result, args.plot)
    return 0


def plot(result: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    n = [r["hosts"] for r in rows]
    ax.plot(
        n,
        [r["sequential_s"] for r in rows],
        "o--",
        color="grey",
        label="one pair after another (n x test, estimated)",
    )
    ax.plot(n, [r["sweep_s"] for r in rows], "o-", color="C0", label="sweep in rounds (whole process)")
    for k in range(max(len(r["rounds"]) for r in rows)):
        ax.plot(n, [r["rounds"][k]["wall_s"] if k < len(r["rounds"]) else None for r in rows], "s:",
                label="round %d" % (k + 1))  # fmt: skip
    ax.plot(n, [r["test_s"] for r in rows], "k-", lw=0.8, label="one test alone")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(n, [str(x) for x in n])
    ax.set_xlabel("hosts (one of them bad)")
    ax.set_ylabel("wall time (s)")
    ax.set_title(
        "REPLAY: pair sweep, %g s stand-in test, %d cores" % (result["test_seconds"], result["cores"])
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
