"""One tag, several architectures: twin variants pushed as one OCI image index (a manifest list).

Variants whose tags name the same `repository:tag` (an x86 variant and its arm64 twin, which differ only by
`platform`) cannot each own that tag. Each image is pushed by digest under `TAG-ARCH` (its own tag, so the
registry keeps it), then an OCI image index naming every image by digest, with the platform its registry
config says (never the matrix's word: an image built for the wrong platform is caught here), is put under
the shared tag. A client pulls the entry for its own platform (`docker pull --platform linux/arm64`).

The release gate reads the index back by digest and gates every entry, not only the variant asked for: a
tag whose arm64 image never passed its checks is not released through its amd64 twin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from imagebuild.adapters.registry import (
    ImageRef,
    Log,
    Refused,
    RegistryAPI,
    RemoteManifest,
    sha256_of,
    split_ref,
)
from imagebuild.errors import ChecksFailed, UserError

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
INDEX_TYPES = (INDEX_TYPE, "application/vnd.docker.distribution.manifest.list.v2+json")


@dataclass(frozen=True)
class IndexEntry:
    """One image of an index: its manifest by digest, and the platform its config declares."""

    digest: str
    media_type: str
    size: int
    os: str
    architecture: str
    variant: Optional[str] = None

    @property
    def platform(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


def platform_tag(tag: str, architecture: str) -> str:
    """The tag an index entry's image is pushed under, beside the shared tag (`local-arm64`)."""
    return f"{tag}-{architecture}"[:128]


# the `architecture` an image config names is a GOARCH value (opencontainers/image-spec config.md); Go's list
# of them: golang/go src/internal/syslist/syslist.go (KnownArch); "unknown" is push's name where none is given
ARCHITECTURES = frozenset(
    "386 amd64 amd64p32 arm armbe arm64 arm64be loong64 mips mipsle mips64 mips64le mips64p32 mips64p32le "
    "ppc ppc64 ppc64le riscv riscv64 s390 s390x sparc sparc64 wasm unknown".split()
)


def with_platform_tags(pairs: Set[Tuple[str, str]]) -> Set[Tuple[str, str]]:
    """`pairs` and each one's TAG-ARCH names: a write-once tag's images are pushed under those (twins,
    fan-out), so a `--tag` extra of that name must not move them either."""
    return pairs | {(repo, platform_tag(tag, arch)) for repo, tag in pairs for arch in ARCHITECTURES}


def twin_groups(targets: Sequence[Tuple[str, Tuple[str, str]]]) -> Dict[Tuple[str, str], List[str]]:
    """(variant, (repository, tag)) pairs -> each (repository, tag) that more than one variant names, with
    its variants in order. Pure: push decides from it which tags become an index."""
    named: Dict[Tuple[str, str], List[str]] = {}
    for variant, where in targets:
        if variant not in named.setdefault(where, []):
            named[where].append(variant)
    return {where: names for where, names in named.items() if len(names) > 1}


