"""Attach small artifacts (an SBOM, a signed attestation) to an image digest in an OCI registry; read them.

An artifact is an OCI image manifest with an `artifactType`, the empty config, one layer (the document) and a
`subject` naming the image. A registry with the referrers API (OCI distribution 1.1) lists it under
`GET /v2/<repo>/referrers/<digest>`; one without it (Debian's docker-registry, distribution 2.8) finds it by
the tag `sha256-<hex>.<kind>`, the scheme cosign uses. Which one a registry has is asked, not assumed: the
referrers endpoint answers 200 with an image index where it exists, 404 where it does not.

Spoken through `RegistryAPI` (imagebuild/adapters/registry.py), so every call has its bounds, retries and
login, and every manifest and blob read is checked against its digest before it is used. oras-py was not
used: it has its own login and transport with no overall deadline and does not check what it reads.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Dict, List, Optional

from imagebuild.adapters.registry import Refused, RegistryAPI, RemoteManifest, sha256_of
from imagebuild.errors import UserError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
EMPTY_BODY = b"{}"

# kind (the tag suffix) -> the artifact's type, also the media type of its one layer
KINDS: Dict[str, str] = {
    "sbom": "application/vnd.cyclonedx+json",
    "att": "application/vnd.dsse.envelope.v1+json",
}


@dataclass(frozen=True)
class Artifact:
    """An attached artifact as read back: where it is, the digest its manifest names as subject, its bytes."""

    where: str  # `repo:tag` or `repo@digest` of the artifact manifest
    subject: Optional[str]
    payload: bytes


def fallback_tag(digest: str, kind: str) -> str:
    """`sha256-<hex>.<kind>`: where a registry without referrers keeps the artifact of `digest`."""
    algo, _, hexpart = digest.partition(":")
    return f"{algo}-{hexpart}.{kind}"


def has_referrers(api: RegistryAPI, repository: str, digest: str) -> bool:
    """Whether the registry serves the referrers API (200 with an index) or not (404)."""
    status, _hdrs, body = api.call("GET", f"/v2/{repository}/referrers/{digest}", {"Accept": OCI_INDEX})
    if status == 404:
        return False
    if status == 200:
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("manifests"), list):
            return True
    raise UserError(
        f"registry {api.registry}: GET referrers of {repository}@{digest} gave HTTP {status} "
        "(neither an index nor 404)",
        key="registry",
    )


def upload_blob(api: RegistryAPI, repository: str, data: bytes) -> str:
    """Put `data` as a blob (POST for an upload session, then one PUT); its digest. Skipped if present."""
    digest = sha256_of(data)
    status, _h, _b = api.call("HEAD", f"/v2/{repository}/blobs/{digest}", {})
    if status == 200:
        return digest
    status, hdrs, body = api.call("POST", f"/v2/{repository}/blobs/uploads/", {}, b"")
    location = {k.lower(): v for k, v in hdrs.items()}.get("location")
    if status != 202 or not location:
        raise UserError(f"registry {api.registry}: blob upload to {repository} refused: HTTP {status}")
    parts = urllib.parse.urlsplit(location)
    query = urllib.parse.parse_qsl(parts.query) + [("digest", digest)]
    path = parts.path + "?" + urllib.parse.urlencode(query)
    headers = {"Content-Type": "application/octet-stream"}
    status, _h, body = api.call("PUT", path, headers, data)
    if status != 201:
        text = body.decode("utf-8", "replace")[:200]
        raise UserError(f"registry {api.registry}: blob {digest} to {repository}: HTTP {status} {text}")
    return digest


def artifact_manifest(subject: RemoteManifest, kind: str, payload: bytes) -> bytes:
    """The manifest bytes of one artifact of `kind` holding `payload`, naming `subject` (pure)."""
    media = KINDS[kind]
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": media,
        "config": {"mediaType": EMPTY_CONFIG, "digest": sha256_of(EMPTY_BODY), "size": len(EMPTY_BODY)},
        "layers": [{"mediaType": media, "digest": sha256_of(payload), "size": len(payload)}],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": len(subject.body)},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def attach(
    api: RegistryAPI,
    repository: str,
    subject: RemoteManifest,
    kind: str,
    payload: bytes,
    referrers: bool,
    move: bool = True,
) -> str:
    """Store `payload` as an artifact of `kind` for `subject`: by digest where the registry lists referrers,
    else under the fallback tag (replacing an older one; with `move` False, as on ECR's immutable tags, a
    fallback tag that holds another artifact is refused and left as it is). Where it went."""
    body = artifact_manifest(subject, kind, payload)
    manifest = RemoteManifest(sha256_of(body), OCI_MANIFEST, body, None)
    reference = manifest.digest if referrers else fallback_tag(subject.digest, kind)
    where = f"{repository}@{manifest.digest}" if referrers else f"{repository}:{reference}"
    if not referrers and not move:
        held = api.manifest(repository, reference)
        if held is not None and held.digest == manifest.digest:
            return where  # this very artifact is there already: nothing to write
        if held is not None:
            raise Refused(
                f"{api.registry}/{where} already holds another {kind} ({held.digest}); its tags are "
                "immutable, so it is not moved (delete that tag to attach this one)"
            )
    upload_blob(api, repository, EMPTY_BODY)
    upload_blob(api, repository, payload)
    api.put_manifest(repository, reference, manifest)
    return where


def fetch(api: RegistryAPI, repository: str, digest: str, kind: str, referrers: bool) -> List[Artifact]:
    """Every artifact of `kind` attached to `digest` (the referrers' list, or the one fallback tag)."""
    if not referrers:
        ref = fallback_tag(digest, kind)
        manifest = api.manifest(repository, ref)
        return [] if manifest is None else [_read(api, repository, f"{repository}:{ref}", manifest, kind)]
    query = urllib.parse.urlencode({"artifactType": KINDS[kind]})
    status, _h, body = api.call("GET", f"/v2/{repository}/referrers/{digest}?{query}", {"Accept": OCI_INDEX})
    try:
        listed = json.loads(body)["manifests"] if status == 200 else None
    except (ValueError, KeyError, TypeError):
        listed = None
    if not isinstance(listed, list):
        raise UserError(f"registry {api.registry}: referrers of {repository}@{digest}: HTTP {status}")
    found = []
    for desc in listed:  # a registry may ignore the filter: the type is checked here again
        if not isinstance(desc, dict) or desc.get("artifactType") != KINDS[kind]:
            continue
        manifest = api.manifest(repository, str(desc.get("digest")))
        if manifest is not None:
            found.append(_read(api, repository, f"{repository}@{manifest.digest}", manifest, kind))
    return found


def _read(api: RegistryAPI, repository: str, where: str, manifest: RemoteManifest, kind: str) -> Artifact:
    """The artifact's subject and its one layer of the kind's media type (blob checked against its digest)."""
    try:
        doc = json.loads(manifest.body)
        layers = [x for x in doc["layers"] if x.get("mediaType") == KINDS[kind]]
        subject = doc.get("subject") or {}
        subject_digest = subject.get("digest") if isinstance(subject, dict) else None
    except (ValueError, KeyError, TypeError, AttributeError):
        layers, subject_digest = [], None
    if len(layers) != 1:
        return Artifact(where, subject_digest, b"")
    blob = api.blob(repository, str(layers[0].get("digest")))
    return Artifact(where, subject_digest, blob or b"")
