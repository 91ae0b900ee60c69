"""The pipeline as functions: render -> build -> check -> push -> release (and bake beside build).

Each stage takes one typed options object and returns what it made; the commands in imagebuild/commands/
turn flags into these objects and results into exit codes, and nothing here reads argv. A stage calls the
one before it directly (build renders through `render` and builds exactly the folders it wrote), never
through the command line. Bad input is a UserError (exit 2), a refusal ChecksFailed (exit 1).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from efa_validators.report.printable import printable
from imagebuild.build.artifacts import DEFAULT_CACHE, ArtifactCache
from imagebuild.errors import ChecksFailed, UserError
from imagebuild.release.destinations import Destination, Registries, RegistryTarget, log

# ---------------------------------------------------------------- render


@dataclass(frozen=True)
class RenderOptions:
    matrix: str = "matrix.yaml"
    variants: Sequence[str] = ()  # only these (default: all)
    out: Path = Path("build")
    platform: Optional[str] = None  # every variant for this platform instead of its own


def rendered(opts: RenderOptions) -> Tuple[List[Any], Dict[str, Dict[str, bytes]]]:
    """Load and check the matrix, refuse env-linter errors, render every variant in memory: the variants and
    their files. Every refusal of `render` happens here, before anything is written, so `list` (which
    calls this and writes nothing) refuses exactly what `render` refuses."""
    from imagebuild.matrix.load import load
    from imagebuild.render.folders import render_all

    variants = load(opts.matrix, list(opts.variants), platform=opts.platform)
    errors = []
    for v in variants:
        for sev, _name, msg in v.lint:
            if sev in ("warning", "info"):
                print(f"env {sev}: {v.name}: {msg}", file=sys.stderr)
            elif sev == "error":
                errors.append(f"{v.name}: {msg}")
    if errors:
        raise ChecksFailed(
            "the env linter found settings the field advises against "
            "(accept one with lint_ignore: [NAME]):\n  " + "\n  ".join(errors)
        )
    return variants, render_all(variants, os.path.dirname(os.path.abspath(opts.matrix)))


def render(opts: RenderOptions) -> List[Path]:
    """`rendered`, then each variant's folder written (only those that changed); the folders."""
    from imagebuild.render.folders import write

    variants, files = rendered(opts)
    written = write(str(opts.out), files)
    for w in written:
        print(f"{'rendered' if w.changed else 'unchanged'} {w.path}")
    return sorted(Path(opts.out) / v.name for v in variants)


def rendered_dirs(out: Path, names: Sequence[str]) -> List[Path]:
    """Variant folders already rendered in `out`: those named, or those of the last render (every one with a
    lock where no render left its index)."""
    if names:
        dirs = [out / n for n in names]
        for d in dirs:
            if not (d / "variant.lock.json").is_file():
                raise UserError(f"variant {d.name!r} is not rendered in {out}", key="--variant")
        return dirs
    from imagebuild.render.folders import rendered_names

    last = rendered_names(str(out))  # the last render's variants: an older matrix's folders are not built
    found = sorted(p.parent for p in out.glob("*/variant.lock.json") if last is None or p.parent.name in last)
    if not found:
        raise UserError(
            f"no rendered variants in {out}", file=str(out), hint="run `efa-image-build render` first"
        )
    return found


@dataclass(frozen=True)
class Selection:
    """The variant folders a build or bake works on."""

    render: Optional[RenderOptions]  # render first and take what it wrote; None: what is rendered in `out`
    out: Path = Path("build")
    variants: Sequence[str] = ()  # with render None: only these rendered ones
    shard: Optional[str] = None  # I/N

    def dirs(self) -> List[Path]:
        """What `render` just wrote (or what is rendered in `out`), then only this shard's."""
        from imagebuild.build.shard import parse_shard, select

        dirs = (
            render(self.render) if self.render is not None else rendered_dirs(Path(self.out), self.variants)
        )
        return select(dirs, [d.name for d in dirs], parse_shard(self.shard))


