"""AWS through boto3: the one client factory (`aws_client`) and the one way to call an operation (`aws_call`:
bounded retries with full jitter on throttling, 5xx and connection errors; credentials missing or refused
become a UserError). Every boto3/botocore import of the project is here or in `imagebuild.adapters.ecr`.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional

from efa_validators.report.printable import printable
from imagebuild.errors import UserError
from imagebuild.retry import DEFAULT_POLICY, RetriesExhausted, Retryable, RetryPolicy, call_with_retry

THROTTLE_CODES = {
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "InternalServerError",
    "InternalFailure",
    "ServerException",
}
NO_CREDENTIAL_ERRORS = ("NoCredentialsError", "PartialCredentialsError", "NoRegionError")
AUTH_CODES = {"UnrecognizedClientException", "InvalidSignatureException", "AccessDeniedException",
              "ExpiredTokenException", "AccessDenied"}  # fmt: skip


# a region is one DNS label (botocore/utils.py validate_region_name at boto/botocore 1.44.18 checks the same
# with `$`, which lets a final newline through, and takes the empty string)
_REGION = re.compile(r"(?![0-9]+$)[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


def check_endpoint(region: Optional[str], endpoint_url: Optional[str]) -> None:
    """--region is a region name and --endpoint-url an http(s) URL with a host and no login in it (requests
    are signed with the AWS credentials; a user:password there would only reach logs), else exit 2 naming
    the flag: botocore takes ftp: and fails at the first call with a traceback, and echoes a newline."""
    if region is not None and not _REGION.fullmatch(region):
        raise UserError(f"{region!r} is no AWS region name (like us-east-1)", key="--region")
    if endpoint_url is None:
        return
    try:
        parts = urllib.parse.urlsplit(endpoint_url)
        scheme, host, _port = parts.scheme, parts.hostname, parts.port  # port: ValueError where no number
        login = parts.username is not None or parts.password is not None
    except ValueError:
        scheme, host, login = "", None, False
    if login:
        raise UserError("holds a user or password: give none there", key="--endpoint-url")
    if scheme not in ("http", "https") or not host or re.search(r"[\x00-\x20\x7f]", endpoint_url):
        raise UserError(f"{endpoint_url!r} is no http(s) URL of a host", key="--endpoint-url")


def aws_client(service: str, region: Optional[str] = None, endpoint_url: Optional[str] = None) -> Any:
    """The one AWS client factory: a boto3 client for `service` with botocore's retries off (ours, in
    `aws_call`, are bounded and jittered) and short timeouts; `endpoint_url` points it at moto in tests."""
    check_endpoint(region, endpoint_url)
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=60
    )
    try:
        client = boto3.client(service, region_name=region, endpoint_url=endpoint_url, config=config)
    except Exception as err:  # noqa: BLE001 - botocore raises NoRegionError and friends at construction
        raise UserError(f"cannot make an AWS {service} client: {err}", key="--region") from err
    client.meta.events.register("before-send", _bounded_send(client))
    return client


# what one answer of a non-streaming operation may hold and how long it may take to arrive: these are small
# JSON/XML documents (a token, a repository, a manifest, a page of log events); botocore reads a body whole
# and its read_timeout is per socket read, so an endpoint that never ends its answer (or drips it) filled the
# memory without a limit (measured: 6 GB in 15 s)
MAX_ANSWER = 32 * 1024 * 1024
ANSWER_S = 120.0


def _bounded_send(client: Any) -> Callable[..., Any]:
    """A `before-send` handler that sends the request through the client's own HTTP session (TLS, proxies
    and timeouts as botocore sets them) and reads the answer under MAX_ANSWER and ANSWER_S; streaming
    operations (S3 GetObject) are left to botocore, their callers read the body."""
    from botocore.awsrequest import AWSResponse

    session = client._endpoint.http_session  # botocore's URLLib3Session: the client has no public handle

    class _Read:
        def __init__(self, body: bytes) -> None:
            self.body = body

        def stream(self, **_kw: Any) -> Any:
            yield self.body

    def send(request: Any, **_kw: Any) -> Any:
        if request.stream_output:
            return None
        request.stream_output = True  # the session then leaves the body unread
        got = session.send(request)
        until, chunks, total = time.monotonic() + ANSWER_S, [], 0
        try:
            while True:
                chunk = got.raw.read1(65536)  # what has arrived: a drip still reaches the deadline check
                if not chunk:
                    break
                total += len(chunk)
                if total > MAX_ANSWER or time.monotonic() > until:
                    raise UserError(
                        f"the AWS endpoint's answer passed {MAX_ANSWER} bytes or {ANSWER_S:g} s: cut off",
                        key="--endpoint-url",
                        hint="is --endpoint-url the service's endpoint?",
                    )
                chunks.append(chunk)
        finally:
            got.raw.close()
        return AWSResponse(got.url, got.status_code, got.headers, _Read(b"".join(chunks)))

    return send


def aws_call(
    fn: Callable[..., Dict[str, Any]],
    policy: RetryPolicy = DEFAULT_POLICY,
    log: Optional[Callable[[str], None]] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """Call one boto3 operation, retrying throttling/5xx/connection errors a bounded number of times.

    Retries exhausted or credentials missing/refused become a UserError (exit 2): fix the environment.
    Other ClientErrors (not found, already exists) are raised as they are for the caller to judge.
    """
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, HTTPClientError

    # the API's own name (GetAuthorizationToken), and never `NAME: detail`: the redactor reads
    # `...Token: Could` as a token's value and masks the reason
    name = "".join(part.title() for part in getattr(fn, "__name__", "call").split("_"))

    def once() -> Dict[str, Any]:
        try:
            return fn(**kwargs)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0
            if code in THROTTLE_CODES or status == 429 or status >= 500:
                raise Retryable(f"{name} failed ({code or status} {err})") from err
            if code in AUTH_CODES:
                raise UserError(f"AWS refused {name}: {code}", hint="check the AWS credentials/role") from err
            raise
        except (EndpointConnectionError, HTTPClientError) as err:  # refused, reset, cut short, timed out
            raise Retryable(f"{name} failed ({printable(err)})") from err
        except BotoCoreError as err:
            if type(err).__name__ in NO_CREDENTIAL_ERRORS:
                raise UserError(
                    f"AWS {name} failed ({err})", hint="configure AWS credentials and region"
                ) from err
            # an answer botocore cannot read (not the service's JSON/XML): the endpoint is not that service
            raise UserError(
                f"AWS {name} failed ({type(err).__name__}: {printable(err)[:300]})",
                hint="is --endpoint-url the service's endpoint?",
            ) from err

    def on_retry(n: int, wait: float, err: BaseException) -> None:
        if log:
            log(f"  {err}; retry {n} in {wait:.1f}s")

    try:
        return call_with_retry(once, policy, on_retry=on_retry)
    except RetriesExhausted as err:
        raise UserError(
            f"AWS {name} kept failing: {err.last} (after {err.attempts} attempts)",
            hint="throttled or the service is down; check --endpoint-url/--region and try again later",
        ) from err
