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

from imagebuild.commands.push import add_login_args, read_password


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check an image's signed provenance and SBOM against the team's public key",
        description=__doc__,
    )
    p.add_argument("image", metavar="IMAGE", help="HOST[:PORT]/REPO:TAG or HOST[:PORT]/REPO@sha256:D")
    p.add_argument("--key", required=True, metavar="PUB.pem", help="the team's public key (PEM)")
    add_login_args(p)
    p.add_argument(
        "--ecr",
        action="store_true",
        help="IMAGE is in Amazon ECR: log in there with ECR's token (boto3; region from --region/env)",
    )
    p.add_argument("--region", help="AWS region of the ECR registry (default: the AWS config)")
    p.add_argument("--endpoint-url", help="AWS endpoint override (tests point it at moto's server)")
    p.add_argument("--attempts", type=int, default=5, help="tries per registry call (default 5)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline
    from imagebuild.release.destinations import RegistryTarget

    target = RegistryTarget(
        username=args.username,
        password=read_password(args),
        docker_config=args.docker_config,
        plain_http=args.plain_http,
        ecr=args.ecr,
        region=args.region,
        endpoint_url=args.endpoint_url,
        attempts=args.attempts,
    )
    digest = pipeline.verify(pipeline.VerifyRequest(args.image, args.key, target))
    print(f"verified\t{args.image}\t{digest}")
    return 0