# ---------------------------------------------------------------- build and bake


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
    results (`builder.VariantResult`), also written to <out>/summary.json."""
    from imagebuild.adapters import docker_engine
    from imagebuild.build import builder, lifeline
    from imagebuild.build.buildkit import cache_args, detect
    from imagebuild.build.shard import parse_shard
    from imagebuild.release.destinations import content_lookup

    if req.jobs < 1:
        raise UserError("--jobs must be at least 1", key="--jobs")
    build_args = builder.parse_build_args(req.stage.build_args)
    ca = builder.resolve_ca(req.stage.build_ca)
    out = Path(req.select.out)
    parse_shard(req.select.shard)  # bad usage: exit 2 before anything runs
    chosen = detect(req.builder)
    cache_args(chosen, req.cache_from, req.cache_to)
    client = docker_engine.connect()  # exit 2 with how to start it, before anything is written
    dirs = req.select.dirs()
    if not dirs:
        print(f"shard {req.select.shard}: no variant falls in this shard; nothing to build")
        builder.write_summary(out / "summary.json", [])
        return []
    cache = req.stage.artifact_cache()
    opts = builder.BuildOptions(
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
    reporter = builder.make_reporter([d.name for d in dirs], plain=True if req.plain else None)
    cache.say = lambda line: reporter.event("artifacts", "info", line)
    with reporter if isinstance(reporter, builder.RichReporter) else ExitStack(), lifeline.held():
        results = builder.build_all(client, dirs, opts, reporter, jobs=req.jobs)
    builder.write_summary(out / "summary.json", results)
    counts = builder.summary_counts(results)
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
    from imagebuild.build import builder

    text = (vdir / "Dockerfile").read_text()
    sent = builder.sent_dockerfile(vdir)
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
    from imagebuild.build import bake as bakefile
    from imagebuild.build import builder
    from imagebuild.build.shard import parse_shard
    from imagebuild.catalog import platforms
    from imagebuild.jsonfile import write_json_atomic

    parse_shard(req.select.shard)
    build_args = builder.parse_build_args(req.stage.build_args)
    ca = builder.resolve_ca(req.stage.build_ca)  # bad input: exit 2 before anything is rendered or staged
    out = Path(req.select.out)
    dirs = req.select.dirs()
    if not dirs:
        raise UserError(f"no variant falls in shard {req.select.shard}", key="--shard")
    cache = req.stage.artifact_cache()
    builder.check_offline(cache, dirs)
    try:  # the engine `build` would use: it says what each base tag names now
        client = docker_engine.connect()
    except UserError as err:
        client = None
        print(f"bake: {err.message} ({err.key}); only bases pinned by digest can be confirmed")
    opts = builder.BuildOptions(
        cache=cache,
        build_ca=ca,
        build_args=build_args,
        out=out,
        trust_local_base=req.trust_local_base,
    )
    targets, unconfirmed = {}, []
    for vdir in dirs:
        lock = builder.read_lock(vdir)
        base = opts.base_of(client, lock)
        if base.problem:
            unconfirmed.append(f"{vdir.name}: {builder.unconfirmed_message(base, 'No target written')}")
            continue
        print(f"{vdir.name}: {builder.base_line(base)}")
        chash, tags = builder.stage_variant(vdir, lock, opts, lambda _line: None, base.identity)
        tags = _without_channels(vdir.name, tags, [str(c) for c in lock.get("channels") or []])
        pinned = builder.pinned_ref(base)
        labels = builder.base_labels(base.digest, builder.known_image_id(base))
        targets[bakefile.target_name(vdir.name)] = bakefile.bake_target(
            os.path.relpath(vdir / "context"),
            tags,
            builder.build_labels(vdir, lock, chash, labels),
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


# ---------------------------------------------------------------- check


@dataclass(frozen=True)
class CheckRequest:
    out: Path = Path("build")
    variants: Sequence[str] = ()  # built variants of <out>/summary.json (default: all)
    images: Sequence[str] = ()  # or these images (the lock is read from their label)
    json_path: Optional[Path] = None  # default <out>/test-report.json
    junit_path: Optional[Path] = None  # default <out>/test-report.xml
    trust_image_checks: bool = False  # run the team checks an --image's own label names (else unknown)


Target = Tuple[Optional[str], str, Optional[dict], Optional[str], List[str]]


def check_targets(out: Path, names: Sequence[str]) -> List[Target]:
    """(variant, image id, lock, lock file, pushed refs) per built variant in the summary (named, or all)."""
    from imagebuild.build.documents import VariantLock
    from imagebuild.build.summary import load_summary
    from imagebuild.jsonfile import read_json

    path = out / "summary.json"
    summary = load_summary(path)  # bounded, typed: `[]` or a FIFO is exit 2 naming the file
    entries = {e.get("variant"): e for e in summary.get("variants") or []}
    for n in names:
        if n not in entries:
            raise UserError(f"variant {n!r} is not in the build summary", file=str(path), key="--variant")
    chosen = [entries[n] for n in names] if names else [entries[k] for k in sorted(entries)]
    targets: List[Target] = []
    for e in chosen:
        if e.get("status") not in ("built", "skipped") or not e.get("image_id"):
            targets.append((e["variant"], "", None, e.get("lock") or "", []))
            continue
        lock_file = e.get("lock") or str(out / e["variant"] / "variant.lock.json")
        lock = read_json(Path(lock_file), "the variant lock", model=VariantLock)
        targets.append((e["variant"], e["image_id"], lock, lock_file, e.get("pushed") or []))
    return targets


def check_lines(rep: Any, ref: str) -> List[str]:
    """What `test` prints for one image: its counts, then each failed or unknown check with its detail. A
    detail quotes the image (a path from its label's checks, a command's stderr, a file's contents): every
    value from outside goes through `printable`, so no ESC sequence or newline reaches the terminal."""
    statuses = [c["status"] for c in rep.checks]
    counts = {s: statuses.count(s) for s in ("pass", "fail", "unknown", "skip")}
    head = (
        f"{'PASS' if rep.passed else 'FAIL'} {printable(rep.variant or ref)} ({printable(rep.image_id[:19])})"
    )
    lines = [head + ": " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" in {rep.duration_s} s"]
    for c in rep.checks:
        if c["status"] in ("fail", "unknown"):
            lines.append(f"  {c['status']:7} {printable(c['name'])}: {printable(c['detail'])}")
    return lines


def check(req: CheckRequest) -> List[Any]:
    """Static checks of each image in a container of it; the reports (`checks.runner.ImageReport`), also
    written as JSON and JUnit. A variant whose build failed is a failed report, not skipped."""
    from imagebuild.adapters.docker_engine import connect, ensure_local, image_labels
    from imagebuild.check import software
    from imagebuild.check.runner import ImageReport, check_image, merge_junit, write_report
    from imagebuild.variant import lock_from_labels

    out = Path(req.out)
    json_path = Path(req.json_path) if req.json_path else out / "test-report.json"
    junit_path = Path(req.junit_path) if req.junit_path else out / "test-report.xml"
    if req.images:
        targets: List[Target] = [(None, ref, None, None, []) for ref in req.images]
    else:
        targets = check_targets(out, req.variants)  # every input read and checked before the engine is asked
    client = connect()
    reports: List[ImageReport] = []
    with tempfile.TemporaryDirectory(prefix="efa-junit-") as tmp:
        parts = []
        for i, (variant, ref, lock, lock_file, pushed) in enumerate(targets):
            if not ref:
                why = "the variant has no image (its build failed)"
                reports.append(
                    ImageReport(variant, "", "", [{"name": "image-built", "status": "fail", "detail": why}])
                )
                print(f"FAIL {printable(variant)}: no image (build failed)")
                continue
            if pushed:
                ensure_local(client, ref, pushed)
            part = Path(tmp) / f"{i}.xml"
            rep = check_image(client, ref, lock=lock, lock_file=lock_file, variant=variant, junit=part,
                              trust_image_checks=req.trust_image_checks)  # fmt: skip
            rep.software = software.describe(client, ref, lock or lock_from_labels(image_labels(ref)))
            parts.append(part)
            reports.append(rep)
            for line in check_lines(rep, ref):
                print(line)
        merge_junit(parts, junit_path)
    write_report(reports, json_path)
    print(f"report {json_path}; junit {junit_path}")
    return reports


# ---------------------------------------------------------------- push


@dataclass(frozen=True)
class PushRequest:
    target: RegistryTarget
    summary: Path = Path("build/summary.json")
    variants: Sequence[str] = ()
    tags: Sequence[str] = ()  # extra tags; {variant} expands
    repository_prefix: str = ""
    force: bool = False  # overwrite a tag that holds another image
    fan_out: bool = False  # a CI job's part of the matrix: shared tags under TAG-ARCH, for `fan-in`
    sign_key: Optional[str] = None  # attest each pushed digest (SBOM, signed provenance) with this key
    matrix: str = "matrix.yaml"  # the matrix file the provenance names (with sign_key)


def _select_built(summary: Dict[str, Any], names: Sequence[str], path: str) -> List[Dict[str, Any]]:
    """The built variants asked for; an unknown name is a user error, an unbuilt one is skipped loudly."""
    entries = summary["variants"]
    known = {e.get("variant") for e in entries}
    for name in names:
        if name not in known:
            raise UserError(f"variant {name!r} not in the build summary", file=path, key="--variant")
    built = []
    for e in entries:
        if names and e.get("variant") not in names:
            continue
        if e.get("status") not in ("built", "skipped") or not e.get("image_id"):  # skipped: up to date
            log(f"skip {e.get('variant')}: status {e.get('status')!r}, nothing to push")
            continue
        built.append(e)
    if not built:
        raise UserError("no built variant to push", file=path, hint="run `efa-image-build build` first")
    return built


def _target_repository(local_tag: str, prefix: str) -> Tuple[str, Optional[str]]:
    """Repository path and tag of a summary tag, with its registry part (if any) dropped."""
    from imagebuild.adapters.registry import split_ref

    ref = split_ref(local_tag, key="tags")
    return prefix + ref.repository, ref.tag


def _write_once(entry: Dict[str, Any], req: PushRequest) -> Set[Tuple[str, str]]:
    """The (repository, tag) pairs of the summary's own tags (content tags, twins' shared tags): write-once,
    never moved, --force or not. Only a `--tag` extra is the user's to move (issue 30)."""
    pairs = (_target_repository(t, req.repository_prefix) for t in entry.get("tags") or [])
    return {(repo, tag or "latest") for repo, tag in pairs}


