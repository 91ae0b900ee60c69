"""`efa-image-build demo`: the main job on the embedded default, end to end on a machine with nothing but
docker (imagebuild/demo.py says how)."""

from __future__ import annotations

import argparse

from imagebuild.commands import add_cache_arg, add_matrix_args, add_verb


def register(sub) -> None:
    p = add_verb(sub, "demo", __doc__.splitlines()[0])
    add_matrix_args(p)
    p.set_defaults(matrix="matrix.local.yaml")
    p.add_argument("--out", default="build", help="output folder (default: build)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="variants built in parallel")
    p.add_argument(
        "--mirror",
        metavar="BASE_URL",
        help="where git/url sources not in the cache come from first: BASE_URL/<host>/<path> (a folder too)",
    )
    p.add_argument(
        "--no-upstream",
        action="store_true",
        help="never fetch a source from its upstream URL (only the cache and --mirror)",
    )
    add_cache_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from imagebuild.demo import DemoRequest, demo

    outcome = demo(
        DemoRequest(
            matrix=args.matrix,
            variants=tuple(args.variant),
            out=Path(args.out),
            jobs=args.jobs,
            mirror=args.mirror,
            upstream=not args.no_upstream,
            cache=Path(args.cache),
        )
    )
    return 0 if outcome.checks_passed and outcome.replay_passed else 1
