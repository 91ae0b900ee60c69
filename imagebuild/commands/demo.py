"""`build.py demo`: the main job on the embedded default, end to end on a machine with nothing but docker.

It makes the local base, renders and builds the local matrix for real, checks every image with the static
checks, and finishes with the validator run inside a built image on a replayed recording (no GPU here:
the replay stand-in prints a recorded nccl-tests log in place of the GPU binary, and says so).
Variants whose sources cannot be had here (git archives of aws-ofi-nccl, nccl-tests) are built when the
artifact cache holds them and otherwise listed with what to put there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import List

from imagebuild.errors import UserError

# A recording the project wrote, replayed inside the image by validators.replay (the only stand-in).
REPLAY = "tests/fixtures/replay/good-efa-p5-2node.log"


def register(sub) -> None:
    from imagebuild.cli import add_matrix_args

    p = sub.add_parser(
        "demo",
        help="the main job on the embedded default: base, render, build, check, validate (replayed)",
        description=__doc__.splitlines()[0],
    )
    add_matrix_args(p)
    p.set_defaults(matrix="matrix.local.yaml")
    p.add_argument("--out", default="build", help="output folder (default: build)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="variants built in parallel")
    p.set_defaults(func=run)


def _buildable(out: Path, names: List[str]) -> List[str]:
    """Variants whose source artifacts are all in the cache or fetchable here (not git/url sources)."""
    from imagebuild.artifacts import DEFAULT_CACHE, ArtifactCache, artifacts_from_lock
    from imagebuild.builder import read_lock

    cache = ArtifactCache(Path(DEFAULT_CACHE), offline=True)
    chosen = []
    for name in names:
        vdir = out / name
        arts = artifacts_from_lock(read_lock(vdir), str(vdir / "variant.lock.json"))
        unreachable = [a for a in cache.missing(arts) if a.kind in ("git", "url")]
        if unreachable:
            print(f"demo: skipping {name}: needs " + ", ".join(a.describe() for a in unreachable))
            print("      (put them in .cache/artifacts, see docs/build.md, then run the demo again)")
            continue
        chosen.append(name)
    return chosen


def run(args: argparse.Namespace) -> int:
    from imagebuild.cli import main as cli_main

    out = Path(args.out)
    if cli_main(["base"]) != 0:
        return 2
    render = ["render", "--matrix", args.matrix, "--out", str(out)] + sum(
        (["--variant", v] for v in args.variant), []
    )
    rc = cli_main(render)
    if rc:
        return rc
    names = args.variant or sorted(json.loads(p.read_text())["name"] for p in out.glob("*/variant.lock.json"))
    names = _buildable(out, names)
    if not names:
        raise UserError("no variant of the matrix can be built here", file=args.matrix)
    sel = sum((["--variant", v] for v in names), [])
    rc = cli_main(
        ["build", "--matrix", args.matrix, "--out", str(out), "--build-ca", "--jobs", str(args.jobs)] + sel
    )
    if rc:
        return rc
    rc_test = cli_main(["test", "--out", str(out)] + sel)
    rc_val = _validate_in_image(out, names[0])
    demo_dir = out / "demo"
    cli_main(
        ["report", str(demo_dir / "preflight.json"), "--plot", str(demo_dir / "busbw.png")]
        + ["--markdown", str(demo_dir / "preflight.md")]
    )
    _print_check_summary(out / "test-report.json")
    print(f"demo: static checks {'passed' if rc_test == 0 else 'FAILED'}: {out / 'test-report.json'}")
    return rc_test or rc_val


def _print_check_summary(path: Path) -> None:
    """One line per image and one per check that did not pass: the end of the demo is its report."""
    report = json.loads(path.read_text())
    print("\ndemo: static checks of the built images (testinfra, in a container of each image)")
    for image in report.get("images", []):
        counts: dict = {}
        for check in image.get("checks", []):
            counts[check["status"]] = counts.get(check["status"], 0) + 1
        tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        name = image.get("variant") or image.get("image")
        print(f"  {'PASS' if image.get('passed') else 'FAIL'}  {name}: {tally}")
        for check in image.get("checks", []):
            if check["status"] in ("fail", "unknown"):
                print(f"        {check['status']:7} {check['name']}: {check.get('detail', '')[:160]}")


def _validate_in_image(out: Path, variant: str) -> int:
    """Run the image's own validators on a replayed recording: the pre-flight code path, minus the GPU."""
    from imagebuild.builder import docker_client

    summary = json.loads((out / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == variant)
    replay = Path(REPLAY).resolve()
    if not replay.is_file():
        raise UserError("recording for the replay stand-in is missing", file=str(replay))
    client = docker_client()
    cmd = [
        "python3", "-m", "validators", "run", "--quiet", "--timeout", "60",
        "--instance-type", "p5.48xlarge", "--nodes", "2", "--json", "/out/preflight.json",
        "--", "python3", "-m", "validators.replay", "/in/recording.log",
    ]  # fmt: skip
    print(f"\ndemo: validator inside {entry['tags'][0] if entry.get('tags') else entry['image_id']}")
    print("      on a REPLAYED recording (replay stand-in for all_reduce_perf; this machine has no GPU/EFA)")
    report_dir = (out / "demo").resolve()
    report_dir.mkdir(parents=True, exist_ok=True)
    container = client.containers.run(
        entry["image_id"],
        cmd,
        volumes={str(replay): {"bind": "/in/recording.log", "mode": "ro"}, str(report_dir): {"bind": "/out"}},
        detach=True,
    )
    try:
        result = container.wait(timeout=120)
        print(container.logs().decode("utf-8", "replace").rstrip())
    finally:
        container.remove(force=True)
    report = json.loads((report_dir / "preflight.json").read_text())
    print(
        f"demo: pre-flight verdict on the replay: {report.get('verdict')} ({report_dir / 'preflight.json'})"
    )
    return 0 if result.get("StatusCode") == 0 else 1
