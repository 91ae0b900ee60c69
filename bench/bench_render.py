#!/usr/bin/env python3
"""Time `build.py render` as a user runs it: whole processes (imports included), cold and warm. Goal: < 1 s
for 100 variants.

Usage: python bench/bench_render.py [--variants N ...] [--repeat R] [--compare CHECKOUT]
Builds a matrix with two crossing axes (10 x 10 for 100) from matrix.local.yaml's defaults (temp folder).
cold: the output folder is empty; warm: the same render again (nothing changed, nothing written). Each
figure is the median of R runs; a breakdown of one in-process render follows (load, render, write).
--compare runs another checkout's build.py (e.g. the main branch) in turn with this one, in the same run.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validators"))


def make_matrix(folder: Path, n: int) -> Path:
    side = max(1, math.isqrt(n))
    local = (ROOT / "matrix.local.yaml").read_text()
    head = local.split("\nvariants:\n", 1)[0]
    a = "\n".join(f'        "{i}": {{labels: {{bench.a: "{i}"}}}}' for i in range(side))
    b = "\n".join(f'        "{j}": {{env: {{NCCL_DEBUG: INFO, BENCH_B: "{j}"}}}}' for j in range(n // side))
    text = head + f"\nvariants:\n  - name: bench-{{a}}-{{b}}\n    axes:\n      a:\n{a}\n      b:\n{b}\n"
    shutil.copytree(ROOT / "examples", folder / "examples")
    path = folder / "matrix.yaml"
    path.write_text(text)
    return path


def run_once(tree: Path, matrix: Path, out: Path) -> Tuple[float, float]:
    """One `build.py render` process of the checkout `tree`: (wall, cpu) seconds, start to exit. The CPU time
    (user + system) moves less than the wall time when other jobs share the cores."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, str(tree / "build.py"), "render", "--matrix", str(matrix), "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        env=env,
        timeout=600,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def breakdown(matrix: Path, out: Path) -> str:
    """load / render / write of one in-process render into `out` (as it stands)."""
    from imagebuild.matrix.load import load
    from imagebuild.render.folders import render_all, write

    t0 = time.perf_counter()
    variants = load(str(matrix))
    t1 = time.perf_counter()
    rendered = render_all(variants, str(matrix.parent))
    t2 = time.perf_counter()
    write(str(out), rendered)
    t3 = time.perf_counter()
    return f"load+check {t1 - t0:.3f} s, render {t2 - t1:.3f} s, write {t3 - t2:.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--variants", type=int, action="append", help="matrix size (repeatable; default 100, 1000)"
    )
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--compare", type=Path, metavar="CHECKOUT", help="another checkout to time in the same run"
    )
    args = ap.parse_args()
    trees = [("this", ROOT)] + ([("compare", args.compare.resolve())] if args.compare else [])
    for n in args.variants or [100, 1000]:
        with tempfile.TemporaryDirectory(prefix="bench-render-") as d:
            folder = Path(d)
            matrix = make_matrix(folder, n)
            times: dict = {(label, mode): [] for label, _ in trees for mode in ("cold", "warm")}
            for r in range(args.repeat):
                for label, tree in trees:  # interleaved: both see the same load on a shared machine
                    out = folder / f"out-{label}-{r}"
                    times[label, "cold"].append(run_once(tree, matrix, out))
                    times[label, "warm"].append(run_once(tree, matrix, out))
                    shutil.rmtree(out)
            for label, tree in trees:
                line = [f"{n} variants, {label} ({tree}), whole process, median of {args.repeat}:"]
                for mode in ("cold", "warm"):
                    wall, cpu = (statistics.median(col) for col in zip(*times[label, mode]))
                    line.append(f"{mode} {wall:.2f} s (cpu {cpu:.2f} s)")
                print(" ".join(line), flush=True)
                for mode in ("cold", "warm"):
                    print(
                        f"  {mode} runs (wall/cpu): "
                        + " ".join(f"{w:.2f}/{c:.2f}" for w, c in times[label, mode])
                    )
            print(f"  this, in process, cold: {breakdown(matrix, folder / 'inproc')}")
            print(f"  this, in process, warm: {breakdown(matrix, folder / 'inproc')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
