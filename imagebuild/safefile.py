"""Reading user-named files without being hung or flooded.

Why: a path the user gives may be a FIFO (open() blocks forever), a device (/dev/zero never ends), or a
huge file (MemoryError). The file type is checked on a non-blocking descriptor before anything is read,
and reads are capped, so every such input is one UserError naming the path.
"""

from __future__ import annotations

import os
import stat
from typing import Optional

from imagebuild.errors import UserError

MAX_INPUT_BYTES = 16 * 1024 * 1024  # a matrix, summary or report is far below; a log is not read here


def read_regular(
    path: str, limit: int = MAX_INPUT_BYTES, key: Optional[str] = None, follow: bool = True
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is a UserError naming `path`.

    `follow=False` refuses a symlink too (O_NOFOLLOW: no window between the check and the open).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
        if os.path.islink(path):
            raise UserError("a symlink (only regular files are read here)", file=path, key=key)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise UserError(f"cannot read file: {err.strerror}", file=path, key=key) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"not a regular file ({kind_of(info.st_mode)})", file=path, key=key)
        if info.st_size > limit:
            raise UserError(f"file too large ({info.st_size} bytes; at most {limit})", file=path, key=key)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as err:
        raise UserError(f"cannot read file: {err.strerror}", file=path, key=key) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while we read it
        raise UserError(f"file too large (more than {limit} bytes)", file=path, key=key)
    return data


def read_text(path: str, limit: int = MAX_INPUT_BYTES, key: Optional[str] = None) -> str:
    data = read_regular(path, limit, key)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"not UTF-8 text (byte {err.start})", file=path, key=key) from None


def kind_of(mode: int) -> str:
    """A file type in words, for messages."""
    for test, word in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return word
    return "a regular file" if stat.S_ISREG(mode) else "not a file"