def _push_targets(entry: Dict[str, Any], req: PushRequest) -> List[Tuple[str, str]]:
    """(repository, tag) pairs a variant is pushed under: its summary tags but its channels (only release
    moves a channel), then the --tag extras; each once."""
    from imagebuild.adapters import registry as reg
    from imagebuild.release.channels import entry_channels, names_channel

    variant = entry["variant"]
    tags = entry.get("tags") or []
    if not tags:
        raise UserError(f"variant {variant!r} has no tags in the summary", file=str(req.summary), key="tags")
    repository, _first = _target_repository(tags[0], req.repository_prefix)
    channels = entry_channels(entry)
    wanted = []
    for t in tags:
        repo_t, tag_t = _target_repository(t, req.repository_prefix)
        if names_channel(t, channels):  # a channel names a gated digest: only release moves it
            log(
                f"  {repo_t}:{tag_t}: a channel of {variant}; not pushed (`efa-image-build release` moves it)"
            )
            continue
        wanted.append((repo_t, tag_t or "latest"))
    for t in req.tags:
        extra = reg.check_tag(t.replace("{variant}", variant), key="--tag")
        if extra in channels:
            raise UserError(
                f"{extra!r} is a channel of variant {variant!r}; push never moves a channel",
                key="--tag",
                hint=f"`efa-image-build release --variant {variant}` moves it to a digest whose checks "
                "passed",
            )
        wanted.append((repository, extra))
    return list(dict.fromkeys(wanted))


