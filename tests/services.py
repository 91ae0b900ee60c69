"""Real services the registry/AWS tests start on 127.0.0.1 free ports, and stop by PID.

- `Registry`: Debian's `docker-registry` (distribution 2.8, /usr/bin/docker-registry), filesystem storage in
  a temp dir, optionally with htpasswd (bcrypt) auth. The bcrypt hash comes from the python `bcrypt` package
  when installed, else from `htpasswd -B` (Debian package apache2-utils).
- `MotoServer`: moto's server (`python -m moto.server`), for boto3 over real HTTP via endpoint_url.
- `FaultProxy`: a small HTTP proxy in front of either one that answers chosen requests with 429/503 (a bounded
  number of times) or delays them, and forwards everything else byte for byte. It is how the tests throttle a
  registry or an AWS API without mocking the client. A fault with `forward=True` lets the request through and
  loses the answer (a gateway's 502 after the registry did the work).
- `RawServer`: a TCP server on 127.0.0.1 whose answers a test writes byte for byte on the socket (a server
  that drips, lies about its length, resets, or speaks no HTTP at all): what no real registry would do.

Nothing here is a stand-in for the service itself: each is the real server, started and stopped here.
Below them: small real images (FROM the local base, a lock in their label) and summaries/check reports in
the agreed formats. The pytest fixtures over all this live in tests/services_fixtures.py.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Dict, List, Optional

REGISTRY_BIN = "/usr/bin/docker-registry"
# Test sessions share one docker engine: names and image contents that a session makes carry this id, so one
# session's cleanup never removes another's images.
RUN = os.environ.get("EFA_TEST_RUN") or uuid.uuid4().hex[:8]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    """Wait until `url` answers any HTTP status (401 counts: the server is up), or fail with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"service at {url} not up after {timeout}s: {log.read_text()[-2000:]}")


