"""Release records in the registry, beside the images: the default store, which every runner that can push
the images can read, with the same client and login, and no other infrastructure.

Each record is an OCI artifact in the image's own repository (an image manifest with an `artifactType`, the
empty config, one layer that is the record JSON and one that is its notes, every blob sha256-addressed, as
the OCI image spec's "Guidelines for Artifact Usage" lays out: opencontainers/image-spec
v1.1.0:manifest.md), under a tag of its own: `_efa.record.<stamp>.<digest12>.<id>`. A release's intent
(imagebuild/release/transaction.py) is one too, `_efa.intent.<stamp>.<id>`. Tags that start with `_efa.`
are the tool's own (imagebuild/adapters/registry.py `TOOL_TAG_PREFIX`): `check_tag` refuses them as a
release tag, a channel or a pushed tag, so a record can never be taken for either, and prune never looks at
them. Records are found by listing the repository's tags (`GET /v2/<name>/tags/list`, paginated by its
`Link` header: the distribution spec, opencontainers/distribution-spec v1.1.0:spec.md "Listing Tags") and
read back by digest; the referrers API is not needed (distribution 2.8 has none).

Why a tag per record and no index: tags are last-writer-wins and the registry has no compare-and-set, so a
mutable `latest` tag written by two runners at once would lose one record. A record under a name only its
release takes is never overwritten; the latest of a variant is the newest of its records by `released_at`
(the releasing runner's clock: CI runners keep theirs by NTP; `newest_record` orders one second's records).
An intent is done once a record of its variant is as new as it (that release's record, or a later one),
so nothing is deleted (ECR's tags are immutable; distribution deletes only when configured to).

Two releases of one repository on two runners at the same moment are not serialised by the registry (on
one host the flock in record.py does it; S3 has a lock, imagebuild/release/s3records.py): both records are
kept, the channel ends where the last writer put it, and promote's read-back refuses the one that finds its
tag taken. The GitHub example runs one release at a time (a `concurrency` group) for that reason.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from imagebuild.adapters import oci_artifacts as oci
from imagebuild.adapters.registry import TOOL_TAG_PREFIX, RemoteManifest, check_tag, sha256_of, split_ref
from imagebuild.errors import UserError
from imagebuild.release.names import parse_record

RECORD_TYPE = "application/vnd.efa-image-build.release-record.v1+json"
INTENT_TYPE = "application/vnd.efa-image-build.release-intent.v1+json"
NOTES_TYPE = "text/markdown"
RECORD_TAG = TOOL_TAG_PREFIX + "record."
INTENT_TAG = TOOL_TAG_PREFIX + "intent."
REGISTRY = "registry"  # the --records value that names this store (the default)


def record_tag(record: Dict[str, Any]) -> str:
    """`_efa.record.<stamp>.<digest12>.<id>`: the name only this release takes (record.py `record_name`)."""
    from imagebuild.release.record import record_name

    return check_tag(RECORD_TAG + record_name(record).replace("-", "."), key="record", own=True)


def intent_tag(intent: Dict[str, Any], token: str) -> str:
    stamp = str(intent.get("started_at", "")).replace(":", "").replace("-", "").replace("+0000", "Z")
    return check_tag(f"{INTENT_TAG}{stamp}.{token}", key="intent", own=True)


def artifact(kind: str, payload: bytes, notes: Optional[bytes] = None) -> RemoteManifest:
    """The manifest of one record (`kind` RECORD_TYPE) or intent (INTENT_TYPE) holding `payload` (pure)."""
    layers = [{"mediaType": kind, "digest": sha256_of(payload), "size": len(payload)}]
    if notes is not None:
        layers.append({"mediaType": NOTES_TYPE, "digest": sha256_of(notes), "size": len(notes)})
    doc = {
        "schemaVersion": 2,
        "mediaType": oci.OCI_MANIFEST,
        "artifactType": kind,
        "config": {"mediaType": oci.EMPTY_CONFIG, "digest": sha256_of(oci.EMPTY_BODY), "size": 2},
        "layers": layers,
    }
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return RemoteManifest(sha256_of(body), oci.OCI_MANIFEST, body, None)


def payload_layer(manifest: RemoteManifest, kind: str, where: str, limit: int) -> Dict[str, Any]:
    """The one layer of `kind` in an artifact manifest read from the registry, its size bounded; anything
    else under the tool's tag (not JSON, another type, no such layer, too big) is exit 2 naming `where`."""
    try:
        doc = json.loads(manifest.body)
    except (ValueError, RecursionError):
        doc = None
    if (
        not isinstance(doc, dict)
        or doc.get("artifactType") != kind
        or not isinstance(doc.get("layers"), list)
    ):
        raise UserError(
            f"not a release {'intent' if kind == INTENT_TYPE else 'record'} this tool wrote "
            f"(artifactType {doc.get('artifactType') if isinstance(doc, dict) else None!r})",
            file=where,
            key="--records",
            hint=f"tags starting {TOOL_TAG_PREFIX} are the tool's own: remove what was pushed there",
        )
    layers = [x for x in doc["layers"] if isinstance(x, dict) and x.get("mediaType") == kind]
    if len(layers) != 1 or not isinstance(layers[0].get("digest"), str):
        raise UserError(f"{len(layers)} layers of type {kind}, not 1", file=where, key="--records")
    size = layers[0].get("size")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= limit:
        raise UserError(f"its layer's size {size!r} is not 0 to {limit} bytes: not read", file=where,
                        key="--records")  # fmt: skip
    return layers[0]


