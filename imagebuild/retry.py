"""Bounded retries with exponential backoff and full jitter, for registries and AWS APIs that throttle.

Why full jitter: many CI jobs of one matrix push at once; equal backoffs would make them retry in lockstep
and throttle again. Why bounded: a registry that stays down must become a clear error, not a hang.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


class Retryable(Exception):
    """A failure worth another try (throttled, 5xx, refused connection); `retry_after`: the server's hint."""

    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RetriesExhausted(Exception):
    """Every attempt failed with a retryable error; `last` is the final one."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all; the n-th wait is uniform in [0, min(cap, base * 2**n)] seconds."""

    attempts: int = 5
    base: float = 0.5
    cap: float = 20.0

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Full-jitter wait before try `attempt + 1` (attempt counts from 0)."""
        return rng() * min(self.cap, self.base * (2**attempt))


DEFAULT_POLICY = RetryPolicy()


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
    on_retry: Optional[Callable[[int, float, BaseException], None]] = None,
) -> T:
    """Call `fn` until it returns or raises something other than `Retryable`, at most `policy.attempts` times.

    A server's Retry-After is honoured but never beyond `policy.cap`, so the total wait stays bounded.
    """
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Retryable as err:
            if attempt + 1 >= policy.attempts:
                raise RetriesExhausted(policy.attempts, err) from err
            wait = policy.delay(attempt, rng)
            if err.retry_after is not None:
                wait = max(wait, min(policy.cap, err.retry_after))
            if on_retry:
                on_retry(attempt + 1, wait, err)
            sleep(wait)
    raise AssertionError("unreachable: attempts must be >= 1")  # pragma: no cover


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds form only; an HTTP date is ignored as unknown)."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None
