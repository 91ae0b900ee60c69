"""The bounded, jittered retry policy that registry pushes and AWS calls share (pure: no sleeping here)."""

from __future__ import annotations

import pytest

from imagebuild.retry import RetriesExhausted, Retryable, RetryPolicy, call_with_retry, parse_retry_after


def test_backoff_doubles_up_to_the_cap_with_full_jitter():
    policy = RetryPolicy(attempts=8, base=0.5, cap=4.0)
    assert [policy.delay(n, rng=lambda: 1.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.delay(3, rng=lambda: 0.25) == 1.0  # jitter scales the whole window
    assert policy.delay(0, rng=lambda: 0.0) == 0.0


def test_retries_are_bounded_and_report_the_last_error():
    calls, waits = [], []

    def always_throttled():
        calls.append(1)
        raise Retryable(f"HTTP 429 #{len(calls)}")

    with pytest.raises(RetriesExhausted) as err:
        call_with_retry(always_throttled, RetryPolicy(attempts=4), sleep=waits.append, rng=lambda: 1.0)
    assert len(calls) == 4 and len(waits) == 3
    assert err.value.attempts == 4 and "#4" in str(err.value.last)


def test_success_after_retries_and_retry_after_is_capped():
    outcomes = [Retryable("503", retry_after=120.0), Retryable("503", retry_after=2.0), "ok"]
    waits = []

    def flaky():
        item = outcomes.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    assert (
        call_with_retry(
            flaky, RetryPolicy(attempts=5, base=0.1, cap=10.0), sleep=waits.append, rng=lambda: 0.0
        )
        == "ok"
    )
    assert waits == [10.0, 2.0]  # the server's hint, never beyond the cap


def test_other_errors_are_not_retried():
    calls = []

    def broken():
        calls.append(1)
        raise ValueError("bad manifest")

    with pytest.raises(ValueError):
        call_with_retry(broken, RetryPolicy(attempts=5), sleep=lambda _s: None)
    assert calls == [1]


def test_parse_retry_after():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after(None) is None