def newest_record(records: Sequence[Dict[str, Any]], variant: str) -> Optional[Dict[str, Any]]:
    """The latest record of `variant` (pure): the newest by `released_at`; of several in one second (its
    resolution), the one no other names as its `previous`, so a release right after another still follows
    it. Two that name neither (two runners at once) are ordered by `record_id`: always the same one."""
    mine = [r for r in records if r.get("variant") == variant]
    if not mine:
        return None
    when = max(str(r.get("released_at")) for r in mine)
    last = [r for r in mine if str(r.get("released_at")) == when]
    named = {
        (p.get("digest"), p.get("released_at"))
        for r in last
        for p in [r.get("previous")]
        if isinstance(p, dict)
    }
    heads = [r for r in last if (r.get("digest"), r.get("released_at")) not in named] or last
    return max(heads, key=lambda r: str(r.get("record_id")))


def newest_intent(
    intents: Sequence[Dict[str, Any]], records: Sequence[Dict[str, Any]], variant: str
) -> Optional[Dict[str, Any]]:
    """The intent of `variant` that no record has superseded yet: its newest, unless a record of it is as
    new (pure). Why: an intent is never deleted; the record written after the tags is what closes it."""
    mine = sorted((i for i in intents if i.get("variant") == variant), key=lambda i: str(i.get("started_at")))
    if not mine:
        return None
    last = mine[-1]
    done = [r for r in records if r.get("variant") == variant and str(r.get("released_at")) >= str(
        last.get("started_at"))]  # fmt: skip
    return None if done else last


