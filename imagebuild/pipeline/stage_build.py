"""build and bake: each variant's image built, or the docker-bake file that builds them."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence

from imagebuild.building.artifacts import DEFAULT_CACHE, ArtifactCache
from imagebuild.errors import ChecksFailed, UserError
from imagebuild.pipeline.stage_render import Selection
from imagebuild.release.destinations import RegistryTarget


@dataclass(frozen=True)
class StageOptions:
    """How a variant's context is staged: the artifact cache and the CA given to builder stages."""

    cache: Path = DEFAULT_CACHE
    offline: bool = False
    mirror: Optional[str] = None
    build_ca: Optional[str] = None  # a CA bundle path (the command fills in the default)
    build_args: Sequence[str] = ()  # K=V

    def artifact_cache(self) -> ArtifactCache:
        return ArtifactCache(Path(self.cache), mirror=self.mirror, offline=self.offline)


@dataclass(frozen=True)
class BuildRequest:
    select: Selection
    stage: StageOptions = field(default_factory=StageOptions)
    builder: str = "auto"
    cache_from: Sequence[str] = ()
    cache_to: Sequence[str] = ()
    target: Optional[RegistryTarget] = None  # where to look for images other runners built
    repository_prefix: str = ""
    jobs: int = 1
    plain: bool = False
    force: bool = False
    no_cache: bool = False
    trust_local_base: bool = False  # base registry unreachable: hash the engine's copy's digest (recorded)


def build(req: BuildRequest) -> List[Any]:
    """Render (unless told not to), then build each variant not already built; the summary's
    results (`VariantResult`), also written to <out>/summary.json."""
    from imagebuild.adapters import docker_engine
    from imagebuild.building import lifeline
    from imagebuild.building.builder import build_all
    from imagebuild.building.buildkit import cache_args, detect
    from imagebuild.building.context import resolve_ca
    from imagebuild.building.options import BuildOptions, parse_build_args, summary_counts
    from imagebuild.building.reporters import RichReporter, make_reporter
    from imagebuild.building.shard import parse_shard
    from imagebuild.building.summary import write_summary
    from imagebuild.release.destinations import content_lookup

    if req.jobs < 1:
        raise UserError("--jobs must be at least 1", key="--jobs")
    build_args = parse_build_args(req.stage.build_args)
    ca = resolve_ca(req.stage.build_ca)
    out = Path(req.select.out)
    parse_shard(req.select.shard)  # bad usage: exit 2 before anything runs
    chosen = detect(req.builder)
    cache_args(chosen, req.cache_from, req.cache_to)
    client = docker_engine.connect()  # exit 2 with how to start it, before anything is written
    dirs = req.select.dirs()
    if not dirs:
        print(f"shard {req.select.shard}: no variant falls in this shard; nothing to build")
        write_summary(out / "summary.json", [])
        return []
    cache = req.stage.artifact_cache()
    opts = BuildOptions(
        cache=cache,
        build_ca=ca,
        build_args=build_args,
        out=out,
        force=req.force,
        nocache=req.no_cache,
        builder=chosen,
        cache_from=list(req.cache_from),
        cache_to=list(req.cache_to),
        remote_lookup=content_lookup(req.target, req.repository_prefix) if req.target else None,
        trust_local_base=req.trust_local_base,
    )
    print(f"builder: {chosen.reason}")
    reporter = make_reporter([d.name for d in dirs], plain=True if req.plain else None)
    cache.say = lambda line: reporter.event("artifacts", "info", line)
    with reporter if isinstance(reporter, RichReporter) else ExitStack(), lifeline.held():
        results = build_all(client, dirs, opts, reporter, jobs=req.jobs)
    write_summary(out / "summary.json", results)
    counts = summary_counts(results)
    print(
        f"{len(results)} variant(s): "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + f"; summary {out / 'summary.json'}"
    )
    for r in results:
        if r.status == "failed":
            lines = (r.error or "failed").splitlines() or ["failed"]
            first, rest = lines[0], lines[1:]  # rest: the failed command's last error lines, a hint
            print(f"FAILED {r.variant}: {first}" + ("" if r.log in first else f" (log {r.log})"))
            for line in rest:
                print(line)
    return results


@dataclass(frozen=True)
class BakeRequest:
    select: Selection
    stage: StageOptions = field(default_factory=StageOptions)
    file: Optional[Path] = None  # default <out>/docker-bake.json
    platforms: Sequence[str] = ()
    cache_from: Sequence[str] = ()
    cache_to: Sequence[str] = ()
    trust_local_base: bool = False  # as BuildRequest's


