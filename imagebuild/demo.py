"""`build.py demo`: the main job on the embedded default, end to end on a machine with nothing but docker.

It makes the local base, renders and builds the local matrix for real, checks every image with the static
checks, and finishes with the validator run inside a built image on a replayed recording (no GPU here:
the replay stand-in prints a recorded nccl-tests log in place of the GPU binary, and every output of that
run says REPLAY: the Markdown heading, `run.replay` in the JSON, the plot title). Variants whose sources
cannot be had here (git archives of aws-ofi-nccl, nccl-tests) are built when the artifact cache holds them;
the summary names each one not built, why, and how to build it.

The source-built parts (git archives of aws-ofi-nccl, nccl-tests, GDRCopy) come from wherever they can be
had, in this order, and the demo says which: the artifact cache, the mirror (`--mirror`, the layout
`build.py build --mirror` reads; `make demo` passes ../shared/mirror when it is there), upstream (unless
`--no-upstream`). Each is verified against its pin whichever it came from.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from imagebuild import pipeline
from imagebuild.adapters.docker_engine import connect
from imagebuild.building.artifacts import DEFAULT_CACHE, ArtifactCache, ArtifactError, artifacts_from_lock
from imagebuild.building.localbase import DEFAULT_NAME, make_base
from imagebuild.building.options import read_lock
from imagebuild.errors import ChecksFailed, UserError, redact
from imagebuild.reports.summarize import ReportRequest, summarize
from imagebuild.variant import Artifact

# A recording the project wrote, replayed inside the image by efa_validators.replay (the only stand-in).
REPLAY = "tests/fixtures/replay/good-efa-p5-2node.log"


@dataclass(frozen=True)
class DemoRequest:
    matrix: str = "matrix.local.yaml"
    variants: Sequence[str] = ()
    out: Path = Path("build")
    jobs: int = 1
    mirror: Optional[str] = None  # BASE of <host>/<path> git mirrors and files
    upstream: bool = True  # fetch what neither the cache nor the mirror has from its upstream URL
    cache: Path = DEFAULT_CACHE


@dataclass(frozen=True)
class DemoOutcome:
    checks_passed: bool  # the static checks of every built image
    replay_passed: bool  # the validator's verdict inside the first image, on the replayed recording


def demo(req: DemoRequest) -> DemoOutcome:
    """Base, render, build what can be built here, check, validate on the replay, report."""
    out = Path(req.out)
    for needed in (req.matrix, REPLAY):  # before the base (minutes, as root): a checkout's files, or nothing
        if not Path(needed).is_file():
            raise UserError(
                "the demo is this project's own job and runs in a checkout of it (make demo)",
                file=needed,
                hint="in your own repository: efa-image-build init, then build and test",
            )
    make_base(connect(), DEFAULT_NAME, say=lambda line: print(line, flush=True))
    rendered = pipeline.render(
        pipeline.RenderOptions(matrix=req.matrix, variants=tuple(req.variants), out=out)
    )
    names, left = _buildable(out, [d.name for d in rendered], req)
    if not names:
        _print_not_built(req.matrix, left)
        raise UserError("no variant of the matrix can be built here", file=req.matrix)
    built = pipeline.Selection(render=None, out=out, variants=tuple(names))  # rendered above
    # No --build-ca: a variant whose matrix asks for the CA gets the default one (context.DEFAULT_CA) anyway.
    stage = pipeline.StageOptions(cache=Path(req.cache), mirror=req.mirror)
    results = pipeline.build(pipeline.BuildRequest(select=built, stage=stage, jobs=req.jobs))
    if any(r.status == "failed" for r in results):
        raise ChecksFailed("")  # each failed variant is printed above with its log
    reports = pipeline.check(pipeline.CheckRequest(out=out, variants=tuple(names)))
    replay_passed = _validate_in_image(out, names[0])
    demo_dir = out / "demo"
    try:
        summarize(
            ReportRequest(
                report=str(demo_dir / "preflight.json"),
                plot=str(demo_dir / "busbw.png"),
                markdown=str(demo_dir / "preflight.md"),
            )
        )
    except UserError as err:  # the demo's summary below still says what passed
        print(f"error: {err}", file=sys.stderr)
    checks_passed = bool(reports) and all(r.passed for r in reports)
    _print_check_summary(out / "test-report.json")
    print(f"demo: static checks {'passed' if checks_passed else 'FAILED'}: {out / 'test-report.json'}")
    print(
        f"demo: pre-flight outputs, each marked REPLAY (replayed recording, no GPU): "
        f"{demo_dir / 'preflight.json'} (run.replay), {demo_dir / 'preflight.md'}, {demo_dir / 'busbw.png'};"
        f" evidence log {demo_dir / 'run.log'}"
    )
    _print_not_built(req.matrix, left)
    return DemoOutcome(checks_passed, replay_passed)


def _buildable(out: Path, names: List[str], req: DemoRequest) -> Tuple[List[str], Dict[str, str]]:
    """(variants whose git/url sources were found, {variant: why not} for the others), saying where each
    variant's sources came from."""
    chosen: List[str] = []
    left: Dict[str, str] = {}
    for name in names:
        vdir = out / name
        arts = [
            a
            for a in artifacts_from_lock(read_lock(vdir), str(vdir / "variant.lock.json"))
            if a.kind in ("git", "url")
        ]
        where, why = find_sources(arts, req)
        if where is None:
            left[name] = why
            print(f"demo: not building {name}: {why}")
            continue
        if arts:
            parts = ", ".join(sorted({a.component for a in arts}))
            print(f"demo: {name}: sources of {parts} from {where}, verified against their pins")
        chosen.append(name)
    return chosen, left


