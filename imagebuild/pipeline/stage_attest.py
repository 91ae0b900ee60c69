"""attest and verify: the SBOM and signed provenance attached to pushed digests, and checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence

from imagebuild.errors import ChecksFailed, UserError
from imagebuild.pipeline.shared import read_signing, select_built
from imagebuild.release.destinations import Registries, RegistryTarget, log


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
    from imagebuild.building.summary import load_summary
    from imagebuild.release.attestations import attach_for_entries

    policy = req.target.policy()
    signer, matrix = read_signing(req.sign_key, req.matrix)
    summary = load_summary(Path(req.summary))
    entries = select_built(summary, req.variants, str(req.summary))
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
