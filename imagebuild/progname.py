"""The program's name, as a user types it: every usage line, --help and hint that tells the user what to run
next says `efa-image-build VERB`. A team installs the wheel and has that console script, never this checkout's
`build.py` (the same program: docs/build.md), so a hint naming `build.py` names a command the user lacks.
A leaf module: the stages that raise those hints import it without importing the CLI."""

from __future__ import annotations

PROG = "efa-image-build"


def command(*words: str) -> str:
    """`efa-image-build WORDS...`: the command line a hint tells the user to run."""
    return " ".join((PROG,) + words)