def platform_of_config(body: bytes, where: str) -> Tuple[str, str, Optional[str]]:
    """(os, architecture, variant) of an image config; a config without them is refused (fail closed)."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise ChecksFailed(f"{where}: the image config is not JSON") from None
    os_name = doc.get("os") if isinstance(doc, dict) else None
    arch = doc.get("architecture") if isinstance(doc, dict) else None
    if not isinstance(os_name, str) or not os_name or not isinstance(arch, str) or not arch:
        raise ChecksFailed(f"{where}: the image config names no os/architecture; it cannot enter an index")
    variant = doc.get("variant")
    return os_name, arch, variant if isinstance(variant, str) and variant else None


def read_entry(api: RegistryAPI, repository: str, digest: str, image_id: str) -> IndexEntry:
    """The index entry of a pushed image, read back from the registry (digest-verified by `manifest`)."""
    where = f"{api.registry}/{repository}@{digest}"
    manifest = api.manifest(repository, digest)
    if manifest is None:
        raise ChecksFailed(f"{where}: the registry has no such manifest")
    if manifest.media_type in INDEX_TYPES or manifest.config_digest is None:
        raise ChecksFailed(f"{where} is itself an index, not one image")
    if manifest.config_digest != image_id:
        raise ChecksFailed(f"{where} is image {manifest.config_digest}, not the built {image_id}")
    config = api.blob(repository, manifest.config_digest)
    if config is None:
        raise ChecksFailed(f"{where}: the registry has no config blob {manifest.config_digest}")
    os_name, arch, variant = platform_of_config(config, where)
    return IndexEntry(digest, manifest.media_type, len(manifest.body), os_name, arch, variant)


def index_body(entries: Sequence[IndexEntry]) -> bytes:
    """The OCI image index naming `entries`, in a stable order; two images for one platform are refused."""
    seen: Dict[str, str] = {}
    for e in entries:
        if e.platform in seen and seen[e.platform] != e.digest:
            raise ChecksFailed(
                f"two images for platform {e.platform} ({seen[e.platform]} and {e.digest}): an index holds "
                "one image per platform (do the twins differ by `platform`?)"
            )
        seen[e.platform] = e.digest
    unique = {e.platform: e for e in entries}
    manifests = []
    for e in sorted(unique.values(), key=lambda x: (x.os, x.architecture, x.variant or "")):
        plat: Dict[str, str] = {"architecture": e.architecture, "os": e.os}
        if e.variant:
            plat["variant"] = e.variant
        manifests.append({"mediaType": e.media_type, "digest": e.digest, "size": e.size, "platform": plat})
    doc = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests}
    return json.dumps(doc, indent=2, sort_keys=True).encode()


def push_index(
    api: RegistryAPI,
    target: ImageRef,
    entries: Sequence[IndexEntry],
    *,
    force: bool = False,
    write_once: bool = False,
    log: Log = lambda _m: None,
) -> Tuple[str, bool]:
    """Put the index of `entries` under `target`'s tag; (its digest, True when the tag held it already).

    As for one image, a tag that holds something else is refused unless `force`, and a `write_once` one even
    then (push.push_image says why); the registry is asked."""
    assert target.tag, "index target needs a tag"
    body = index_body(entries)
    digest = sha256_of(body)
    current = api.manifest(target.repository, target.tag)
    if current is not None:
        if current.digest == digest:
            log(f"  {target}: already holds this index ({digest}); nothing to push")
            return digest, True
        held = f"{target} already exists in the registry as {current.digest}, not this index ({digest}); "
        if write_once:
            raise Refused(held + "not overwriting: a tag of the matrix is write-once, --force or not")
        if not force:
            raise Refused(held + "not overwriting")
        log(f"  {target}: overwriting {current.digest} (--force)")
    got = api.put_manifest(target.repository, target.tag, RemoteManifest(digest, INDEX_TYPE, body, None))
    if got != digest:
        raise ChecksFailed(f"{target}: the registry stored the index as {got}, not {digest}")
    log(f"  {target}: index of {', '.join(e.platform for e in entries)}, digest {digest}")
    return digest, False


def index_digests(body: bytes, where: str) -> List[Tuple[str, str]]:
    """(digest, platform) of each entry of an index document; anything else is refused."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise ChecksFailed(f"{where}: the index is not JSON") from None
    items = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise ChecksFailed(f"{where}: not an image index (no manifests)")
    out = []
    for item in items:
        digest = item.get("digest") if isinstance(item, dict) else None
        plat = item.get("platform") if isinstance(item, dict) else None
        if not isinstance(digest, str) or not isinstance(plat, dict):
            raise ChecksFailed(f"{where}: an index entry without digest or platform")
        parts = (plat.get("os"), plat.get("architecture"), plat.get("variant"))
        out.append((digest, "/".join(str(p) for p in parts if p)))
    return out


GateFn = Callable[[Dict[str, Any]], List[str]]


def index_refusals(
    entry: Dict[str, Any],
    all_entries: Sequence[Dict[str, Any]],
    read_index: Callable[[ImageRef], Optional[RemoteManifest]],
    gate: GateFn,
) -> List[str]:
    """Why the index `entry` was pushed into may not be released: every entry of it, read back from the
    registry by digest, must be a built variant of the summaries (by digest) whose own gate passes."""
    index = entry.get("index")
    if not index:
        return []
    if not isinstance(index, str) or "@" not in index:
        return [f"the summary's index {index!r} is not `repository:tag@digest`"]
    try:
        ref = split_ref(index, key="index")
    except UserError as err:
        return [f"the summary's index {index!r}: {err}"]
    manifest = read_index(ref)
    if manifest is None:
        return [f"index {index}: the registry has no such manifest"]
    try:
        members = index_digests(manifest.body, index)
    except ChecksFailed as err:
        return [str(err)]
    by_digest = {e.get("digest"): e for e in all_entries if e.get("digest")}
    reasons = []
    if entry.get("digest") not in {d for d, _ in members}:
        reasons.append(f"index {index} does not name this variant's digest {entry.get('digest')}")
    for digest, plat in members:
        twin = by_digest.get(digest)
        if twin is None:
            reasons.append(f"index {index}: its {plat} entry {digest} is no variant of the given summaries")
            continue
        if twin.get("variant") == entry.get("variant"):
            continue  # gated already, as the variant asked for
        for why in gate(twin):
            reasons.append(f"index {index}: its {plat} entry ({twin.get('variant')}): {why}")
    return reasons