def _push_indexes(
    dest: Any,
    twins: Dict[Tuple[str, str], List[str]],
    entries: List[Dict[str, Any]],
    done: Dict[str, str],
    summary: Dict[str, Any],
    summary_path: Path,
    movable: Set[Tuple[str, str]],
    fixed: Set[Tuple[str, str]],
) -> int:
    """Put one image index under each tag the twins share, naming each twin's pushed digest; the index
    ref goes into each twin's summary entry (`index`). Returns how many indexes were refused."""
    from imagebuild.jsonfile import write_json_atomic
    from imagebuild.release.index import push_index, read_entry

    by_name = {e["variant"]: e for e in entries}
    refused = 0
    for (repo_t, tag_t), names in twins.items():
        ref = dest.ref(dest.prepare(repo_t), tag_t)
        missing = [n for n in names if n not in done]
        if missing:
            failed = [n for n in missing if n in by_name]
            log(f"index {ref} not written: {', '.join(missing)} not pushed in this run")
            refused += 1 if failed else 0  # a twin left out by --variant is the user's choice, not a failure
            continue
        try:
            api = dest.oci_api()
            members = [read_entry(api, ref.repository, done[n], by_name[n]["image_id"]) for n in names]
            force = (repo_t, tag_t) in movable  # only a --tag extra, with --force
            once = (repo_t, tag_t) in fixed
            digest, _same = push_index(api, ref, members, force=force, write_once=once, log=log)
        except ChecksFailed as err:
            log(f"refused: {err}")
            refused += 1
            continue
        for n in names:
            by_name[n]["index"] = f"{ref}@{digest}"
            _print_fields(n, ref, digest)
        write_json_atomic(summary_path, summary)
    return refused


