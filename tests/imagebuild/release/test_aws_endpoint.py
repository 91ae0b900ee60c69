"""`--region` and `--endpoint-url` as a careless user or an attacker gives them, and an endpoint that is not
ECR's API: each is exit 2 naming the flag, with no traceback, no echoed control character and no credential
in the message. The endpoint is a small server on 127.0.0.1 (tests/services.py RawServer) answering what a
hostile or wrong service would; nothing leaves loopback.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from cli import build_py
from release_setup import make_keys
from services import MotoServer, RawServer, free_port, http_answer

from imagebuild.adapters import ecr
from imagebuild.adapters.aws import aws_client
from imagebuild.adapters.registry import ImageRef, RemoteManifest
from imagebuild.errors import UserError
from imagebuild.retry import RetryPolicy

IMAGE = "127.0.0.1:9/h-attack/app:t"
TOKEN = "ECR-TOKEN-SECRET"


@pytest.fixture
def dummy_aws(monkeypatch):
    for key, value in MotoServer.env().items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def pub(tmp_path):
    return make_keys(tmp_path, "team")[1]


def _verify(pub, *flags):
    return build_py("verify", IMAGE, "--key", pub, "--ecr", "--attempts", "2", *flags)


def _refused(res, key: str) -> str:
    assert res.rc == 2, res.err
    assert "Traceback" not in res.err
    assert f"key '{key}'" in res.err, res.err
    return res.err


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1:{port}/",  # botocore took it, then a traceback at the first call
        "file:///etc/passwd",
        "http://127.0.0.1:{port}/\nX-Injected: 1",  # echoed with its newline, under key '--region'
        "http://[::1",
        "",
        "127.0.0.1:{port}",
        "http://127.0.0.1:99999/",
    ],
)
def test_an_endpoint_url_that_is_no_http_url_is_exit_2_naming_the_flag(dummy_aws, pub, url):
    err = _refused(
        _verify(pub, "--region", "us-east-1", "--endpoint-url", url.format(port=free_port())),
        "--endpoint-url",
    )
    assert len(err.strip().splitlines()) == 1, err  # the value's newline is escaped, not echoed


def test_an_endpoint_url_with_a_login_in_it_is_refused_without_showing_it(dummy_aws, pub):
    url = f"http://admin:pw-SECRET@127.0.0.1:{free_port()}/"
    err = _refused(_verify(pub, "--region", "us-east-1", "--endpoint-url", url), "--endpoint-url")
    assert "pw-SECRET" not in err and "admin" not in err


@pytest.mark.parametrize("region", ["", "us-east-1\n", "us east 1", "us-east-1/../x", "us-", "123"])
def test_a_region_that_is_no_region_name_is_exit_2_naming_the_flag(dummy_aws, pub, region):
    url = f"http://127.0.0.1:{free_port()}/"
    err = _refused(_verify(pub, "--region", region, "--endpoint-url", url), "--region")
    assert len(err.strip().splitlines()) == 1, err  # the value's newline is escaped, not echoed


def _login(token: str = base64.b64encode(f"AWS:{TOKEN}".encode()).decode(), endpoint="https://ecr.example"):
    return {"authorizationData": [{"authorizationToken": token, "proxyEndpoint": endpoint}]}


JSON = {"Content-Type": "application/x-amz-json-1.1"}


def _head(length: int) -> bytes:
    """An HTTP answer's head that promises `length` bytes of JSON."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: %d\r\n\r\n" % length
    )


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({}).encode(),
        json.dumps({"authorizationData": []}).encode(),
        json.dumps(_login(token="!!! no base64 " + TOKEN)).encode(),
        json.dumps(_login(token=base64.b64encode(TOKEN.encode()).decode())).encode(),  # no USER:
        json.dumps(_login(token=base64.b64encode(b"\xff\xfe:" + TOKEN.encode()).decode())).encode(),
        json.dumps(_login(endpoint="https://evil.example/\r\nX-Injected: 1")).encode(),
        json.dumps(_login(endpoint="https://AWS:x@evil.example/v2")).encode(),
        b"<html>not the service</html>",
    ],
)
def test_an_endpoint_that_is_not_ecrs_api_is_exit_2_and_never_shows_the_token(dummy_aws, pub, body):
    """The answer to GetAuthorizationToken is read whole or refused: a KeyError, binascii.Error or a
    host with a newline was a traceback or went on into URLs."""
    server = RawServer(lambda _m, _p, sock, _s: sock.sendall(http_answer(200, body, JSON))).start()
    try:
        res = _verify(pub, "--region", "us-east-1", "--endpoint-url", f"http://{server.host}")
    finally:
        server.stop()
    assert res.rc == 2, res.err
    assert "Traceback" not in res.err and TOKEN not in res.err and "\nX-Injected" not in res.err
    assert "--endpoint-url" in res.err
    assert 1 <= len(server.requests) <= 2


