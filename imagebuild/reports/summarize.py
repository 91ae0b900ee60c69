"""`build.py report`: a validator report (JSON) -> the busbw plot and a Markdown summary, on the host.

The validator (inside the image, standard library only) writes JSON; what needs libraries -- the busbw
plot -- is made here. Bad input is a UserError (exit 2) and nothing is written: every output is made in
memory or a temporary file first and moved into place only when all inputs were good. The Markdown is
efa_validators.report.formats.to_markdown, the writer the validator itself uses.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional

from efa_validators.report.contract import SCHEMA
from efa_validators.report.formats import to_markdown
from imagebuild.errors import UserError
from imagebuild.reports.markdown import mark_replay
from imagebuild.reports.plot import plot_busbw, temp_beside
from imagebuild.safefile import read_text


@dataclass(frozen=True)
class ReportRequest:
    report: str  # the validator's JSON report
    plot: Optional[str] = None  # PNG path
    markdown: Optional[str] = None  # path, or "-" for stdout


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
            hint="make one with: python -m efa_validators parse LOG --json REPORT.json",
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


def _write_text(path: str, text: str) -> None:
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


def summarize(req: ReportRequest) -> None:
    """Check the validator report, then write the busbw plot and/or the Markdown summary (whole files,
    only when every input was good); Markdown to stdout when neither path is given."""
    if req.plot:
        require_matplotlib()
    doc = load_report(req.report)
    _check_dest(req.plot, "--plot")
    _check_dest(req.markdown, "--markdown")
    text = None
    if req.markdown or not req.plot:
        try:
            text = mark_replay(doc, to_markdown(doc))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            # a report that passed the shape checks but still has a wrong value somewhere inside
            raise UserError(
                f"cannot summarise this report ({type(err).__name__}: {err})", file=req.report
            ) from None
    if req.plot:
        plot_busbw(doc, req.plot, source=req.report)
        print(f"plot: {req.plot}", file=sys.stderr)
    if text is not None:
        if req.markdown and req.markdown != "-":
            _write_text(req.markdown, text)
            print(f"markdown: {req.markdown}", file=sys.stderr)
        else:
            sys.stdout.write(text)
