"""AWS through boto3: the one client factory (`aws_client`) and the one way to call an operation (`aws_call`:
bounded retries with full jitter on throttling, 5xx and connection errors; credentials missing or refused
become a UserError). Every boto3/botocore import of the project is here or in `imagebuild.adapters.ecr`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

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


def aws_client(service: str, region: Optional[str] = None, endpoint_url: Optional[str] = None) -> Any:
    """The one AWS client factory: a boto3 client for `service` with botocore's retries off (ours, in
    `aws_call`, are bounded and jittered) and short timeouts; `endpoint_url` points it at moto in tests."""
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=60
    )
    try:
        return boto3.client(service, region_name=region, endpoint_url=endpoint_url, config=config)
    except Exception as err:  # noqa: BLE001 - botocore raises NoRegionError and friends at construction
        raise UserError(f"cannot make an AWS {service} client: {err}", key="--region") from err


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
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

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
        except EndpointConnectionError as err:
            raise Retryable(f"{name} failed ({err})") from err
        except BotoCoreError as err:
            if type(err).__name__ in NO_CREDENTIAL_ERRORS:
                raise UserError(
                    f"AWS {name} failed ({err})", hint="configure AWS credentials and region"
                ) from err
            raise

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
