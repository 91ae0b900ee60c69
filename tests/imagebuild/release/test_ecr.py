"""ECR through boto3 against moto's server over real HTTP (started by the tests on 127.0.0.1).

moto implements ECR's API but has no registry behind it, so a docker push to moto's ECR is impossible: the
API flow (repository creation with immutable tags and scan on push, the login token, tag look-ups,
promotion by PutImage) is tested here against moto, and the docker push itself against the real local
registry in test_registry.py. Throttling is real HTTP too: FaultProxy answers the first call with the
ThrottlingException body AWS sends, in front of moto.
"""

from __future__ import annotations

import io
import json

import pytest
from cli import build_py
from services import (
    Fault,
    FaultProxy,
    summary_entry,
    write_summary,
)

from imagebuild.adapters import ecr
from imagebuild.adapters.aws import aws_client
from imagebuild.adapters.registry import ImageRef, Refused, RegistryAPI
from imagebuild.errors import UserError
from imagebuild.retry import RetryPolicy

pytest_plugins = ["services_fixtures"]  # fixtures: registry, auth_registry, moto_server, aws, small_images

FAST = RetryPolicy(attempts=3, base=0.05, cap=0.2)


def _client(aws, endpoint=None):
    return aws_client("ecr", "us-east-1", endpoint or aws.endpoint_url)


def _pushed_manifest(registry, tmp_path, monkeypatch, image, repo):
    """The manifest of `image` as pushed to the local registry under REPO:dev (a real one for moto's ECR)."""
    summary = write_summary(tmp_path / "src.json", [summary_entry("a", image, tags=[f"{repo}:dev"])])
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    return RegistryAPI(registry.host).manifest(repo, "dev")


def test_repository_created_immutable_with_scan_on_push(aws):
    client = _client(aws)
    messages = []
    repo = ecr.ensure_repository(client, "h6/efa-image", FAST, messages.append)
    described = client.describe_repositories(repositoryNames=["h6/efa-image"])["repositories"][0]
    assert described["imageTagMutability"] == "IMMUTABLE"
    assert described["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repo["repositoryUri"] == described["repositoryUri"]
    assert any("created ECR repository" in m for m in messages)
    # second time: found, not created again
    messages.clear()
    assert (
        ecr.ensure_repository(client, "h6/efa-image", FAST, messages.append)["repositoryArn"]
        == repo["repositoryArn"]
    )
    assert messages == []
    # an existing mutable repository is used, with a warning
    client.create_repository(repositoryName="h6/mutable", imageTagMutability="MUTABLE")
    ecr.ensure_repository(client, "h6/mutable", FAST, messages.append)
    assert any("mutable tags" in m for m in messages)


def test_login_token_decodes_and_hides_the_secret(aws):
    client = _client(aws)
    creds = ecr.login(client, FAST)
    assert creds.username == "AWS" and creds.password
    assert creds.password not in repr(creds)
    host = ecr.registry_host(client, FAST)
    repo = ecr.ensure_repository(client, "h6/login", FAST)
    assert repo["repositoryUri"].startswith(host + "/")


@pytest.mark.docker
def test_tag_lookup_and_promotion_with_a_real_manifest(aws, registry, small_images, tmp_path, monkeypatch):
    """The manifest of an image really pushed to the local registry, stored in moto's ECR with PutImage."""
    image = small_images["a"]
    manifest = _pushed_manifest(registry, tmp_path, monkeypatch, image, "h6-test/ecrsrc")

    client = _client(aws)
    ecr.ensure_repository(client, "h6/promote", FAST)
    host = ecr.registry_host(client, FAST)
    look = ecr.existing_image(client, FAST)
    assert look(ImageRef(host, "h6/promote", "v1")) is None
    digest = ecr.put_tag(client, ImageRef(host, "h6/promote", "v1"), manifest, FAST)
    assert digest == manifest.digest
    found = look(ImageRef(host, "h6/promote", "v1"))
    assert found.config_digest == image.id and found.digest == manifest.digest
    by_digest = look(ImageRef(host, "h6/promote", None, manifest.digest))
    assert by_digest.digest == manifest.digest
    # the repository is immutable: the same tag again is refused, never overwritten
    with pytest.raises(Refused, match="v1"):
        ecr.put_tag(client, ImageRef(host, "h6/promote", "v1"), manifest, FAST)


@pytest.mark.docker
def test_push_to_ecr_refuses_a_tag_holding_another_image(aws, registry, small_images, tmp_path, monkeypatch):
    """`build.py push --ecr` end to end up to the docker push: the tag check refuses before any upload,
    so no traffic leaves this machine (moto's ECR has no registry to push to)."""
    image_a, image_b = small_images["a"], small_images["b"]
    manifest_a = _pushed_manifest(registry, tmp_path, monkeypatch, image_a, "h6-test/ecrclash")
    client = _client(aws)
    ecr.ensure_repository(client, "h6-test/ecrclash", FAST)
    ecr.put_tag(client, ImageRef("x", "h6-test/ecrclash", "dev"), manifest_a, FAST)

    summary = write_summary(tmp_path / "b.json", [summary_entry("b", image_b, tags=["h6-test/ecrclash:dev"])])
    argv = [
        "push",
        "--summary",
        str(summary),
        "--ecr",
        "--region",
        "us-east-1",
        "--endpoint-url",
        aws.endpoint_url,
    ]
    res = build_py(*argv)
    assert res.rc == 1
    err = res.err
    assert "already exists" in err and "not overwriting" in err
    assert json.loads(summary.read_text())["variants"][0]["digest"] is None


def test_throttling_is_retried_then_bounded(aws):
    body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()

    def is_create(method, path, headers):
        return headers.get("X-Amz-Target", "").endswith(".CreateRepository")

    fault = Fault(is_create, status=400, times=2, body=body, content_type="application/x-amz-json-1.1")
    proxy = FaultProxy(upstream=aws.endpoint_url.split("://")[1], faults=[fault]).start()
    try:
        client = _client(aws, f"http://{proxy.host}")
        messages = []
        ecr.ensure_repository(client, "h6/throttled", FAST, messages.append)
        assert fault.hits == 2
        assert sum("ThrottlingException" in m and "retry" in m for m in messages) == 2
        assert _client(aws).describe_repositories(repositoryNames=["h6/throttled"])["repositories"]
        # a service that keeps throttling: a bounded number of tries, then a clear UserError (exit 2)
        fault.times, fault.hits = 10**6, 0
        with pytest.raises(UserError, match="after 3 attempts"):
            ecr.ensure_repository(client, "h6/throttled-forever", FAST)
        assert fault.hits == 3
    finally:
        proxy.stop()


def test_unreachable_endpoint_is_a_user_error(monkeypatch):
    from services import MotoServer, free_port

    for key, value in MotoServer.env().items():
        monkeypatch.setenv(key, value)
    client = aws_client("ecr", "us-east-1", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(UserError, match="kept failing") as got:
        ecr.login(client, FAST)
    # the reason reads whole: the redactor once masked `get_authorization_token: Could` as a token's value
    assert "GetAuthorizationToken failed (Could not connect" in str(got.value), str(got.value)
    assert "***" not in str(got.value)
