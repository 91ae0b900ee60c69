"""build.py verb module (placeholder until its issue lands: registers nothing yet)."""

from __future__ import annotations


def register(sub) -> None:  # noqa: ARG001 - filled in by the issue that owns this verb
    return None
