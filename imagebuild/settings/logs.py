"""Progress on stderr through one logger, so the global `-v`/`-q`/`--log-level` set how much is said.

stdout carries the results scripts read (refs, digests, tables) and is never touched by the level; errors are
printed by the CLI whatever the level. Every record goes through the redaction table first, so a debug line
can no more leak a credential than an error message can, and its control characters are shown escaped.
"""

from __future__ import annotations

import logging
import sys

from imagebuild.errors import for_terminal

LOGGER = logging.getLogger("efa_image_build")
LEVELS = ("debug", "info", "warning", "error")


class _Stderr(logging.Handler):
    """Writes to whatever sys.stderr is at the time (tests and `| tee` swap it), one redacted line each."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(for_terminal(self.format(record)) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never take the command down
            self.handleError(record)


_HANDLER = _Stderr()
_HANDLER.setFormatter(logging.Formatter("%(message)s"))
LOGGER.addHandler(_HANDLER)  # from import on: code run outside the CLI (tests, a library user) still says it
LOGGER.propagate = False
LOGGER.setLevel(logging.INFO)


def setup(level: str = "info") -> None:
    """The level of this run (`-v`: debug, `-q`: warning); called once per CLI invocation."""
    LOGGER.setLevel(getattr(logging, level.upper()))


def progress(msg: str) -> None:
    """A progress line (what is being done, what was skipped): hidden by `-q`."""
    LOGGER.info(msg)


def detail(msg: str) -> None:
    """What only `-v` shows: where a setting came from, what was looked up."""
    LOGGER.debug(msg)
