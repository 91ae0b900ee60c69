"""One module per verb of `efa-image-build` (see imagebuild/cli.py); here, what the verbs share: the argument
groups more than one verb takes, each written once, and the flags read back as the data the pipeline takes.

Why one place: a group written again in each verb drifts (a help line changed in one copy, a default in
another). Why here and not in a module beside the verbs: a verb imports no other verb's module
(tests/imagebuild/test_cli_help.py), and this package is imported with every verb anyway. Heavy modules (the
builder, the release targets) are imported inside the function that needs them, so `render` and `list` stay
light.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from imagebuild.pipeline import Selection, StageOptions
    from imagebuild.release.destinations import RegistryTarget


def add_verb(sub, name: str, description: str) -> argparse.ArgumentParser:
    """Verb `name`'s parser. Its help line is the one cli.COMMANDS lists for `--help` without importing the
    verb's module, so it is written there alone."""
    from imagebuild.cli import COMMANDS

    help = next(line for verb, _module, line in COMMANDS if verb == name)
    return sub.add_parser(name, help=help, description=description)


def add_matrix_args(p: argparse.ArgumentParser) -> None:
    """The options every verb that reads a matrix takes."""
    p.add_argument("--matrix", default="matrix.yaml", help="build matrix file (default: matrix.yaml)")
    add_variant_arg(p)


def add_variant_arg(
    p: argparse.ArgumentParser, help: str = "only this variant (repeatable; default: all)"
) -> None:
    p.add_argument("--variant", action="append", default=[], metavar="NAME", help=help)


def add_summary_args(p: argparse.ArgumentParser) -> None:
    """The build summary a verb after `build` reads, and the variants of it to work on."""
    p.add_argument(
        "--summary", default="build/summary.json", help="build summary (default build/summary.json)"
    )
    add_variant_arg(p, help="only this variant (repeatable)")


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
    add_aws_args(
        p, "AWS region for ECR/S3 (default: the AWS config)", "tries per registry/AWS call (default 5)"
    )


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


def add_aws_args(p, region_help: str, attempts_help: Optional[str]) -> None:
    """--region and --endpoint-url (tests point AWS clients at moto's server), and --attempts where the verb
    retries (`attempts_help` None: it has none). `p` is a parser or an argument group."""
    p.add_argument("--region", help=region_help)
    p.add_argument("--endpoint-url", help="AWS endpoint override (tests point it at moto's server)")
    if attempts_help is not None:
        p.add_argument("--attempts", type=int, default=5, help=attempts_help)


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


def read_password(args: argparse.Namespace) -> Optional[str]:
    if not args.password_stdin:
        return None
    from imagebuild.errors import UserError

    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise UserError("--password-stdin given but standard input was empty", key="--password-stdin")
    return secret


def registry_target(args: argparse.Namespace) -> RegistryTarget:
    """The flags of `add_registry_args` (or of `add_login_args` and `add_aws_args`, as verify has them) as
    data, the password read from stdin when asked. A verb without --registry (verify: IMAGE names its
    registry) leaves it unset."""
    from imagebuild.release.destinations import RegistryTarget

    return RegistryTarget(
        registry=getattr(args, "registry", None),
        ecr=args.ecr,
        username=args.username,
        password=read_password(args),
        docker_config=args.docker_config,
        plain_http=args.plain_http,
        region=args.region,
        endpoint_url=args.endpoint_url,
        attempts=args.attempts,
    )


def add_rendered_args(p: argparse.ArgumentParser, no_render_help: str) -> None:
    """--out and --no-render: the folder `selection` renders into, or takes as rendered (build, bake)."""
    p.add_argument("--out", default="build", help="rendered variants folder (default: build)")
    p.add_argument("--no-render", action="store_true", help=no_render_help)


def add_cache_arg(p: argparse.ArgumentParser) -> None:
    """The artifact cache every verb that fetches sources reads and fills (build, bake, demo)."""
    from imagebuild.building.artifacts import DEFAULT_CACHE

    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"artifact cache (default: {DEFAULT_CACHE})")


def add_stage_args(p: argparse.ArgumentParser, build_ca_help: str, build_arg_help: str) -> None:
    """The artifact and CA flags `stage_options` reads (build, bake); the help of the last two says what
    each verb does with them."""
    from imagebuild.building.context import DEFAULT_CA

    add_cache_arg(p)
    p.add_argument("--offline", action="store_true", help="use the artifact cache only; name what is missing")
    p.add_argument("--mirror", metavar="BASE_URL", help="fetch url/git artifacts from BASE_URL/<host>/<path>")
    p.add_argument("--build-ca", nargs="?", const=DEFAULT_CA, metavar="PATH", help=build_ca_help)
    p.add_argument("--build-arg", action="append", default=[], metavar="K=V", help=build_arg_help)


def add_trust_local_base(p: argparse.ArgumentParser) -> None:
    """--trust-local-base, as `build` and `bake` both take it."""
    p.add_argument(
        "--trust-local-base",
        action="store_true",
        help="when a base's registry cannot be asked, hash the digest of the copy the engine pulled before "
        "(recorded as base_source trusted-local-digest) instead of failing the variant",
    )


def stage_options(args: argparse.Namespace) -> StageOptions:
    """The artifact and CA flags build and bake share, as data."""
    from imagebuild.pipeline import StageOptions

    return StageOptions(
        cache=Path(args.cache),
        offline=args.offline,
        mirror=args.mirror,
        build_ca=args.build_ca,
        build_args=tuple(args.build_arg),
    )


def selection(args: argparse.Namespace) -> Selection:
    """The variants build and bake work on: rendered first, unless --no-render (what is in --out)."""
    from imagebuild.pipeline import RenderOptions, Selection

    out, names = Path(args.out), tuple(args.variant)
    source = None if args.no_render else RenderOptions(matrix=args.matrix, variants=names, out=out)
    return Selection(render=source, out=out, variants=names, shard=args.shard)
