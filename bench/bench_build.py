#!/usr/bin/env python3
"""Build benchmark: cold build, warm no-op rebuild, training-code-only change, runtime size vs single stage.

    python bench/bench_build.py [--matrix matrix.local.yaml] [--variant NAME] [--out build/bench]

- cold: `build.py build --force --no-cache` (every layer rebuilt; the artifact cache is warm, so downloads are
  not in the figure: they depend on the network, not on the tool).
- warm no-op: the same command again without --force: the content hash has an image, nothing is built.
- training-only: one byte of the training code changed, then build: only the layers after `COPY training` run.
- size: the runtime image over its base, against the `builder` stage of the same Dockerfile -- which is what a
  single-stage build of the same components holds (compilers, -dev packages and unpacked archives included).
Writes bench/RESULTS-build.json and a bar chart bench/build-bench.png (matplotlib, if installed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validators"))

from imagebuild.adapters import docker_engine  # noqa: E402
from imagebuild.building import context  # noqa: E402
from imagebuild.cli import main as cli_main  # noqa: E402


def timed(argv) -> float:
    started = time.monotonic()
    rc = cli_main(argv)
    if rc != 0:
        raise SystemExit(f"build failed (rc {rc}): {' '.join(argv)}")
    return time.monotonic() - started


def entry(out: Path, variant: str) -> dict:
    return next(
        e for e in json.loads((out / "summary.json").read_text())["variants"] if e["variant"] == variant
    )


def size_mb(client, ref: str) -> float:
    return client.images.get(ref).attrs["Size"] / 1e6


def builder_stage_image(client, vdir: Path) -> str:
    """Build the Dockerfile's `builder` target from the same context the tool sends (layers are cached)."""
    image_id = None
    with tempfile.TemporaryFile() as tar:
        context.write_context_tar(vdir, tar, classic=True)  # the API build is the classic builder
        tar.seek(0)
        for chunk in client.api.build(
            fileobj=tar,
            custom_context=True,
            dockerfile=context.DOCKERFILE_IN_TAR,
            target="builder",
            decode=True,
        ):
            if "error" in chunk:
                raise SystemExit(f"builder stage failed: {chunk['error']}")
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]  # the last one is the target's
    if not image_id:
        raise SystemExit("builder stage: no image id")
    return image_id


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    t = results["times_s"]
    names = ["cold", "warm no-op", "training only"]
    vals = [t["cold"], t["warm_noop"], t["training_only"]]
    a.bar(names, vals, color=["#888", "#2a7", "#27a"])
    for i, v in enumerate(vals):
        a.text(i, v, f"{v:.1f} s\n{100 * v / t['cold']:.1f}%", ha="center", va="bottom")
    a.set_ylim(0, max(vals) * 1.25)
    a.set_ylabel("seconds")
    a.set_title(f"build time ({results['variant']})")
    s = results["size_over_base_mb"]
    b.bar(
        ["runtime (multi-stage)", "single stage"], [s["runtime"], s["single_stage"]], color=["#27a", "#888"]
    )
    for i, v in enumerate([s["runtime"], s["single_stage"]]):
        b.text(i, v, f"{v:.0f} MB", ha="center", va="bottom")
    b.set_ylim(0, max(s["runtime"], s["single_stage"]) * 1.15)
    b.set_ylabel("MB over the base image")
    b.set_title("image size over its base")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=str(ROOT / "matrix.local.yaml"))
    ap.add_argument("--variant", default="local-debian-nccl2.27")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench"))
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "artifacts"))
    ap.add_argument("--json", default=str(ROOT / "bench" / "RESULTS-build.json"))
    ap.add_argument("--png", default=str(ROOT / "bench" / "build-bench.png"))
    args = ap.parse_args()
    out = Path(args.out)
    base = [
        "build",
        "--matrix",
        args.matrix,
        "--variant",
        args.variant,
        "--out",
        str(out),
        "--cache",
        args.cache,
    ]
    base.append("--plain")
    client = docker_engine.connect()
    print("== warm-up (fills the artifact cache; not measured)")
    timed(base)
    # From here on the rendered folder is frozen (--no-render): in a shared checkout validators/ may change
    # under the benchmark, and a changed file is rightly a rebuild. Rendering is timed on its own.
    frozen = base + ["--no-render"]
    print("== cold build (--force --no-cache)")
    cold = timed(frozen + ["--force", "--no-cache"])
    print("== render alone")
    render_s = timed(
        ["render", "--matrix", args.matrix, "--variant", args.variant, "--out", str(out) + "-render"]
    )
    print("== warm no-op rebuild")
    warm = timed(frozen)
    assert entry(out, args.variant)["status"] == "skipped"
    vdir = out / args.variant
    train = next(p for p in sorted((vdir / "context" / "training").rglob("*.py")))
    original = train.read_text()
    print(f"== training-only change ({train.name}); build with --no-render so the change is kept")
    try:
        # One unmeasured change first: after a --no-cache build the classic builder holds two parent chains
        # for the same steps and may pick the older one once; a team's normal builds never run --no-cache.
        train.write_text(original + f"\n# settle {time.time()}\n")
        settle = timed(frozen)
        train.write_text(original + f"\n# bench {time.time()}\n")
        training = timed(frozen)
        assert entry(out, args.variant)["status"] == "built"
    finally:
        train.write_text(original)
    runtime_ref = entry(out, args.variant)["image_id"]
    lock = json.loads((vdir / "variant.lock.json").read_text())
    base_mb = size_mb(client, lock["base"]["image"])
    single_id = builder_stage_image(client, vdir)
    results = {
        "variant": args.variant,
        "host": {"cpus": __import__("os").cpu_count()},
        "times_s": {
            "cold": round(cold, 1),
            "warm_noop": round(warm, 2),
            "render": round(render_s, 2),
            "training_only": round(training, 1),
            "training_only_first_after_no_cache": round(settle, 1),
        },
        "ratios_to_cold": {"warm_noop": round(warm / cold, 4), "training_only": round(training / cold, 4)},
        "goals": {"warm_noop": "< 5% of cold", "training_only": "< 15% of cold"},
        "size_over_base_mb": {
            "base": round(base_mb, 1),
            "runtime": round(size_mb(client, runtime_ref) - base_mb, 1),
            "single_stage": round(size_mb(client, single_id) - base_mb, 1),
        },
    }
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    plot(results, Path(args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
