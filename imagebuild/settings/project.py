"""The project config: `[tool.efa-image-build]` in the pyproject.toml of the current folder or a parent (up to
the git root, the home directory or a mount point, whichever comes first: `find`), so a team's repository
names its matrix, registry, artifact cache and output folder once instead of in every command. Flags win
over it, it wins over the built-in defaults; `$IMAGE_REGISTRY` (a CI setting) wins over its `registry`.

    [tool.efa-image-build]
    matrix = "images/matrix.yaml"   # paths are relative to the pyproject.toml's folder
    registry = "registry.example.com:5000/ml"
    cache = ".cache/artifacts"
    out = "build"
"""

from __future__ import annotations

import functools
import os
import re
import stat
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from efa_validators.report.printable import printable
from efa_validators.run.smallfile import NotAFile, TooLarge, read_small
from imagebuild.errors import UserError, did_you_mean

TABLE = "efa-image-build"
PATH_KEYS = ("matrix", "cache", "out")  # resolved against the folder of the pyproject.toml
KEYS = PATH_KEYS + ("registry",)
KEY_MAX = 256  # a key is looked for in a line's first characters (each `=` there is tried: bounded work)
# HOST[:PORT][/NAMESPACE]: no scheme, no user:password@ (a login never goes into a committed file)
_REGISTRY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?(?:/[a-z0-9._-]+)*")


# A pyproject.toml is a few kilobytes; a candidate bigger than this is never read (its size is checked first):
# a parent folder may hold anyone's file (/tmp/pyproject.toml, 2 GB sparse, cost every run under /tmp 4 GB).
MAX_BYTES = 1 << 20


def find(start: Path, home: Optional[Path] = None) -> Optional[Path]:
    """The nearest pyproject.toml with a `[tool.efa-image-build]` table, from `start` up to the first boundary
    a user would expect, that folder included: the folder holding `.git` (a repository's config does not leak
    into the repositories inside it), the home directory (`home`, default `~`: a config above it is not
    this user's project), or a filesystem's mount point (a parent on another filesystem is another tree).

    Each candidate is judged by its metadata first (a regular file, its owner and mode: `trusted`, its size:
    MAX_BYTES) and read, at most MAX_BYTES, only then; one over the cap or untrusted that names the table is
    exit 2 naming it (`UserError`), never read whole."""
    home = Path(os.path.expanduser("~")) if home is None else home
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if _has_table(candidate):
            return candidate
        if (folder / ".git").exists() or _same(folder, home) or _mount_point(folder):
            return None
    return None


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _mount_point(folder: Path) -> bool:
    """`folder` is where a filesystem is mounted (its parent's device differs), or unreadable: stop there."""
    try:
        return folder.stat().st_dev != folder.parent.stat().st_dev
    except OSError:
        return True


