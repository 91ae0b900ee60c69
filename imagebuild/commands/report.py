"""Plot and summarise a validator report: `build.py report REPORT.json [--plot PNG] [--markdown MD]`.

The validator (inside the image, standard library only) writes JSON; what needs libraries -- the busbw
plot -- is made here on the host. Bad input is a UserError (exit 2) and nothing is written: every output
is made in memory or a temporary file first and moved into place only when all inputs were good.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any, Callable, Dict, Optional

from imagebuild.errors import UserError
from imagebuild.safefile import read_text
from validators.runreport import SCHEMA


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="plot and summarise a validator report (python -m validators parse --json)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("report", metavar="REPORT.json", help="the validator's JSON report")
    p.add_argument("--plot", metavar="PNG", help="write a busbw-against-size plot here")
    p.add_argument("--markdown", metavar="MD", help="write a Markdown summary here ('-' for stdout)")
    p.set_defaults(func=run)


def load_report(path: str) -> Dict[str, Any]:
    """The report as a dict, or a UserError naming the file, line and key."""
    text = read_text(path)  # a FIFO or a device is refused, not read forever
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"not valid JSON: {err.msg}", file=path, line=err.lineno) from None
    if not isinstance(doc, dict):
        raise UserError("expected a JSON object (a validator report)", file=path, line=1)
    schema = doc.get("schema")
    if schema is not None and schema != SCHEMA:
        raise UserError(
            f"unsupported report schema {schema!r} (expected {SCHEMA!r})", file=path, key="schema"
        )
    if "verdict" not in doc and "nccl_tests" not in doc:
        raise UserError(
            "not a validator report (neither 'verdict' nor 'nccl_tests')",
            file=path,
            key="verdict",
            hint="make one with: python -m validators parse LOG --json REPORT.json",
        )
    nt = doc.get("nccl_tests")
    if nt is not None and not isinstance(nt, dict):
        raise UserError("expected an object or null", file=path, key="nccl_tests")
    shapes = [("checks", doc.get("checks")), ("findings", doc.get("findings"))]
    if nt is not None:
        shapes.append(("nccl_tests.rows", nt.get("rows")))
    for key, value in shapes:
        if value is not None and not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
            raise UserError("expected a list of objects", file=path, key=key)
    return doc


def markdown_renderer() -> Callable[[Dict[str, Any]], str]:
    """validators.report's Markdown writer if it has one (one source of truth), else the compact one here."""
    try:
        from validators import report as writers  # type: ignore[attr-defined]
    except ImportError:
        writers = None
    for name in ("render_markdown", "markdown_text", "to_markdown", "markdown"):
        fn = getattr(writers, name, None) if writers is not None else None
        if callable(fn):
            return fn
    write = getattr(writers, "write_markdown", None) if writers is not None else None
    if callable(write):

        def via_file(report: Dict[str, Any]) -> str:
            fd, tmp = tempfile.mkstemp(suffix=".md")
            os.close(fd)
            try:
                write(report, tmp)
                with open(tmp, encoding="utf-8") as fh:
                    return fh.read()
            finally:
                os.unlink(tmp)

        return via_file
    from imagebuild.reports.markdown import render

    return render


def _write_text(path: str, text: str) -> None:
    from imagebuild.reports.plot import temp_beside

    tmp = temp_beside(path, ".md")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as err:  # full or read-only: the path, not a traceback
        raise UserError(f"cannot write: {err.strerror}", file=path, key="--markdown") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _check_dest(path: Optional[str], flag: str) -> None:
    if path and path != "-":
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise UserError(f"directory {parent} does not exist", key=flag)


def require_matplotlib() -> None:
    """`--plot` needs matplotlib (the optional `plot` extra): say how to get it before anything is read."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(
            "--plot needs matplotlib, which is not installed",
            key="--plot",
            hint="pip install 'efa-image-build[plot]' (or matplotlib); --markdown works without it",
        )


def run(args: argparse.Namespace) -> int:
    if args.plot:
        require_matplotlib()
    report = load_report(args.report)
    _check_dest(args.plot, "--plot")
    _check_dest(args.markdown, "--markdown")
    text = None
    if args.markdown or not args.plot:
        try:
            from imagebuild.reports.markdown import mark_replay

            text = mark_replay(report, markdown_renderer()(report))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            # a report that passed the shape checks but still has a wrong value somewhere inside
            raise UserError(
                f"cannot summarise this report ({type(err).__name__}: {err})", file=args.report
            ) from None
    if args.plot:
        from imagebuild.reports.plot import plot_busbw

        plot_busbw(report, args.plot, source=args.report)
        print(f"plot: {args.plot}", file=sys.stderr)
    if text is not None:
        if args.markdown and args.markdown != "-":
            _write_text(args.markdown, text)
            print(f"markdown: {args.markdown}", file=sys.stderr)
        else:
            sys.stdout.write(text)
    return 0