def push(req: PushRequest) -> List[Any]:
    """Push each built variant's image by digest under its tags; the pushes (`registry.PushResult`), also
    recorded in the summary. ChecksFailed when a tag holds another image (unless force)."""
    from imagebuild.adapters import registry as reg
    from imagebuild.adapters.docker_engine import connect, missing_image
    from imagebuild.build.summary import load_summary
    from imagebuild.jsonfile import write_json_atomic
    from imagebuild.release.fanin import is_content_tag
    from imagebuild.release.index import platform_tag, twin_groups, with_platform_tags
    from imagebuild.release.push import push_image, record_pushes

    policy = req.target.policy()
    summary_path = Path(req.summary)
    summary = load_summary(summary_path)
    entries = _select_built(summary, req.variants, str(summary_path))
    signing = _signing(req.sign_key, req.matrix) if req.sign_key else None  # bad key: exit 2 now
    for t in req.tags:
        reg.check_tag(t.replace("{variant}", "v"), key="--tag")
    dest = Destination(req.target, policy)
    client = connect()
    failures = 0
    pushed: List[Any] = []
    plans = [(entry, _push_targets(entry, req)) for entry in entries]
    fixed = with_platform_tags({pair for e in summary["variants"] for pair in _write_once(e, req)})
    # twins are found among every built variant of the summary, so one pushed alone (--variant) still goes
    # under its TAG-ARCH and never takes the shared tag from the index
    others = [e for e in summary["variants"] if e not in entries and e.get("image_id") and e.get("tags")]
    every = plans + [(e, _push_targets(e, req)) for e in others if e.get("status") in ("built", "skipped")]
    twins = twin_groups([(e["variant"], w) for e, wanted in every for w in wanted])
    done: Dict[str, str] = {}  # variant -> the digest it was pushed as
    for entry, wanted in plans:
        variant = entry["variant"]
        log(f"push {variant} ({entry['image_id'][:19]})")
        why = missing_image(client, entry["image_id"])
        if why is not None:
            raise UserError(
                f"image {entry['image_id']} of variant {variant!r} not in the local engine: {why}",
                file=str(summary_path),
                key="image_id",
            )
        arch = client.images.get(entry["image_id"]).attrs.get("Architecture") or "unknown"
        results = []
        try:
            for repo_t, tag_t in wanted:
                once = (repo_t, tag_t) in fixed  # before TAG-ARCH: the matrix's tag under its platform name
                if (repo_t, tag_t) in twins or (req.fan_out and not is_content_tag(entry, tag_t)):
                    tag_t = platform_tag(tag_t, arch)  # the shared tag gets the index; this image its own
                ref = dest.ref(dest.prepare(repo_t), tag_t)
                results.append(
                    push_image(
                        client,
                        entry["image_id"],
                        ref,
                        dest.creds,
                        existing=dest.existing,
                        force=req.force and not once,
                        write_once=once,
                        policy=policy,
                        log=log,
                    )
                )
            if results:
                done[variant] = results[-1].digest
        except ChecksFailed as err:
            log(f"refused: {err}")
            failures += 1
        finally:
            if results:
                record_pushes(summary, variant, results)
                write_json_atomic(summary_path, summary)
        for res in results:
            _print_fields(variant, res.ref, res.digest)
        pushed += results
    movable = {key for key in twins if key not in fixed} if req.force else set()
    failures += _push_indexes(dest, twins, entries, done, summary, summary_path, movable, fixed)
    if signing is not None:
        from imagebuild.release.attestations import attach_for_entries

        attested = [e for e in entries if e.get("pushed")]
        apis = Registries(req.target, policy)  # each host's v2 API; ECR's with its token
        for where in attach_for_entries(client, apis.api, attested, *signing, log, apis.fixed_tags):
            print(f"attached\t{where}")
    if failures:
        raise ChecksFailed(f"{failures} variant(s) not pushed (see above)")
    return pushed


# ---------------------------------------------------------------- attest and verify


def _signing(key: str, matrix: str) -> Tuple[Any, Tuple[str, str]]:
    """The signer and the matrix (path, sha256), read before anything is pushed or attached."""
    from imagebuild.release.attest import load_signer
    from imagebuild.release.attestations import read_matrix

    return load_signer(key), read_matrix(matrix)


@dataclass(frozen=True)
class AttestRequest:
    target: RegistryTarget
    sign_key: str  # the team's private key (PEM)
    summary: Path = Path("build/summary.json")
    variants: Sequence[str] = ()
    matrix: str = "matrix.yaml"  # the matrix file the provenance names by sha256


def attest(req: AttestRequest) -> List[str]:
    """Attach a CycloneDX SBOM and a signed provenance to every digest the summary says was pushed."""
    from imagebuild.adapters.docker_engine import connect
    from imagebuild.build.summary import load_summary
    from imagebuild.release.attestations import attach_for_entries

    policy = req.target.policy()
    signer, matrix = _signing(req.sign_key, req.matrix)
    summary = load_summary(Path(req.summary))
    entries = _select_built(summary, req.variants, str(req.summary))
    pushed = [e for e in entries if e.get("pushed")]
    if not pushed:
        raise UserError(
            "nothing pushed to attest", file=str(req.summary), hint="run `efa-image-build push` first"
        )
    apis = Registries(req.target, policy)  # each host's v2 API; ECR's with its token
    return attach_for_entries(connect(), apis.api, pushed, signer, matrix, log, apis.fixed_tags)


