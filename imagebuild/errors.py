"""The one exception for bad user input: it carries where the problem is, so the CLI can say so and exit 2."""

from __future__ import annotations

import difflib
from typing import Iterable, Optional

from efa_validators.report.printable import printable
from efa_validators.scan.redact import redact_text

# The program's name, as a user types it: every usage line, --help and hint that says what to run next names
# `efa-image-build VERB`. A team installs the wheel and has that console script, never this checkout's
# `build.py` (the same program: docs/build.md), so a hint naming `build.py` names a command the user lacks.
PROG = "efa-image-build"


def command(*words: str) -> str:
    """`efa-image-build WORDS...`: the command line a hint tells the user to run."""
    return " ".join((PROG,) + words)


def redact(text: str) -> str:
    """`scheme://user:secret@host` -> `scheme://***@host`, `TOKEN=...`, `Authorization: ...` and every
    other rule of efa_validators/scan/redact.py (the table `validators run` uses too): no message leaks
    one."""
    return redact_text(text)


def for_terminal(text: str) -> str:
    """A message as stderr gets it: redacted, and each line's control characters escaped (a registry's or an
    AWS endpoint's own text is quoted in refusals: its ESC sequences must not reach the terminal)."""
    return "\n".join(printable(line) for line in redact(text).split("\n"))


class UserError(Exception):
    """Bad input from the user (a file, a flag, an environment). Never a bug in this tool.

    `file`, `line` and `key` point at the offending place; any of them may be unknown (None).
    The CLI prints `str(err)` and exits 2; nothing may have been written before it is raised.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        file: Optional[str] = None,
        line: Optional[int] = None,
        key: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        self.hint = hint

    def __str__(self) -> str:
        # each part is redacted alone: joined, `/x/private_key: key '--key'` would read as an assignment
        where = ""
        if self.file:
            where = redact(self.file) + (f":{self.line}" if self.line else "")
        parts = [p for p in (where, f"key '{redact(self.key)}'" if self.key else "") if p]
        head = ": ".join(parts)
        text = f"{head}: {redact(self.message)}" if head else redact(self.message)
        if self.hint:
            text += f"\n  hint: {redact(self.hint)}"
        return text


class ChecksFailed(Exception):
    """Checks ran and some failed: exit 1 (not a user error, not a crash)."""

    exit_code = 1


def did_you_mean(word: str, known: Iterable[str], n: int = 1, cutoff: float = 0.6) -> Optional[str]:
    """`did you mean 'x'?` (`'x' or 'y'` for n > 1), the hint for a mistyped name (a verb, a variant, a
    matrix or cluster-file key, an instance type): one rule everywhere; None when nothing is close."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=n, cutoff=cutoff)
    if not close:
        return None
    return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
