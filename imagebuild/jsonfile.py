"""JSON files passed between the stages: read one object (bad input -> UserError, exit 2) and write one
atomically (temp file beside it, then rename: a reader never sees half a file)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

from imagebuild.errors import UserError


def read_json(path: Path, what: str, missing_hint: Optional[str] = None) -> Dict[str, Any]:
    """The JSON object in `path`; `what` names the file in the error (`build summary not found`)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{what} not found", file=str(path), hint=missing_hint) from None
    except ValueError as err:
        raise UserError(f"{what} is not JSON: {err}", file=str(path)) from None
    if not isinstance(doc, dict):
        raise UserError(f"{what} must be a JSON object", file=str(path))
    return doc


def write_json_atomic(path: Path, doc: Any) -> None:
    """Keys sorted, indented, newline-terminated; written to `.tmp-<name>` and renamed over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
