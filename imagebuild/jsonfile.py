"""JSON files passed between the stages: read one object (bad input -> UserError, exit 2) and write one
atomically (a new temp file beside it, then rename: a reader never sees half a file).

Reading goes through safefile's bounded reader (regular files only, a size cap: a FIFO, a device or a folder
is refused before anything is read) and, given a pydantic model (imagebuild/building/documents.py), through
its typed check: a field of the wrong type is one UserError naming the file and the key, never a traceback."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Type

from pydantic import BaseModel, ValidationError

from imagebuild.errors import UserError
from imagebuild.safefile import MAX_INPUT_BYTES, atomic_file, read_text


def read_json(
    path: Path,
    what: str,
    missing_hint: Optional[str] = None,
    model: Optional[Type[BaseModel]] = None,
    flag: Optional[str] = None,
    limit: int = MAX_INPUT_BYTES,
) -> Dict[str, Any]:
    """The JSON object in `path`; `what` names the file in the error (`build summary not found`), `flag` the
    option that named it; with `model` the object is checked against it (the dict is returned as read)."""
    if not os.path.lexists(path):
        raise UserError(f"{what} not found", file=str(path), key=flag, hint=missing_hint)
    try:
        doc = json.loads(read_text(str(path), limit, key=flag))  # a FIFO or a device is refused, not read
    except ValueError as err:
        raise UserError(f"{what} is not JSON: {err}", file=str(path), key=flag) from None
    except RecursionError:  # arrays or objects nested deeper than Python's stack: a traceback before
        raise UserError(f"{what} is not a JSON object this tool reads (nested too deep)", file=str(path),
                        key=flag) from None  # fmt: skip
    if not isinstance(doc, dict):
        raise UserError(f"{what} must be a JSON object", file=str(path), key=flag)
    if model is not None:
        check_model(doc, model, what, str(path))
    return doc


def check_model(doc: Any, model: Type[BaseModel], what: str, file: str) -> None:
    """UserError naming `file` and the first wrong key (`variants[0].digest`) unless `doc` fits `model`."""
    try:
        model.model_validate(doc)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        value = first.get("input")
        shown = type(value).__name__ if isinstance(value, (dict, list)) else repr(value)[:60]
        raise UserError(
            f"{what}: {first['msg'].replace('Input should be', 'expected')} (got {shown})",
            file=file,
            key=dotted(first["loc"]) or None,
        ) from None


def dotted(loc: Sequence[Any]) -> str:
    """A pydantic location as a key path: `variants[0].digest`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _no_regular_file(path: Path) -> bool:
    """`path` exists and is neither a regular file nor a folder once links are followed (a device, a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_json_atomic(path: Path, doc: Any) -> None:
    """Keys sorted, indented, newline-terminated; written whole to a new temporary file beside `path`
    (safefile.atomic_file: a unique name made exclusively, never a link planted at a name known in advance),
    fsynced and renamed over `path`; on any failure the temporary file is removed and the old file stays."""
    path = Path(path)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    try:
        if _no_regular_file(path):  # /dev/null, a FIFO: written through as `>` does (a rename replaced it)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            return
        with atomic_file(path, published=True) as tmp:
            fd = os.open(tmp, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
    except OSError as err:  # full or read-only: exit 2 naming the file; the old file stays whole
        raise UserError(f"cannot write: {err.strerror}", file=str(path)) from None
