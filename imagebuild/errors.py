"""The one exception for bad user input: it carries where the problem is, so the CLI can say so and exit 2."""

from __future__ import annotations

from typing import Optional

from efa_validators.scan.redact import redact_text


def redact(text: str) -> str:
    """`scheme://user:secret@host` -> `scheme://***@host`, `TOKEN=...`, `Authorization: ...` and every
    other rule of validators/scan/redact.py (the table `validators run` uses too): no message leaks one."""
    return redact_text(text)


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