def test_an_endpoint_that_closes_the_connection_is_retried_then_exit_2(dummy_aws, pub):
    """botocore's ConnectionClosedError (an HTTPClientError, no EndpointConnectionError) was a traceback."""
    server = RawServer(lambda _m, _p, _sock, _s: None).start()  # reads the request, answers nothing, closes
    try:
        res = _verify(pub, "--region", "us-east-1", "--endpoint-url", f"http://{server.host}")
    finally:
        server.stop()
    assert res.rc == 2, res.err
    assert "Traceback" not in res.err and "kept failing" in res.err and "after 2 attempts" in res.err
    assert len(server.requests) == 2


def test_an_endless_answer_is_cut_off_at_the_cap(dummy_aws, pub):
    """botocore reads a body whole: an endpoint that never ends its answer filled memory without a limit."""

    def endless(_method, _path, sock, stop):
        sock.sendall(_head(10**10))
        chunk = b"{" + b" " * 65535
        while not stop.is_set():
            try:
                sock.sendall(chunk)
            except OSError:
                return

    server = RawServer(endless).start()
    try:
        res = _verify(pub, "--region", "us-east-1", "--endpoint-url", f"http://{server.host}")
    finally:
        server.stop()
    err = _refused(res, "--endpoint-url")
    assert "passed 33554432 bytes" in err and len(server.requests) == 1


def test_a_dripping_answer_is_cut_off_at_its_deadline(dummy_aws, pub, monkeypatch):
    """One byte every 0.1 s never trips botocore's read timeout (it is per read); the answer's deadline
    (120 s, 1 s here) ends it."""
    monkeypatch.setattr("imagebuild.adapters.aws.ANSWER_S", 1.0)

    def drip(_method, _path, sock, stop):
        sock.sendall(_head(100000))
        for _ in range(100000):
            if stop.wait(0.1):
                return
            sock.sendall(b" ")

    server = RawServer(drip).start()
    started = time.monotonic()
    try:
        res = _verify(pub, "--region", "us-east-1", "--endpoint-url", f"http://{server.host}")
    finally:
        server.stop()
    assert time.monotonic() - started < 10
    assert "or 1 s: cut off" in _refused(res, "--endpoint-url")


def _answering(doc: dict) -> RawServer:
    """An endpoint answering every ECR call with `doc` (JSON, 200)."""
    body = json.dumps(doc).encode()
    return RawServer(lambda _m, _p, sock, _s: sock.sendall(http_answer(200, body, JSON))).start()


FAST = RetryPolicy(attempts=1)
REF = ImageRef("127.0.0.1:9", "h-attack/app", "t")
MANIFEST = RemoteManifest("sha256:" + "a" * 64, "application/vnd.oci.image.manifest.v1+json", b"{}", None)


@pytest.mark.parametrize(
    "call, doc",
    [
        (lambda c: ecr.ensure_repository(c, "h-attack/app", FAST), {"repositories": []}),
        (
            lambda c: ecr.ensure_repository(c, "h-attack/app", FAST),
            {"repositories": [{"repositoryName": "x"}]},
        ),
        (lambda c: ecr.existing_image(c, FAST)(REF), {"images": [{"imageId": {}}]}),
        (lambda c: ecr.existing_image(c, FAST)(REF), {"images": [{"imageManifest": "[1]", "imageId": {}}]}),
        (lambda c: ecr.put_tag(c, REF, MANIFEST, FAST), {"image": {}}),
    ],
    ids=["no-repository", "no-uri", "no-manifest", "manifest-a-list", "no-digest"],
)
def test_ecr_answers_of_another_shape_are_exit_2_naming_the_endpoint(dummy_aws, call, doc):
    """A KeyError, IndexError or AttributeError on what the endpoint answered was a traceback."""
    server = _answering(doc)
    try:
        with pytest.raises(UserError, match="answer is not of the shape ECR gives") as err:
            call(aws_client("ecr", "us-east-1", f"http://{server.host}"))
    finally:
        server.stop()
    assert err.value.key == "--endpoint-url"
