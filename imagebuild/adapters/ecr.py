"""Amazon ECR through boto3: login token, repositories with immutable tags and scan on push, tag look-ups.

Every call goes through `imagebuild.adapters.aws.aws_call` (bounded, jittered retries); the client comes
from `imagebuild.adapters.aws.aws_client`, the one AWS client factory.

ECR URIs are never built from strings here: the repository URI and the registry endpoint come from the API
(`repositoryUri`, `proxyEndpoint`), so no registry host name lives in this code.
"""

from __future__ import annotations

import base64
import json
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from imagebuild.adapters.aws import aws_call
from imagebuild.adapters.registry import (
    Credentials,
    ImageRef,
    Log,
    Refused,
    RegistryAPI,
    RemoteManifest,
    config_digest_of,
    is_host,
)
from imagebuild.errors import UserError
from imagebuild.retry import DEFAULT_POLICY, RetryPolicy


def _code(err: Exception) -> str:
    return getattr(err, "response", {}).get("Error", {}).get("Code", "")


@contextmanager
def _shaped(operation: str) -> Iterator[None]:
    """An answer read as ECR gives it, or exit 2: a missing key or a wrong type means --endpoint-url is not
    ECR's API (botocore parses whatever came by the service's model and leaves out what is missing)."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:
        raise UserError(
            f"ECR's {operation} answer is not of the shape ECR gives ({type(err).__name__}: {err})",
            key="--endpoint-url",
        ) from None


def _authorization(ecr: Any, policy: RetryPolicy) -> Tuple[Credentials, str]:
    """GetAuthorizationToken's login (base64 of `USER:TOKEN`) and registry host, or exit 2 where the answer
    has another shape: the endpoint (--endpoint-url) is not ECR's API. The message never quotes the token."""
    out = aws_call(ecr.get_authorization_token, policy)
    try:
        data = out["authorizationData"][0]
        raw = base64.b64decode(data["authorizationToken"], validate=True).decode()
        endpoint = data["proxyEndpoint"]
        host = endpoint.split("://", 1)[-1].rstrip("/")
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):  # binascii/Unicode errors too
        raise UserError(
            "ECR's GetAuthorizationToken answer holds no login and registry endpoint "
            "(authorizationData[0]: authorizationToken, base64 of USER:TOKEN; proxyEndpoint)",
            key="--endpoint-url",
        ) from None
    user, _, secret = raw.partition(":")
    if not user or not secret:
        raise UserError("ECR's GetAuthorizationToken answer holds no USER:TOKEN login", key="--endpoint-url")
    if not is_host(host):
        raise UserError(f"ECR named the registry endpoint {endpoint!r}: no host[:port]", key="--endpoint-url")
    return Credentials(user, secret, "ECR get-authorization-token"), host


def login(ecr: Any, policy: RetryPolicy = DEFAULT_POLICY) -> Credentials:
    """ECR's 12-hour token as registry credentials (user AWS), for the docker engine's push auth."""
    return _authorization(ecr, policy)[0]


def registry_host(ecr: Any, policy: RetryPolicy = DEFAULT_POLICY) -> str:
    return _authorization(ecr, policy)[1]


# ECR's registry endpoint speaks the OCI distribution v2 API to a client that logs in with the token of
# GetAuthorizationToken (user AWS, the token as password, Basic auth; AWS ECR user guide, "Private registry
# authentication in Amazon ECR", https://docs.aws.amazon.com/AmazonECR/latest/userguide/registry_auth.html),
# and, since its OCI 1.1 support, stores artifacts that name a `subject` and lists them through the referrers
# API (user guide, "Private images in Amazon ECR", .../userguide/images.html; OCI image manifests 1.0 and 1.1:
# .../userguide/image-manifest-formats.html). Limits that matter here: every artifact counts as one image
# against the repository's image quota (images.html); an artifact's `artifactType` is 1 to 255 characters
# (API reference, ImageReferrer, .../APIReference/API_ImageReferrer.html); the subject here is always an image
# manifest, never an index (aws/containers-roadmap issue 2783, open: a referrer whose subject is an index
# answered 405).
def registry_api(
    ecr: Any, host: str, policy: RetryPolicy = DEFAULT_POLICY, log: Optional[Log] = None
) -> RegistryAPI:
    """ECR's registry `host` as an OCI v2 API, logged in with the 12-hour token, over https (a loopback host,
    which no ECR endpoint is, gets http as dockerd gives it; --plain-http is never applied to ECR)."""
    return RegistryAPI(host, login(ecr, policy), plain_http=None, policy=policy, log=log)


