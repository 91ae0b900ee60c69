"""The base's identity: what the FROM's tag names now, how that was learned, and what the image records.

The Dockerfile names its base by tag; the content hash takes the base's registry digest, engine image id or
pin instead, so a base re-published under the same tag is a new content tag. A base that cannot be confirmed
fails closed: its variant is neither skipped nor built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from imagebuild.adapters.docker_engine import find_image
from imagebuild.building.contenthash import split_repo_tag
from imagebuild.errors import PROG, command
from imagebuild.variant import BASE_DIGEST_LABEL, BASE_ID_LABEL


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
    return f"{split_repo_tag(base.ref)[0]}@{base.identity}"


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


def base_line(base: BaseIdentity) -> str:
    """The build log's line on what went into the hash for the base, and how it was learned."""
    if base.ref is None:
        return "base: none in the lock; nothing of it in the content hash"
    note = f" ({base.note})" if base.note else ""
    return f"base {base.ref}: {base.source} {base.identity} in the content hash{note}"


def ensure_base(client, base: BaseIdentity, log) -> None:
    """Make the engine's tag of a registry base name the digest that was hashed, before building from it:
    a build uses the engine's copy of a tag when it has one, which may be from before the base moved."""
    if base.source != REGISTRY_DIGEST or not base.ref or not base.identity:
        return
    image = find_image(client, base.ref)
    if image is not None and base.identity in _repo_digests(image, base.ref):
        return
    repo, tag = split_repo_tag(base.ref)
    log(f"base {base.ref}: the engine's copy is not {base.identity}; pull {pinned_ref(base)}")
    client.images.pull(pinned_ref(base)).tag(repo, tag)
