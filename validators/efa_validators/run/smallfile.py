"""Small input files of a run (SageMaker's resource config, an mpirun hostfile) read without being hung or
flooded: regular files only, checked on a non-blocking descriptor before a byte is read, and capped.

The validators are standard library only and copied alone into images, so this is their own copy of what
imagebuild/safefile.py does for the build side (a FIFO given as a file would block open() forever; /dev/zero
would never end)."""

import os
import stat

MAX_SMALL = 1 << 20  # a resource config or a hostfile of 16384 hosts is far below


class NotAFile(ValueError):
    """The path is no regular file of at most the cap: its message names the path and what it is."""


class TooLarge(NotAFile):
    """A regular file over the cap (by its size, or by what was read): a caller may word this one apart."""


def read_small(path: str, limit: int = MAX_SMALL) -> bytes:
    """The bytes of the regular file `path` (at most `limit`); NotAFile or OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile("%s: not a regular file" % path)
        if info.st_size > limit:
            raise TooLarge("%s: file too large (%d bytes; at most %d)" % (path, info.st_size, limit))
        os.set_blocking(fd, True)
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TooLarge("%s: file too large (more than %d bytes)" % (path, limit))
    return data
