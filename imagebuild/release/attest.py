"""What a security team reads about a pushed image: a CycloneDX SBOM and a signed in-toto/SLSA provenance.

The SBOM lists the OS packages (the image's dpkg status, read from a container of the image that never runs),
the Python distributions (the probe `build.py test` runs, imagebuild/check/software.py) and the lock's
components with their pins and sha256. Its top component is the image, named by its registry digest.

The provenance is an in-toto Statement (SLSA provenance v1) whose subject is the image digest; it names the
matrix file and the lock by sha256, the base by digest, the builder, and the SBOM by sha256 (a byproduct), so
the one signature covers both. It is signed in a DSSE envelope (securesystemslib) with the team's key.

`check` is pure: given what the registry holds for a digest and the team's public key, it says what is wrong
(nothing, when the signature verifies, the provenance names this digest and the SBOM is the one it names and
describes this digest). Unknown never passes: nothing attached is a failure too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from imagebuild.adapters.oci_artifacts import KINDS, Artifact
from imagebuild.errors import UserError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE = "urn:efa-image-build:build:v1"
DPKG_STATUS = "/var/lib/dpkg/status"
TOOL = "efa-image-build"


# ---------------------------------------------------------------- keys


MAX_KEY_BYTES = 1024 * 1024  # a PEM key is a few KB; a FIFO or /dev/zero given as one is refused


def _read_key_file(path: str, what: str, flag: str) -> bytes:
    """The key file's bytes: a regular file under MAX_KEY_BYTES, else exit 2 naming it (never a hang)."""
    from imagebuild.safefile import read_regular

    try:
        return read_regular(path, MAX_KEY_BYTES, key=flag)
    except UserError as err:
        raise UserError(f"cannot read {what}: {err.message}", file=path, key=flag) from None


def require_libraries() -> None:
    """The `attest` extra's libraries, or exit 2 saying how to install them (no traceback)."""
    import importlib.util

    for module in ("cyclonedx", "securesystemslib", "cryptography"):
        if importlib.util.find_spec(module) is None:
            raise UserError(
                f"the Python package {module!r} is not installed",
                key="attest",
                hint="pip install -e '.[attest]' (make test installs it)",
            )


def load_signer(path: str, flag: str = "--sign-key") -> Any:
    """The team's private key (PEM, PKCS#8, unencrypted: ed25519, ECDSA or RSA) as a DSSE signer."""
    require_libraries()
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner

    data = _read_key_file(path, "signing key", flag)
    try:
        return CryptoSigner(load_pem_private_key(data, password=None))
    except (ValueError, TypeError) as err:
        raise UserError(f"not an unencrypted PEM private key: {err}", file=path, key="--sign-key") from None


def load_public_key(path: str, flag: str = "--key") -> Any:
    """The team's public key (PEM, SubjectPublicKeyInfo) as the key a DSSE signature is verified with."""
    require_libraries()
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    data = _read_key_file(path, "public key", flag)
    try:
        return SSlibKey.from_crypto(load_pem_public_key(data))
    except (ValueError, TypeError) as err:
        raise UserError(f"not a PEM public key: {err}", file=path, key=flag) from None


# ---------------------------------------------------------------- reading the image


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: Optional[str]


def parse_dpkg_status(text: str) -> List[DebPackage]:
    """The installed packages of a dpkg status file (stanzas whose Status ends `installed`), by name."""
    found = []
    for stanza in text.split("\n\n"):
        fields: Dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue  # a continuation line (descriptions, conffiles)
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            source = fields.get("Source", "").split(" ")[0] or None
            found.append(
                DebPackage(
                    fields["Package"], fields.get("Version", ""), fields.get("Architecture", ""), source
                )
            )
    return sorted(found, key=lambda p: (p.name, p.arch))


PYTHONS = ("/usr/local/bin/python3", "/usr/bin/python3", "/opt/conda/bin/python3")


def candidate_pythons(named: Any) -> List[str]:
    """The interpreters to look for: the one the lock names, then PYTHONS (a DLC has one in /usr/local
    beside Debian's own; each has its own packages)."""
    return list(dict.fromkeys(([named] if isinstance(named, str) and named else []) + list(PYTHONS)))


@dataclass(frozen=True)
class ImageFacts:
    """What the SBOM and the provenance say about one pushed image."""

    name: str  # host/repository
    digest: str  # the registry's manifest digest
    image_id: str
    labels: Mapping[str, str]
    deb: Sequence[DebPackage]
    python: Mapping[str, Mapping[str, str]]  # interpreter -> {distribution: version}; {}: none in the image


