"""`build.py release` against registries that misbehave at the transport: small hostile servers on 127.0.0.1
(tests/services.py RawServer) that drip, claim 3 GiB, cut the body short, speak no HTTP, serve a config that
is not JSON, or serve other bytes for a digest. Each is exit 1 or 2 naming the registry, within its
deadline, with no traceback and nothing PUT. Deadlines come from REGISTRY_REQUEST_TIMEOUT and
REGISTRY_OPERATION_TIMEOUT, set small here so every test ends in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
from types import SimpleNamespace

import pytest
from cli import build_py, build_py_process
from services import http_answer, small_lock, summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import MANIFEST_TYPES, Bounds, RegistryAPI
from imagebuild.errors import UserError

pytest_plugins = ["services_fixtures"]  # fixtures: raw_server

DEADLINES = {"REGISTRY_REQUEST_TIMEOUT": "0.5", "REGISTRY_OPERATION_TIMEOUT": "2"}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _image(lock_name: str = "h23-bounds") -> SimpleNamespace:
    """An image as a registry holds it: config (with the lock label), manifest, and their digests."""
    label = json.dumps(small_lock(lock_name), sort_keys=True)
    config = json.dumps({"config": {"Labels": {"org.efa-image-build.lock": label}}}).encode()
    return _image_of(config)


def _image_of(config: bytes) -> SimpleNamespace:
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPES[0],
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "digest": _sha(config),
                "size": len(config),
            },
            "layers": [],
        }  # fmt: skip
    ).encode()
    return SimpleNamespace(config=config, id=_sha(config), manifest=manifest, digest=_sha(manifest))


def _documents(tmp_path, host: str, image: SimpleNamespace) -> list:
    """A summary whose variant `h23` was pushed to `host` at the image's digest; a passing check report."""
    entry = summary_entry("h23", image, tags=["h23-test/x:dev"])
    entry["digest"] = image.digest
    entry["pushed"] = [f"{host}/h23-test/x:dev@{image.digest}"]
    summary = write_summary(tmp_path / "summary.json", [entry])
    checks = write_check_report(tmp_path / "checks.json", [("h23", image.id, True)])
    return ["release", "--summary", summary, "--checks", checks, "--tag", "r1", "--records", tmp_path / "rec"]