def find_sources(arts: List[Artifact], req: DemoRequest) -> Tuple[Optional[str], str]:
    """Where every artifact of `arts` was found (the cache, the mirror, upstream), or (None, why not).

    The first place that has all of them wins; a partial find is kept in the cache for the next place."""
    cache = ArtifactCache(Path(req.cache), offline=True, say=lambda _line: None)
    missing = cache.missing(arts)
    if not missing:
        return f"the artifact cache {req.cache}", ""
    places = [(f"the mirror {redact(req.mirror)}", req.mirror)] if req.mirror else []
    if req.upstream:
        places.append(("upstream", None))
    errors = []
    for label, mirror in places:
        fetcher = ArtifactCache(Path(req.cache), mirror=mirror, say=lambda _line: None)
        try:
            for art in missing:
                fetcher.ensure(art)
        except (ArtifactError, UserError) as err:
            errors.append(f"{label}: {str(err).splitlines()[0][:200]}")
            missing = cache.missing(arts)
            continue
        return label, ""
    tried = "; ".join(errors) or "no mirror given and --no-upstream"
    return None, f"needs {', '.join(a.describe() for a in missing)} (not in {req.cache}; {tried})"


def _print_not_built(matrix: str, left: Dict[str, str]) -> None:
    """The end of the demo names every variant it did not build, why, and how to build it."""
    if not left:
        return
    print("\ndemo: variants NOT built on this machine (their sources cannot be downloaded here)")
    for name, why in sorted(left.items()):
        print(f"  NOT BUILT  {name}: {why}")
        print(
            f"             to build it: put those files in {DEFAULT_CACHE} (docs/build.md, 'artifact cache')"
            f" or give a mirror: efa-image-build demo --mirror BASE_URL"
            f" (or efa-image-build build --mirror BASE_URL --matrix {matrix} --variant {name})"
        )


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


def _validate_in_image(out: Path, variant: str) -> bool:
    """Run the image's own validators on a replayed recording: the pre-flight code path, minus the GPU."""
    summary = json.loads((out / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == variant)
    replay = Path(REPLAY).resolve()
    if not replay.is_file():
        raise UserError("recording for the replay stand-in is missing", file=str(replay))
    client = connect()
    report_dir = (out / "demo").resolve()
    report_dir.mkdir(parents=True, exist_ok=True)
    # Mounted at the host's paths: the evidence (file, line) the report points at exists after the demo.
    cmd = [
        "python3", "-m", "efa_validators", "run", "--quiet", "--timeout", "60",
        "--instance-type", "p5.48xlarge", "--nodes", "2", "--json", str(report_dir / "preflight.json"),
        "--log", str(report_dir / "run.log"),
        "--", "python3", "-m", "efa_validators.replay", str(replay),
    ]  # fmt: skip
    print(f"\ndemo: validator inside {entry['tags'][0] if entry.get('tags') else entry['image_id']}")
    print("      on a REPLAYED recording (replay stand-in for all_reduce_perf; this machine has no GPU/EFA)")
    mounts = {str(replay): {"bind": str(replay), "mode": "ro"}, str(report_dir): {"bind": str(report_dir)}}
    container = client.containers.run(
        entry["image_id"],
        cmd,
        volumes=mounts,
        user=f"{os.getuid()}:{os.getgid()}",
        detach=True,
    )
    try:
        result = container.wait(timeout=120)
        print(container.logs().decode("utf-8", "replace").rstrip())
    finally:
        container.remove(force=True)
    report = json.loads((report_dir / "preflight.json").read_text())
    print(
        f"demo: pre-flight verdict on the REPLAY: {report.get('verdict')} ({report_dir / 'preflight.json'})"
    )
    return result.get("StatusCode") == 0
