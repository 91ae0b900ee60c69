"""`build.py demo`: the main job on the embedded default, end to end on a machine with nothing but docker
(imagebuild/demo.py says how)."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    from imagebuild.cli import add_matrix_args

    p = sub.add_parser(
        "demo",
        help="the main job on the embedded default: base, render, build, check, validate (replayed)",
        description=__doc__.splitlines()[0],
    )
    add_matrix_args(p)
    p.set_defaults(matrix="matrix.local.yaml")
    p.add_argument("--out", default="build", help="output folder (default: build)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="variants built in parallel")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from imagebuild.demo import DemoRequest, demo

    outcome = demo(
        DemoRequest(matrix=args.matrix, variants=tuple(args.variant), out=Path(args.out), jobs=args.jobs)
    )
    return 0 if outcome.checks_passed and outcome.replay_passed else 1
