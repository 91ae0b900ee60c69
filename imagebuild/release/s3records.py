"""Release records and the release lock in S3, shared by every runner that is given the same bucket/prefix.

Why: CI runs each job on its own machine, so an flock in the temp folder serialises nothing and a records
folder is lost with the runner. S3 has compare-and-set writes: `PutObject` with `If-None-Match: *` creates an
object only if no object has that key (412 PreconditionFailed otherwise), `If-Match: <etag>` replaces or
deletes only the object that was read (the S3 user guide's "conditional requests",
docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-requests.html, as the boto3 scenario in
awsdocs/aws-doc-sdk-examples python/example_code/s3/scenarios/conditional_requests/ uses them; the pinned
moto 5.2.5 answers both in moto/s3/responses.py, PutObject's and DeleteObject's If-Match/If-None-Match
checks, which the tests run against). So:
- a record is written under a name no other release takes (`<stamp>-<digest12>-<random>`), create-only: a
  second writer of that key is refused, never silently overwritten;
- `latest.json` is replaced only if it is still the one read (If-Match), created only if absent;
- the lock is a create-only object `<prefix>/.locks/<hash of host/repo>.json` with a lease: the second
  release waits for it; the holder rewrites it (If-Match) every third of the lease while it holds it, so a
  release longer than the lease keeps it; a runner that died leaves a lock that stops changing, and once it
  has not changed for a lease, by the store's clock (the GET's `Date` less the object's `LastModified`: a
  runner whose clock is wrong cannot misjudge it), the next release deletes exactly that object (If-Match
  its ETag) and takes the lock.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from imagebuild.adapters.aws import aws_call
from imagebuild.errors import UserError
from imagebuild.safefile import MAX_INPUT_BYTES

LOCK_SCHEMA = "efa-image-build/release-lock/v1"
LOCK_TTL_S = 900.0  # a release checks and writes a few tags and records: minutes; a dead runner's lock ends
TAKEN = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def error_code(err: BaseException) -> str:
    response = getattr(err, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code or str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _get_object(s3: Any, bucket: str, key: str, what: str) -> Optional[Dict[str, Any]]:
    """S3's GetObject answer for `key`, or None when there is no such object; exit 2 naming `what` when it
    cannot be read."""
    try:
        return aws_call(s3.get_object, Bucket=bucket, Key=key)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore ClientError
        if error_code(err) in ("NoSuchKey", "404"):
            return None
        raise UserError(f"cannot read {what} s3://{bucket}/{key}: {err}", key="--records") from err


def get_json(s3: Any, bucket: str, key: str, what: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(the JSON object at `key`, its ETag), or (None, None) when there is none; exit 2 when unreadable."""
    got = _get_object(s3, bucket, key, what)
    if got is None:
        return None, None
    data = got["Body"].read(MAX_INPUT_BYTES + 1)  # bounded as every record is (names.read_s3_records)
    if len(data) > MAX_INPUT_BYTES:
        raise UserError(f"{what} is over {MAX_INPUT_BYTES} bytes: not read", file=f"s3://{bucket}/{key}")
    try:
        doc = json.loads(data)
    except ValueError as err:
        raise UserError(f"{what} is not JSON: {err}", file=f"s3://{bucket}/{key}") from None
    except RecursionError:  # nested deeper than Python's stack: a traceback before
        raise UserError(
            f"{what} is not a JSON object (nested too deep)", file=f"s3://{bucket}/{key}"
        ) from None
    if not isinstance(doc, dict):
        raise UserError(f"{what} is not a JSON object", file=f"s3://{bucket}/{key}")
    return doc, got.get("ETag")


def put(s3: Any, bucket: str, key: str, data: bytes, ctype: str, if_match: Optional[str] = None) -> str:
    """Write `key` only if it does not exist (`if_match` None) or still has ETag `if_match`; returns the new
    ETag. Refused (another writer was first): UserError naming the object."""
    cond = {"IfMatch": if_match} if if_match else {"IfNoneMatch": "*"}
    try:
        got = aws_call(s3.put_object, Bucket=bucket, Key=key, Body=data, ContentType=ctype, **cond)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore ClientError
        if error_code(err) in TAKEN:
            raise UserError(
                f"s3://{bucket}/{key} was written by another release meanwhile ({error_code(err)})",
                key="--records",
                hint="another release of this variant ran at the same time; rerun the same command",
            ) from None
        raise UserError(f"cannot write s3://{bucket}/{key}: {err}", key="--records") from err
    return str(got.get("ETag") or "")


def delete(s3: Any, bucket: str, key: str, if_match: Optional[str] = None) -> bool:
    """Delete `key` (only the version with ETag `if_match`, when given); False if it was not that one."""
    cond = {"IfMatch": if_match} if if_match else {}
    try:
        aws_call(s3.delete_object, Bucket=bucket, Key=key, **cond)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore ClientError
        if error_code(err) in (*TAKEN, "NoSuchKey", "404"):
            return False
        raise UserError(f"cannot delete s3://{bucket}/{key}: {err}", key="--records") from err
    return True


def lock_body(owner: str, now: float, ttl_s: float) -> bytes:
    """The lock object: who holds it and its lease (`ttl_s`, a duration: judged against the store's clock,
    never against a runner's); `expires_at` (the holder's clock) is for people reading it."""
    return json.dumps(
        {
            "schema": LOCK_SCHEMA,
            "owner": owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "ttl_s": ttl_s,
            "expires_at": now + ttl_s,
        }  # fmt: skip
    ).encode()


