"""Build rendered variants into images (BuildKit or the classic builder): cached by content, parallel, logged.

Each variant directory (`build/<variant>/`: Dockerfile, variant.lock.json, context/) is hashed (Dockerfile
and context files, sorted, stable across hosts); the image is tagged `<repo>:<versions>-<hash12>`, so a hash
that already has an image is skipped with no work. An image is built untagged and tagged only after the
build succeeded: an interrupted or failed build leaves no tag pointing at a half-built image. Before building,
the content tag is looked up in the local engine, then (given a lookup) in the target registry: a fresh CI
runner skips what another runner already built and pushed. imagebuild.build.buildkit picks the builder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from imagebuild.adapters.docker_engine import find_image
from imagebuild.adapters.registry import ExistingFn, ImageRef, Log, split_ref
from imagebuild.build import buildkit, lifeline, steplog
from imagebuild.build.artifacts import ArtifactCache, ArtifactError, artifacts_from_lock, stage
from imagebuild.build.summary import write_summary as write_summary
from imagebuild.components import REGISTRY
from imagebuild.errors import PROG, UserError, command
from imagebuild.render.dockerfile import ca_stages, with_build_ca
from imagebuild.safefile import atomic_file
from imagebuild.variant import BASE_DIGEST_LABEL, BASE_ID_LABEL, HASH_LABEL, LOCK_LABEL, VARIANT_LABEL

DEFAULT_CA = "/etc/ssl/certs/ca-certificates.crt"
CA_IN_CONTEXT = Path("certs") / "build-ca.crt"
DOCKERFILE_IN_TAR = ".efa-image-build.Dockerfile"
# Bumped when the labels the builder adds or what the hash covers change meaning: an image built under an
# older scheme is rebuilt. v4: the base's identity (registry digest, engine image id or pin) is hashed.
HASH_SCHEME = "efa-image-build/context-hash/v4\n"
# Excluded from the content hash: the CA only lets builder stages reach the network through a proxy; it is
# never in the final image, so an image built behind one proxy is the same image as one built without.
_UNHASHED_DIRS = ("certs",)

# Version abbreviations in tags, in the blocks' tag order (short: docker tags stop at 128 characters).
_TAG_PARTS = tuple((b.name, b.tag[1]) for b in sorted((b for b in REGISTRY if b.tag), key=lambda b: b.tag))


# ---------------------------------------------------------------- content hash and tags (pure-ish)


def _hashed_files(variant_dir: Path) -> List[Tuple[str, Path]]:
    """(name in the hash, path) of the Dockerfile and every context file, sorted."""
    # The lock rides in a label, so it is part of what the image is, even where the Dockerfile is unchanged.
    out = [
        ("Dockerfile", variant_dir / "Dockerfile"),
        ("variant.lock.json", variant_dir / "variant.lock.json"),
    ]
    ctx = variant_dir / "context"
    for dirpath, dirnames, filenames in os.walk(ctx):
        rel_dir = Path(dirpath).relative_to(ctx)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in _UNHASHED_DIRS]
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.startswith(".tmp-") or name.endswith(".pyc"):
                continue
            out.append(((rel_dir / name).as_posix(), Path(dirpath) / name))
    return sorted(out)


def context_hash(
    variant_dir: Path, memo: Optional[Dict[str, list]] = None, base: Optional[str] = None
) -> str:
    """sha256 over (path, exec bit, content sha256) of each file: what docker would see, in a stable order,
    and over `base`, what the FROM's tag names now (`resolve_base`): the Dockerfile names the base by tag,
    so without it a base re-published under the same tag would keep the old content tag.

    `memo` maps path -> [size, mtime_ns, ino, sha] so an unchanged 300 MB wheel is not re-read on a no-op.
    """
    top = hashlib.sha256(HASH_SCHEME.encode())
    if base:
        top.update(f"base\0{base}\n".encode())
    for name, path in _hashed_files(variant_dir):
        if not path.exists() and name == "variant.lock.json":
            continue
        if path.is_symlink():
            digest, mode = "link:" + os.readlink(path), "l"
        else:
            st = path.stat()
            key = [st.st_size, st.st_mtime_ns, st.st_ino]
            cached = (memo or {}).get(str(path))
            if cached and cached[:3] == key:
                digest = cached[3]
            else:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                digest = h.hexdigest()
                if memo is not None:
                    memo[str(path)] = key + [digest]
            mode = "x" if st.st_mode & 0o111 else "-"
        top.update(f"{name}\0{mode}\0{digest}\n".encode())
    return top.hexdigest()


def _tag_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def version_tag(lock: dict) -> str:
    """`nccl2.27.3-ofi1.16.0-...` from the lock's component versions (only those present)."""
    comps = lock.get("components") or {}
    parts = []
    for name, abbr in _TAG_PARTS:
        ver = (comps.get(name) or {}).get("version")
        if ver:
            parts.append(abbr + _tag_safe(str(ver)))
    return "-".join(parts) or "noversions"