def read_facts(client: Any, name: str, digest: str, image_id: str) -> ImageFacts:
    """Read the dpkg status and the Python distributions of a local image. An image without a dpkg status,
    or whose interpreter is there but cannot list its packages, cannot be described: ChecksFailed."""
    from imagebuild.adapters.image_files import read_image_files
    from imagebuild.check import software
    from imagebuild.errors import ChecksFailed
    from imagebuild.variant import lock_from_labels

    labels = client.images.get(image_id).attrs.get("Config", {}).get("Labels") or {}
    lock = dict(lock_from_labels(labels) or {})
    pythons = [p for p in candidate_pythons(lock.get("python")) if p.startswith("/")]
    files = read_image_files(client, image_id, [DPKG_STATUS] + pythons)
    status = files[DPKG_STATUS]
    if status is None:
        raise ChecksFailed(f"image {image_id[:19]} has no {DPKG_STATUS}: its OS packages cannot be listed")
    python: Dict[str, Dict[str, str]] = {}
    for interpreter in (p for p in pythons if files[p] is not None):
        described = software.describe(client, image_id, dict(lock, python=interpreter))
        if described.get("error") or not isinstance(described.get("python_packages"), dict):
            why = described.get("error") or "no package list"
            raise ChecksFailed(f"image {image_id[:19]}: cannot list the packages of {interpreter}: {why}")
        python[interpreter] = described["python_packages"]
    deb = parse_dpkg_status(status.decode("utf-8", "replace"))
    return ImageFacts(name, digest, image_id, labels, deb, python)


# ---------------------------------------------------------------- the SBOM


def make_sbom(facts: ImageFacts) -> bytes:
    """The CycloneDX (1.6, JSON) SBOM of the image: OS packages, Python packages, the lock's components."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    from imagebuild.variant import lock_from_labels

    algo, _, hexpart = facts.digest.partition(":")
    repo = facts.name.rsplit("/", 1)[-1]
    bom = Bom()
    bom.metadata.component = Component(
        type=ComponentType.CONTAINER,
        name=facts.name,
        version=facts.digest,
        bom_ref=facts.digest,
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=hexpart)],
        purl=PackageURL("oci", None, repo, facts.digest, {"repository_url": facts.name}),
        properties=[Property(name=f"{TOOL}:image-id", value=facts.image_id)],
    )
    if not facts.python:
        none = Property(name=f"{TOOL}:python", value="none: the image has no interpreter")
        bom.metadata.properties.add(none)
    for p in facts.deb:
        qualifiers = {"arch": p.arch} | ({"upstream": p.source} if p.source else {})
        bom.components.add(
            Component(
                type=ComponentType.LIBRARY,
                name=p.name,
                version=p.version,
                bom_ref=f"deb:{p.name}:{p.arch}",
                purl=PackageURL("deb", "debian", p.name, p.version, qualifiers),
            )
        )
    where: Dict[Tuple[str, str], List[str]] = {}  # (name, version) -> the interpreters that have it
    for interpreter, packages in sorted(facts.python.items()):
        for name, version in packages.items():
            where.setdefault((name, version), []).append(interpreter)
    for (name, version), interpreters in sorted(where.items()):
        bom.components.add(
            Component(
                type=ComponentType.LIBRARY,
                name=name,
                version=version,
                bom_ref=f"pypi:{name}@{version}",
                purl=PackageURL("pypi", None, name, version),
                properties=[Property(name=f"{TOOL}:python", value=p) for p in interpreters],
            )
        )
    for name, comp in sorted(((lock_from_labels(facts.labels) or {}).get("components") or {}).items()):
        if not isinstance(comp, dict):
            continue
        sha = comp.get("sha256")
        props = [
            Property(name=f"{TOOL}:{key}", value=str(comp[key]))
            for key in ("method", "prefix", "url")
            if comp.get(key)
        ]
        params = comp.get("params")
        if params:
            props.append(Property(name=f"{TOOL}:params", value=json.dumps(params, sort_keys=True)))
        bom.components.add(
            Component(
                type=ComponentType.LIBRARY,
                name=name,
                version=str(comp.get("version") or ""),
                bom_ref=f"lock:{name}",
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=str(sha))] if sha else [],
                properties=props,
            )
        )
    bom.register_dependency(bom.metadata.component, list(bom.components))  # all of them are in the image
    return JsonV1Dot6(bom).output_as_string(indent=1).encode()


# ---------------------------------------------------------------- the provenance


def digest_map(digest: str) -> Dict[str, str]:
    """`sha256:HEX` -> `{"sha256": HEX}`, as in-toto writes digests."""
    algo, _, hexpart = digest.partition(":")
    return {algo: hexpart}


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class BuildFacts:
    """How the image was made, from the build summary entry and the files the user names."""

    variant: str
    matrix: Tuple[str, str]  # (path, sha256:HEX) of the matrix file
    lock_sha256: Optional[str]  # of the lock label's text as the image carries it
    base: Mapping[str, Optional[str]]  # ref, digest (manifest), image_id
    builder: str  # buildx | buildkit | classic, or how a skipped image was found
    context_hash: Optional[str]
    tool_version: str


def make_statement(facts: ImageFacts, build: BuildFacts, sbom: bytes) -> Dict[str, Any]:
    """The in-toto Statement (SLSA provenance v1) of the image; names the SBOM by sha256 (pure)."""
    deps: List[Dict[str, Any]] = [
        {"name": "matrix", "uri": f"file:{build.matrix[0]}", "digest": digest_map(build.matrix[1])}
    ]
    if build.lock_sha256:
        deps.append({"name": "lock", "digest": digest_map(build.lock_sha256)})
    base_digest = build.base.get("digest") or build.base.get("image_id")
    base: Dict[str, Any] = {"name": "base", "uri": build.base.get("ref") or ""}
    if base_digest:
        base["digest"] = digest_map(base_digest)
    else:
        base["annotations"] = {"digest": "unknown"}
    deps.append(base)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": facts.name, "digest": digest_map(facts.digest)}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"variant": build.variant, "matrix": build.matrix[0]},
                "internalParameters": {"context_hash": build.context_hash, "image_id": facts.image_id},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {
                    "id": f"urn:{TOOL}:builder:{build.builder}",
                    "version": {TOOL: build.tool_version},
                },
                "byproducts": [
                    {"name": "sbom", "mediaType": KINDS["sbom"], "digest": digest_map(sha256_bytes(sbom))}
                ],
            },
        },
    }


def sign(statement: Mapping[str, Any], signer: Any) -> bytes:
    """The statement in a DSSE envelope signed by `signer`, as JSON bytes."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    envelope.sign(signer)
    return json.dumps(envelope.to_dict(), sort_keys=True).encode()