@dataclass(frozen=True)
class ReleasedIndex:
    """The index a twin's release tags and channels go to: its repository, manifest (read by digest) and
    entries as (digest, platform)."""

    repository: str  # host/repo
    manifest: RemoteManifest
    entries: Tuple[Tuple[str, str], ...]

    def record(self) -> Dict[str, Any]:
        """The release record's `index`: the digest the tags name and each entry's digest and platform."""
        return {
            "ref": f"{self.repository}@{self.manifest.digest}",
            "digest": self.manifest.digest,
            "manifests": [{"digest": d, "platform": p} for d, p in self.entries],
        }


def released_index(
    entry: Dict[str, Any], read_index: Callable[[ImageRef], Optional[RemoteManifest]]
) -> Optional[ReleasedIndex]:
    """The index a gated variant's release goes to (its summary's `index`), None for a variant in no index.
    Read again by digest (the gate read it too); a manifest that is gone or no index is refused."""
    index = entry.get("index")
    if not index:
        return None
    ref = split_ref(str(index), key="index")
    manifest = read_index(ref)
    if manifest is None or manifest.media_type not in INDEX_TYPES:
        raise ChecksFailed(f"index {index}: the registry has no such image index")
    entries = tuple(index_digests(manifest.body, str(index)))
    return ReleasedIndex(ref.name, manifest, entries)


def assembly_refusals(
    entry: Dict[str, Any],
    all_entries: Sequence[Dict[str, Any]],
    read_index: Callable[[ImageRef], Optional[RemoteManifest]],
    read_entry: Callable[[ImageRef, str, str], IndexEntry],
    lock_platform: Callable[[ImageRef, str], Optional[str]],
) -> List[str]:
    """Why the index `entry` was pushed into is not one this tool would assemble from the checked digests.

    Each entry's platform is what its image config says (read back from the registry by `read_entry`, as
    push does) and what its variant's lock says (`lock_platform`, when the lock names one); the index is then
    assembled again from those entries as push assembles it (`index_body`) and must be, byte for byte, the
    index the summary names. So an index whose linux/arm64 entry is the amd64 image, or one written by hand
    or another tool (other entries, annotations, order), is refused, whatever its entries' gates say.
    Entries no summary names are refused by `index_refusals`; here they are left out."""
    index = entry.get("index")
    if not index or not isinstance(index, str) or "@" not in index:
        return []  # no index, or a malformed one `index_refusals` names
    try:
        ref = split_ref(index, key="index")
        manifest = read_index(ref)
        members = index_digests(manifest.body, index) if manifest is not None else []
    except (UserError, ChecksFailed):
        return []  # named by `index_refusals`
    by_digest = {e.get("digest"): e for e in all_entries if e.get("digest")}
    reasons: List[str] = []
    checked: List[IndexEntry] = []
    for digest, plat in members:
        twin = by_digest.get(digest)
        if twin is None:
            continue
        image_id, name = str(twin.get("image_id")), twin.get("variant")
        try:
            got = read_entry(ref, digest, image_id)
        except (UserError, ChecksFailed) as err:
            why = getattr(err, "message", None) or str(err)
            reasons.append(f"index {index}: its {plat} entry ({name}): {why}")
            continue
        if got.platform != plat:
            reasons.append(
                f"index {index}: its {plat} entry ({name}) is a {got.platform} image (its config says so)"
            )
        locked = lock_platform(ref, image_id)
        if locked and not same_platform(locked, got.platform):
            reasons.append(
                f"index {index}: its {plat} entry ({name}) is a {got.platform} image, but its lock "
                f"says {locked}"
            )
        checked.append(got)
    if reasons or not checked or len(checked) != len(members):
        return reasons
    try:
        body = index_body(checked)
    except ChecksFailed as err:
        return [f"index {index}: {err}"]
    if manifest is not None and sha256_of(body) != manifest.digest:
        reasons.append(
            f"index {index} is not the index this tool assembles from its checked entries "
            f"({sha256_of(body)}): an index made elsewhere is not released (push the twins with "
            "efa-image-build push)"
        )
    return reasons


def same_platform(locked: str, config: str) -> bool:
    """Whether a lock's `os/arch` names the platform an image config says; a config may add the CPU
    variant the lock leaves out (`linux/arm64` is `linux/arm64/v8`, as the engine builds it)."""
    return locked == config or (locked.count("/") == 1 and config.startswith(locked + "/"))
