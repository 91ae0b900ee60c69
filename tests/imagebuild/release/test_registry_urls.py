"""URLs a hostile registry names: a Bearer challenge's realm and a redirect's Location. Only http(s) is ever
opened (a `file:` realm would read a local token file and send its `token` to the registry), and the
registry's login never follows a redirect to another origin. A registry host the user gives is a host[:port]
before any URL is made of it. Small servers on 127.0.0.1 (tests/services.py RawServer) play the registry and
the redirect's target; every call ends within seconds.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from types import SimpleNamespace

import pytest
from cli import build_py
from release_setup import make_keys
from services import RawServer, free_port, http_answer, summary_entry, write_summary

from imagebuild.adapters.registry import Bounds, Credentials, RegistryAPI
from imagebuild.errors import UserError
from imagebuild.retry import RetryPolicy

pytest_plugins = ["services_fixtures"]  # fixtures: raw_server

FAST = RetryPolicy(attempts=2, base=0.01, cap=0.02)
BOUNDS = Bounds(request_s=2, operation_s=5)
BLOB = b'{"config": {}}'
DIGEST = "sha256:" + hashlib.sha256(BLOB).hexdigest()


def _api(server: RawServer) -> RegistryAPI:
    return RegistryAPI(server.host, Credentials("team", "registry-secret"), policy=FAST, bounds=BOUNDS)


def test_a_realm_that_is_a_local_file_is_never_opened(raw_server, tmp_path):
    """Before: urllib's default opener read the file and its `token` went to the registry as Bearer."""
    local = tmp_path / "cached-token.json"
    local.write_text('{"token": "LOCAL-SECRET"}')

    def challenge(_method, _path, sock: socket.socket, _stop: threading.Event) -> None:
        realm = f'Bearer realm="file://{local}",service="x"'
        sock.sendall(http_answer(401, headers={"WWW-Authenticate": realm}))

    server = raw_server(challenge)
    with pytest.raises(UserError, match=r"only http\(s\) URLs") as err:
        _api(server).blob("r", DIGEST)
    assert f"registry {server.host}" in str(err.value) and "file://" in str(err.value)
    assert len(server.requests) == 1
    assert not any("LOCAL-SECRET" in h.get("authorization", "") for h in server.heads)


def test_the_login_does_not_follow_a_redirect_to_another_origin(raw_server):
    """Registries send blob GETs to storage elsewhere; the registry's credentials stay with the registry."""
    target = raw_server(lambda _m, _p, sock, _s: sock.sendall(http_answer(200, BLOB)))

    def answer(_method, path, sock, _stop):
        if "authorization" not in registry.heads[-1]:
            sock.sendall(http_answer(401, headers={"WWW-Authenticate": 'Basic realm="r"'}))
        else:
            sock.sendall(http_answer(307, headers={"Location": f"http://{target.host}{path}"}))

    registry = raw_server(answer)
    assert _api(registry).blob("r", DIGEST) == BLOB
    assert [h.get("authorization", "")[:6] for h in registry.heads] == ["", "Basic "]
    assert len(target.requests) == 1 and "authorization" not in target.heads[0]


def test_a_redirect_within_the_registry_keeps_the_login(raw_server):
    """Same scheme, host and port: the registry's own redirect is still logged in."""

    def answer(_method, path, sock, _stop):
        heads = registry.heads[-1]
        if "authorization" not in heads:
            sock.sendall(http_answer(401, headers={"WWW-Authenticate": 'Basic realm="r"'}))
        elif "moved" not in path:
            sock.sendall(http_answer(307, headers={"Location": f"http://{registry.host}/moved{path}"}))
        else:
            sock.sendall(http_answer(200, BLOB))

    registry = raw_server(answer)
    assert _api(registry).blob("r", DIGEST) == BLOB
    assert [p.startswith("/moved") for _m, p in registry.requests] == [False, False, True]
    assert registry.heads[-1]["authorization"].startswith("Basic ")


def test_a_redirect_to_ftp_is_refused_not_followed(raw_server):
    """urllib follows ftp: redirects by default; nothing but http(s) is opened."""
    port = free_port()

    def answer(_method, path, sock, _stop):
        sock.sendall(http_answer(307, headers={"Location": f"ftp://127.0.0.1:{port}/x"}))

    registry = raw_server(answer)
    with pytest.raises(UserError, match=r"redirect to 'ftp://127\.0\.0\.1:\d+/x': only http\(s\) URLs"):
        _api(registry).blob("r", DIGEST)
    assert len(registry.requests) == 1


@pytest.mark.parametrize(
    "image", ["[::1/r:t", "evil.example%40127.0.0.1:9/r:t", "a..b/r:t", "x y.example/r:t"]
)
def test_an_image_whose_registry_host_is_no_host_is_exit_2(image, tmp_path):
    """The host part of IMAGE goes into URLs: '[::1' was a ValueError traceback, '#@' would make urllib
    read another host than the one the login was looked up for (%40 is '@' once decoded)."""
    res = build_py("verify", image, "--key", make_keys(tmp_path, "team")[1], "--attempts", "1")
    assert res.rc == 2, res.err
    assert "key 'IMAGE': bad registry host" in res.err and "Traceback" not in res.err


@pytest.mark.parametrize("where", ["registry.example@127.0.0.1:9", "127.0.0.1:9?x=1", "[::1"])
def test_a_registry_flag_that_is_no_host_is_exit_2(where, tmp_path):
    image = SimpleNamespace(id="sha256:" + "a" * 64)  # refused before the engine or the registry is asked
    summary = write_summary(tmp_path / "s.json", [summary_entry("v", image)])
    res = build_py("push", "--summary", summary, "--registry", where)
    assert res.rc == 2, res.err
    assert "key '--registry'" in res.err and "is no registry host" in res.err, res.err


@pytest.mark.parametrize("length", [b"Content-Length: 100000000000", b"Connection: close"])
def test_a_redirects_own_body_is_read_under_the_cap(raw_server, length):
    """urllib reads a redirect's body whole before following it: a 100 GB Content-Length was a MemoryError
    traceback, an endless body grew the process until the request's deadline."""

    def endless(_method, _path, sock, stop):
        sock.sendall(b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\n" + length + b"\r\n\r\n")
        while not stop.is_set():
            try:
                sock.sendall(b" " * 65536)
            except OSError:
                return

    registry = raw_server(endless)
    api = RegistryAPI(
        registry.host, policy=FAST, bounds=Bounds(request_s=5, operation_s=10, max_body=1 << 20)
    )
    with pytest.raises(UserError, match=r"over the cap of 1048576 bytes"):
        api.manifest("r", "t")
    assert len(registry.requests) == 1  # refused at once, never followed