# ---------------------------------------------------------------- verification


def check(
    digest: str, sboms: Sequence[Artifact], atts: Sequence[Artifact], key: Any, key_path: str
) -> List[str]:
    """What is wrong with the SBOM(s) and provenance(s) attached to `digest` (empty: all verified)."""
    problems: List[str] = []
    if not atts:
        problems.append(f"no provenance attached to {digest}")
    if not sboms:
        problems.append(f"no SBOM attached to {digest}")
    named: Optional[List[str]] = None  # the SBOM digests a provenance whose signature verified names
    for art in atts:
        found, statement = _check_provenance(digest, art, key, key_path)
        problems += found
        if statement is not None:
            named = (named or []) + _sbom_digests(statement)
    for art in sboms:
        problems += _check_sbom(digest, art, named)
    return problems


def _check_provenance(
    digest: str, art: Artifact, key: Any, key_path: str
) -> Tuple[List[str], Optional[Dict]]:
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    where = f"provenance {art.where}"
    problems = []
    if art.subject != digest:
        problems.append(f"{where} is attached to {art.subject}, not {digest}")
    try:
        envelope = Envelope.from_dict(json.loads(art.payload))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return problems + [f"{where} is not a DSSE envelope ({type(err).__name__}: {err})"], None
    try:
        envelope.verify([key], 1)
    except VerificationError as err:
        return problems + [f"signature of {where} does not verify with the key {key_path} ({err})"], None
    try:
        statement = json.loads(envelope.payload)
        subjects = [s["digest"] for s in statement["subject"]]
    except (ValueError, KeyError, TypeError) as err:
        return problems + [
            f"{where}: the signed statement cannot be read ({type(err).__name__}: {err})"
        ], None
    if envelope.payload_type != PAYLOAD_TYPE or statement.get("_type") != STATEMENT_TYPE:
        problems.append(
            f"{where}: not an in-toto statement ({envelope.payload_type}, {statement.get('_type')})"
        )
    if digest_map(digest) not in subjects:
        names = ", ".join(":".join(next(iter(d.items()))) for d in subjects if isinstance(d, dict) and d)
        problems.append(f"{where}: the signed statement names {names or 'no subject'}, not {digest}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"{where}: predicate {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    return problems, statement


def _sbom_digests(statement: Mapping[str, Any]) -> List[str]:
    try:
        products = statement["predicate"]["runDetails"]["byproducts"]
        return [f"sha256:{p['digest']['sha256']}" for p in products if p.get("name") == "sbom"]
    except (KeyError, TypeError, AttributeError):
        return []


def _check_sbom(digest: str, art: Artifact, named: Optional[Sequence[str]]) -> List[str]:
    """What is wrong with one SBOM. `named`: the SBOMs a verified provenance names; None when no provenance
    verified (none attached, or a signature this key does not verify): the SBOM cannot be matched then, and
    saying it is not the one named would add a second cause to the one the provenance's line gives."""
    where = f"SBOM {art.where}"
    problems = []
    if art.subject != digest:
        problems.append(f"{where} is attached to {art.subject}, not {digest}")
    actual = sha256_bytes(art.payload)
    if named is not None and actual not in named:
        problems.append(f"{where} ({actual}) is not the SBOM the signed provenance names")
    try:
        doc = json.loads(art.payload)
        described = doc["metadata"]["component"]["version"]
    except (ValueError, KeyError, TypeError):
        return problems + [f"{where} is not a CycloneDX document naming its image"]
    if doc.get("bomFormat") != "CycloneDX":
        problems.append(f"{where} is not CycloneDX")
    if described != digest:
        problems.append(f"{where} describes {described}, not {digest}")
    return problems
