"""The registry side of SBOM and provenance: make and attach them for each pushed digest, read them back and
check them (imagebuild/release/attest.py makes and judges the documents; imagebuild/adapters/oci_artifacts.py
stores them). Used by `build.py attest`, `push --sign-key`, `verify` and `release --require-signed`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Sequence, Tuple

from imagebuild.adapters import oci_artifacts as oci
from imagebuild.adapters.registry import ImageRef, Refused, RegistryAPI
from imagebuild.errors import ChecksFailed
from imagebuild.release import attest
from imagebuild.release.push import pushed_refs

ApiFor = Callable[[str], RegistryAPI]  # registry host -> its v2 API, logged in


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("efa-image-build")
    except PackageNotFoundError:
        return "unknown"


def build_facts(entry: Dict[str, Any], labels: Dict[str, str], matrix: Tuple[str, str]) -> attest.BuildFacts:
    """How the image of a build summary entry was made (pure)."""
    from imagebuild.variant import LOCK_LABELS

    lock_text = next((labels[k] for k in LOCK_LABELS if labels.get(k)), None)
    return attest.BuildFacts(
        variant=str(entry.get("variant")),
        matrix=matrix,
        lock_sha256=attest.sha256_bytes(lock_text.encode()) if lock_text else None,
        base={
            "ref": entry.get("base_ref"),
            "digest": entry.get("base_digest"),
            "image_id": entry.get("base_image_id"),
        },
        builder=str(entry.get("builder") or entry.get("found_in") or "unknown"),
        context_hash=entry.get("context_hash"),
        tool_version=tool_version(),
    )


def digest_refs(entry: Dict[str, Any]) -> List[ImageRef]:
    """Each repository@digest an entry was pushed to, once (an image's tags share its attestations)."""
    refs = (ImageRef(r.registry, r.repository, None, r.digest) for r in pushed_refs(entry))
    return list(dict.fromkeys(refs))


def attach_for_entries(
    client: Any,
    api_for: ApiFor,
    entries: Sequence[Dict[str, Any]],
    signer: Any,
    matrix: Tuple[str, str],
    log: Callable[[str], None],
    fixed_tags: Callable[[str], bool] = lambda _host: False,
) -> List[str]:
    """Make, sign and attach the SBOM and the provenance of every pushed digest of `entries`; where they went.
    The image's contents are read once per image, whatever the number of repositories it went to. On a host
    where `fixed_tags` (ECR: immutable tags) a fallback tag is written once, never moved."""
    done: List[str] = []
    read: Dict[str, attest.ImageFacts] = {}
    for entry in entries:
        image_id = str(entry.get("image_id"))
        for ref in digest_refs(entry):
            api = api_for(ref.registry)
            subject = api.manifest(ref.repository, str(ref.digest))
            if subject is None:
                raise ChecksFailed(f"{ref} is not in the registry: push it again before attesting")
            referrers = oci.has_referrers(api, ref.repository, subject.digest)
            fixed = not referrers and fixed_tags(ref.registry)  # fallback tags that must never move
            if fixed and _attested_already(api, ref.repository, subject.digest, signer):
                done += [f"{ref.name}:{oci.fallback_tag(subject.digest, kind)}" for kind in ("sbom", "att")]
                log(f"  {ref}: already attested, and it verifies with this key; kept (immutable tags)")
                continue
            if image_id not in read:
                log(f"attest {entry.get('variant')}: reading the packages of {image_id[:19]}")
                read[image_id] = attest.read_facts(client, ref.name, subject.digest, image_id)
            facts = dataclasses.replace(read[image_id], name=ref.name, digest=subject.digest)
            sbom = attest.make_sbom(facts)
            statement = attest.make_statement(facts, build_facts(entry, dict(facts.labels), matrix), sbom)
            envelope = attest.sign(statement, signer)
            for kind, payload in (("sbom", sbom), ("att", envelope)):
                where = oci.attach(api, ref.repository, subject, kind, payload, referrers, move=not fixed)
                done.append(f"{ref.registry}/{where}")
                log(f"  {kind} of {ref}: {ref.registry}/{where}")
    return done


def _attested_already(api: RegistryAPI, repository: str, digest: str, signer: Any) -> bool:
    """Where a fallback tag never moves (ECR's immutable tags): whether `digest` already has an SBOM and a
    provenance that verify with the signer's own key (attesting again then writes nothing). Nothing there:
    False. Something there that does not verify: Refused, naming what, and it is left as it is."""
    sboms = oci.fetch(api, repository, digest, "sbom", referrers=False)
    atts = oci.fetch(api, repository, digest, "att", referrers=False)
    if not sboms and not atts:
        return False
    problems = attest.check(digest, sboms, atts, signer.public_key, "of --sign-key")
    if problems:
        tags = " and ".join(oci.fallback_tag(digest, kind) for kind in ("sbom", "att"))
        raise Refused(
            f"{api.registry}/{repository}@{digest}: what its tags {tags} hold does not verify with this key "
            "(" + "; ".join(problems) + "); the registry's tags are immutable, so they are not moved "
            "(delete those tags there to attest it again)"
        )
    return True


def problems_of(api: RegistryAPI, repository: str, digest: str, key: Any, key_path: str) -> List[str]:
    """What is wrong with what is attached to `repository@digest` (empty: verified)."""
    referrers = oci.has_referrers(api, repository, digest)
    sboms = oci.fetch(api, repository, digest, "sbom", referrers)
    atts = oci.fetch(api, repository, digest, "att", referrers)
    return attest.check(digest, sboms, atts, key, key_path)


def index_problems(api: RegistryAPI, repository: str, index: Any, key: Any, key_path: str) -> List[str]:
    """What is wrong with what an image index (`index`, a RemoteManifest read by digest) names: every entry
    must verify as one image does (`problems_of`) and be the platform its index entry says (its config,
    read back by digest). Nothing is attached to the index itself: it is content-addressed, so its digest
    fixes exactly which signed images it names, and the SBOM and provenance describe an image's contents,
    which an index has none of (and the release, which holds only the public key, could not sign one)."""
    from imagebuild.release.index import index_digests, platform_of_config

    where = f"{api.registry}/{repository}@{index.digest}"
    try:
        members = index_digests(index.body, where)
    except ChecksFailed as err:
        return [str(err)]
    problems: List[str] = []
    for digest, plat in members:
        entry = f"its {plat} entry {digest}"
        manifest = api.manifest(repository, digest)
        config = api.blob(repository, manifest.config_digest) if manifest and manifest.config_digest else None
        if manifest is None or config is None:
            problems.append(f"{entry}: not in the registry (or not one image)")
            continue
        try:
            said = "/".join(p for p in platform_of_config(config, f"{where} {entry}") if p)
        except ChecksFailed as err:
            problems.append(str(err))
            continue
        if said != plat:
            problems.append(f"{entry} is a {said} image (its config says so), not {plat}")
        problems += [f"{entry}: {p}" for p in problems_of(api, repository, digest, key, key_path)]
    return problems


def require_signed(api_for: ApiFor, entries: Sequence[Dict[str, Any]], key: Any, key_path: str) -> None:
    """ChecksFailed naming each pushed digest of `entries` whose SBOM or signed provenance does not verify,
    and, for a variant pushed into an image index, each entry of that index (what the release tag will name:
    a twin not selected with --variant included)."""
    from imagebuild.adapters.registry import split_ref
    from imagebuild.release.index import INDEX_TYPES

    problems: List[str] = []
    for entry in entries:
        refs = digest_refs(entry)
        if not refs:
            problems.append(f"{entry.get('variant')}: nothing pushed, so nothing signed")
        for ref in refs:
            found = problems_of(api_for(ref.registry), ref.repository, str(ref.digest), key, key_path)
            problems += [f"{entry.get('variant')} {ref}: {p}" for p in found]
    for index in dict.fromkeys(str(e["index"]) for e in entries if e.get("index")):
        ref = split_ref(index, key="index")
        api = api_for(ref.registry)
        manifest = api.manifest(ref.repository, ref.digest) if ref.digest else None
        if manifest is None or manifest.media_type not in INDEX_TYPES:
            problems.append(f"index {index}: the registry has no such image index")
            continue
        found = index_problems(api, ref.repository, manifest, key, key_path)
        problems += [f"index {index}: {p}" for p in found]
    if problems:
        raise ChecksFailed(
            "release refused: not signed as --require-signed asks:\n  "
            + "\n  ".join(problems)
            + "\n  (`efa-image-build attest --sign-key KEY` attaches them; "
            + f"`efa-image-build verify IMAGE --key {key_path}` checks one)"
        )


def read_matrix(path: str) -> Tuple[str, str]:
    """(path, sha256:HEX) of the matrix file the provenance names."""
    from imagebuild.safefile import read_regular

    return path, attest.sha256_bytes(read_regular(path, key="--matrix"))  # bounded: a FIFO is exit 2
