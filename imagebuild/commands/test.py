"""`build.py test`: static checks of built images (testinfra in a container), JSON + JUnit reports."""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.commands import add_variant_arg, add_verb


def register(sub) -> None:
    p = add_verb(
        sub,
        "test",
        "Check the images of the built variants (from <out>/summary.json), or any image "
        "this tool built (--image REF: the lock is read from its label). "
        "Writes <out>/test-report.json and JUnit XML.",
    )
    # no --matrix: what was built (and with which lock) is in the summary, not in a matrix file
    add_variant_arg(p, help="only this built variant (repeatable; default: all in the summary)")
    p.add_argument(
        "--image", action="append", default=[], metavar="REF", help="check this image (repeatable)"
    )
    p.add_argument(
        "--trust-image-checks",
        action="store_true",
        help="with --image: run the team checks (custom:) its own lock label names; without it they are "
        "reported unknown, never run (an image can name any command there)",
    )
    p.add_argument("--out", default="build", help="rendered/built variants folder (default: build)")
    p.add_argument("--json", metavar="FILE", help="JSON report (default: <out>/test-report.json)")
    p.add_argument("--junit", metavar="FILE", help="JUnit XML (default: <out>/test-report.xml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    request = pipeline.CheckRequest(
        out=Path(args.out),
        variants=tuple(args.variant),
        images=tuple(args.image),
        json_path=Path(args.json) if args.json else None,
        junit_path=Path(args.junit) if args.junit else None,
        trust_image_checks=args.trust_image_checks,
    )
    reports = pipeline.check(request)
    return 0 if reports and all(r.passed for r in reports) else 1