def get_lock(
    s3: Any, bucket: str, key: str
) -> Tuple[Optional[Dict[str, Any]], Optional[str], Optional[float]]:
    """(the lock object, its ETag, its age in seconds by the store's clock), or (None, None, None) when
    there is none. The age is the response's `Date` (S3's clock now) less the object's `LastModified` (S3's
    clock when it was last written): no runner's clock enters it. None when S3 did not say both."""
    got = _get_object(s3, bucket, key, "the release lock")
    if got is None:
        return None, None, None
    try:
        doc = json.loads(got["Body"].read(64 * 1024))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        doc = None
    if not isinstance(doc, dict):
        doc = {}  # not a lock this tool wrote: judged by its age alone
    date = (got.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    modified = got.get("LastModified")
    age = None
    if date and modified is not None:
        try:
            age = (parsedate_to_datetime(date) - modified).total_seconds()
        except (TypeError, ValueError):
            age = None
    return doc, got.get("ETag"), age


def lease_over(held: Dict[str, Any], age: Optional[float], ttl_s: float) -> bool:
    """Whether a lock's lease has passed, by the store's clock: its age reached its lease (the holder's
    `ttl_s`, never longer than ours). An age S3 did not give is never over (fail closed: wait)."""
    lease = held.get("ttl_s")
    if not isinstance(lease, (int, float)) or isinstance(lease, bool) or not 0 <= lease <= ttl_s:
        lease = ttl_s
    return age is not None and age >= lease


class _Renewal:
    """Rewrites the held lock (If-Match its ETag: only while it is still ours) every third of its lease, so a
    release longer than the lease keeps it; stopped on release, and after `max_hold_s` at the latest (a hung
    run does not hold it for ever: it expires a lease later)."""

    def __init__(self, s3: Any, bucket: str, key: str, body: Callable[[], bytes], etag: str,
                 ttl_s: float, max_hold_s: float, log: Callable[[str], None]) -> None:  # fmt: skip
        self.s3, self.bucket, self.key, self.body = s3, bucket, key, body
        self.etag, self.ttl_s, self.max_hold_s, self.log = etag, ttl_s, max_hold_s, log
        self.lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="release-lock-renewal", daemon=True)

    def start(self) -> _Renewal:
        self._thread.start()
        return self

    def stop(self) -> str:
        """Stop renewing; the ETag of the lock as last written."""
        self._stop.set()
        self._thread.join()
        return self.etag

    def _run(self) -> None:
        until = time.monotonic() + self.max_hold_s
        where = f"s3://{self.bucket}/{self.key}"
        while not self._stop.wait(self.ttl_s / 3.0):
            if time.monotonic() > until:
                self.log(f"release lock {where}: held over {self.max_hold_s:.0f}s; no longer renewed")
                return
            try:
                self.etag = put(self.s3, self.bucket, self.key, self.body(), "application/json", self.etag)
            except UserError as err:
                self.lost = err.message
                self.log(f"release lock {where}: could not be renewed ({err.message}); it may be taken")
                return


LOCK_MAX_HOLD_S = 2 * 3600.0  # the longest a release renews its lock: far past any real one (minutes)


@contextmanager
def hold_lock(
    s3: Any,
    bucket: str,
    key: str,
    wait_s: float,
    log: Callable[[str], None],
    ttl_s: float = LOCK_TTL_S,
    clock: Callable[[], float] = time.time,
    max_hold_s: float = LOCK_MAX_HOLD_S,
) -> Iterator[None]:
    """Hold the release lock object `key` (create-only), waiting at most `wait_s` for another holder, renewed
    while held (`_Renewal`). A lock whose lease passed by the store's clock (`get_lock`, `lease_over`: its
    holder died) is deleted by its ETag and taken. Released by deleting it by its ETag. `clock` (this
    runner's) only fills the `expires_at` people read."""
    owner = uuid.uuid4().hex
    where = f"s3://{bucket}/{key}"
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            etag = put(s3, bucket, key, lock_body(owner, clock(), ttl_s), "application/json")
            break
        except UserError as err:
            if "written by another release" not in err.message:
                raise
        held, held_etag, age = get_lock(s3, bucket, key)
        if held is None:
            continue  # released between the two calls: try again
        if held.get("owner") == owner:  # our create landed, its answer was lost and the retry refused
            etag = str(held_etag or "")
            break
        if lease_over(held, age, ttl_s):
            if delete(s3, bucket, key, if_match=held_etag):
                who = f"{held.get('host')} pid {held.get('pid')}"
                log(f"release lock {where}: took over an expired lock of {who} (unchanged for {age:.0f}s)")
            continue
        if not said:
            log(f"release lock {where}: held by {held.get('host')} pid {held.get('pid')}; waiting")
            said = True
        if time.monotonic() > deadline:
            raise UserError(
                f"another release held the lock for over {wait_s:.0f}s", file=where,
                hint="it expires by itself when its holder died; rerun later",
            )  # fmt: skip
        time.sleep(0.2 + random.uniform(0, 0.3))
    renewal = _Renewal(
        s3, bucket, key, lambda: lock_body(owner, clock(), ttl_s), etag, ttl_s, max_hold_s, log
    )
    renewal.start()
    try:
        yield
    finally:
        etag = renewal.stop()
        if renewal.lost is not None or not delete(s3, bucket, key, if_match=etag):
            log(f"release lock {where}: no longer ours when released (it expired and was taken)")