def repositories(lock: dict) -> List[str]:
    """Repositories named by the lock's tags (`repo:tag`), or one made from the variant name."""
    repos = []
    for tag in lock.get("tags") or []:
        repo = _split_ref(str(tag))[0]
        if repo not in repos:
            repos.append(repo)
    return repos or [f"efa-image-build/{_tag_safe(lock.get('name', 'variant')).lower()}"]


def _split_ref(ref: str) -> Tuple[str, str]:
    slash, colon = ref.rfind("/"), ref.rfind(":")
    return (ref[:colon], ref[colon + 1 :]) if colon > slash else (ref, "latest")


# The `tags` placeholder for the content hash (imagebuild.matrix.load keeps it for the build to fill).
CONTENT_HASH = "{content_hash}"


def image_tags(lock: dict, chash: str, rebuild: Optional[str] = None) -> List[str]:
    """The content tag first (`repo:<versions>-<hash12>`, write-once), then the lock's own tags with
    `{content_hash}` filled (the load refuses any other tag but a channel's: write-once and moving at once
    would be refused on the next commit's push).

    `rebuild` (an image id): a `build --force` whose content already has an image; its tags become
    `...-r<id8>-<hash12>`, so the write-once tags of the first image are never re-pointed (they would then be
    refused on push) and the rebuild's own tags still end in the hash (prune knows them as content tags)."""
    token = f"r{rebuild.split(':')[-1][:8]}-{chash[:12]}" if rebuild else chash[:12]
    vt = version_tag(lock)
    content = [f"{repo}:{vt[: 128 - len(token) - 1]}-{token}" for repo in repositories(lock)]
    own = [str(t).replace(CONTENT_HASH, token) for t in lock.get("tags") or []]
    return content + [t for t in own if t not in content]


# ---------------------------------------------------------------- one variant


@dataclass(frozen=True)
class RemoteHit:
    """The content tag found in the target registry: its pushed ref, manifest digest and image id."""

    ref: str
    digest: str
    image_id: str


@dataclass
class BuildOptions:
    cache: ArtifactCache
    build_ca: Optional[Path] = None
    build_args: Dict[str, str] = field(default_factory=dict)
    out: Path = Path("build")
    cancel: threading.Event = field(default_factory=threading.Event)
    force: bool = False  # build even when the content tag exists
    nocache: bool = False  # and without docker's layer cache (a cold build, for benchmarks)
    builder: buildkit.BuilderChoice = buildkit.CLASSIC
    cache_from: List[str] = field(default_factory=list)
    cache_to: List[str] = field(default_factory=list)
    # content tag -> where a registry already holds it (None: not there); asked only when not in the engine
    remote_lookup: Optional[Callable[[str, str], Optional[RemoteHit]]] = None
    # docker CLI builds in flight: ended on Ctrl-C, so no BuildKit build runs on after the tool exits
    children: set = field(default_factory=set)
    # --trust-local-base: when the base's registry cannot be asked, hash the local copy's digest instead
    trust_local_base: bool = False
    # base ref -> what it resolved to, once per run: variants on one base share one look-up and one answer
    bases: Dict[str, BaseIdentity] = field(default_factory=dict)
    bases_lock: threading.Lock = field(default_factory=threading.Lock)

    def base_of(self, client, lock: dict) -> BaseIdentity:
        """The lock's base resolved (`resolve_base`), asked once per run and ref."""
        ref = base_ref(lock, self.build_args)
        if ref is None:
            return base_without_ref(lock)
        with self.bases_lock:
            if ref not in self.bases:
                found = resolve_base(client, ref, self.trust_local_base)
                base = lock.get("base") or {}
                local = base.get("kind") == "local" or bool(base.get("local"))
                self.bases[ref] = dataclasses.replace(found, local=local) if local else found
            return self.bases[ref]


@dataclass
class VariantResult:
    variant: str
    status: str  # built | skipped | failed
    image_id: Optional[str]
    tags: List[str]
    context_hash: Optional[str]
    duration_s: float
    log: str
    lock: str
    error: Optional[str] = None
    digest: Optional[str] = None
    pushed: List[str] = field(default_factory=list)
    builder: Optional[str] = None  # buildx | buildkit | classic (built only)
    found_in: Optional[str] = None  # engine | registry (skipped only)
    base_digest: Optional[str] = None  # the base's manifest digest (pinned, the registry's); in the labels
    base_image_id: Optional[str] = None  # and its image id in the engine (a local base has no digest)
    base_ref: Optional[str] = None  # the FROM the lock names (build args filled in)
    base_hashed: Optional[str] = None  # the identity that went into the content hash
    base_source: Optional[str] = None  # how it was learned: BASE_SOURCES
    channels: List[str] = field(
        default_factory=list
    )  # the lock's moving tags: release moves them, push never


class Reporter:
    """What a build tells the person watching; the rich and plain displays implement it."""

    def event(self, variant: str, status: str, text: str = "", step: Tuple[int, int] = (0, 0)) -> None:
        raise NotImplementedError


_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")


def read_lock(variant_dir: Path) -> dict:
    path = variant_dir / "variant.lock.json"
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise UserError(
            f"no rendered lock: {err.strerror}", file=str(path), hint="run `efa-image-build render`"
        ) from None
    except ValueError as err:
        raise UserError(f"not JSON: {err}", file=str(path)) from None