def _bounded_bytes(path: Path) -> Optional[bytes]:
    """The file's bytes when it is a regular file of at most MAX_BYTES, None when it is not a regular file
    or cannot be read; UserError when it is bigger. Its metadata is judged before any byte is read: the
    type, then the owner and mode (`trusted`, named in the error), then the size."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        why = trusted(path)
    except OSError:
        return None
    if st.st_size > MAX_BYTES:
        raise UserError(
            f"not read: {st.st_size} bytes, over the {MAX_BYTES} a project config may be"
            + (f"; and {why}" if why else ""),
            file=str(path),
            hint="a pyproject.toml in this folder or a parent is looked at for [tool.efa-image-build]: "
            "remove or move this one, or run from a folder outside it",
        )
    # the descriptor judged again (read_small): the path may name another file by now (a FIFO blocks open()),
    # and the file may have grown since its stat
    try:
        return read_small(str(path), MAX_BYTES)
    except TooLarge:
        raise UserError(
            f"not read: over the {MAX_BYTES} bytes a project config may be", file=str(path)
        ) from None
    except (NotAFile, OSError):
        return None


def _has_table(path: Path) -> bool:
    """Whether the file configures this tool, read by the TOML parser, so every form TOML allows counts the
    same (`[tool.efa-image-build]`, `[tool."efa-image-build"]`, dotted `tool.efa-image-build.x = ...`, an
    inline table, `[[tool.efa-image-build]]` too: `load` refuses that one by name). A pyproject.toml without
    the table is not ours to judge; one that is not valid TOML is, where it names the table (`load` says
    where it breaks). Read bounded (`_bounded_bytes`)."""
    data = _bounded_bytes(path)
    if data is None:
        return False
    text = data.decode("utf-8", errors="replace")
    toml = _toml()
    try:
        return _names_table(toml.loads(text).get("tool"))
    except toml.TOMLDecodeError:
        return TABLE in text


def _names_table(tool: object) -> bool:
    """`tool` (the document's) holds our table: as a table, or inside an array of tables (`[[tool]]`, which
    `load` refuses by name)."""
    if isinstance(tool, list):
        return any(isinstance(t, dict) and TABLE in t for t in tool)
    return isinstance(tool, dict) and TABLE in tool


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli  # the same parser, before it joined the standard library (pyproject: python < 3.11)

    return tomli


def _chain(doc: object) -> Tuple[str, ...]:
    """The key path of a one-key-per-level document (what a header or a `key = 0` line parses to)."""
    path: List[str] = []
    while True:
        if isinstance(doc, list) and len(doc) == 1:  # [[array.of.tables]]
            doc = doc[0]
        if not isinstance(doc, dict) or len(doc) != 1:
            return tuple(path)
        key, doc = next(iter(doc.items()))
        path.append(key)


@functools.lru_cache(maxsize=4)
def _key_paths(text: str) -> List[Tuple[Tuple[str, ...], int]]:
    """(full key path, line) of each table header and `key = ...` line, in file order. The TOML parser reads
    each header, and each key up to an `=`, so quoted, dotted and escaped keys name what the parser makes of
    them (tomllib gives no positions). A line inside a multi-line string or array may be misread: a line
    number is as near as can be found."""
    toml = _toml()
    table: Tuple[str, ...] = ()
    out: List[Tuple[Tuple[str, ...], int]] = []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            try:
                table = _chain(toml.loads(stripped))
                out.append((table, n))
                continue
            except toml.TOMLDecodeError:
                pass
        for i, char in enumerate(stripped[:KEY_MAX]):
            if char == "=":
                try:
                    out.append((table + _chain(toml.loads(stripped[:i] + "= 0")), n))
                    break
                except toml.TOMLDecodeError:
                    continue
    return out


def _line_of(text: str, path: Tuple[str, ...]) -> Optional[int]:
    """The line that defines `path`: its own header or `key = ...` line, else the first line of a key under
    it (dotted keys only), else the nearest table above it (an inline table's line)."""
    lines = _key_paths(text)
    for where, n in lines:
        if where == path:
            return n
    for where, n in lines:
        if where[: len(path)] == path:
            return n
    above = [(len(where), n) for where, n in lines if where and path[: len(where)] == where]
    return max(above)[1] if above else None


def trusted(path: Path, uid: Optional[int] = None) -> Optional[str]:
    """None when `path` may steer this run; else why not. The file is found by walking up from the working
    folder, so outside a repository it may be one another user left in a parent (/tmp/pyproject.toml) that
    would pick the registry a push goes to: like git's safe.directory, only a file owned by this user (or
    root) that no one else can write is read."""
    st = path.stat()
    uid = os.getuid() if uid is None else uid
    owners = {uid, 0}
    if uid == 0 and os.environ.get("SUDO_UID", "").isdigit():
        # root through sudo acts for the user who ran sudo (CI's `sudo efa-image-build base` in the runner's
        # checkout): that user's own file steers this run as it would theirs
        owners.add(int(os.environ["SUDO_UID"]))
    if st.st_uid not in owners:
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def load(path: Path) -> Dict[str, str]:
    """The table, checked: bad TOML, an unknown key or a bad value is exit 2 naming the file, line and key."""
    file = str(path)
    try:
        why = trusted(path)
    except OSError as err:
        raise UserError(f"cannot read: {err.strerror or err}", file=file) from None
    if why is not None:
        raise UserError(
            f"not read: {why}",
            file=file,
            key=f"tool.{TABLE}",
            hint="chown/chmod go-w it, or run from a folder outside it and give the flags",
        )
    data = _bounded_bytes(path)
    if data is None:
        raise UserError("cannot read: not a readable regular file", file=file)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"cannot read: {err}", file=file) from None
    toml = _toml()
    try:
        doc = toml.loads(text)
    except toml.TOMLDecodeError as err:
        m = re.search(r"line (\d+)", str(err))
        raise UserError(f"not valid TOML: {err}", file=file, line=int(m.group(1)) if m else None) from None
    tool = doc.get("tool")
    if not _names_table(tool):
        return {}
    key_of = f"tool.{TABLE}"
    if not isinstance(tool, dict):
        raise UserError(
            "is an array of tables ([[tool]]): `tool` is one table",
            file=file,
            line=_line_of(text, ("tool",)),
            key="tool",
            hint="write [tool.efa-image-build]",
        )
    table = tool[TABLE]
    if isinstance(table, list):
        raise UserError(
            "is an array of tables ([[tool.efa-image-build]]): the settings are one table",
            file=file,
            line=_line_of(text, ("tool", TABLE)),
            key=key_of,
            hint="write [tool.efa-image-build] (one pair of brackets), once",
        )
    if not isinstance(table, dict):
        raise UserError(
            f"must be a table, got {type(table).__name__}",
            file=file,
            line=_line_of(text, ("tool", TABLE)),
            key=key_of,
        )
    out: Dict[str, str] = {}
    for key, value in table.items():
        line = _line_of(text, ("tool", TABLE, key))
        if key not in KEYS:
            shown = printable(key)  # a quoted key may hold a newline or an ESC: named escaped
            raise UserError(
                f"unknown key '{shown}'",
                file=file,
                line=line,
                key=f"{key_of}.{shown}",
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