def bake(req: BakeRequest) -> Path:
    """Stage and hash each variant as `build` does, its base included, and write a docker-bake file of
    them; its path. A base that cannot be confirmed writes nothing (ChecksFailed, exit 1), and a bake file
    an earlier run left at that path is removed: a script that ignored the exit code would bake it."""
    path = Path(req.file) if req.file else Path(req.select.out) / "docker-bake.json"
    try:
        return _bake(req, path)
    except BaseException:
        if _is_bake_file(path):  # never a file of another kind that --file happened to name
            path.unlink()
            # an earlier run's, or this run's own when `buildx bake --print` refused it after writing
            print(f"bake: removed {path}: this run failed, so the file there is not its result")
        raise


def _ca_dockerfile(vdir: Path) -> Optional[str]:
    """With a build CA staged where the rendered Dockerfile lacks it (`--build-ca`, the matrix silent): the
    Dockerfile `build` would send, for the target to carry inline; else None (the rendered file is used)."""
    from imagebuild.building.context import sent_dockerfile

    text = (vdir / "Dockerfile").read_text()
    sent = sent_dockerfile(vdir)
    return sent if sent != text else None


def _without_channels(variant: str, tags: List[str], channels: Sequence[str]) -> List[str]:
    """The tags a bake target pushes: not the variant's channels (`buildx bake --push` runs before any
    check, and only `build.py release` moves a channel), the same rule as push."""
    from imagebuild.release.channels import names_channel

    kept = []
    for ref in tags:
        if names_channel(ref, channels):
            print(f"bake: {variant}: {ref} is a channel; left out (`efa-image-build release` moves it)")
        else:
            kept.append(ref)
    return kept


def _is_bake_file(path: Path) -> bool:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("target"), dict)


def _bake(req: BakeRequest, path: Path) -> Path:
    from imagebuild.adapters import docker_engine
    from imagebuild.building import bake as bakefile
    from imagebuild.building.baseid import (
        base_labels,
        base_line,
        known_image_id,
        pinned_ref,
        unconfirmed_message,
    )
    from imagebuild.building.builder import check_offline
    from imagebuild.building.context import resolve_ca, stage_variant
    from imagebuild.building.dockerbuild import build_labels
    from imagebuild.building.options import BuildOptions, parse_build_args, read_lock
    from imagebuild.building.shard import parse_shard
    from imagebuild.catalog import platforms
    from imagebuild.jsonfile import write_json_atomic

    parse_shard(req.select.shard)
    build_args = parse_build_args(req.stage.build_args)
    ca = resolve_ca(req.stage.build_ca)  # bad input: exit 2 before anything is rendered or staged
    out = Path(req.select.out)
    dirs = req.select.dirs()
    if not dirs:
        raise UserError(f"no variant falls in shard {req.select.shard}", key="--shard")
    cache = req.stage.artifact_cache()
    check_offline(cache, dirs)
    try:  # the engine `build` would use: it says what each base tag names now
        client = docker_engine.connect()
    except UserError as err:
        client = None
        print(f"bake: {err.message} ({err.key}); only bases pinned by digest can be confirmed")
    opts = BuildOptions(
        cache=cache,
        build_ca=ca,
        build_args=build_args,
        out=out,
        trust_local_base=req.trust_local_base,
    )
    targets, unconfirmed = {}, []
    for vdir in dirs:
        lock = read_lock(vdir)
        base = opts.base_of(client, lock)
        if base.problem:
            unconfirmed.append(f"{vdir.name}: {unconfirmed_message(base, 'No target written')}")
            continue
        print(f"{vdir.name}: {base_line(base)}")
        chash, tags = stage_variant(vdir, lock, opts, lambda _line: None, base.identity)
        tags = _without_channels(vdir.name, tags, [str(c) for c in lock.get("channels") or []])
        pinned = pinned_ref(base)
        labels = base_labels(base.digest, known_image_id(base))
        targets[bakefile.target_name(vdir.name)] = bakefile.bake_target(
            os.path.relpath(vdir / "context"),
            tags,
            build_labels(vdir, lock, chash, labels),
            build_args,
            list(req.platforms) or [lock.get("platform") or platforms.DEFAULT],
            list(req.cache_from),
            list(req.cache_to),
            description=vdir.name,
            contexts=bakefile.base_context(base.ref, pinned) if base.ref and pinned else None,
            dockerfile_inline=_ca_dockerfile(vdir),
        )
    if unconfirmed:  # nothing half-written: a file without these targets would look complete
        raise ChecksFailed("no bake file written:\n" + "\n".join(unconfirmed))
    doc = bakefile.bake_file(targets)
    problems = bakefile.validate(doc)
    if problems:  # a bug here, not the user's input: say what bake would refuse
        raise UserError("the bake file breaks bake's schema: " + "; ".join(problems), key="bake")
    write_json_atomic(path, doc)
    print(f"bake: {len(targets)} target(s) -> {path}")
    bakefile.buildx_print(path)
    print(f"build them: docker buildx bake -f {path} --load  (or --push; from this directory)")
    return path
