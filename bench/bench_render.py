#!/usr/bin/env python3
"""Time matrix -> 100 rendered variants (load, check, render in memory, write to disk). Goal: under 1 s.

Usage: python bench/bench_render.py [--variants N] [--repeat R]
Builds a matrix with two crossing axes (10 x 10 by default) from matrix.local.yaml's defaults (temp folder).
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.matrix import load  # noqa: E402
from imagebuild.render import render_all, write  # noqa: E402


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-render-") as d:
        folder = Path(d)
        path = make_matrix(folder, args.variants)
        rows = []
        for r in range(args.repeat):
            t0 = time.perf_counter()
            variants = load(str(path))
            t1 = time.perf_counter()
            rendered = render_all(variants, str(folder))
            t2 = time.perf_counter()
            write(str(folder / f"out{r}"), rendered)
            t3 = time.perf_counter()
            rows.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
            print(
                f"run {r + 1}/{args.repeat}: {len(variants)} variants  load+check {t1 - t0:.3f}s  "
                f"render {t2 - t1:.3f}s  write {t3 - t2:.3f}s  total {t3 - t0:.3f}s",
                flush=True,
            )
        med = [statistics.median(col) for col in zip(*rows)]
        print(
            f"median: load+check {med[0]:.3f}s render {med[1]:.3f}s write {med[2]:.3f}s total {med[3]:.3f}s "
            f"({'under' if med[3] < 1 else 'OVER'} the 1 s goal)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