class RegistryRecordStore:
    """The record store interface record.py's `RecordStore` serves (latest, pending, write_pending,
    clear_pending, write, all_records, where, check_reachable), kept in the registry: records are read from
    and written to the `host/repo`s of the release (`repositories`), through `registries.api(host)` (its
    login, bounds and retries; ECR's token on the ECR host)."""

    root = None  # no local folder
    s3 = None  # and no S3: the S3 release lock is not taken

    def __init__(self, registries: Any, repositories: Sequence[str]) -> None:
        self.registries = registries
        self.repositories = sorted(set(repositories))
        self._read: Optional[Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]] = None

    def where(self) -> str:
        return "the registry, beside the images (" + ", ".join(self.repositories) + ")"

    def check_reachable(self) -> None:
        """Records go where the release tags go, with the same login: what the tags need, the records need;
        reading them (all_records, before any write) is the check that the registry answers."""
        self._load()

    # -- reading ---------------------------------------------------------------------------------------
    def _load(self) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
        """(records, intents) of every repository, read once (each artifact once, by digest)."""
        if self._read is None:
            from imagebuild.safefile import MAX_INPUT_BYTES

            records: List[Dict[str, Any]] = []
            intents: List[Dict[str, Any]] = []
            seen: set = set()
            for name in self.repositories:
                for kind, doc in read_repository(self.registries, name, MAX_INPUT_BYTES, seen):
                    (intents if kind == INTENT_TYPE else records).append(doc)
            self._read = (records, intents)
        return self._read

    def all_records(self) -> List[Dict[str, Any]]:
        return list(self._load()[0])

    def latest(self, variant: str) -> Optional[Dict[str, Any]]:
        return newest_record(self._load()[0], variant)

    def pending(self, variant: str) -> Optional[Dict[str, Any]]:
        records, intents = self._load()
        return newest_intent(intents, records, variant)

    # -- writing ---------------------------------------------------------------------------------------
    def _put(self, repository: str, tag: str, kind: str, payload: bytes, notes: Optional[bytes]) -> str:
        ref = split_ref(repository, key="record")
        api = self.registries.api(ref.registry)
        manifest = artifact(kind, payload, notes)
        for blob in (oci.EMPTY_BODY, payload) + ((notes,) if notes is not None else ()):
            oci.upload_blob(api, ref.repository, blob)
        api.put_manifest(ref.repository, tag, manifest)
        return f"{repository}:{tag}"

    def write_pending(self, variant: str, intent: Dict[str, Any]) -> None:
        """The intent, in every repository this variant's release writes to, before the first tag write."""
        import os

        body = json.dumps(intent, indent=2, sort_keys=True).encode()
        tag = intent_tag(intent, os.urandom(6).hex())
        repos = sorted({str(w.get("repository")) for w in intent.get("writes") or []}) or self.repositories
        for repository in repos:
            self._put(repository, tag, INTENT_TYPE, body, None)
        self._load()[1].append(intent)

    def clear_pending(self, variant: str) -> None:
        """Nothing to remove: the record just written is as new as the intent, which closes it
        (`newest_intent`)."""

    def write(self, record: Dict[str, Any], notes: str) -> List[str]:
        """The record and its notes, one artifact under the record's own tag, in each repository it names."""
        body = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        tag = record_tag(record)
        repos = [str(r.get("repository")) for r in record.get("repositories") or [] if isinstance(r, dict)]
        written = [self._put(name, tag, RECORD_TYPE, body, notes.encode()) for name in dict.fromkeys(repos)]
        self._load()[0].append(record)
        return written


def read_repository(registries: Any, repository: str, limit: int, seen: set) -> List[Tuple[str, Any]]:
    """(kind, typed document) of every record and intent tag in `host/repo` (`seen`: manifest digests read
    already, in another repository, skipped). A tag deleted between the listing and its read is gone; any
    other answer that is not a record of this tool is exit 2 naming `host/repo:tag`."""
    from imagebuild.adapters.registry_tags import list_tags

    ref = split_ref(repository, key="record")
    api = registries.api(ref.registry)
    out: List[Tuple[str, Any]] = []
    for tag in sorted(list_tags(api, ref.repository)):
        kind = (
            RECORD_TYPE if tag.startswith(RECORD_TAG) else INTENT_TYPE if tag.startswith(INTENT_TAG) else None
        )
        if kind is None:
            continue
        where = f"{repository}:{tag}"
        manifest = api.manifest(ref.repository, tag)
        if manifest is None or manifest.digest in seen:
            continue
        seen.add(manifest.digest)
        layer = payload_layer(manifest, kind, where, limit)
        data = api.blob(ref.repository, layer["digest"])
        if data is None:
            raise UserError(
                f"its layer {layer['digest']} is not in the registry", file=where, key="--records"
            )
        out.append((kind, parse_record(data, where, intent=kind == INTENT_TYPE)))
    return out
