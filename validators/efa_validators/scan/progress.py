"""A progress line on the terminal while a large log is parsed: a log of many GiB takes minutes, and a
silent terminal reads as a hang. Only a terminal gets it; a pipe or a CI log never does."""

from __future__ import annotations

import os
import time
from typing import Callable, Optional, TextIO

MIB = 1 << 20


class ProgressLine:
    """`(path, bytes done, size)` -> one line on `stream`, rewritten in place: shown once `after` seconds
    have passed (a quick parse shows nothing), then at most every `every` seconds. `close` clears it."""

    def __init__(
        self,
        stream: TextIO,
        after: float = 1.0,
        every: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream, self.after, self.every, self.clock = stream, after, every, clock
        self.start = clock()
        self.last = float("-inf")
        self.width = 0

    def __call__(self, path: str, done: int, size: int) -> None:
        now = self.clock()
        if now - self.start < self.after or now - self.last < self.every:
            return
        self.last = now
        took = now - self.start
        text = "parse: %s %d of %d MiB (%d %%), %.0f MiB/s" % (
            os.path.basename(path),
            done // MIB,
            size // MIB,
            100 * done // size if size else 100,
            done / MIB / took if took > 0 else 0,  # `after` 0 and a coarse clock: no rate yet
        )
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def on_terminal(stream: TextIO) -> Optional[ProgressLine]:
    """A ProgressLine where `stream` is a terminal, else None (no progress)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced by something that is not a file
        tty = False
    return ProgressLine(stream) if tty else None