def base_ref(lock: dict, build_args: Dict[str, str]) -> Optional[str]:
    """The FROM of the lock's base as the engine sees it (`${ARG}/repo:tag` filled from the build args).

    On a split base, the runtime image: what the shipped layers start from is what the image records as its
    base (digest and image id labels)."""
    base = lock.get("base") or {}
    image, arg = base.get("runtime_image") or base.get("image"), base.get("registry_arg")
    if not image:
        return None
    if arg:
        host = build_args.get(arg)
        return f"{host}/{image}" if host else None
    return image


def engine_image_id(client, ref: Optional[str]) -> Optional[str]:
    """The engine's image id of the base (its label beside the digest `resolve_base` hashed); None where the
    engine lacks it."""
    image = find_image(client, ref) if ref else None
    return image.id if image is not None else None


# How the base's identity was learned (VariantResult.base_source, docs/build.md "Content hash").
PINNED, ENGINE_ID, REGISTRY_DIGEST = "pinned", "engine-id", "registry-digest"
TRUSTED_LOCAL = "trusted-local-digest"  # only with --trust-local-base
BASE_SOURCES = (PINNED, ENGINE_ID, REGISTRY_DIGEST, TRUSTED_LOCAL)


@dataclass(frozen=True)
class BaseIdentity:
    """What the base's tag names now: `identity` goes into the content hash, `source` says how it was learned
    (BASE_SOURCES; None with no base in the lock). `identity` None with a `problem`: it could not be
    confirmed, and the variant is neither skipped nor built. `note`: why a fallback was taken."""

    ref: Optional[str]
    identity: Optional[str]
    source: Optional[str]
    problem: Optional[str] = None
    note: Optional[str] = None
    local: bool = False  # the matrix says it is made on this machine (`efa-image-build base`), never pulled

    @property
    def digest(self) -> Optional[str]:
        """The manifest digest, where the identity is one (an engine id is the config digest)."""
        return self.identity if self.source in (PINNED, REGISTRY_DIGEST, TRUSTED_LOCAL) else None


def base_without_ref(lock: dict) -> BaseIdentity:
    """No ref to resolve: no base in the lock (nothing to hash), or its registry build arg was not given."""
    base = lock.get("base") or {}
    if not base.get("image"):
        return BaseIdentity(None, None, None)
    arg = base.get("registry_arg")
    return BaseIdentity(
        f"${{{arg}}}/{base['image']}",
        None,
        None,
        problem=f"its registry is the build arg {arg}, not given (--build-arg {arg}=HOST)",
    )


def _repo_digests(image, name: str) -> List[str]:
    """The manifest digests the engine recorded for the repository of `name` (`[host/]repo[:tag]`)."""
    last = name.rsplit("/", 1)[-1]
    repo = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return [d.split("@", 1)[1] for d in image.attrs.get("RepoDigests") or [] if d.split("@", 1)[0] == repo]


def resolve_base(
    client, ref: str, trust_local: bool = False, ask: Optional[Callable[[object, str], str]] = None
) -> BaseIdentity:
    """The identity of base `ref` now, for the content hash.

    A pinned `@sha256:` as written (no look-up). A base the engine has with no manifest digest for its
    repository (imported or built here, `build.py base`) by its engine image id: a re-created local base
    is a new id, and no network is used. Otherwise the base comes from a registry, and the engine's copy may
    be stale, so the registry is asked what the tag names now (`ask`, default current_digest: one
    request, no pull). When it cannot answer (or no engine, `client` None, can be asked), the base is
    unconfirmed (fail closed), unless `trust_local` and the engine holds a copy pulled from that
    repository: then that copy's digest is used, and said.
    """
    from imagebuild.adapters.docker_engine import BaseUnconfirmed, current_digest

    name, _, pinned = ref.partition("@")
    if pinned:
        return BaseIdentity(ref, pinned, PINNED)
    if client is None:  # `bake` where no engine answers: nothing can say what the tag names
        return BaseIdentity(ref, None, None, problem="no docker engine could be reached to look it up")
    image = find_image(client, ref)
    local = next(iter(_repo_digests(image, name)), None) if image is not None else None
    if image is not None and local is None:
        return BaseIdentity(ref, image.id, ENGINE_ID)
    try:
        return BaseIdentity(ref, (ask or current_digest)(client, ref), REGISTRY_DIGEST)
    except BaseUnconfirmed as err:
        reason = str(err)
    if trust_local and local:
        return BaseIdentity(ref, local, TRUSTED_LOCAL, note=f"{reason}; --trust-local-base: the local copy")
    held = f"the engine's copy ({local}) may be stale" if local else "the engine has no copy of it"
    return BaseIdentity(ref, None, None, problem=f"{reason}; {held}")


def pinned_ref(base: BaseIdentity) -> Optional[str]:
    """`repo@digest` of a base hashed by its registry digest (or a trusted local one): what a builder that
    does not use this engine must build from. None for a pin as written (the FROM is already that), an
    engine id (no registry holds it) or no base."""
    if base.source not in (REGISTRY_DIGEST, TRUSTED_LOCAL) or not base.ref or not base.identity:
        return None
    return f"{_split_ref(base.ref)[0]}@{base.identity}"