@dataclass(frozen=True)
class VerifyRequest:
    image: str  # HOST/REPO[:TAG][@sha256:D]
    key: str  # the team's public key (PEM)
    target: RegistryTarget = field(default_factory=RegistryTarget)


def verify(req: VerifyRequest) -> str:
    """The digest whose signature, provenance and SBOM verified; ChecksFailed naming what did not."""
    from imagebuild.adapters.registry import split_ref
    from imagebuild.release.attest import load_public_key
    from imagebuild.release.attestations import index_problems, problems_of
    from imagebuild.release.index import INDEX_TYPES

    key = load_public_key(req.key)
    ref = split_ref(req.image, key="IMAGE")
    if not ref.registry:
        raise UserError(f"{req.image!r} names no registry host", key="IMAGE", hint="HOST[:PORT]/REPO:TAG")
    api = Registries(req.target, req.target.policy()).api(ref.registry)
    manifest = api.manifest(ref.repository, ref.digest or ref.tag or "latest")
    if manifest is None:
        raise ChecksFailed(f"{req.image}: not in the registry")
    if manifest.media_type in INDEX_TYPES:  # twins under one tag: every image of it, each its platform
        problems = index_problems(api, ref.repository, manifest, key, req.key)
    else:
        problems = problems_of(api, ref.repository, manifest.digest, key, req.key)
    if problems:
        raise ChecksFailed(f"{ref.name}@{manifest.digest} does not verify:\n  " + "\n  ".join(problems))
    return manifest.digest


# ---------------------------------------------------------------- release


@dataclass(frozen=True)
class ReleaseRequest:
    target: RegistryTarget
    tags: Sequence[str]  # release tags; {variant} and {date} expand; never overwritten
    channels: Sequence[str] = ()  # channels moved to the promoted digest, beside the matrix's own
    summaries: Sequence[str] = ("build/summary.json",)
    variants: Sequence[str] = ()
    checks: Sequence[str] = ("build/test-report.json",)
    require_preflight: Sequence[str] = ()  # pre-flight reports that must pass for the same digest
    records: str = "build/releases"  # a folder, or s3://BUCKET/PREFIX (shared by runners)
    s3: Optional[str] = None  # s3://BUCKET/PREFIX for records and notes too
    previous: Optional[str] = None  # previous release record (default: the latest)
    dry_run: bool = False
    require_signed: Optional[str] = None  # a public key: every digest's SBOM and provenance must verify
    adopt_channels: Sequence[str] = ()  # CHANNEL@DIGEST: a channel no record knows, adopted at that digest


def release(req: ReleaseRequest) -> None:
    """Promote the checked digests to the release tags and write the records: all or nothing
    (ChecksFailed, nothing promoted, when any variant or tag is refused)."""
    from imagebuild.build.summary import load_summary
    from imagebuild.release import channels, promote
    from imagebuild.release import record as rel

    policy = req.target.policy()
    adopted = channels.parse_adopted(req.adopt_channels)
    signed_by = None
    if req.require_signed:
        from imagebuild.release.attest import load_public_key

        signed_by = load_public_key(req.require_signed, "--require-signed")
    summaries = [(p, load_summary(Path(p))) for p in req.summaries]
    all_entries = rel.gather_summaries([(str(p), doc) for p, doc in summaries])
    where = ", ".join(str(p) for p, _ in summaries)
    known = {e.get("variant") for e in all_entries}
    for name in req.variants:
        if name not in known:
            raise UserError(f"variant {name!r} not in the build summaries", file=where, key="--variant")
    entries = [e for e in all_entries if not req.variants or e.get("variant") in req.variants]
    if not entries:
        raise UserError("no variant to release", file=where)
    checks = rel.gather_check_reports([Path(p) for p in req.checks])
    preflights = [(p, rel.read_json(Path(p), "pre-flight report")) for p in req.require_preflight]
    when = rel.now_utc()
    if not req.tags and not req.channels and not any(channels.entry_channels(e) for e in entries):
        raise UserError(
            "nothing to promote to: no release tag and no channel",
            key="--tag",
            hint="give --tag (never moves) or --channel (moves on each promotion), or declare channels: "
            "in the matrix",
        )
    registries = Registries(req.target, policy)
    if signed_by is not None:
        from imagebuild.release.attestations import require_signed

        require_signed(registries.api, entries, signed_by, req.require_signed)
    store = _record_store(req)
    previous_of = _previous_records(req, store)

    with ExitStack() as held:
        if not req.dry_run:
            from imagebuild.build import lifeline

            # a cancelled CI job (SIGTERM) or a dead parent unwinds like Ctrl-C: the locks are given back
            held.enter_context(lifeline.held())
            names = sorted({n for e in entries for n in rel.unique_repositories(e)})
            for path in rel.lock_paths(names):
                held.enter_context(rel.hold_lock(path))
            if store.s3 is not None:  # runners that share the record store share this lock
                from imagebuild.release import s3records

                bucket = str(store.bucket)
                for key in store.lock_keys(names):
                    held.enter_context(s3records.hold_lock(store.s3, bucket, key, rel.LOCK_WAIT_S, log))
        plans = promote.plan(
            entries, checks, preflights, req.tags, when, registries, req.channels, previous_of, all_entries,
            store.pending,
            _all_records(req, store),
            adopted,
        )  # fmt: skip
        store.check_reachable()
        if req.dry_run:
            from imagebuild.release.transaction import plan_lines

            for line in plan_lines(plans, store.where()):
                print(line)
        promote.refuse_conflicts(plans)  # the dry run refuses where the real run would (exit 1)
        if req.dry_run:
            return
        promote.carry_out(plans, registries, store, when, previous_of)


