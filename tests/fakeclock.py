"""A clock for deadline and rate arithmetic, shared by the watchdog and progress tests."""

from __future__ import annotations


class Clock:
    """A clock the test moves by hand: the deadline arithmetic is what is under test here."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
