"""`build.py prune`: which of the tool's own content-tagged images nothing names any more, and removing them.

Every rebuild leaves a content tag (`repo:<versions>-<hash12>`, its image labelled with the whole hash); only
those are ever considered, in the repositories the build summary and the release records name. One is kept
when the latest build (the summary), a release or a channel (the release records, and any other tag in the
registry: release tags and channels are not content tags) names its image, a twin's image index that a
record names included with every entry of it (by digest, local and in the registry), or when it is younger
than the age given. Release tags are never removed: a registry manifest goes only when every tag naming it
is an unreferenced content tag, and a local image loses only its content tags. The SBOM and provenance tags
(`sha256-<hex>.sbom`/`.att`) of a deleted manifest go after it; those of a kept one stay. The records are
read first and fail closed: a records folder that is missing or unreadable is exit 2 before anything goes.
The tool's own tags (`_efa.*`: release records and intents kept in the registry) are never looked at as
images; by default those records are what prune reads.

Pure functions first; the engine and registry calls are in the small functions at the end.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from imagebuild.errors import ChecksFailed, UserError, command
from imagebuild.variant import HASH_LABEL

_AGE = re.compile(r"([0-9]{1,6})([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AGE_S = 100 * 365 * 86400
MAX_SAID = 20  # repositories of the tool's images nothing here names, said one a line; then a count
_CONTENT = re.compile(r".*-[0-9a-f]{12}")
# The tag of an SBOM or a provenance kept beside an image on a registry without the referrers API
# (imagebuild/adapters/oci_artifacts.py `fallback_tag`): it goes when that image goes, never before.
_ATTESTATION = re.compile(r"sha256-([0-9a-f]{64})\.(sbom|att)")


def parse_age(text: str) -> timedelta:
    """`7d`, `12h`, `30m`, `2w`, `0s`: the --older-than flag."""
    found = _AGE.fullmatch(text.strip())
    if not found:
        raise UserError(f"{text!r} is not an age like 7d, 12h, 30m or 2w", key="--older-than")
    seconds = int(found.group(1)) * _UNIT_S[found.group(2)]
    if seconds > MAX_AGE_S:  # `now - age` must stay a date (999999w is before year 1)
        raise UserError(f"{text!r} is longer than 100 years", key="--older-than")
    return timedelta(seconds=seconds)


def parse_created(text: Any) -> Optional[datetime]:
    """An image's `Created`/`created` (RFC 3339, nanoseconds allowed) as aware UTC; None if unreadable."""
    if not isinstance(text, str):
        return None
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text.strip())
    if not found:
        return None
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    try:
        return datetime.fromisoformat(found.group(1) + zone).astimezone(timezone.utc)
    except ValueError:
        return None


def split_tag(ref: str) -> Tuple[str, str]:
    """(`[host/]repo`, tag) of `repo:tag`; the tag `latest` when none is written."""
    slash, colon = ref.rfind("/"), ref.rfind(":")
    return (ref[:colon], ref[colon + 1 :]) if colon > slash else (ref, "latest")


def is_content_tag(tag: str, chash: Optional[str] = None) -> bool:
    """A tag the builder makes from the content hash (`<versions>-<hash12>`); with `chash`, that hash's."""
    if chash:
        return tag.endswith("-" + chash[:12]) and bool(_CONTENT.fullmatch(tag))
    return bool(_CONTENT.fullmatch(tag))


@dataclass
class Named:
    """What the latest build, the releases and the channels name: image ids, digests, repositories."""

    image_ids: Set[str] = field(default_factory=set)
    digests: Set[str] = field(default_factory=set)
    repositories: Set[str] = field(default_factory=set)  # `[host/]repo`, where to look

    def names(self, image_id: Optional[str], digest: Optional[str] = None) -> bool:
        return bool((image_id and image_id in self.image_ids) or (digest and digest in self.digests))


