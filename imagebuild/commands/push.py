"""`efa-image-build push`: push the built images of build/summary.json to an OCI registry or ECR, by digest.

Each pushed ref and its registry digest go back into the summary (`digest`, `pushed`), which `release` reads.
A tag that already holds another image is refused (exit 1); the same image is a no-op. The matrix's own tags
(content tags, the tag twins share) are write-once: `--force` moves only a `--tag` extra.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.commands import add_registry_args, add_sign_args, add_summary_args, add_verb, registry_target


def register(sub) -> None:
    p = add_verb(sub, "push", __doc__)
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
