"""Substring search over a chunk, through the C library's memmem when it can be had.

Why: the line scanner makes one pass per needle, and CPython's `bytes.find` runs at about
2 GB/s for the 3-10 byte needles it is given; glibc's memmem runs the same passes two to
five times faster (bench/RESULTS-parse.md). ctypes is standard library, so this stays
inside the rule for validators/; where there is no memmem (no ctypes, another libc, or
VALIDATORS_MEMMEM=0) `bytes.find` gives the same answers. ctypes also releases the GIL
around the call, so parallel scanners do not queue behind each other.
"""

import os
from typing import Callable

Finder = Callable[[bytes, int, int], int]  # (needle, start, end) -> index or -1


def _load():
    if os.environ.get("VALIDATORS_MEMMEM", "1") == "0":
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None).memmem
    except (ImportError, OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
    return ctypes, fn


_LIB = _load()


def available() -> bool:
    return _LIB is not None


def finder(body: bytes) -> Finder:
    """A `find(needle, start, end)` over `body` that agrees with `body.find` everywhere.

    One-byte needles stay with `bytes.find` (memchr already). `body` must stay alive and
    unchanged while the finder is used (it points into the bytes object's own buffer).
    """
    lib = _LIB
    if lib is None:
        return body.find
    ctypes, memmem = lib
    base = ctypes.cast(body, ctypes.c_void_p).value
    if base is None:  # pragma: no cover - an empty bytes object has a buffer in CPython
        return body.find
    bfind = body.find

    def find(needle: bytes, start: int, end: int) -> int:
        m = len(needle)
        if m < 2 or end - start < m:
            return bfind(needle, start, end)
        r = memmem(base + start, end - start, needle, m)
        return -1 if r is None else r - base

    return find
