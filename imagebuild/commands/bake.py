"""`efa-image-build bake`: write a docker-bake JSON file of the rendered variants, for `docker buildx bake`.

Each target is a variant's staged context (artifacts fetched and verified, as `build` does) with its
Dockerfile, the same content-hash tags `build` gives (the base's identity asked of the engine the same
way), the base pinned by digest where it came from a registry, platforms, build args and cache settings.
Hand the file to `docker buildx bake -f FILE` on a remote builder; run it from this directory (contexts are
relative to it). The file is checked against bake's schema, and with `docker buildx bake --print` where
buildx is installed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.commands import (
    add_matrix_args,
    add_rendered_args,
    add_stage_args,
    add_trust_local_base,
    add_verb,
    selection,
    stage_options,
)


def register(sub) -> None:
    p = add_verb(
        sub,
        "bake",
        __doc__.splitlines()[0] + " Contexts are staged and hashed as `build` does, so the "
        "tags and labels are the ones `build` would give.",
    )
    add_matrix_args(p)
    add_rendered_args(p, no_render_help="use what is already rendered in --out")
    p.add_argument("--file", metavar="PATH", help="bake file to write (default: <out>/docker-bake.json)")
    p.add_argument("--shard", metavar="I/N", help="only shard I of N (stable by variant name)")
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        help="target platform (repeatable; default: the variant's `platform`, linux/amd64 unless set)",
    )
    p.add_argument("--cache-from", action="append", default=[], metavar="REF", help="cache source")
    p.add_argument(
        "--cache-to", action="append", default=[], metavar="REF", help="cache export (default: inline)"
    )
    add_stage_args(p, build_ca_help="CA for builder stages", build_arg_help="build arg (repeatable)")
    add_trust_local_base(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    request = pipeline.BakeRequest(
        select=selection(args),
        stage=stage_options(args),
        file=Path(args.file) if args.file else None,
        platforms=tuple(args.platform),
        cache_from=tuple(args.cache_from),
        cache_to=tuple(args.cache_to),
        trust_local_base=args.trust_local_base,
    )
    pipeline.bake(request)
    return 0
