"""The project config: `[tool.efa-image-build]` in the pyproject.toml of the current folder or a parent (up to
the git root), so a team's repository names its matrix, registry, artifact cache and output folder once
instead of in every command. Flags win over it, it wins over the built-in defaults; `$IMAGE_REGISTRY` (a CI
setting) wins over its `registry`.

    [tool.efa-image-build]
    matrix = "images/matrix.yaml"   # paths are relative to the pyproject.toml's folder
    registry = "registry.example.com:5000/ml"
    cache = ".cache/artifacts"
    out = "build"
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from imagebuild.errors import UserError, did_you_mean

TABLE = "efa-image-build"
PATH_KEYS = ("matrix", "cache", "out")  # resolved against the folder of the pyproject.toml
KEYS = PATH_KEYS + ("registry",)
# HOST[:PORT][/NAMESPACE]: no scheme, no user:password@ (a login never goes into a committed file)
_REGISTRY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?(?:/[a-z0-9._-]+)*")


def find(start: Path) -> Optional[Path]:
    """The nearest pyproject.toml with a `[tool.efa-image-build]` table, from `start` up to the folder holding
    `.git` (a repository's config does not leak into the repositories inside it), else up to the root."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _has_table(candidate):
            return candidate
        if (folder / ".git").exists():
            return None
    return None


def _has_table(path: Path) -> bool:
    """A cheap look before parsing: a pyproject.toml without the table is not ours to judge."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r'^\s*\[\s*tool\s*\.\s*"?efa-image-build"?\s*\]', text, re.M) is not None


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli  # the same parser, before it joined the standard library (pyproject: python < 3.11)

    return tomli


def _line_of(text: str, key: str) -> Optional[int]:
    """The line of `key = ...` inside the table (tomllib gives no positions)."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        head = re.match(r"\s*\[([^\]]*)\]", line)
        if head:
            inside = re.sub(r'[\s"]', "", head.group(1)) == "tool." + TABLE
            continue
        if inside and re.match(rf'\s*"?{re.escape(key)}"?\s*=', line):
            return n
    return None


def trusted(path: Path, uid: Optional[int] = None) -> Optional[str]:
    """None when `path` may steer this run; else why not. The file is found by walking up from the working
    folder, so outside a repository it may be one another user left in a parent (/tmp/pyproject.toml) that
    would pick the registry a push goes to: like git's safe.directory, only a file owned by this user (or
    root) that no one else can write is read."""
    st = path.stat()
    uid = os.getuid() if uid is None else uid
    if st.st_uid not in (uid, 0):
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def load(path: Path) -> Dict[str, str]:
    """The table, checked: bad TOML, an unknown key or a bad value is exit 2 naming the file, line and key."""
    file = str(path)
    why = trusted(path)
    if why is not None:
        raise UserError(
            f"not read: {why}",
            file=file,
            key=f"tool.{TABLE}",
            hint="chown/chmod go-w it, or run from a folder outside it and give the flags",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read: {err}", file=file) from None
    toml = _toml()
    try:
        doc = toml.loads(text)
    except toml.TOMLDecodeError as err:
        m = re.search(r"line (\d+)", str(err))
        raise UserError(f"not valid TOML: {err}", file=file, line=int(m.group(1)) if m else None) from None
    table = (doc.get("tool") or {}).get(TABLE)
    if table is None:
        return {}
    key_of = f"tool.{TABLE}"
    if not isinstance(table, dict):
        raise UserError("must be a table", file=file, key=key_of)
    out: Dict[str, str] = {}
    for key, value in table.items():
        line = _line_of(text, key)
        if key not in KEYS:
            raise UserError(
                f"unknown key '{key}'",
                file=file,
                line=line,
                key=f"{key_of}.{key}",
                hint=did_you_mean(key, KEYS) or "known: " + ", ".join(KEYS),
            )
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            raise UserError(
                f"must be a non-empty string, got {value!r}", file=file, line=line, key=f"{key_of}.{key}"
            )
        if key == "registry" and not _REGISTRY.fullmatch(value):
            raise UserError(
                f"not a registry: {value!r}",
                file=file,
                line=line,
                key=f"{key_of}.{key}",
                hint="HOST[:PORT][/NAMESPACE], no scheme and no login (docker login or "
                "REGISTRY_USERNAME/PASSWORD give those)",
            )
        out[key] = str((path.parent / value).resolve()) if key in PATH_KEYS else value
    return out


def settings(start: Path, environ: Dict[str, str]) -> Tuple[Optional[Path], Dict[str, str]]:
    """(the pyproject.toml used or None, its values); `$IMAGE_REGISTRY` drops the file's registry."""
    path = find(start)
    if path is None:
        return None, {}
    values = load(path)
    if environ.get("IMAGE_REGISTRY"):
        values.pop("registry", None)
    return path, values


def describe(path: Optional[Path], values: Dict[str, str], used: List[str]) -> str:
    """One line for `-v`: which file gave which settings to this command."""
    if path is None:
        return "config: no pyproject.toml with [tool.efa-image-build] here or above"
    given = ", ".join(f"{k} = {values[k]}" for k in used) or "nothing this command takes"
    return f"config: {path} [tool.{TABLE}]: {given}"