def known_image_id(base: BaseIdentity) -> Optional[str]:
    """The base's image id as known without asking the engine: a local base is hashed by it."""
    return base.identity if base.source == ENGINE_ID else None


def base_labels(digest: Optional[str], image_id: Optional[str]) -> Dict[str, str]:
    """The labels that say what the image was built from: the base's manifest digest and image id, where
    known (`bake` pulls nothing, so it knows a registry base's digest only; `build` asks its engine). An
    unknown one is written empty: an image inherits its base's labels, and a base built by this tool (or
    forged) carries its own base's, which must never be read as this image's base."""
    return {BASE_DIGEST_LABEL: digest or "", BASE_ID_LABEL: image_id or ""}


def unconfirmed_message(base: BaseIdentity, outcome: str = "Not skipped and not built") -> str:
    """Why a variant is neither skipped nor built (or baked): names the base and the reason (never a
    credential). A local base no engine holds is made, not pulled: the hint names the verb that makes it (on
    a fresh CI runner no base exists yet)."""
    if base.local:
        return (
            f"base {base.ref}: its current identity could not be confirmed: {base.problem}. {outcome}: it is "
            "made on this machine, never pulled"
            f"\n  hint: make it: `{command('base')}` makes every local base the matrix names (debootstrap "
            f'runs as root: `sudo "$(command -v {PROG})" base`), then run this again'
        )
    return (
        f"base {base.ref}: its current identity could not be confirmed: {base.problem}. {outcome}: a "
        "content tag must name the base it was built from"
        "\n  hint: make the registry reachable (`docker login HOST` where it needs a login), pin the base "
        "by digest (image@sha256:...), or pass --trust-local-base to hash the digest of the copy the engine "
        "pulled before"
    )


# A RUN instruction's BuildKit-only cache mount flag, with the blanks after it.
_MOUNT_FLAG = re.compile(r"--mount=\S+[ \t]*")


def classic_dockerfile(text: str) -> str:
    """The rendered Dockerfile for the classic builder: each RUN's `--mount=...` flags out, all else as is.

    The classic builder refuses `RUN --mount` ("requires BuildKit"). The rendered file stays the one that is
    hashed and tagged, so both builders give the same tags and labels; the templates end each mounted step
    with a cleanup that runs only where no mount is (partials/system.j2 `apt_clean`): the same files.
    Flags may continue over `\\` lines; a flag-only line left empty is dropped.
    """
    out: List[str] = []
    continued = in_flags = False
    for line in text.splitlines(keepends=True):
        if not continued:
            head = re.match(r"[ \t]*RUN[ \t]+", line, re.IGNORECASE)
            in_flags = bool(head)
            lead = head.group(0) if head else ""
        else:
            lead = line[: len(line) - len(line.lstrip(" \t"))]
        rest = line[len(lead) :]
        if in_flags and not rest.lstrip().startswith("#"):
            stripped = rest
            while _MOUNT_FLAG.match(stripped):
                stripped = _MOUNT_FLAG.sub("", stripped, count=1)
            if stripped != rest and stripped.strip() == "\\" and continued:
                line = ""  # a continuation line that held only flags
            else:
                line = lead + stripped
            in_flags = stripped.strip() in ("\\", "")
        body = line.rstrip("\r\n")
        if line or not continued:
            continued = body.endswith("\\") and not body.lstrip().startswith("#")
        out.append(line)
    return "".join(out)


def sent_dockerfile(variant_dir: Path, classic: bool = False) -> str:
    """The Dockerfile docker is given: the rendered one (the one hashed) with the build CA in its builder
    stages where a CA is staged (`with_build_ca`: `--build-ca` works whether or not the matrix asked for it),
    and without `--mount` flags for the classic builder (`classic_dockerfile`)."""
    text = (variant_dir / "Dockerfile").read_text()
    if (variant_dir / "context" / CA_IN_CONTEXT).is_file():
        text = with_build_ca(text)
    return classic_dockerfile(text) if classic else text