def named_by(summary: Dict[str, Any], records: Iterable[Dict[str, Any]]) -> Named:
    """The images the build summary (the latest build of each variant) and the release records name."""
    named = Named()
    for entry in summary.get("variants") or []:
        named.image_ids.add(entry.get("image_id"))
        named.digests.add(entry.get("digest"))
        named.repositories.update(split_tag(str(t))[0] for t in entry.get("tags") or [])
        named.repositories.update(split_tag(str(p).split("@", 1)[0])[0] for p in entry.get("pushed") or [])
    for rec in records:
        named.image_ids.add(rec.get("image_id"))
        named.digests.add(rec.get("digest"))
        for repo in rec.get("repositories") or []:
            if isinstance(repo, dict) and repo.get("repository"):
                named.repositories.add(str(repo["repository"]))
        for chan in rec.get("channels") or []:
            if isinstance(chan, dict):
                named.digests.add(chan.get("digest"))
        named.digests.update(index_digests(rec.get("index")))
        for write in (
            rec.get("writes") or []
        ):  # a pending intent (pending.json): tags an interrupted run wrote
            if isinstance(write, dict):
                named.digests.add(write.get("digest"))
    named.image_ids.discard(None)
    named.digests.discard(None)
    named.repositories.discard("")
    return named


def index_digests(index: Any) -> List[str]:
    """The digests a record's `index` names: the index the release tags name, and every entry of it (each
    twin's image, both architectures): deleting any of them breaks what the release tags pull."""
    if not isinstance(index, dict):
        return []
    entries = [m.get("digest") for m in index.get("manifests") or [] if isinstance(m, dict)]
    return [d for d in [index.get("digest"), *entries] if isinstance(d, str) and d]


@dataclass(frozen=True)
class Candidate:
    """A content tag that nothing names and is older than the cutoff: where, which tag, what it holds."""

    where: str  # local | registry
    ref: str  # `[host/]repo:tag`
    image_id: str
    digest: Optional[str]
    created: datetime
    subject: Optional[str] = None  # an attestation tag's: the image digest it describes, removed first


@dataclass(frozen=True)
class LocalImage:
    image_id: str
    tags: Tuple[str, ...]
    labels: Dict[str, str]
    created: Optional[datetime]
    digests: Tuple[str, ...] = ()  # its registry manifest digests (RepoDigests), as pushed
    pushed_to: Tuple[str, ...] = ()  # its RepoDigests as the engine gives them, `host/repo@sha256:...`


def local_candidates(images: Iterable[LocalImage], named: Named, cutoff: datetime) -> List[Candidate]:
    """The content tags of local images to remove: the tool's (its hash label), in a named repository, older
    than `cutoff`, and named by nothing: no summary, record or channel, and no other tag of its own."""
    out = []
    for img in images:
        chash = img.labels.get(HASH_LABEL)
        if not chash or img.created is None or img.created > cutoff or named.names(img.image_id):
            continue
        if any(named.names(None, d) for d in img.digests):
            continue  # pushed as an image a release names by digest only (an index entry)
        mine = [t for t in img.tags if split_tag(t)[0] in named.repositories]
        if not mine or any(not is_content_tag(split_tag(t)[1], chash) for t in img.tags):
            continue  # not in our repositories, or another tag (a release, a channel, a matrix tag) names it
        out += [Candidate("local", t, img.image_id, None, img.created) for t in sorted(mine)]
    return out


def unnamed_repositories(images: Iterable[LocalImage], named: Named) -> Dict[str, int]:
    """Repository -> how many of the tool's content tags it holds, for each repository of a local image the
    tool built (its hash label, a tag made from that hash, or a digest it was pushed as) that neither the
    build summary nor a release record names: a repository a matrix once named and no longer does (a renamed
    variant, a moved registry), whose old builds prune would otherwise never look at. The engine may be
    shared with other projects built by this tool, so the label alone does not make a repository this
    project's: these are said, and pruned only when named with `--repository` (pure)."""
    found: Dict[str, int] = {}
    for img in images:
        chash = img.labels.get(HASH_LABEL)
        if not chash:
            continue
        repos = [split_tag(t)[0] for t in img.tags if is_content_tag(split_tag(t)[1], chash)]
        repos += [ref.split("@", 1)[0] for ref in img.pushed_to]
        for repo in dict.fromkeys(repos):
            if repo and repo not in named.repositories:
                found[repo] = found.get(repo, 0) + 1
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class RemoteTag:
    repository: str  # host/repo
    tag: str
    digest: str
    image_id: Optional[str]  # the manifest's config digest
    chash: Optional[str]  # the config's hash label
    created: Optional[datetime]
    subject: Optional[str] = None  # an attestation tag's manifest `subject` digest