def _record_store(req: ReleaseRequest) -> Any:
    """Where the records go: `--records DIR` (and `--s3` beside it), or `--records s3://BUCKET/PREFIX` (S3
    alone: what runners that share no disk share)."""
    from imagebuild.release import record as rel

    records = str(req.records)
    if records.startswith("s3://"):
        if req.s3:
            raise UserError("give the S3 record store once: --records s3://... or --s3", key="--s3")
        rel.parse_s3_uri(records, key="--records")
        return rel.RecordStore(None, _s3_client(req, records), records)
    return rel.RecordStore(Path(records), _s3_client(req, req.s3), req.s3)


@dataclass(frozen=True)
class FanInRequest:
    target: RegistryTarget
    jobs: Sequence[str]  # each CI job's output folder (summary.json, test-report.json, preflight/*.json)
    out: str = "build/fan-in"  # the merged summary and reports, for `build.py release`
    repository_prefix: str = ""
    require_preflight: bool = False  # every variant needs a passing pre-flight among the jobs' reports


def fan_in(req: FanInRequest) -> Path:
    """Gate every variant of every job, then write the shared tags (an index for twins pushed by different
    jobs); the merged summary's path. ChecksFailed (nothing written) when a variant does not pass."""
    from imagebuild.adapters.registry import Refused
    from imagebuild.build.summary import load_summary
    from imagebuild.release import fanin
    from imagebuild.release import record as rel
    from imagebuild.release.index import push_index, read_entry

    jobs = fanin.job_outputs(req.jobs)
    out = Path(req.out)
    fanin.check_fan_in_outputs_do_not_overlap(out, jobs)
    entries = rel.gather_summaries([(str(j.summary), load_summary(j.summary)) for j in jobs])
    checks = rel.gather_check_reports([j.checks for j in jobs if j.checks is not None])
    preflights = [(str(p), rel.read_json(p, "pre-flight report")) for j in jobs for p in j.preflights]
    refusals = fanin.gate_all(entries, checks, preflights, req.require_preflight)
    if refusals:
        log("fan-in: REFUSED (every variant of every job must pass before a shared tag is written)")
        for line in refusals:
            log(f"  - {line}")
        raise ChecksFailed(f"fan-in refused: {len(refusals)} problem(s); no shared tag written")
    policy = req.target.policy()
    dest = Destination(req.target, policy)
    by_name = {e["variant"]: e for e in entries}
    targets = [
        (dest.ref(dest.prepare(repo_t), tag_t), tag_t, names)
        for (repo_t, tag_t), names in fanin.shared_targets(entries, req.repository_prefix).items()
    ]
    missing = fanin.not_pushed_there(targets, by_name)
    if missing:
        raise ChecksFailed("fan-in refused: " + "; ".join(missing))
    api = dest.oci_api()
    for ref, tag_t, names in targets:
        if len(names) > 1:
            members = [read_entry(api, ref.repository, by_name[n]["digest"], by_name[n]["image_id"])
                       for n in names]  # fmt: skip
            try:
                digest, _same = push_index(api, ref, members, log=log)
            except Refused as err:
                raise Refused(f"{err} (did each job push with --fan-out?)") from None
            for n in names:
                by_name[n]["index"] = f"{ref}@{digest}"
            _print_fields("index", ref, digest, ",".join(names))
        else:
            entry = by_name[names[0]]
            fanin.single_tag(api, ref.repository, tag_t, entry["digest"], entry["image_id"], log)
            pushed = f"{ref}@{entry['digest']}"
            entry["pushed"] = [p for p in entry.get("pushed") or [] if p != pushed] + [pushed]
            _print_fields("tag", ref, entry["digest"], names[0])
    fanin.write_outputs(out, entries, checks, jobs)
    log(f"fan-in: {len(entries)} variant(s) of {len(jobs)} job(s); release --summary {out / 'summary.json'}")
    return out / "summary.json"