def _write_context_tar(variant_dir: Path, dest, classic: bool = False) -> None:
    """The build context as docker receives it: context/ at the root, `sent_dockerfile` beside it."""

    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    with tarfile.open(fileobj=dest, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dockerfile = variant_dir / "Dockerfile"
        data = sent_dockerfile(variant_dir, classic).encode()
        info = norm(tar.gettarinfo(dockerfile, arcname=DOCKERFILE_IN_TAR))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        ctx = variant_dir / "context"
        for dirpath, dirnames, filenames in os.walk(ctx):
            dirnames.sort()
            rel = Path(dirpath).relative_to(ctx)
            if rel != Path("."):
                tar.add(dirpath, arcname=rel.as_posix(), recursive=False, filter=norm)
            for name in sorted(filenames):
                if name.startswith(".tmp-"):
                    continue
                tar.add(Path(dirpath) / name, arcname=(rel / name).as_posix(), filter=norm)


def _prepare_context(variant_dir: Path, lock: dict, opts: BuildOptions, log) -> None:
    ctx = variant_dir / "context"
    ctx.mkdir(exist_ok=True)
    certs = ctx / "certs"
    certs.mkdir(exist_ok=True)
    ca_dest = ctx / CA_IN_CONTEXT
    ca = opts.build_ca
    if ca is None and (lock.get("options") or {}).get("build_ca"):
        # The matrix asked for it (option build_ca): its Dockerfile COPYs the file, so give the default.
        ca = Path(DEFAULT_CA)
        if not ca.is_file():
            raise UserError(
                f"variant {variant_dir.name} needs a build CA (option build_ca) and {DEFAULT_CA} is missing",
                key="--build-ca",
                hint="pass --build-ca PATH",
            )
    if ca:
        if not ca_dest.exists() or ca_dest.read_bytes() != ca.read_bytes():
            with atomic_file(ca_dest) as tmp:
                shutil.copyfile(ca, tmp)
        stages = ca_stages((variant_dir / "Dockerfile").read_text())
        where = f"builder stages {', '.join(stages)}" if stages else "no builder stage here"
        log(f"build CA: {ca} -> context/{CA_IN_CONTEXT} ({where}; never the final image)")
    elif ca_dest.exists():
        ca_dest.unlink()
    arts = artifacts_from_lock(lock, str(variant_dir / "variant.lock.json"))
    for name, sha in stage(opts.cache, arts, ctx):
        log(f"artifact {name} sha256 {sha}")


def hash_memo_path(variant_dir: Path) -> Path:
    """Beside the variant folder, not in it: a render replaces the folder of a changed variant, and the memo
    must outlive that so the re-staged wheels (hard links: same inode and mtime) are not read again."""
    return variant_dir.parent / ".hash-memo" / f"{variant_dir.name}.json"


def stage_variant(
    variant_dir: Path, lock: dict, opts: BuildOptions, log, base: Optional[str] = None
) -> Tuple[str, List[str]]:
    """Stage the artifacts (and CA) of `lock` into the context, hash it with the base's identity `base`:
    (context hash, tags)."""
    _prepare_context(variant_dir, lock, opts, log)
    chash = memo_hash(variant_dir, base)
    return chash, image_tags(lock, chash)


def memo_hash(variant_dir: Path, base: Optional[str] = None) -> str:
    """context_hash with its memo read from and written back to hash_memo_path."""
    memo_path = hash_memo_path(variant_dir)
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    chash = context_hash(variant_dir, memo, base)
    with atomic_file(memo_path) as tmp:
        tmp.write_text(json.dumps(memo))
    return chash


def build_variant(client, variant_dir: Path, opts: BuildOptions, report: Reporter) -> VariantResult:
    """Stage artifacts, hash, skip or build, tag. Never raises for a build failure: it is in the result."""
    started = time.monotonic()
    name = variant_dir.name
    log_path = variant_dir / "build.log"
    lock_path = variant_dir / "variant.lock.json"
    result = VariantResult(name, "failed", None, [], None, 0.0, str(log_path), str(lock_path))
    with open(log_path, "w", buffering=1) as logf:

        def log(line: str) -> None:
            logf.write(line.rstrip("\n") + "\n")

        try:
            lock = read_lock(variant_dir)
            result.channels = [str(c) for c in lock.get("channels") or []]
            base = opts.base_of(client, lock)
            result.base_ref, result.base_hashed, result.base_source = base.ref, base.identity, base.source
            if base.problem:
                raise BuildFailed(unconfirmed_message(base))
            log(base_line(base))
            report.event(name, "staging", "artifacts")
            chash, tags = stage_variant(variant_dir, lock, opts, log, base.identity)
            result.context_hash, result.tags = chash, tags
            log(f"context hash {chash}; tags {' '.join(tags)}")
            existing = find_image(client, tags[0])
            remote = None
            if existing is None and opts.remote_lookup is not None:
                remote = opts.remote_lookup(tags[0], chash)
            if existing is not None and existing.labels.get(HASH_LABEL) == chash and not opts.force:
                for ref in tags[1:]:
                    existing.tag(*_split_ref(ref))
                result.status, result.image_id, result.found_in = "skipped", existing.id, "engine"
                result.base_digest = existing.labels.get(BASE_DIGEST_LABEL) or base.digest
                result.base_image_id = existing.labels.get(BASE_ID_LABEL) or None
                log(f"skipped: {tags[0]} already built from this content ({existing.id})")
                report.event(name, "skipped", tags[0])
            elif remote is not None and not opts.force:
                result.status, result.image_id, result.found_in = "skipped", remote.image_id, "registry"
                result.digest, result.pushed = remote.digest, [f"{remote.ref}@{remote.digest}"]
                result.base_digest = base.digest
                result.base_image_id = known_image_id(base)
                log(f"skipped: the registry holds {remote.ref}@{remote.digest} built from this content")
                report.event(name, "skipped", f"{remote.ref} (in the registry)")
            else:
                report.event(name, "building", f"sending context ({opts.builder.kind})")
                result.builder = opts.builder.kind
                ref = base.ref
                _ensure_base(client, base, log)
                result.base_digest, result.base_image_id = base.digest, engine_image_id(client, ref)
                labels = base_labels(result.base_digest, result.base_image_id)
                image_id = _docker_build(client, variant_dir, lock, chash, opts, log, report, labels)
                if result.base_image_id is None:  # pulled by the build: the engine has it now
                    result.base_image_id = engine_image_id(client, ref)
                log(f"base {ref}: digest {result.base_digest}, image id {result.base_image_id}")
                if opts.cancel.is_set():
                    raise BuildFailed("interrupted: built but not tagged")
                image = client.images.get(image_id)
                held = existing.id if existing is not None else (remote.image_id if remote else None)
                if held is not None and held != image_id:  # --force: the content tags stay where they are
                    tags = image_tags(lock, chash, rebuild=image_id)
                    result.tags = tags
                    log(f"--force: {held} keeps this content's write-once tags; the rebuild gets its own")
                for ref in tags:  # only now: a failed or interrupted build tags nothing
                    image.tag(*_split_ref(ref))
                result.status, result.image_id = "built", image_id
                log(f"built {image_id}; tagged {' '.join(tags)}")
                report.event(name, "built", tags[0])
        except (ArtifactError, UserError, BuildFailed) as err:
            result.error = str(err)
            log(f"FAILED: {err}")
            report.event(name, "failed", str(err).splitlines()[0])
        except Exception as err:  # noqa: BLE001 - a docker API error in one variant must not stop the others
            result.error = f"{type(err).__name__}: {err}"
            log(f"FAILED: {result.error}")
            report.event(name, "failed", result.error.splitlines()[0])
        result.duration_s = round(time.monotonic() - started, 2)
        log(f"status {result.status} in {result.duration_s} s")
    return result


class BuildFailed(Exception):
    """docker said the build failed; the message is its error, the log has the rest."""


def _ca_used(variant_dir: Path, opts: BuildOptions) -> Optional[str]:
    """The CA bundle builder stages trusted in this build (None: none was staged)."""
    if not (variant_dir / "context" / CA_IN_CONTEXT).is_file():
        return None
    return str(opts.build_ca or DEFAULT_CA)


def base_line(base: BaseIdentity) -> str:
    """The build log's line on what went into the hash for the base, and how it was learned."""
    if base.ref is None:
        return "base: none in the lock; nothing of it in the content hash"
    note = f" ({base.note})" if base.note else ""
    return f"base {base.ref}: {base.source} {base.identity} in the content hash{note}"


def _ensure_base(client, base: BaseIdentity, log) -> None:
    """Make the engine's tag of a registry base name the digest that was hashed, before building from it:
    a build uses the engine's copy of a tag when it has one, which may be from before the base moved."""
    if base.source != REGISTRY_DIGEST or not base.ref or not base.identity:
        return
    image = find_image(client, base.ref)
    if image is not None and base.identity in _repo_digests(image, base.ref):
        return
    repo, tag = _split_ref(base.ref)
    log(f"base {base.ref}: the engine's copy is not {base.identity}; pull {pinned_ref(base)}")
    client.images.pull(pinned_ref(base)).tag(repo, tag)


def build_labels(
    variant_dir: Path, lock: dict, chash: str, base: Optional[Dict[str, str]] = None
) -> Dict[str, str]:
    """The labels the builder adds (the same for every builder); `base`: what the base resolved to."""
    # Each label given through the API is one more LABEL step in the classic builder, re-run on every code
    # change: add the lock and its labels only when the Dockerfile does not already write them.
    labels = {**(base or {}), HASH_LABEL: chash}
    if LOCK_LABEL not in (variant_dir / "Dockerfile").read_text():
        labels = {VARIANT_LABEL: variant_dir.name}
        labels |= {str(k): str(v) for k, v in (lock.get("labels") or {}).items()}  # the lock's word wins
        labels |= {LOCK_LABEL: json.dumps(lock, sort_keys=True, separators=(",", ":")), HASH_LABEL: chash}
        labels |= base or {}
    return labels


def _docker_build(
    client,
    variant_dir: Path,
    lock: dict,
    chash: str,
    opts: BuildOptions,
    log,
    report,
    base: Optional[Dict[str, str]] = None,
) -> str:
    labels = build_labels(variant_dir, lock, chash, base)
    platform = lock.get("platform") or None
    if opts.builder.is_buildkit:
        return _buildkit_build(variant_dir, labels, opts, log, report, platform)
    name = variant_dir.name
    with tempfile.TemporaryFile(prefix="efa-context-", dir=variant_dir) as tar:
        _write_context_tar(variant_dir, tar, classic=True)
        tar.seek(0)
        stream = client.api.build(
            fileobj=tar,
            custom_context=True,
            dockerfile=DOCKERFILE_IN_TAR,
            rm=True,
            forcerm=True,
            nocache=opts.nocache,
            decode=True,
            buildargs=dict(opts.build_args),
            labels=labels,
            cache_from=list(opts.cache_from) or None,
            platform=platform,
        )
        image_id = None
        step = (0, 0)
        steps = steplog.ClassicSteps()
        for chunk in stream:
            if opts.cancel.is_set():
                raise BuildFailed("interrupted")
            if "stream" in chunk:
                text = chunk["stream"]
                logf_text = text.rstrip("\n")
                if logf_text:
                    log(logf_text)
                m = _STEP.match(text)
                if m:
                    step = (int(m.group(1)), int(m.group(2)))
                    steps.start(text)
                    report.event(name, "building", m.group(3).strip(), step)
                else:
                    steps.feed(text)
                    last = text.strip()
                    if last:
                        report.event(name, "building", last, step)
            elif "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            elif "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                log(f"ERROR: {detail}")
                ca = _ca_used(variant_dir, opts)
                raise BuildFailed(steplog.describe(steps.failure(detail), str(variant_dir / "build.log"), ca))
            elif "status" in chunk:
                log(str(chunk.get("status")))
        if not image_id:
            raise BuildFailed(f"docker reported no image id (log {variant_dir / 'build.log'})")
    return image_id


def _buildkit_build(
    variant_dir: Path, labels: Dict[str, str], opts: BuildOptions, log, report, platform: Optional[str] = None
) -> str:
    """One BuildKit build through the docker CLI, the same context tar on stdin; returns the image id."""
    name = variant_dir.name
    log_path = variant_dir / "build.log"
    with tempfile.TemporaryDirectory(prefix=".tmp-iid-", dir=variant_dir) as tmp:
        iidfile = str(Path(tmp) / "iid")
        argv, env = buildkit.build_argv(
            opts.builder,
            DOCKERFILE_IN_TAR,
            iidfile,
            labels,
            opts.build_args,
            nocache=opts.nocache,
            cache_from=opts.cache_from,
            cache_to=opts.cache_to,
            platform=platform,
        )
        log(f"builder: {opts.builder.reason}")
        with tempfile.TemporaryFile(prefix="efa-context-", dir=variant_dir) as tar:
            _write_context_tar(variant_dir, tar)
            tar.seek(0)
            proc = subprocess.Popen(
                argv,
                stdin=tar,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                text=True,
                errors="replace",
                preexec_fn=lifeline.die_with_parent,  # this process killed: the CLI cancels its build
            )
            opts.children.add(proc)
            steps = steplog.BuildkitSteps()
            try:
                for line in proc.stdout:  # type: ignore[union-attr]
                    if opts.cancel.is_set():
                        raise BuildFailed("interrupted")
                    text = line.rstrip("\n")
                    log(text)
                    steps.feed(text)
                    m = buildkit.STEP_RE.match(text)
                    if m:
                        step = (int(m.group(1)), int(m.group(2)))
                        report.event(name, "building", m.group(3).strip(), step)
                rc = proc.wait()
            finally:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=30)
                opts.children.discard(proc)
        if rc != 0:
            failure = steps.failure() or steplog.Failure(None, f"docker build exited {rc}")
            raise BuildFailed(steplog.describe(failure, str(log_path), _ca_used(variant_dir, opts)))
        image_id = Path(iidfile).read_text().strip() if Path(iidfile).is_file() else ""
    if not image_id:
        raise BuildFailed(f"BuildKit reported no image id (log {log_path})")
    return image_id


