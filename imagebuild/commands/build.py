"""`build.py build`: render the matrix (unless told not to), then build each variant not already built."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.build.artifacts import DEFAULT_CACHE

if TYPE_CHECKING:
    from imagebuild.pipeline import Selection, StageOptions

EXIT_FAILED = 1


def register(sub) -> None:
    from imagebuild.build.buildkit import BUILDERS
    from imagebuild.build.context import DEFAULT_CA
    from imagebuild.cli import add_matrix_args
    from imagebuild.commands.push import add_registry_args

    p = sub.add_parser(
        "build",
        help="build the variants' images (content-hash tags; unchanged variants are skipped)",
        description="Render (unless --no-render), fetch and verify artifacts, then build each variant "
        "whose content tag (component versions + context hash) is neither in the engine nor, with "
        "--registry/--ecr, in the target registry. BuildKit where the machine has it, else the classic "
        "builder. Writes <out>/summary.json; exit 1 if a variant failed.",
    )
    add_matrix_args(p)
    p.add_argument(
        "--builder",
        choices=BUILDERS,
        default="auto",
        help="auto (default): buildx, else the engine's BuildKit via a docker CLI < 23, else classic",
    )
    p.add_argument(
        "--cache-from",
        action="append",
        default=[],
        metavar="REF",
        help="BuildKit/classic cache source: an image ref (registry cache with buildx) or a buildx spec",
    )
    p.add_argument(
        "--cache-to",
        action="append",
        default=[],
        metavar="REF",
        help="buildx only: export the cache (an image ref means type=registry,mode=max); "
        "without it the cache is written inline into the image",
    )
    p.add_argument("--shard", metavar="I/N", help="build only shard I of N (stable by variant name)")
    add_registry_args(p)  # --registry/--ecr here: where to look for images other runners built
    p.add_argument(
        "--repository-prefix", default="", help="prefix of repository names in the registry (as push)"
    )
    p.add_argument("--out", default="build", help="rendered variants folder (default: build)")
    p.add_argument("--no-render", action="store_true", help="build what is already rendered in --out")
    p.add_argument("--jobs", "-j", type=int, default=1, help="variants built in parallel (default: 1)")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"artifact cache (default: {DEFAULT_CACHE})")
    p.add_argument("--offline", action="store_true", help="use the artifact cache only; name what is missing")
    p.add_argument("--mirror", metavar="BASE_URL", help="fetch url/git artifacts from BASE_URL/<host>/<path>")
    p.add_argument(
        "--build-ca",
        nargs="?",
        const=DEFAULT_CA,
        metavar="PATH",
        help=f"give builder stages this CA bundle (default {DEFAULT_CA}); never in the final image",
    )
    p.add_argument(
        "--build-arg", action="append", default=[], metavar="K=V", help="docker build-arg (repeatable)"
    )
    p.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    p.add_argument(
        "--force",
        action="store_true",
        help="build even when an image of this content exists (the rebuild gets its own -r<id8>-<hash12> "
        "tags: write-once tags stay where they are)",
    )
    p.add_argument("--no-cache", action="store_true", help="with --force: do not use docker's layer cache")
    add_trust_local_base(p)
    p.set_defaults(func=run)


def add_trust_local_base(p) -> None:
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


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline
    from imagebuild.commands.push import registry_target

    request = pipeline.BuildRequest(
        select=selection(args),
        stage=stage_options(args),
        builder=args.builder,
        cache_from=tuple(args.cache_from),
        cache_to=tuple(args.cache_to),
        target=registry_target(args) if (args.registry or args.ecr) else None,
        repository_prefix=args.repository_prefix,
        jobs=args.jobs,
        plain=args.plain,
        force=args.force,
        no_cache=args.no_cache,
        trust_local_base=args.trust_local_base,
    )
    results = pipeline.build(request)
    return EXIT_FAILED if any(r.status == "failed" for r in results) else 0
