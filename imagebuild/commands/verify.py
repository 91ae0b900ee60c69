"""`efa-image-build verify IMAGE --key PUB`: check the SBOM and the signed provenance attached to an image's
digest.

Passes (exit 0) only when the provenance's DSSE signature verifies with the team's public key, the signed
statement names this digest as its subject, and the SBOM is the one the statement names and describes this
digest. Anything else is exit 1 naming what: a missing, unsigned or other digest's SBOM, provenance or
signature. A key file that cannot be read as a PEM public key is exit 2. With `--ecr` the registry is logged
in to with ECR's token (IMAGE names the ECR registry's host, as `push --ecr` recorded it).
"""

from __future__ import annotations

import argparse

from imagebuild.commands import add_aws_args, add_login_args, add_verb, registry_target


def register(sub) -> None:
    p = add_verb(sub, "verify", __doc__)
    p.add_argument("image", metavar="IMAGE", help="HOST[:PORT]/REPO:TAG or HOST[:PORT]/REPO@sha256:D")
    p.add_argument("--key", required=True, metavar="PUB.pem", help="the team's public key (PEM)")
    add_login_args(p)
    p.add_argument(
        "--ecr",
        action="store_true",
        help="IMAGE is in Amazon ECR: log in there with ECR's token (boto3; region from --region/env)",
    )
    add_aws_args(
        p, "AWS region of the ECR registry (default: the AWS config)", "tries per registry call (default 5)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    digest = pipeline.verify(pipeline.VerifyRequest(args.image, args.key, registry_target(args)))
    print(f"verified\t{args.image}\t{digest}")
    return 0
