"""`efa-image-build attest`: attach a CycloneDX SBOM and a signed in-toto/SLSA provenance to every pushed
digest.

Reads build/summary.json (what `efa-image-build push` recorded), reads each image's OS packages (dpkg status)
and Python packages in a container of the image, and signs the provenance (matrix, lock, base digest, builder,
the SBOM's sha256) in a DSSE envelope with the team's key. Both go to the registry as OCI artifacts of the
digest: through the referrers API where the registry has it, else under the tag `sha256-<hex>.<kind>`.
`efa-image-build push --sign-key KEY` does the same right after pushing. Exit 0 attached, 1 an image that
cannot be described, 2 bad input (a key file that is not a PEM private key, a missing matrix).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.commands import add_registry_args, add_sign_args, add_summary_args, add_verb, registry_target


def register(sub) -> None:
    p = add_verb(sub, "attest", __doc__)
    add_summary_args(p)
    add_registry_args(p)
    add_sign_args(p, required=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    request = pipeline.AttestRequest(
        target=registry_target(args),
        sign_key=args.sign_key,
        summary=Path(args.summary),
        variants=tuple(args.variant),
        matrix=args.matrix,
    )
    for where in pipeline.attest(request):
        print(f"attached\t{where}")
    return 0
