"""A tiny version parser: compat rules and the env policy compare versions numerically, never as strings.

`"1.10" > "1.9"` is False as strings; that bug shipped in real install scripts, so every comparison here goes
through `Version`. Accepted forms: `1.2.3`, `2.27.7-1`, `1.5.0-aws`, `1.13.2aws`, `12.8`, `2.26.2.post1`.
Only the leading dotted numbers take part in ordering; a suffix is kept for display.
"""

from __future__ import annotations

import re
from functools import total_ordering
from typing import Tuple

_LEAD = re.compile(r"^v?(\d+(?:\.\d+)*)(.*)$")


@total_ordering
class Version:
    """A release number compared part by part as integers (trailing zeros ignored: 1.22 == 1.22.0)."""

    __slots__ = ("text", "parts", "suffix")

    def __init__(self, text: str) -> None:
        match = _LEAD.match(str(text).strip())
        if not match:
            raise ValueError(f"not a version number: {text!r}")
        self.text = str(text)
        nums = [int(p) for p in match.group(1).split(".")]
        while len(nums) > 1 and nums[-1] == 0:
            nums.pop()
        self.parts: Tuple[int, ...] = tuple(nums)
        self.suffix = match.group(2)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Version(other)
        if not isinstance(other, Version):
            return NotImplemented
        return self.parts == other.parts

    def __lt__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Version(other)
        if not isinstance(other, Version):
            return NotImplemented
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text


def is_version(text: str) -> bool:
    return bool(_LEAD.match(str(text).strip()))


_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([0-9][0-9A-Za-z.+_-]*)\s*$")


def satisfies(version: str, spec: str) -> bool:
    """`satisfies("1.21.1", ">=1.7, <1.22")`: every comma-separated clause must hold."""
    v = Version(version)
    for clause in spec.split(","):
        match = _CLAUSE.match(clause)
        if not match:
            raise ValueError(f"bad version constraint: {clause!r}")
        if not _OPS[match.group(1)](v, Version(match.group(2))):
            return False
    return True


def check_spec(spec: str) -> None:
    """Raise ValueError unless `spec` is a well-formed constraint (used when loading the catalog)."""
    for clause in spec.split(","):
        if not _CLAUSE.match(clause):
            raise ValueError(f"bad version constraint: {clause!r}")
