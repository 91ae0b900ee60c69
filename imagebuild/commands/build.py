"""`build.py build`: render the matrix (unless told not to), then build each variant not already built."""

from __future__ import annotations

import argparse

from imagebuild.commands import (
    add_matrix_args,
    add_registry_args,
    add_rendered_args,
    add_stage_args,
    add_trust_local_base,
    add_verb,
    registry_target,
    selection,
    stage_options,
)

EXIT_FAILED = 1


def register(sub) -> None:
    from imagebuild.building.buildkit import BUILDERS
    from imagebuild.building.context import DEFAULT_CA

    p = add_verb(
        sub,
        "build",
        "Render (unless --no-render), fetch and verify artifacts, then build each variant "
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
    add_rendered_args(p, no_render_help="build what is already rendered in --out")
    p.add_argument("--jobs", "-j", type=int, default=1, help="variants built in parallel (default: 1)")
    add_stage_args(
        p,
        build_ca_help=f"give builder stages this CA bundle (default {DEFAULT_CA}); never in the final image",
        build_arg_help="docker build-arg (repeatable)",
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


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

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