def registry_candidates(tags: Iterable[RemoteTag], named: Named, cutoff: datetime) -> List[Candidate]:
    """The registry content tags to remove, by manifest: every tag naming that digest in that repository
    must be the tool's content tag (a release tag or channel there keeps it), older than `cutoff`, and
    named by nothing."""
    by_digest: Dict[Tuple[str, str], List[RemoteTag]] = {}
    for t in tags:
        by_digest.setdefault((t.repository, t.digest), []).append(t)
    out = []
    for (_repo, digest), group in sorted(by_digest.items()):
        first = group[0]
        if not first.chash or first.created is None or first.created > cutoff:
            continue
        if named.names(first.image_id, digest) or any(not is_content_tag(t.tag, first.chash) for t in group):
            continue
        out += [
            Candidate("registry", f"{t.repository}:{t.tag}", t.image_id or "", digest, t.created or cutoff)
            for t in sorted(group, key=lambda t: t.tag)
        ]
    return out + attestation_candidates(tags, out)


def attestation_candidates(tags: Iterable[RemoteTag], removed: List[Candidate]) -> List[Candidate]:
    """The `sha256-<hex>.sbom`/`.att` tags of the manifests in `removed`: each named for a removed digest
    and whose artifact says that digest is its subject (a tag of that name holding anything else stays)."""
    gone = {(c.ref.rsplit(":", 1)[0], c.digest): c.created for c in removed}
    out = []
    for t in sorted(tags, key=lambda t: (t.repository, t.tag)):
        found = _ATTESTATION.fullmatch(t.tag)
        subject = f"sha256:{found.group(1)}" if found else None
        if subject and t.subject == subject and (t.repository, subject) in gone:
            when = gone[(t.repository, subject)]  # its image's age: an artifact has no creation time
            out.append(Candidate("registry", f"{t.repository}:{t.tag}", "", t.digest, when, subject))
    return out


