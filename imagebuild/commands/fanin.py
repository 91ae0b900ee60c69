"""`efa-image-build fan-in`: make the outputs of separate CI jobs (one variant each) one, gated as a whole.

Each job builds, tests and pushes its variants with `push --fan-out` (shared tags under TAG-ARCH) and hands
on its output folder. fan-in gates every variant with every job's evidence, then writes each shared tag: an
image index of twins pushed by different runners, or the one image. Then `efa-image-build release --summary
OUT/summary.json --checks OUT/test-report.json`. Exit 0 written, 1 refused (a gate, a tag held by another
image), 2 bad input or unreachable registry.
"""

from __future__ import annotations

import argparse

from imagebuild.commands import add_registry_args, add_verb, registry_target


def register(sub) -> None:
    p = add_verb(sub, "fan-in", __doc__)
    p.add_argument(
        "--from",
        dest="jobs",
        action="append",
        default=[],
        required=True,
        metavar="DIR",
        help="a CI job's output folder: summary.json, test-report.json, preflight/*.json (repeatable)",
    )
    p.add_argument("--out", default="build/fan-in", help="where the merged summary and reports go")
    p.add_argument("--repository-prefix", default="", help="the prefix the jobs pushed with (e.g. team/)")
    p.add_argument(
        "--require-preflight",
        action="store_true",
        help="every variant needs a pre-flight report with verdict pass among the jobs' preflight/*.json",
    )
    add_registry_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    request = pipeline.FanInRequest(
        target=registry_target(args),
        jobs=tuple(args.jobs),
        out=args.out,
        repository_prefix=args.repository_prefix,
        require_preflight=args.require_preflight,
    )
    pipeline.fan_in(request)  # refused: ChecksFailed, exit 1
    return 0
