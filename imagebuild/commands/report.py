"""Plot and summarise a validator report: `efa-image-build report REPORT.json [--plot PNG] [--markdown MD]`.

The validator (inside the image, standard library only) writes JSON; what needs libraries -- the busbw
plot -- is made here on the host. Bad input is a UserError (exit 2) and nothing is written: every output
is made in memory or a temporary file first and moved into place only when all inputs were good.
"""

from __future__ import annotations

import argparse

from imagebuild.commands import add_verb


def register(sub) -> None:
    p = add_verb(sub, "report", __doc__.splitlines()[0])
    p.add_argument("report", metavar="REPORT.json", help="the validator's JSON report")
    p.add_argument("--plot", metavar="PNG", help="write a busbw-against-size plot here")
    p.add_argument("--markdown", metavar="MD", help="write a Markdown summary here ('-' for stdout)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.reports.summarize import ReportRequest, summarize

    summarize(ReportRequest(report=args.report, plot=args.plot, markdown=args.markdown))
    return 0