def _print_fields(*fields: object) -> None:
    """One tab-separated stdout line a script reads (push, fan-in), each field `printable` (and its tab
    written `\\t`, as printable leaves tabs): a value from a job's files (a variant name in its summary.json)
    cannot put a control byte, a field or a line of its own there."""
    print("\t".join(printable(f).replace("\t", "\\t") for f in fields))


def _all_records(req: ReleaseRequest, store: Any) -> List[Dict[str, Any]]:
    """Every release record a name's role (release tag or channel) is read from, before any registry write:
    the local folder's (none yet on a first release) and, with --s3, the bucket's (a fresh runner's folder
    is empty; the team's records are there)."""
    from imagebuild.release.names import read_local_records, read_s3_records

    records = read_local_records(store.root, must_exist=False) if store.root is not None else []
    if store.s3 is not None:
        records += read_s3_records(store.s3, store.bucket, store.prefix)
    return records


def _previous_records(req: ReleaseRequest, store: Any) -> Any:
    """variant -> its previous release record (`--previous`, else the store's latest), read once each:
    the channels are checked against it before anything moves and carried forward from it after."""
    from imagebuild.release import record as rel

    seen: Dict[str, Any] = {}

    def previous_of(variant: str) -> Any:
        if variant not in seen:
            given = rel.read_json(Path(req.previous), "previous release record") if req.previous else None
            seen[variant] = given if given is not None else store.latest(variant)
        return seen[variant]

    return previous_of


def _s3_client(req: ReleaseRequest, uri: Optional[str]) -> Any:
    if not uri:
        return None
    from imagebuild.adapters.aws import aws_client
    from imagebuild.release import record as rel

    rel.parse_s3_uri(uri, key="--records" if uri == str(req.records) else "--s3")
    return aws_client("s3", req.target.region, req.target.endpoint_url)


# ---------------------------------------------------------------- pre-flight launch recipes


@dataclass(frozen=True)
class RecipeRequest:
    recipe: str  # mpirun | sbatch | mpijob
    cluster: str  # cluster description YAML
    lock: Optional[str] = None  # a variant.lock.json instead of the matrix's one variant
    matrix: str = "matrix.yaml"
    variants: Sequence[str] = ()
    image: Optional[str] = None  # REPO@sha256:D the report will name (else the cluster's pinned image)


def recipe(req: RecipeRequest) -> str:
    """The launch recipe that runs the image's validator around nccl-tests on the described cluster."""
    from imagebuild.preflight import recipes

    lock = _recipe_lock(req)
    try:
        recipes.probe(lock)  # nccl-tests, else the torch probe; neither is bad input
    except UserError as err:
        raise UserError(err.message, file=req.lock or req.matrix, key=err.key, hint=err.hint) from None
    cluster = recipes.load_cluster(req.cluster)
    recipes.check_target(lock, cluster)  # the cluster's own mismatch first: no digest would fix it
    return recipes.render(req.recipe, lock, recipes.bind_image(cluster, req.image))


def _recipe_lock(req: RecipeRequest) -> Dict[str, Any]:
    """The lock a recipe is for: the --lock file, or the one variant of the matrix."""
    if req.lock:
        from imagebuild.build.documents import VariantLock
        from imagebuild.jsonfile import read_json

        # bounded (a FIFO, a device: exit 2) and typed: `env` a list of {name, value}, the components mappings
        return read_json(Path(req.lock), "variant lock", model=VariantLock, flag="--lock")
    from imagebuild.matrix.load import load

    variants = load(req.matrix, list(req.variants))
    if len(variants) != 1:
        raise UserError(
            f"{len(variants)} variants in {req.matrix}: choose one with --variant",
            key="--variant",
            hint=", ".join(v.name for v in variants[:10]),
        )
    return variants[0].to_lock()
