"""The S3 release lock is renewed while held and its expiry is judged by the store's clock (issue 41, hostile
input round five, item 4), against moto's server over real HTTP.

On main the lock held an `expires_at` written by the holder's clock and judged by the waiter's, and was never
renewed: a runner whose clock was behind (or a waiter whose clock was ahead) saw a live lock as expired and
took it, and a release longer than the lease lost mutual exclusion."""

from __future__ import annotations

import json
import threading
import time
import uuid

import boto3
import pytest
from fakeclock import Clock

from imagebuild.errors import UserError
from imagebuild.release import s3records

pytest_plugins = ["services_fixtures"]  # fixtures: moto_server, aws

KEY = "p/.locks/x.json"


def _s3(aws):
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    bucket = f"lock-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return s3, bucket


def _owner(s3, bucket):
    return json.loads(s3.get_object(Bucket=bucket, Key=KEY)["Body"].read())["owner"]


def test_a_holder_whose_clock_is_behind_keeps_its_lock(aws):
    """The holder's clock says 1970 (fakeclock.Clock: 100 s after the epoch): its lock is live all the
    same."""
    s3, bucket = _s3(aws)
    said = []
    with s3records.hold_lock(s3, bucket, KEY, 5, said.append, clock=Clock()):
        mine = _owner(s3, bucket)
        with pytest.raises(UserError, match="held the lock for over 1s"):
            with s3records.hold_lock(s3, bucket, KEY, 1, said.append):
                pass
        assert _owner(s3, bucket) == mine
    assert not any("took over" in s for s in said), said


def test_a_waiter_whose_clock_is_ahead_does_not_take_a_live_lock(aws):
    s3, bucket = _s3(aws)
    ahead = Clock()
    ahead.now = time.time() + 3600  # an hour ahead: past the 15 minute lease of a lock just taken
    with s3records.hold_lock(s3, bucket, KEY, 5, lambda _m: None):
        mine = _owner(s3, bucket)
        with pytest.raises(UserError, match="held the lock"):
            with s3records.hold_lock(s3, bucket, KEY, 1, lambda _m: None, clock=ahead):
                pass
        assert _owner(s3, bucket) == mine


def test_a_release_longer_than_the_lease_keeps_the_lock_and_stops_renewing_when_released(aws):
    s3, bucket = _s3(aws)
    said = []
    with s3records.hold_lock(s3, bucket, KEY, 5, said.append, ttl_s=3):
        mine = _owner(s3, bucket)
        time.sleep(5)  # the release outlives its 3 s lease: renewed every second, it is still held
        with pytest.raises(UserError, match="held the lock"):
            with s3records.hold_lock(s3, bucket, KEY, 0.5, said.append, ttl_s=3):
                pass
        assert _owner(s3, bucket) == mine
        assert any(t.name == "release-lock-renewal" for t in threading.enumerate())
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # released, and not written again
    assert not any(t.name == "release-lock-renewal" for t in threading.enumerate())
    assert not any("took over" in s or "no longer ours" in s for s in said), said


def test_the_age_and_the_lease_are_the_stores(aws):
    s3, bucket = _s3(aws)
    s3.put_object(Bucket=bucket, Key=KEY, Body=s3records.lock_body("o", 100.0, 900))
    held, etag, age = s3records.get_lock(s3, bucket, KEY)
    assert held["owner"] == "o" and etag and age is not None and 0 <= age < 60
    assert not s3records.lease_over(held, age, 900)  # its expires_at (1970) is not what is judged
    assert s3records.lease_over(held, 900.0, 900)
    assert s3records.lease_over(dict(held, ttl_s=10**9), 900.0, 900)  # a lease never longer than ours
    assert not s3records.lease_over(held, None, 900)  # S3 gave no age: wait, never take