def _honest(image: SimpleNamespace, puts: list):
    """Answers as a registry holding `image` would: a PUT of a tag is recorded and accepted, and the tag then
    names the image."""

    def answer(method: str, path: str, sock: socket.socket, _stop: threading.Event) -> None:
        if method == "PUT":
            puts.append(path)
            sock.sendall(http_answer(201, headers={"Docker-Content-Digest": image.digest}))
        elif path.endswith(f"/manifests/{image.digest}") or path in puts:
            headers = {"Content-Type": MANIFEST_TYPES[0], "Docker-Content-Digest": image.digest}
            sock.sendall(http_answer(200, image.manifest, headers))
        elif path.endswith(f"/blobs/{image.id}"):
            sock.sendall(http_answer(200, image.config))
        else:
            sock.sendall(http_answer(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'))

    return answer


@pytest.fixture
def deadlines(monkeypatch):
    for key, value in DEADLINES.items():
        monkeypatch.setenv(key, value)


def _refused_cleanly(err: str, host: str) -> None:
    assert "Traceback" not in err
    assert f"registry {host}" in err


def test_a_server_that_drips_fails_the_release_at_its_deadline(raw_server, tmp_path):
    """One byte every 0.2 s never trips a socket timeout; the request and operation deadlines end it."""

    def drip(_method, _path, sock, stop):
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            if stop.wait(0.2):
                return
            sock.sendall(b" ")

    server = raw_server(drip)
    argv = _documents(tmp_path, server.host, _image())
    done = build_py_process(*argv, "--attempts", "20", timeout=30, env=dict(os.environ, **DEADLINES))
    assert done.returncode == 2, done.stderr
    _refused_cleanly(done.stderr, server.host)
    assert "gave no complete answer within 2 s" in done.stderr
    assert "no complete answer within 0.5 s" in done.stderr  # each request was cut at its own deadline
    assert 2 <= len(server.requests) <= 5
    assert not (tmp_path / "rec").exists()


def test_a_server_that_drips_its_status_line_is_cut_at_the_request_deadline(raw_server):
    """The head itself dripped (http.client reads it line by line, each read well inside a socket timeout)."""

    def drip_head(_method, _path, sock, stop):
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}":
            if stop.wait(0.2):
                return
            sock.sendall(bytes([byte]))

    server = raw_server(drip_head)
    api = RegistryAPI(server.host, bounds=Bounds(request_s=0.5, operation_s=4))
    # the operation ends at its 4 s or when the retries are spent, whichever comes first (the last attempt
    # may be cut by what is left of the operation, so the message's figure depends on timing)
    with pytest.raises(UserError, match=r"no complete answer within [0-9.]+ s"):
        api.manifest("h23-test/x", "dev")
    # the whole head takes 8 s to drip, twice the operation: without a deadline per request the first
    # request would run until the operation's end and be the only one; a second means it was cut at 0.5 s
    assert len(server.requests) >= 2


def test_a_3_gib_content_length_is_refused_before_reading(raw_server, tmp_path, deadlines):
    def huge(_method, _path, sock, _stop):
        sock.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 3221225472\r\n\r\n{"
        )

    server = raw_server(huge)
    rc, _out, err = build_py(*_documents(tmp_path, server.host, _image()))
    assert rc == 2
    _refused_cleanly(err, server.host)
    assert "gave an answer of 3221225472 bytes (Content-Length), refused before reading it" in err
    assert "over the cap of 4194304 bytes" in err
    assert len(server.requests) == 1  # not asked again: the same answer would come


def test_a_body_over_the_cap_without_a_length_is_cut_off(raw_server):
    def endless(_method, _path, sock, stop):
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        for _ in range(64):
            if stop.is_set():
                return
            sock.sendall(b" " * 65536)

    server = raw_server(endless)
    api = RegistryAPI(server.host, bounds=Bounds(request_s=5, operation_s=10, max_body=1 << 20))
    with pytest.raises(UserError, match=r"an answer of more than 1048576 bytes, cut off there: over the cap"):
        api.manifest("h23-test/x", "dev")


def _short_body(_method, _path, sock, _stop):
    sock.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":')


def _not_http(_method, _path, sock, _stop):
    sock.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")


@pytest.mark.parametrize(
    "answer, says",
    [(_short_body, "IncompleteRead"), (_not_http, "BadStatusLine")],
    ids=["short-body", "not-http"],
)
def test_transport_faults_are_exit_2_naming_the_registry(raw_server, tmp_path, deadlines, answer, says):
    server = raw_server(answer)
    rc, _out, err = build_py(*_documents(tmp_path, server.host, _image()), "--attempts", "2")
    assert rc == 2, err
    _refused_cleanly(err, server.host)
    assert "unreachable or failing" in err and says in err and "(after 2 attempts)" in err
    assert len(server.requests) == 2
    assert not (tmp_path / "rec").exists()


def test_an_image_config_that_is_not_json_is_exit_2_naming_the_registry(raw_server, tmp_path, deadlines):
    """The bytes match their digest (the registry is honest) but are no JSON: refused, no traceback."""
    image, puts = _image_of(b"{not json"), []
    server = raw_server(_honest(image, puts))
    rc, _out, err = build_py(*_documents(tmp_path, server.host, image))
    assert rc == 2, err
    _refused_cleanly(err, server.host)
    assert f"image config h23-test/x@{image.id} is not JSON" in err
    assert puts == []


def test_a_manifest_with_other_bytes_than_its_digest_is_refused_and_nothing_is_put(
    raw_server, tmp_path, deadlines
):
    """The registry answers GET manifests/<digest> with other bytes (same image config, no digest header):
    the gate must not clear on them, and no release tag may be written from them."""
    image, puts = _image(), []
    other = json.dumps(json.loads(image.manifest), indent=1).encode()
    honest = _honest(image, puts)

    def lying(method, path, sock, stop):
        if method == "GET" and path.endswith(f"/manifests/{image.digest}"):
            sock.sendall(http_answer(200, other, {"Content-Type": MANIFEST_TYPES[0]}))
        else:
            honest(method, path, sock, stop)

    server = raw_server(lying)
    argv = _documents(tmp_path, server.host, image)
    rc, _out, err = build_py(*argv)
    assert rc == 1, err
    _refused_cleanly(err, server.host)
    assert f"answered GET h23-test/x@{image.digest} with other bytes (their sha256 is {_sha(other)})" in err
    assert puts == [] and not any(m == "PUT" for m, _ in server.requests)
    assert not (tmp_path / "rec").exists()
    # the same registry without the lie: the release goes through (the refusal above was the lie's)
    truthful = raw_server(honest)
    assert build_py(*_documents(tmp_path, truthful.host, image)).rc == 0
    assert puts == ["/v2/h23-test/x/manifests/r1"]


@pytest.mark.parametrize("value", ["0", "-1", "soon", "1e9"])
def test_bad_deadline_settings_are_exit_2_naming_the_variable(value, monkeypatch):
    monkeypatch.setenv("REGISTRY_OPERATION_TIMEOUT", value)
    with pytest.raises(UserError) as err:
        Bounds.from_env()
    assert err.value.key == "REGISTRY_OPERATION_TIMEOUT"


def test_a_registrys_own_text_reaches_the_terminal_escaped(raw_server, tmp_path, deadlines):
    """A registry refusing the tag's PUT with ESC sequences (clear the screen, retitle the window) and a
    direction override in its body: the refusal quotes that body, every control character shown escaped."""
    image, puts = _image(), []
    honest = _honest(image, puts)
    hostile = b"\x1b[2J\x1b]0;owned\x07denied\xe2\x80\xae\xc2\x9b"

    def answer(method, path, sock, stop):
        if method == "PUT":
            sock.sendall(http_answer(400, hostile))
        else:
            honest(method, path, sock, stop)

    server = raw_server(answer)
    rc, _out, err = build_py(*_documents(tmp_path, server.host, image))
    assert rc == 1, err
    assert "\\x1b[2J\\x1b]0;owned\\x07denied\\u202e\\x9b" in err, err
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", err), repr(err)
