#!/usr/bin/env python3
"""Runtime image size against one stage of the same content, per variant, from one run.

    python bench/bench_runtime_size.py [--matrix matrix.local.yaml] [--variant NAME ...] [--mirror DIR]

Each variant is built as the tool builds it (`build.py build`: multi-stage, the runtime stage copies the
built trees and nothing else), then the same Dockerfile's `builder` target is built from the same context:
that stage holds every built tree plus the compilers, CUDA toolkit, -dev packages, headers and static
libraries, which is what a single-stage build of the same components ships. Sizes are the engine's image
sizes over the base image. Both images come from one run on one engine, so the ratio is not moved by the
machine's load. Writes bench/RESULTS-runtime-size.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validators"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_build import builder_stage_image, entry, size_mb, timed  # noqa: E402

from imagebuild.adapters import docker_engine  # noqa: E402

DEFAULT_VARIANTS = ["local-debian-nccl2.27", "local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6"]


def measure(client, out: Path, variant: str) -> dict:
    vdir = out / variant
    lock = json.loads((vdir / "variant.lock.json").read_text())
    base_mb = size_mb(client, lock["base"].get("runtime_image") or lock["base"]["image"])
    runtime_mb = size_mb(client, entry(out, variant)["image_id"])
    single_mb = size_mb(client, builder_stage_image(client, vdir))
    return {
        "variant": variant,
        "base_mb": round(base_mb, 1),
        "runtime_over_base_mb": round(runtime_mb - base_mb, 1),
        "single_stage_over_base_mb": round(single_mb - base_mb, 1),
        "runtime_fraction_of_single_stage": round((runtime_mb - base_mb) / (single_mb - base_mb), 3),
    }


def markdown(rows: list) -> str:
    lines = [
        "# Runtime image against one stage of the same content",
        "",
        "`python bench/bench_runtime_size.py` (see its docstring for how). Sizes in MB (1e6 bytes) over the",
        "base image, as the engine reports them; both images of a row come from the same run.",
        "",
        "| variant | base | runtime (multi-stage) | single stage (`builder` target) | runtime / single |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['variant']}` | {r['base_mb']} | {r['runtime_over_base_mb']} | "
            f"{r['single_stage_over_base_mb']} | {r['runtime_fraction_of_single_stage']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=str(ROOT / "matrix.local.yaml"))
    ap.add_argument("--variant", action="append", help="repeatable; default: the local matrix's two")
    ap.add_argument("--mirror", help="source mirror for the git sources (build.py build --mirror)")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-size"))
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "artifacts"))
    ap.add_argument("--json", default=str(ROOT / "bench" / "RESULTS-runtime-size.json"))
    ap.add_argument("--md", default=str(ROOT / "bench" / "RESULTS-runtime-size.md"))
    args = ap.parse_args()
    variants = args.variant or DEFAULT_VARIANTS
    out = Path(args.out)
    argv = ["build", "--matrix", args.matrix, "--out", str(out), "--cache", args.cache, "--plain"]
    for v in variants:
        argv += ["--variant", v]
    if args.mirror:
        argv += ["--mirror", args.mirror]
    print("== build (the tool's multi-stage images)")
    timed(argv)
    client = docker_engine.connect()
    rows = []
    for v in variants:
        print(f"== {v}: the builder target (one stage of the same content)")
        rows.append(measure(client, out, v))
    Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    Path(args.md).write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
