"""Files in and out without harm: reading user-named files without being hung or flooded, and writing a
file whole or not at all.

Why: a path the user gives may be a FIFO (open() blocks forever), a device (/dev/zero never ends), or a
huge file (MemoryError). The file type is checked on a non-blocking descriptor before anything is read,
and reads are capped, so every such input is one UserError naming the path. A write can fail half way (a
full disk, a kill): `atomic_file` writes to a temporary name beside the file and renames it into place only
when whole, and removes it on any exception, so nothing partial is ever left under either name.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Tuple

from imagebuild.errors import UserError

MAX_INPUT_BYTES = 16 * 1024 * 1024  # a matrix, summary or report is far below; a log is not read here


def read_regular(
    path: str, limit: int = MAX_INPUT_BYTES, key: Optional[str] = None, follow: bool = True
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is a UserError naming `path`.

    `follow=False` refuses a symlink too (O_NOFOLLOW: no window between the check and the open).
    """
    return read_regular_stat(path, limit, key, follow)[0]


def read_regular_stat(
    path: str, limit: int = MAX_INPUT_BYTES, key: Optional[str] = None, follow: bool = True
) -> Tuple[bytes, os.stat_result]:
    """`read_regular`, with the stat of the descriptor read (its inode and link count, for callers that
    must know whether the same file is reachable elsewhere)."""
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
    return data, info


def within(path: str, folder: str) -> bool:
    """Whether `path`, every symlink on the way resolved, lies inside `folder` (resolved too): a `../` check
    on the text misses `checks.yaml -> /elsewhere/checks.yaml`."""
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, root]) == root


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


@contextlib.contextmanager
def atomic_file(final: Path, sync: bool = True, published: bool = False) -> Iterator[Path]:
    """A new empty temporary file beside `final` (`.tmp-<name>.*`, made exclusively under a name no one can
    guess, so a link planted beside it is never followed; mode 0600) for the block to fill; renamed over
    `final` when the block ends (after an fsync unless `sync=False`), removed on any exception.

    `published`: the mode a plain open() gives (0644 under the usual umask), for a file others read (a
    summary, a report CI publishes). The block may replace the temporary file (os.link, os.replace onto it):
    only its name is kept."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".tmp-{final.name}.", dir=final.parent)
    try:
        if published:
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if sync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
