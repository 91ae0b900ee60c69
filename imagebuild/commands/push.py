"""`efa-image-build push`: push the built images of build/summary.json to an OCI registry or ECR, by digest.

Each pushed ref and its registry digest go back into the summary (`digest`, `pushed`), which `release` reads.
A tag that already holds another image is refused (exit 1); the same image is a no-op. The matrix's own tags
(content tags, the tag twins share) are write-once: `--force` moves only a `--tag` extra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from imagebuild.errors import UserError

if TYPE_CHECKING:
    from imagebuild.release.destinations import RegistryTarget


def add_registry_args(p: argparse.ArgumentParser) -> None:
    """Where images go and how to log in; shared by push and release."""
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--registry",
        metavar="HOST[/NAMESPACE]",
        help="OCI registry to push to (default: $IMAGE_REGISTRY); never committed, give it in CI settings",
    )
    where.add_argument(
        "--ecr", action="store_true", help="push to Amazon ECR (boto3; region from --region/env)"
    )
    add_login_args(p)
    p.add_argument("--region", help="AWS region for ECR/S3 (default: the AWS config)")
    p.add_argument("--endpoint-url", help="AWS endpoint override (tests point it at moto's server)")
    p.add_argument("--attempts", type=int, default=5, help="tries per registry/AWS call (default 5)")


def add_login_args(p: argparse.ArgumentParser) -> None:
    """How to log in to an OCI registry; shared by push, release and verify."""
    p.add_argument("--username", help="registry user (else REGISTRY_USERNAME, else the docker config)")
    p.add_argument(
        "--password-stdin", action="store_true", help="read the registry password from standard input"
    )
    p.add_argument("--docker-config", metavar="DIR_OR_FILE", help="docker config to read logins from")
    p.add_argument(
        "--plain-http", action="store_true", help="talk HTTP to the registry (loopback is by default)"
    )


def add_summary_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--summary", default="build/summary.json", help="build summary (default build/summary.json)"
    )
    p.add_argument(
        "--variant", action="append", default=[], metavar="NAME", help="only this variant (repeatable)"
    )


def add_sign_args(p: argparse.ArgumentParser, required: bool) -> None:
    """The key that signs the provenance and the matrix it names; shared by push and attest."""
    p.add_argument(
        "--sign-key",
        required=required,
        metavar="KEY.pem",
        help="the team's private key (PEM, unencrypted) that signs the provenance; never written anywhere",
    )
    p.add_argument(
        "--matrix", default="matrix.yaml", help="the matrix file the provenance names (default matrix.yaml)"
    )


def register(sub) -> None:
    p = sub.add_parser("push", help="push built images by digest to a registry or ECR", description=__doc__)
    add_summary_args(p)
    add_registry_args(p)
    p.add_argument(
        "--tag", action="append", default=[], help="extra tag to push (repeatable; {variant} expands)"
    )
    p.add_argument("--repository-prefix", default="", help="prefix for repository names (e.g. team/)")
    p.add_argument(
        "--force",
        action="store_true",
        help="move a --tag extra that holds another image (the matrix's tags are write-once: never moved)",
    )
    p.add_argument(
        "--fan-out",
        action="store_true",
        help="this CI job pushes part of a fanned-out matrix: each tag but the content tag goes under "
        "TAG-ARCH; `efa-image-build fan-in` then writes the shared tags (an index for twins)",
    )
    add_sign_args(p, required=False)  # with --sign-key: `efa-image-build attest` over what was just pushed
    p.set_defaults(func=run)


def read_password(args: argparse.Namespace) -> Optional[str]:
    if not args.password_stdin:
        return None
    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise UserError("--password-stdin given but standard input was empty", key="--password-stdin")
    return secret


def registry_target(args: argparse.Namespace) -> RegistryTarget:
    """The flags of `add_registry_args` as data (the password read from stdin when asked)."""
    from imagebuild.release.destinations import RegistryTarget

    return RegistryTarget(
        registry=args.registry,
        ecr=args.ecr,
        username=args.username,
        password=read_password(args),
        docker_config=args.docker_config,
        plain_http=args.plain_http,
        region=args.region,
        endpoint_url=args.endpoint_url,
        attempts=args.attempts,
    )


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    request = pipeline.PushRequest(
        target=registry_target(args),
        summary=Path(args.summary),
        variants=tuple(args.variant),
        tags=tuple(args.tag),
        repository_prefix=args.repository_prefix,
        force=args.force,
        fan_out=args.fan_out,
        sign_key=args.sign_key,
        matrix=args.matrix,
    )
    pipeline.push(request)  # a refused tag is ChecksFailed: exit 1
    return 0
