"""JSON files passed between the stages: read one object (bad input -> UserError, exit 2) and write one
atomically (temp file beside it, then rename: a reader never sees half a file)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

from imagebuild.errors import UserError
from imagebuild.safefile import read_text


def read_json(path: Path, what: str, missing_hint: Optional[str] = None) -> Dict[str, Any]:
    """The JSON object in `path`; `what` names the file in the error (`build summary not found`)."""
    if not os.path.lexists(path):
        raise UserError(f"{what} not found", file=str(path), hint=missing_hint)
    try:
        doc = json.loads(read_text(str(path)))  # a FIFO or a device is refused, not read forever
    except ValueError as err:
        raise UserError(f"{what} is not JSON: {err}", file=str(path)) from None
    if not isinstance(doc, dict):
        raise UserError(f"{what} must be a JSON object", file=str(path))
    return doc


def write_json_atomic(path: Path, doc: Any) -> None:
    """Keys sorted, indented, newline-terminated; written to `.tmp-<name>` and renamed over `path`."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as err:  # full or read-only: exit 2 naming the file; the old file stays whole
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"cannot write: {err.strerror}", file=str(path)) from None
