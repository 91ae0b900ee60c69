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
- the lock is a create-only object `<prefix>/.locks/<hash of host/repo>.json` with an expiry: the second
  release waits for it; a runner that died leaves a lock that expires, and the next release deletes exactly
  that expired object (If-Match its ETag) and takes the lock.
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from imagebuild.adapters.aws import aws_call
from imagebuild.errors import UserError

LOCK_SCHEMA = "efa-image-build/release-lock/v1"
LOCK_TTL_S = 900.0  # a release checks and writes a few tags and records: minutes; a dead runner's lock ends
TAKEN = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def error_code(err: BaseException) -> str:
    response = getattr(err, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code or str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def get_json(s3: Any, bucket: str, key: str, what: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(the JSON object at `key`, its ETag), or (None, None) when there is none; exit 2 when unreadable."""
    try:
        got = aws_call(s3.get_object, Bucket=bucket, Key=key)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - botocore ClientError
        if error_code(err) in ("NoSuchKey", "404"):
            return None, None
        raise UserError(f"cannot read {what} s3://{bucket}/{key}: {err}", key="--records") from err
    try:
        doc = json.loads(got["Body"].read())
    except ValueError as err:
        raise UserError(f"{what} is not JSON: {err}", file=f"s3://{bucket}/{key}") from None
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
    return json.dumps(
        {
            "schema": LOCK_SCHEMA,
            "owner": owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "expires_at": now + ttl_s,
        }  # fmt: skip
    ).encode()


@contextmanager
def hold_lock(
    s3: Any,
    bucket: str,
    key: str,
    wait_s: float,
    log: Callable[[str], None],
    ttl_s: float = LOCK_TTL_S,
    clock: Callable[[], float] = time.time,
) -> Iterator[None]:
    """Hold the release lock object `key` (create-only), waiting at most `wait_s` for another holder; an
    expired lock (its holder died) is deleted by its ETag and taken. Released by deleting it by its ETag."""
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
        held, held_etag = get_json(s3, bucket, key, "release lock")
        if held is None:
            continue  # released between the two calls: try again
        if held.get("owner") == owner:  # our create landed, its answer was lost and the retry refused
            etag = str(held_etag or "")
            break
        expires = held.get("expires_at")
        if not isinstance(expires, (int, float)) or expires < clock():
            if delete(s3, bucket, key, if_match=held_etag):
                who = f"{held.get('host')} pid {held.get('pid')}"
                log(f"release lock {where}: took over an expired lock of {who}")
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
    try:
        yield
    finally:
        if not delete(s3, bucket, key, if_match=etag):
            log(f"release lock {where}: no longer ours when released (it expired and was taken)")