# ---------------------------------------------------------------- the matrix


def check_offline(cache: ArtifactCache, variant_dirs: Sequence[Path]) -> None:
    """With --offline, name every missing artifact of every variant at once, before anything builds."""
    if not cache.offline:
        return
    missing = []
    for vdir in variant_dirs:
        for art in cache.missing(artifacts_from_lock(read_lock(vdir), str(vdir / "variant.lock.json"))):
            missing.append(f"{vdir.name}: {art.describe()}")
    if missing:
        raise UserError(
            f"--offline: {len(missing)} artifact(s) not in the cache {cache.root}:\n    "
            + "\n    ".join(missing),
            key="--offline",
            hint="fill the cache once online (or with --mirror), or copy a filled .cache/artifacts here",
        )


def build_all(
    client, variant_dirs: Sequence[Path], opts: BuildOptions, report: Reporter, jobs: int = 1
) -> List[VariantResult]:
    """Build `jobs` variants at a time. Ctrl-C: workers stop before tagging and the process may exit at once.

    Workers are daemon threads (not a ThreadPoolExecutor, whose exit joins them): a build blocked in a long
    RUN step must not keep an interrupted process alive until it finishes -- and then tag its image.
    """
    check_offline(opts.cache, variant_dirs)
    for vdir in variant_dirs:
        read_lock(vdir)  # a broken lock is bad input: say so before any build starts
    todo: queue.Queue = queue.Queue()
    for i in range(len(variant_dirs)):
        todo.put(i)
    results: List[Optional[VariantResult]] = [None] * len(variant_dirs)
    cancel = opts.cancel

    def worker() -> None:
        while not cancel.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            results[i] = build_variant(client, variant_dirs[i], opts, report)

    threads = [
        threading.Thread(target=worker, name=f"build-{n}", daemon=True)
        for n in range(max(1, min(jobs, len(variant_dirs))))
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        cancel.set()
        for proc in list(opts.children):
            if proc.poll() is None:
                proc.terminate()
        raise
    return [r for r in results if r is not None]


# ---------------------------------------------------------------- displays


class PlainReporter(Reporter):
    """One line per step and per outcome: what CI logs and pipes want."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()
        self.last: Dict[str, Tuple[str, Tuple[int, int]]] = {}

    def event(self, variant: str, status: str, text: str = "", step: Tuple[int, int] = (0, 0)) -> None:
        key = (status, step)
        if status == "building" and self.last.get(variant) == key:
            return  # output lines inside a step go to the log file only
        self.last[variant] = key
        where = f" {step[0]}/{step[1]}" if step[1] else ""
        with self.lock:
            print(f"[{variant}] {status}{where} {text[:160]}".rstrip(), file=self.stream, flush=True)


class RichReporter(Reporter):
    """A live table, one row per variant: status, step, elapsed, last line."""

    def __init__(self, names: Sequence[str]):
        from rich.console import Console
        from rich.live import Live

        self.rows: Dict[str, list] = {n: ["queued", (0, 0), "", None] for n in names}
        self.lock = threading.Lock()
        self.console = Console()
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)

    def _table(self):
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", expand=True)
        for col, kw in (("variant", {}), ("status", {}), ("step", {}), ("time", {}), ("last", {"ratio": 1})):
            table.add_column(col, no_wrap=True, overflow="ellipsis", **kw)
        style = {"built": "green", "skipped": "cyan", "failed": "bold red"}
        now = time.monotonic()
        for name, (status, step, text, t0) in self.rows.items():
            elapsed = f"{now - t0:.0f}s" if t0 else ""
            table.add_row(
                name,
                f"[{style.get(status, 'yellow')}]{status}[/]",
                f"{step[0]}/{step[1]}" if step[1] else "",
                elapsed,
                text,
            )
        return table

    def event(self, variant: str, status: str, text: str = "", step: Tuple[int, int] = (0, 0)) -> None:
        with self.lock:
            row = self.rows.setdefault(variant, ["queued", (0, 0), "", None])
            if row[3] is None:
                row[3] = time.monotonic()
            row[0], row[2] = status, text[:200]
            if step[1]:
                row[1] = step
            self.live.update(self._table())

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)


def make_reporter(names: Sequence[str], plain: Optional[bool] = None):
    """rich on a terminal, plain lines elsewhere (CI, pipes, files)."""
    if plain is None:
        plain = not sys.stdout.isatty()
    return PlainReporter() if plain else RichReporter(names)


def parse_build_args(values: Sequence[str]) -> Dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v or not v.split("=", 1)[0]:
            raise UserError(f"--build-arg wants KEY=VALUE, got {v!r}", key="--build-arg")
        k, val = v.split("=", 1)
        out[k] = val
    return out


def resolve_ca(value: Optional[str]) -> Optional[Path]:
    if value is None:
        return None
    path = Path(value)
    if not path.is_file():
        raise UserError(f"CA bundle not found: {path}", key="--build-ca", hint=f"default is {DEFAULT_CA}")
    from imagebuild.safefile import read_regular

    # bounded (a huge file is refused here, not copied into every context), and PEM certificates
    if b"-----BEGIN CERTIFICATE-----" not in read_regular(str(path), MAX_CA_BYTES, key="--build-ca"):
        raise UserError("not a PEM CA bundle (no BEGIN CERTIFICATE)", file=str(path), key="--build-ca")
    return path


MAX_CA_BYTES = 8 * 1024 * 1024  # the system bundle is about 200 KB


def summary_counts(results: Sequence[VariantResult]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


# -- skip by the registry: is this content tag already there? --------------------------------------------
def content_lookup(
    host: str,
    repository_of: Callable[[str], str],
    existing: ExistingFn,
    config_of: Optional[Callable[[str, str], Optional[bytes]]] = None,
    log: Log = lambda _m: None,
) -> Callable[[str, str], Any]:
    """A look-up `(local content tag, context hash) -> RemoteHit | None` against the target registry.

    The content tag names its hash, so finding it means another runner built and pushed this content. Where
    the image config can be read (`config_of`), its context-hash label must match as well: a tag that holds
    anything else (a single-image manifest is required) is not trusted, and the variant is built.
    """

    def look(content_tag: str, chash: str) -> Optional[RemoteHit]:
        local = split_ref(content_tag, key="tags")
        target = ImageRef(host, repository_of(local.repository), local.tag)
        found = existing(target)
        if found is None:
            return None
        if not found.config_digest:
            log(f"  {target}: in the registry as an index, not one image; building")
            return None
        if config_of is not None:
            try:
                labels = json.loads(config_of(target.repository, found.config_digest) or b"{}")
                labels = (labels.get("config") or {}).get("Labels") or {}
            except (ValueError, AttributeError):
                labels = {}
            if labels.get(HASH_LABEL) != chash:
                log(f"  {target}: in the registry but its {HASH_LABEL} label differs; building")
                return None
        return RemoteHit(str(target), found.digest, found.config_digest)

    return look
