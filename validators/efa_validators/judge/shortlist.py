"""Lists said in one short line, at any length: a finding about 8192 ranks stays readable."""

from __future__ import annotations

from typing import Iterable, List, Sequence


def few(items: Sequence[str], cap: int = 4) -> str:
    """`a, b, c, d and 7 more`."""
    return ", ".join(items[:cap]) + (" and %d more" % (len(items) - cap) if len(items) > cap else "")


def ranges(numbers: Iterable[int], cap: int = 8) -> str:
    """`0-3, 8, 10-12`: sorted runs, at most `cap` of them, then how many numbers are left out."""
    runs: List[List[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = ", ".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in runs[:cap])
    rest = sum(b - a + 1 for a, b in runs[cap:])
    return text + (" and %d more" % rest if rest else "")