# -- I/O: records, the engine, the registry -----------------------------------------------------------------
def read_records(req: PruneRequest, summary: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every release record prune must respect, read before anything is looked at or removed. Fails closed
    (exit 2): a records folder that is missing, not a folder or unreadable, or a record that cannot be
    read, would make a released digest look unnamed. `req.records` None: the records (and intents) in the
    registry, in every repository the build summary names (imagebuild/release/registryrecords.py); a
    registry prune may not ask (`--engine-only`, another `--registry`) is exit 2 too. `req.more_records` is
    where records kept elsewhere (S3) are read; a reader that cannot read them must raise UserError too,
    never return []."""
    from imagebuild.release.names import read_local_records

    if req.records is not None:
        records = read_local_records(req.records, must_exist=True)  # typed there: exit 2 naming file and key
    else:
        records = registry_records(req, named_by(summary, []))
    return records + (req.more_records() if req.more_records is not None else [])


def registry_records(req: PruneRequest, named: Named) -> List[Dict[str, Any]]:
    """The records and intents kept in the registry beside the images the summary names (typed, bounded)."""
    from types import SimpleNamespace

    from imagebuild.release.registryrecords import read_repository
    from imagebuild.safefile import MAX_INPUT_BYTES

    out: List[Dict[str, Any]] = []
    seen: Set[str] = set()
    for host, repo in registry_repositories(named):
        api = req.registry_api(host) if req.registry_api is not None else None
        if api is None:
            raise UserError(
                f"the release records are in the registry {host}, which prune is not asking: what they name "
                "cannot be known",
                key="--records",
                hint="let prune ask that registry, or give the folder release wrote with --records DIR",
            )
        out += [doc for _kind, doc in read_repository(SimpleNamespace(api=lambda _h, a=api: a),
                                                       f"{host}/{repo}", MAX_INPUT_BYTES, seen)]  # fmt: skip
    return out


def local_images(client: Any) -> List[LocalImage]:
    """The engine's images that carry the tool's hash label."""
    out = []
    for image in client.images.list(filters={"label": HASH_LABEL}):
        attrs = image.attrs or {}
        labels = (attrs.get("Config") or {}).get("Labels") or image.labels or {}
        pushed = tuple(str(d) for d in attrs.get("RepoDigests") or [] if "@" in str(d))
        digests = tuple(d.split("@", 1)[1] for d in pushed)
        created = parse_created(attrs.get("Created"))
        out.append(LocalImage(image.id, tuple(image.tags), dict(labels), created, digests, pushed))
    return out


def remote_tags(api: Any, host: str, repository: str, log: Callable[[str], None]) -> List[RemoteTag]:
    """Every tag of `host/repository` with its digest, and for content-looking tags the image config's hash
    label and creation time (one config read per digest)."""
    from imagebuild.adapters.registry import TOOL_TAG_PREFIX
    from imagebuild.adapters.registry_tags import list_tags

    configs: Dict[str, Tuple[Optional[str], Optional[datetime]]] = {}
    out = []
    for tag in list_tags(api, repository):
        if tag.startswith(TOOL_TAG_PREFIX):
            continue  # a release record or intent (registryrecords.py): never an image, never removed
        manifest = api.manifest(repository, tag)
        if manifest is None:
            continue  # deleted meanwhile
        if manifest.digest not in configs:
            chash, created = None, None
            if is_content_tag(tag) and manifest.config_digest:
                body = api.blob(repository, manifest.config_digest)
                config = json.loads(body) if body else {}
                chash = ((config.get("config") or {}).get("Labels") or {}).get(HASH_LABEL)
                created = parse_created(config.get("created"))
            configs[manifest.digest] = (chash, created)
        chash, created = configs[manifest.digest]
        subject = _subject(manifest.body) if _ATTESTATION.fullmatch(tag) else None
        out.append(
            RemoteTag(
                f"{host}/{repository}", tag, manifest.digest, manifest.config_digest, chash, created, subject
            )
        )
    log(f"registry {host}/{repository}: {len(out)} tag(s)")
    return out


def _subject(body: bytes) -> Optional[str]:
    """The `subject.digest` of an artifact manifest (the image it is attached to), or None."""
    try:
        subject = json.loads(body).get("subject")
    except (ValueError, AttributeError):
        return None
    digest = subject.get("digest") if isinstance(subject, dict) else None
    return digest if isinstance(digest, str) else None


def registry_repositories(named: Named) -> List[Tuple[str, str]]:
    """(host, repository) of every named repository that names a registry host."""
    from imagebuild.adapters.registry import split_ref

    out = []
    for name in sorted(named.repositories):
        first = name.split("/", 1)[0]
        if "/" in name and ("." in first or ":" in first or first == "localhost"):
            ref = split_ref(name, key="repository")
            out.append((ref.registry, ref.repository))
    return out


def with_hosts(repositories: Iterable[str], named: Named) -> List[str]:
    """Each `--repository`, and a bare one (`team/app`, as its local tags name it) in every registry the
    named repositories are on too: a push leaves no registry-qualified tag in the engine, so the engine
    shows a former repository without the registry it was pushed to (pure)."""
    hosts = sorted({host for host, _repo in registry_repositories(named)})
    out = []
    for repo in (r.strip("/") for r in repositories):
        out.append(repo)
        if not registry_repositories(Named(repositories={repo})):
            out += [f"{host}/{repo}" for host in hosts]
    return out


@dataclass
class PruneRequest:
    summary: Path
    records: Optional[Path]  # None: the records in the registry, beside the images
    older_than: timedelta
    dry_run: bool = False
    registry_api: Optional[Callable[[str], Any]] = None  # host -> RegistryAPI or None (skip that host)
    more_records: Optional[Callable[[], List[Dict[str, Any]]]] = None  # records kept elsewhere (S3)
    # `[host/]repo`s the summary and the records no longer name, looked at too (`--repository`): the user
    # names each one, after prune said it holds the tool's content tags
    repositories: Tuple[str, ...] = ()


def run_prune(
    req: PruneRequest, engine: Callable[[], Any], log: Callable[[str], None], now: datetime
) -> List[Candidate]:
    """List (dry run) or remove the unreferenced content tags, local and in the registries; returns them.

    Registry repositories are held under the release locks meanwhile, so a release on this host cannot
    put a release tag on a manifest between the look and the delete."""
    from contextlib import ExitStack

    from imagebuild.building.summary import load_summary
    from imagebuild.release.record import hold_lock, lock_paths

    summary = load_summary(req.summary)
    named = named_by(summary, read_records(req, summary))  # every input before the engine
    named.repositories.update(with_hosts(req.repositories, named))
    client = engine()
    cutoff = now - req.older_than
    repos = registry_repositories(named) if req.registry_api is not None else []
    with ExitStack() as held:
        if not req.dry_run:
            for path in lock_paths([f"{h}/{r}" for h, r in repos]):
                held.enter_context(hold_lock(path))
        images = local_images(client)
        unnamed = unnamed_repositories(images, named)
        for repo, count in list(unnamed.items())[:MAX_SAID]:
            log(
                f"repository {repo}: {count} image(s) of this tool that the build summary and the release "
                f"records do not name (a repository the matrix once named?); left alone. "
                f"`{command('prune', '--repository', repo, '--dry-run')}` lists what would go "
                "(here and in the registries prune asks)"
            )
        if len(unnamed) > MAX_SAID:
            log(f"... and {len(unnamed) - MAX_SAID} more such repositories")
        apis = {host: req.registry_api(host) for host in sorted({h for h, _ in repos})}
        remote = [remote_tags(apis[h], h, r, log) for h, r in repos if apis[h] is not None]
        # a local image is the one a record names by digest only (a twin in a released index) when the
        # registry's manifest of that digest has its config: the engine keeps no registry tag after a push,
        # so its RepoDigests no longer say so
        named.image_ids.update(t.image_id for tags in remote for t in tags if named.names(None, t.digest))
        named.image_ids.discard(None)  # type: ignore[arg-type]
        found = local_candidates(images, named, cutoff)
        for tags in remote:
            found += registry_candidates(tags, named, cutoff)
        verb = "would remove" if req.dry_run else "remove"
        for c in found:
            age = now - c.created
            print(f"{verb}\t{c.where}\t{c.ref}\t{c.digest or c.image_id}\t{age.days}d{age.seconds // 3600}h")
        if not req.dry_run:
            _remove(found, client, apis, log)
    return found


def _remove(found: List[Candidate], client: Any, apis: Dict[str, Any], log: Callable[[str], None]) -> None:
    """Untag the local content tags (the engine drops an image with its last tag) and delete each registry
    manifest once, after reading its tags again: one moved meanwhile is left alone."""
    from imagebuild.adapters.registry import split_ref
    from imagebuild.adapters.registry_tags import delete_manifest

    done: Set[Tuple[str, str]] = set()
    failed = []
    for c in found:
        if c.where == "local":
            try:
                client.images.remove(c.ref, noprune=False)
            except Exception as err:  # noqa: BLE001 - docker APIError: a container still uses it, say
                failed.append(c.ref)
                log(f"  could not remove local tag {c.ref}: {getattr(err, 'explanation', None) or err}")
                continue
            log(f"  removed local tag {c.ref}")
            continue
        ref = split_ref(c.ref, key="registry")
        if (ref.name, c.digest) in done:
            continue
        if c.subject is not None and (ref.name, c.subject) not in done:
            log(f"  {c.ref}: its image {c.subject} was not deleted; left alone")
            continue
        api = apis[ref.registry]
        now = api.manifest(ref.repository, ref.tag)
        if now is None or now.digest != c.digest:
            log(f"  {c.ref} moved meanwhile; left alone")
            continue
        delete_manifest(api, ref.repository, c.digest)
        done.add((ref.name, c.digest))
        log(f"  deleted {ref.name}@{c.digest} from the registry")
    if failed:
        raise ChecksFailed(f"{len(failed)} local content tag(s) could not be removed: {', '.join(failed)}")