def _stop(proc: Optional[subprocess.Popen]) -> None:
    """Stop a process this module started, by its PID only: SIGTERM, then SIGKILL after 5 s."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def bcrypt_htpasswd_line(user: str, password: str) -> str:
    """One htpasswd line with a bcrypt hash (the only scheme docker-registry accepts)."""
    try:
        import bcrypt
    except ImportError:
        exe = shutil.which("htpasswd")
        if not exe:
            raise RuntimeError(
                "need python `bcrypt` or `htpasswd` (apt apache2-utils) to make an htpasswd file"
            ) from None
        out = subprocess.run(
            [exe, "-nbB", user, password], check=True, capture_output=True, text=True, timeout=30
        ).stdout
        return out.strip()
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    return f"{user}:{hashed}"


@dataclass
class Registry:
    """A real OCI registry (distribution) on 127.0.0.1:port with its storage in a temp dir."""

    user: Optional[str] = None
    password: Optional[str] = None
    port: int = 0
    root: Optional[Path] = None
    proc: Optional[subprocess.Popen] = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        if not os.path.exists(REGISTRY_BIN):
            raise FileNotFoundError(REGISTRY_BIN)
        self.root = Path(tempfile.mkdtemp(prefix="h6-registry-"))
        self.port = free_port()
        auth = ""
        if self.user:
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text(bcrypt_htpasswd_line(self.user, self.password or "") + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: test-registry\n    path: {htpasswd}\n"
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n" + auth
        )
        log = self.root / "registry.log"
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [REGISTRY_BIN, "serve", str(config)], stdout=fh, stderr=subprocess.STDOUT
            )
        _wait_http(f"http://{self.host}/v2/", self.proc, 20, log)
        return self

    def stop(self) -> None:
        _stop(self.proc)
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class MotoServer:
    """moto's server on 127.0.0.1:port; `env()` gives the dummy credentials a test sets for boto3."""

    port: int = 0
    proc: Optional[subprocess.Popen] = None
    logdir: Optional[Path] = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        self.port = free_port()
        self.logdir = Path(tempfile.mkdtemp(prefix="h6-moto-"))
        log = self.logdir / "moto.log"
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        _wait_http(f"{self.endpoint_url}/moto-api/", self.proc, 30, log)
        return self

    def reset(self) -> None:
        """Forget every resource (moto's own reset endpoint), so tests do not see each other's state."""
        req = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).close()

    @staticmethod
    def env() -> Dict[str, str]:
        """Dummy credentials: set in the test's environment only, never real ones."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def stop(self) -> None:
        _stop(self.proc)
        if self.logdir:
            shutil.rmtree(self.logdir, ignore_errors=True)


@dataclass
class Fault:
    """Answer requests for which `match(method, path, headers)` is true with `status` (at most `times`
    times; a non-positive `times` means never answer, only delay), after waiting `delay` seconds."""

    match: Callable[[str, str, Dict[str, str]], bool]
    status: int = 503
    times: int = 1
    delay: float = 0.0
    retry_after: Optional[str] = None
    body: Optional[bytes] = None
    content_type: str = "text/plain"
    forward: bool = False  # let the request reach upstream first, then answer with `status` instead
    hits: int = 0


@dataclass
class FaultProxy:
    """HTTP/1.1 proxy on 127.0.0.1:port in front of `upstream` (host:port) that injects `faults`."""

    upstream: str
    faults: List[Fault] = field(default_factory=list)
    port: int = 0
    forwarded: int = 0
    _server: Optional[ThreadingHTTPServer] = None
    _thread: Optional[threading.Thread] = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args, **kwargs) -> None:  # quiet
                return None

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                headers = {k: v for k, v in self.headers.items()}
                for fault in proxy.faults:
                    if fault.match(self.command, self.path, headers):
                        if fault.delay:
                            time.sleep(fault.delay)
                        if fault.hits < fault.times:
                            fault.hits += 1
                            if fault.forward:
                                self._forward(body, headers)
                            text = fault.body or f"injected {fault.status}\n".encode()
                            self.send_response(fault.status)
                            if fault.retry_after:
                                self.send_header("Retry-After", fault.retry_after)
                            self.send_header("Content-Type", fault.content_type)
                            self.send_header("Content-Length", str(len(text)))
                            self.end_headers()
                            if self.command != "HEAD":
                                self.wfile.write(text)
                            return
                        break
                status, reason, got, data = self._forward(body, headers)
                self.send_response(status, reason)
                for k, v in got:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                length = dict((k.lower(), v) for k, v in got).get("content-length")
                length = length if self.command == "HEAD" else str(len(data))
                if length is not None:
                    self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _forward(self, body: bytes, headers: Dict[str, str]) -> tuple:
                """The request sent upstream as it came: (status, reason, headers, body) of the answer."""
                proxy.forwarded += 1
                host, port = proxy.upstream.rsplit(":", 1)
                conn = http.client.HTTPConnection(host, int(port), timeout=120)
                fwd = {
                    k: v for k, v in headers.items() if k.lower() not in ("transfer-encoding", "connection")
                }
                fwd["Content-Length"] = str(len(body))
                if self.command in ("GET", "HEAD") and not body:
                    fwd.pop("Content-Length")
                conn.request(self.command, self.path, body=body or None, headers=fwd)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                return resp.status, resp.reason, resp.getheaders(), data

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


@dataclass
class RawServer:
    """TCP on 127.0.0.1:port; each connection's request head (and body, by Content-Length) is read, recorded
    as (method, path) in `requests`, and `answer(method, path, sock, stop)` writes whatever it likes. `stop`
    is set by `stop()`: an answer that drips or waits returns when it is set; no thread outlives the test."""

    answer: Callable[[str, str, socket.socket, threading.Event], None]
    port: int = 0
    requests: List[tuple] = field(default_factory=list)
    heads: List[Dict[str, str]] = field(default_factory=list)  # each request's header fields, names lowercase
    _listener: Optional[socket.socket] = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: List[threading.Thread] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RawServer:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            worker = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            worker.start()
            self._threads.append(worker)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                head, _, rest = head.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                fields = [x.partition(":") for x in lines[1:]]
                length = next((int(v) for k, _, v in fields if k.strip().lower() == "content-length"), 0)
                while len(rest) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                self.requests.append((method, path))
                self.heads.append({k.strip().lower(): v.strip() for k, _, v in fields})
                self.answer(method, path, conn, self._stop)
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        if self._listener:
            self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


def http_answer(status: int, body: bytes = b"", headers: Optional[Dict[str, str]] = None) -> bytes:
    """A whole HTTP/1.1 answer (closing the connection), as bytes for a RawServer to send."""
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


# -- small real images and documents in the agreed formats ------------------------------------------------
LOCK_LABEL = "org.efa-image-build.lock"


def small_lock(name: str, nccl: str = "2.27.7", ofi: str = "1.16.0") -> dict:
    """A small variant lock in the agreed format (docs/architecture.md), enough for release notes."""
    return {
        "schema": "efa-image-build/lock/v1",
        "name": name,
        "base": {"image": "localbase/debian:bookworm-minbase", "kind": "local", "os": "debian12"},
        "cuda": "12.8",
        "python": "/usr/bin/python3",
        "components": {
            "nccl": {
                "version": nccl,
                "method": "wheel",
                "prefix": "/opt/nccl",
                "url": None,
                "sha256": None,
                "params": {},
            },
            "aws_ofi_nccl": {
                "version": ofi,
                "method": "source",
                "prefix": "/opt/aws-ofi-nccl",
                "url": None,
                "sha256": None,
                "params": {},
            },
            "libfabric": {
                "version": "1.17.0",
                "method": "apt",
                "prefix": "/usr",
                "url": None,
                "sha256": None,
                "params": {},
            },
        },
        "env": [],
        "env_forbidden": [],
        "labels": {},
        "tags": [f"h6-test/{name}:dev"],
        "instance_types": ["p5.48xlarge"],
    }


SMALL_TAGS = {name: f"h6-test/{name}-{RUN}:dev" for name in ("a", "b")}  # services_fixtures.small_images


def build_small_image(client, local_base: str, lock: dict, tag: str):
    """A real image FROM the local base whose label carries `lock` (built by the engine, no network)."""
    import io

    text = json.dumps(lock, sort_keys=True)
    dockerfile = (
        f"FROM {local_base}\nLABEL {LOCK_LABEL}={json.dumps(text)} org.efa-image-build.test-run={RUN}\n"
    )
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    return image


def build_arm64_scratch(
    client, labels: Dict[str, str], tag: Optional[str] = None, files: Optional[Dict[str, str]] = None
):
    """A small real image whose config says linux/arm64 (FROM scratch: no emulation needed), with `labels`
    and `files` (absolute path in the image -> text: a dpkg status makes it one `build.py attest` reads)."""
    import io
    import tarfile

    said = " ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
    copies = "".join(f"COPY f{n} {path}\n" for n, path in enumerate(files or {}))
    data = f"FROM scratch\nCOPY Dockerfile /arm64-marker\n{copies}"
    data += f"LABEL {said} org.efa-image-build.test-run={RUN}\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in [
            ("Dockerfile", data),
            *((f"f{n}", t) for n, t in enumerate((files or {}).values())),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    buf.seek(0)
    image, _ = client.images.build(
        fileobj=buf, custom_context=True, platform="linux/arm64", rm=True, forcerm=True, tag=tag
    )
    assert image.attrs["Architecture"] == "arm64"
    return image


def write_summary(path: Path, entries: list) -> Path:
    """A build summary in the agreed format, as `build.py build` writes it."""
    doc = {"schema": "efa-image-build/build-summary/v1", "variants": entries}
    path.write_text(json.dumps(doc, indent=2))
    return path


def summary_entry(variant: str, image, lock_path: Optional[Path] = None, tags: Optional[list] = None) -> dict:
    return {
        "variant": variant,
        "status": "built",
        "image_id": image.id,
        "tags": tags or [f"h6-test/{variant}:dev"],
        "context_hash": "0" * 16,
        "duration_s": 1.0,
        "log": f"build/{variant}/build.log",
        "lock": str(lock_path) if lock_path else None,
        "digest": None,
        "pushed": [],
    }


def write_check_report(path: Path, results: list) -> Path:
    """A static check report in the agreed format; `results` are (variant, image_id, passed) triples."""
    images = []
    for variant, image_id, passed in results:
        images.append(
            {
                "variant": variant,
                "image": f"h6-test/{variant}:dev",
                "image_id": image_id,
                "passed": passed,
                "checks": [
                    {"name": "plugin-present", "status": "pass" if passed else "fail", "detail": "test"}
                ],
            }
        )
    path.write_text(json.dumps({"schema": "efa-image-build/check-report/v1", "images": images}, indent=2))
    return path
