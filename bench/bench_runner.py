"""The runner's own overhead: wall time of `python -m efa_validators run -- CMD` minus the wall time of CMD
alone, for a command that exits at once, one that sleeps 1 s, and the replay stand-in printing a recorded
log under mpirun (parse included). Goal (issue 5): under 2 s. Prints a table; --json FILE writes figures.

    python bench/bench_runner.py [--repeat 5] [--json bench/runner.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "replay" / "good-efa-p5-2node.log"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--tag-output", "-x", "NCCL_DEBUG", "-np", "2"]


def wall(argv: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + str(ROOT / "validators"), NCCL_DEBUG="INFO")
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT, timeout=300)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    cases = {
        "true": ["true"],
        "sleep 1": ["sleep", "1"],
        "mpirun -np 2 replay (330 lines)": MPIRUN
        + [sys.executable, "-m", "efa_validators.replay", "--rank-filter", str(LOG)],
    }
    runner = [
        sys.executable,
        "-m",
        "efa_validators",
        "run",
        "--quiet",
        "--instance-type",
        "p5.48xlarge",
        "--nodes",
        "2",
        "--log",
        "/tmp/bench-runner.log",
        "--json",
        "/tmp/bench-runner.json",
        "--",
    ]
    results = {}
    print(f"{'command':<34} {'alone s':>8} {'runner s':>9} {'overhead s':>11}")
    for name, argv in cases.items():
        alone = [wall(argv) for _ in range(args.repeat)]
        under = [wall(runner + argv) for _ in range(args.repeat)]
        a, u = statistics.median(alone), statistics.median(under)
        results[name] = {
            "alone_s": round(a, 3),
            "runner_s": round(u, 3),
            "overhead_s": round(u - a, 3),
            "repeat": args.repeat,
        }
        print(f"{name:<34} {a:>8.3f} {u:>9.3f} {u - a:>11.3f}", flush=True)
    worst = max(r["overhead_s"] for r in results.values())
    print(f"worst overhead {worst:.3f} s (goal < 2 s): {'OK' if worst < 2 else 'OVER'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if worst < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