def ensure_repository(
    ecr: Any,
    name: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    log: Callable[[str], None] = lambda _m: None,
) -> Dict[str, Any]:
    """The repository, created when missing with IMMUTABLE tags and scan on push (so the registry itself
    refuses to overwrite a tag). An existing mutable repository is used as is, with a warning."""
    with _shaped("DescribeRepositories/CreateRepository"):
        repo = _ensure_repository(ecr, name, policy, log)
        if not isinstance(repo["repositoryUri"], str):
            raise TypeError("repositoryUri is no string")
    return repo


def _ensure_repository(
    ecr: Any, name: str, policy: RetryPolicy, log: Callable[[str], None]
) -> Dict[str, Any]:
    try:
        repo = aws_call(ecr.describe_repositories, policy, log, repositoryNames=[name])["repositories"][0]
    except Exception as err:  # noqa: BLE001 - botocore builds its exception classes at run time
        if _code(err) != "RepositoryNotFoundException":
            raise
        try:
            repo = aws_call(
                ecr.create_repository,
                policy,
                log,
                repositoryName=name,
                imageTagMutability="IMMUTABLE",
                imageScanningConfiguration={"scanOnPush": True},
            )["repository"]
        except Exception as err2:  # noqa: BLE001
            if _code(err2) == "InvalidParameterException":
                raise UserError(f"ECR refused repository name {name!r}: {err2}", key="repository") from err2
            if _code(err2) != "RepositoryAlreadyExistsException":  # created by a parallel job: fine
                raise
            repo = aws_call(ecr.describe_repositories, policy, log, repositoryNames=[name])["repositories"][0]
        log(f"  created ECR repository {name} (immutable tags, scan on push)")
        return repo
    if repo.get("imageTagMutability") != "IMMUTABLE":
        log(f"  warning: ECR repository {name} has mutable tags; this tool still refuses to overwrite them")
    return repo


def existing_image(
    ecr: Any, policy: RetryPolicy = DEFAULT_POLICY
) -> Callable[[ImageRef], Optional[RemoteManifest]]:
    """A look-up of what a tag holds now in ECR (BatchGetImage), shaped like `RegistryAPI.manifest`."""

    def look(ref: ImageRef) -> Optional[RemoteManifest]:
        name = ref.repository
        ident = {"imageDigest": ref.digest} if ref.digest else {"imageTag": ref.tag}
        try:
            out = aws_call(
                ecr.batch_get_image,
                policy,
                repositoryName=name,
                imageIds=[ident],
                acceptedMediaTypes=[
                    "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.oci.image.manifest.v1+json",
                ],
            )
        except Exception as err:  # noqa: BLE001
            if _code(err) in ("RepositoryNotFoundException", "ImageNotFoundException"):
                return None
            raise
        with _shaped("BatchGetImage"):
            images = out.get("images") or []
            if not images:
                return None
            img = images[0]
            body = img["imageManifest"].encode()
            media = img.get("imageManifestMediaType") or json.loads(body).get("mediaType") or ""
            return RemoteManifest(img["imageId"]["imageDigest"], media, body, config_digest_of(body))

    return look


def put_tag(ecr: Any, ref: ImageRef, manifest: RemoteManifest, policy: RetryPolicy = DEFAULT_POLICY) -> str:
    """Promote: the same manifest bytes under a new tag (ECR PutImage), so the digest cannot change."""
    try:
        out = aws_call(
            ecr.put_image,
            policy,
            repositoryName=ref.repository,
            imageManifest=manifest.body.decode(),
            imageManifestMediaType=manifest.media_type,
            imageTag=ref.tag,
            imageDigest=manifest.digest,
        )
    except Exception as err:  # noqa: BLE001
        if _code(err) in ("ImageAlreadyExistsException", "ImageTagAlreadyExistsException"):
            raise Refused(f"ECR refused tag {ref}: {err}") from err
        raise
    with _shaped("PutImage"):
        digest = out["image"]["imageId"]["imageDigest"]
    if digest != manifest.digest:
        raise Refused(f"ECR stored {ref} as {digest}, not the promoted digest {manifest.digest}")
    return digest
