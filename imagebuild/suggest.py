"""Did you mean ...?" for a mistyped name (a verb, a variant, a matrix or cluster-file key, an instance type):
one rule everywhere, so every message reads alike."""

from __future__ import annotations

import difflib
from typing import Iterable, Optional


def did_you_mean(word: str, known: Iterable[str], n: int = 1, cutoff: float = 0.6) -> Optional[str]:
    """`did you mean 'x'?` (or `'x' or 'y'` for n > 1) from the close matches of `word`; None when none is
    close (difflib's ratio, from the standard library)."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=n, cutoff=cutoff)
    if not close:
        return None
    return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"


def bare_type(instance_type: str) -> str:
    """`ml.p5.48xlarge` -> `p5.48xlarge`: SageMaker's prefix is not part of the profile names."""
    name = instance_type.strip().lower()
    return name[3:] if name.startswith("ml.") else name
