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

from imagebuild.build.artifacts import DEFAULT_CACHE


def register(sub) -> None:
    from imagebuild.build.context import DEFAULT_CA
    from imagebuild.cli import add_matrix_args
    from imagebuild.commands.build import add_trust_local_base

    p = sub.add_parser(
        "bake",
        help="write a docker-bake JSON file of the rendered variants (for buildx bake on remote builders)",
        description=__doc__.splitlines()[0] + " Contexts are staged and hashed as `build` does, so the "
        "tags and labels are the ones `build` would give.",
    )
    add_matrix_args(p)
    p.add_argument("--out", default="build", help="rendered variants folder (default: build)")
    p.add_argument("--no-render", action="store_true", help="use what is already rendered in --out")
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
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"artifact cache (default: {DEFAULT_CACHE})")
    p.add_argument("--offline", action="store_true", help="use the artifact cache only; name what is missing")
    p.add_argument("--mirror", metavar="BASE_URL", help="fetch url/git artifacts from BASE_URL/<host>/<path>")
    p.add_argument("--build-ca", nargs="?", const=DEFAULT_CA, metavar="PATH", help="CA for builder stages")
    p.add_argument("--build-arg", action="append", default=[], metavar="K=V", help="build arg (repeatable)")
    add_trust_local_base(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline
    from imagebuild.commands.build import selection, stage_options

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
