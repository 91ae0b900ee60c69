"""Wall time of `node-check --slurm-health-check` (issue 39 item 4), whole process as slurmd runs it, on a
healthy node (recorded tools that answer at once) and on a hung-tool node (an nvidia-smi that sleeps for
ever).
The goal is slurmd's limit: the program must be done well inside 60 s (slurm.conf(5) HealthCheckProgram;
efa_validators/node/dropin.py). `--plan`: nothing is drained here.

    python bench/bench_healthcheck.py [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = "".join(
    "%d, NVIDIA H100 80GB HBM3, 570.86.15, 00000000:%02X:00.0\\n" % (i, 0x10 + i) for i in range(8)
)
TOOLS = {
    "healthy": {"nvidia-smi": 'case "$1" in --query-gpu*) printf "%s";; esac; exit 0' % ROWS, "dmesg": ":"},
    "hung nvidia-smi": {"nvidia-smi": "exec sleep 100000", "dmesg": ":"},
}
ARGV = ["node-check", "--slurm-health-check", "--plan", "--instance-type", "p5.48xlarge", "--dcgm-level", "0"]


def wall(bindir: Path) -> tuple:
    env = dict(
        os.environ,
        PATH="%s:%s" % (bindir, os.environ["PATH"]),
        PYTHONPATH=str(ROOT) + os.pathsep + str(ROOT / "validators"),
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "efa_validators", *ARGV], env=env, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)  # fmt: skip
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case, tools in TOOLS.items():
            bindir = Path(tmp) / case.replace(" ", "-")
            bindir.mkdir()
            for name, body in tools.items():
                (bindir / name).write_text("#!/bin/sh\n%s\n" % body)
                (bindir / name).chmod(0o755)
            runs = [wall(bindir) for _ in range(args.repeat)]
            secs = [s for s, _ in runs]
            results[case] = {"median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs),
                             "exit": sorted({rc for _, rc in runs}), "runs": len(runs)}  # fmt: skip
            print(
                "%-16s median %.2f s (min %.2f, max %.2f) over %d, exit %s"
                % (case, results[case]["median_s"], min(secs), max(secs), len(runs), results[case]["exit"])
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
