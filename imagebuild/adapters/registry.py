"""Push images by digest to any OCI registry, and read/write manifests through the registry's v2 HTTP API.

The docker SDK pushes (the engine does the layer upload); the v2 API, spoken here with urllib, answers the
questions a release needs without pulling anything: does this tag exist, which image (config digest) does a
digest name, and "put this exact manifest under that tag" (promotion keeps the digest byte for byte).

Every answer is bounded (`Bounds`): one request may take `request_s`, one operation (a call with its retries)
`operation_s`, and a body may hold `max_body` bytes. Socket timeouts bound each read, not their sum, so a
watchdog shuts the socket down at the request's deadline: a server that drips a byte at a time cannot hold a
release. A manifest is used only after its bytes hash to the digest asked for (or, by tag, to the registry's
digest header): a registry that serves other bytes is refused before anything is written from them.

Credentials come from flags/env or the docker config (`~/.docker/config.json`, credential helpers included,
via the docker SDK). They are passed per request and never written anywhere: not to a file, a label, a log
line or a summary. `Credentials.__repr__` hides the secret so an accidental print cannot leak it.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import ipaddress
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from imagebuild.errors import ChecksFailed, UserError
from imagebuild.retry import (
    DEFAULT_POLICY,
    RetriesExhausted,
    Retryable,
    RetryPolicy,
    call_with_retry,
    parse_retry_after,
)

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
DEFAULT_REGISTRY = ""  # an unqualified name: the engine's default registry (never named in this code)
Log = Callable[[str], None]


class Refused(ChecksFailed):
    """The tool refused to do what was asked (overwrite a tag, promote an unchecked digest): exit 1."""


class AuthRefused(UserError):
    """The registry refused the credentials (or none were found): exit 2, fix the configuration."""


@dataclass(frozen=True)
class Credentials:
    """A registry login. `source` says where it came from, for messages; the secret is never shown."""

    username: str
    password: str = field(repr=False)
    source: str = "flags"

    def auth_config(self) -> Dict[str, str]:
        return {"username": self.username, "password": self.password}

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


@dataclass(frozen=True)
class ImageRef:
    """`registry/repository[:tag][@digest]`, split the way the docker engine splits it."""

    registry: str
    repository: str
    tag: Optional[str] = None
    digest: Optional[str] = None

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


# Used with fullmatch only: `$` matches before a trailing newline, so `^r9$` accepts "r9\n" (issue 31).
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REPO_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
# a registry host as image references have it: DNS labels (letters, digits, inner '-') joined by '.', or an
# IPv6 address in brackets, then an optional :port (distribution/reference regexp.go, domainAndPort, at
# 727f80d4); nothing a URL's login, path or query could come from ('[::1' was a ValueError traceback)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")


def is_host(host: str) -> bool:
    """Whether `host` is a registry host[:port] (see _HOST_RE)."""
    return _HOST_RE.fullmatch(host) is not None


def split_ref(ref: str, key: str = "image") -> ImageRef:
    """Parse an image reference; a first path part with '.' or ':' (or 'localhost') is the registry host."""
    text = ref.strip()
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.fullmatch(digest):
            raise UserError(
                f"bad digest in image reference {ref!r}", key=key, hint="expected sha256:<64 hex>"
            )
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
        if not is_host(registry):
            raise UserError(
                f"bad registry host {registry!r} in image reference {ref!r}",
                key=key,
                hint="HOST[:PORT]: a DNS name, an IPv4 address or [IPv6]",
            )
    else:
        registry, path = DEFAULT_REGISTRY, text
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.fullmatch(tag):
            raise UserError(f"bad tag {tag!r} in image reference {ref!r}", key=key)
    if not path or not _REPO_RE.fullmatch(path):
        raise UserError(
            f"bad repository name {path!r} in image reference {ref!r}",
            key=key,
            hint="lowercase letters, digits and separators . _ - /",
        )
    return ImageRef(registry, path, tag, digest)


# Tags that start with this are the tool's own (release records and intents in the image's repository,
# imagebuild/release/registryrecords.py): never a release tag, a channel or a pushed tag, so a record is never
# taken for one, nor one for a record.
TOOL_TAG_PREFIX = "_efa."


def check_tag(tag: str, key: str = "tag", own: bool = False) -> str:
    """`tag` if it is a tag (the distribution spec's `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`) a user may give;
    `own`: one of the tool's own (TOOL_TAG_PREFIX), which a user may not."""
    if not _TAG_RE.fullmatch(tag):
        raise UserError(
            f"bad tag {tag!r}", key=key, hint="1-128 of letters, digits, _ . - (not starting . -)"
        )
    if tag.startswith(TOOL_TAG_PREFIX) != own:
        raise UserError(
            f"tag {tag!r} starts with {TOOL_TAG_PREFIX!r}: those are the tool's release records",
            key=key,
            hint="choose a tag that does not start with " + TOOL_TAG_PREFIX,
        )
    return tag


def resolve_credentials(
    registry: str,
    username: Optional[str] = None,
    password: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    docker_config: Optional[str] = None,
) -> Optional[Credentials]:
    """Flags first, then REGISTRY_USERNAME/REGISTRY_PASSWORD, then the docker config; None when none exist."""
    env = dict(os.environ if env is None else env)
    if username or password:
        if not (username and password):
            raise UserError(
                "--username needs a password (--password-stdin or REGISTRY_PASSWORD)", key="--username"
            )
        return Credentials(username, password, "flags")
    if env.get("REGISTRY_USERNAME") and env.get("REGISTRY_PASSWORD"):
        return Credentials(env["REGISTRY_USERNAME"], env["REGISTRY_PASSWORD"], "environment")
    from imagebuild.adapters.docker_engine import config_login

    try:
        found = config_login(registry, docker_config)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - a broken docker config is the user's file
        where = docker_config or "~/.docker/config.json"
        raise UserError(f"cannot read docker config: {err}", file=where) from err
    user, secret = (
        found.get("username") or found.get("Username"),
        found.get("password") or found.get("Secret"),
    )
    if user and secret:
        return Credentials(user, secret, "docker config")
    return None


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 or host.startswith("[") else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def scheme_for(host: str, plain_http: Optional[bool] = None) -> str:
    """https, except loopback registries (which dockerd also treats as insecure) or when asked."""
    if plain_http is not None:
        return "http" if plain_http else "https"
    return "http" if is_loopback(host) else "https"


@dataclass(frozen=True)
class Bounds:
    """How long one HTTP request and one operation (a call with all its retries) may take, and how many bytes
    an answer may hold. 4 MiB: the size the OCI distribution spec says registries should accept for a
    manifest; image configs are far smaller."""

    request_s: float = 60.0
    operation_s: float = 300.0
    max_body: int = 4 * 1024 * 1024

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Bounds:
        """The defaults, or REGISTRY_REQUEST_TIMEOUT / REGISTRY_OPERATION_TIMEOUT (seconds) from `env`."""
        env = os.environ if env is None else env
        return cls(
            request_s=_seconds(env, "REGISTRY_REQUEST_TIMEOUT", cls.request_s),
            operation_s=_seconds(env, "REGISTRY_OPERATION_TIMEOUT", cls.operation_s),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise UserError(f"{text!r} is not a number of seconds in (0, 86400]", key=name)
    return value


class _Watchdog:
    """Shuts one request's sockets down when its time is up, so a blocked read returns at the deadline."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._socks: List[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.fired:
                _shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._socks:
                _shutdown(sock)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:  # the plain socket's shutdown, also under TLS: it only wakes the reader, the TLS state is left alone
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _Watched:
    """A connection whose socket the request's watchdog may shut down once it is connected."""

    def __init__(self, *args: Any, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watchdog = watchdog

    def connect(self) -> None:
        super().connect()
        self.watchdog.watch(self.sock)


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self.watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_WatchedHTTP, req, watchdog=self.watchdog)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self.watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_WatchedHTTPS, req, context=self._context, watchdog=self.watchdog)


class _Unsafe(Exception):
    """A URL the registry named (a redirect's Location, a Bearer challenge's realm) that is no http(s) URL."""


# http(s) only: urllib's default opener would also read a file:, ftp: or data: URL a hostile registry names as
# its realm or redirect target (a local token file's `token` then sent to it as a Bearer token)
_SCHEMES = ("http", "https")


def _origin(url: str) -> Tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


class _Redirect(urllib.request.HTTPRedirectHandler):
    """Follows a redirect to http(s) only, and drops the Authorization header where the redirect leaves the
    origin (another host or port, or https to http): the credentials are the registry's, not the target's
    (Go's net/http, which docker uses, drops it on a redirect to another host too). The redirect's own body
    is read under the body cap: urllib reads it whole (a Content-Length of 100 GB was a MemoryError)."""

    def __init__(self, max_body: int) -> None:
        super().__init__()
        self.max_body = max_body

    def http_error_302(self, req, fp, code, msg, headers):  # type: ignore[no-untyped-def]
        _read_capped(fp, self.max_body)  # urllib's own read after this one then finds nothing left
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if urllib.parse.urlsplit(newurl).scheme.lower() not in _SCHEMES:
            raise _Unsafe(f"a redirect to {newurl!r}")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


class _TooLarge(Exception):
    """An answer over the body cap (by its Content-Length, or by what arrived)."""


def _read_capped(resp: Any, limit: int) -> bytes:
    """The body, refused unread when its Content-Length is over `limit`, and cut off once more arrives;
    a body shorter than its Content-Length is an IncompleteRead (http.client returns it short)."""
    declared = resp.headers.get("Content-Length", "").strip()
    length = int(declared) if declared.isdigit() else None
    if length is not None and length > limit:
        raise _TooLarge(f"an answer of {length} bytes (Content-Length), refused before reading it")
    chunks: List[bytes] = []
    total = 0
    while True:
        chunk = resp.read(min(65536, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _TooLarge(f"an answer of more than {limit} bytes, cut off there")
    body = b"".join(chunks)
    if length is not None and len(body) < length:
        raise http.client.IncompleteRead(body, length - len(body))
    return body


def sha256_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class RemoteManifest:
    """A manifest as the registry serves it: its digest, media type, raw bytes and the image config digest."""

    digest: str
    media_type: str
    body: bytes
    config_digest: Optional[str]


def config_digest_of(body: bytes) -> Optional[str]:
    """The image config digest (= the local image id) a single-image manifest names; None for an index."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    config = doc.get("config") if isinstance(doc, dict) else None
    return config.get("digest") if isinstance(config, dict) else None


def _parse_challenge(header: str) -> Tuple[str, Dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


class RegistryAPI:
    """The few v2 registry calls a push and a release need, with auth challenges and bounded retries."""

    def __init__(
        self,
        registry: str,
        creds: Optional[Credentials] = None,
        plain_http: Optional[bool] = None,
        policy: RetryPolicy = DEFAULT_POLICY,
        bounds: Optional[Bounds] = None,
        log: Optional[Log] = None,
    ) -> None:
        self.registry = registry
        self.creds = creds
        self.base = f"{scheme_for(registry, plain_http)}://{registry}"
        self.policy = policy
        self.bounds = bounds if bounds is not None else Bounds.from_env()
        self.log = log
        self._auth: Optional[str] = None

    # -- transport -------------------------------------------------------------------------------------
    def _exchange(
        self, method: str, url: str, headers: Dict[str, str], data: Optional[bytes], until: float
    ) -> Tuple[int, Dict[str, str], bytes]:
        """One HTTP request, done by `until` (monotonic) or within `bounds.request_s`, whichever is first.

        An HTTP error status comes back as a status; a transport fault (reset, short body, timeout, garbage)
        is Retryable; an answer over the body cap is exit 2 at once (asking again gets the same answer)."""
        if urllib.parse.urlsplit(url).scheme.lower() not in _SCHEMES:
            raise UserError(f"registry {self.registry} named {url!r}: only http(s) URLs", key="registry")
        budget = min(self.bounds.request_s, until - time.monotonic())
        if budget <= 0:
            raise Retryable(f"{method} {url}: no time left")
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with _Watchdog(budget) as watchdog:
            opener = urllib.request.build_opener(
                _HTTPHandler(watchdog), _HTTPSHandler(watchdog), _Redirect(self.bounds.max_body)
            )
            try:
                try:
                    resp = opener.open(req, timeout=budget)
                except urllib.error.HTTPError as err:
                    resp = err
                with resp:
                    body = b"" if method == "HEAD" else _read_capped(resp, self.bounds.max_body)
                    return resp.status, dict(resp.headers.items()), body
            except _Unsafe as err:
                raise UserError(
                    f"registry {self.registry}: {method} {url} gave {err}: only http(s) URLs", key="registry"
                ) from None
            except _TooLarge as err:
                raise UserError(
                    f"registry {self.registry}: {method} {url} gave {err}: over the cap of "
                    f"{self.bounds.max_body} bytes",
                    key="registry",
                ) from None
            except (OSError, http.client.HTTPException, ValueError) as err:
                if watchdog.fired:
                    raise Retryable(f"{method} {url}: no complete answer within {budget:.3g} s") from err
                reason = getattr(err, "reason", None) or f"{type(err).__name__}: {err}"
                raise Retryable(f"{method} {url}: {reason}") from err

    def _once(self, method: str, path: str, headers: Dict[str, str], data: Optional[bytes], until: float):
        url = self.base + path
        for _ in range(2):  # second pass only after an auth challenge
            hdrs = dict(headers)
            if self._auth:
                hdrs["Authorization"] = self._auth
            status, got, body = self._exchange(method, url, hdrs, data, until)
            if status == 401 and self._auth is None:
                challenge = {k.lower(): v for k, v in got.items()}.get("www-authenticate", "")
                self._auth = self._answer_challenge(challenge, path, until)
                if self._auth:
                    continue
            if status == 429 or status >= 500:
                retry_after = {k.lower(): v for k, v in got.items()}.get("retry-after")
                raise Retryable(f"{method} {url}: HTTP {status}", parse_retry_after(retry_after))
            return status, got, body
        return 401, {}, b""

    def _answer_challenge(self, header: str, path: str, until: float) -> Optional[str]:
        scheme, params = _parse_challenge(header)
        if scheme == "basic":
            return self.creds.basic_header() if self.creds else None
        if scheme == "bearer" and params.get("realm"):
            query = {k: v for k, v in params.items() if k in ("service", "scope")}
            if "scope" not in query:
                repo = path.split("/manifests/")[0].replace("/v2/", "", 1)
                query["scope"] = f"repository:{repo}:pull,push"
            url = params["realm"] + "?" + urllib.parse.urlencode(query)
            hdrs = {"Authorization": self.creds.basic_header()} if self.creds else {}
            status, _got, body = self._exchange("GET", url, hdrs, None, until)
            try:
                doc = json.loads(body) if status == 200 else {}
            except ValueError:
                return None
            token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
            return f"Bearer {token}" if isinstance(token, str) and token else None
        return None

    def call(self, method: str, path: str, headers: Dict[str, str], data: Optional[bytes] = None):
        """One bounded request for the other registry adapters (tags, artifacts): (status, headers, body)."""
        return self._call(method, path, headers, data)

    def _call(self, method: str, path: str, headers: Dict[str, str], data: Optional[bytes] = None):
        """One operation: bounded retries, all of them done within `bounds.operation_s`."""
        until = time.monotonic() + self.bounds.operation_s
        last: List[BaseException] = []

        def attempt():
            if time.monotonic() >= until:
                raise _OutOfTime()
            return self._once(method, path, headers, data, until)

        def on_retry(n: int, wait: float, err: BaseException) -> None:
            last[:] = [err]
            if self.log:
                self.log(f"  registry {self.registry}: {err}; retry {n} in {wait:.1f}s")

        def sleep(wait: float) -> None:
            time.sleep(max(0.0, min(wait, until - time.monotonic())))

        try:
            status, hdrs, body = call_with_retry(attempt, self.policy, sleep=sleep, on_retry=on_retry)
        except RetriesExhausted as err:
            raise UserError(
                f"registry {self.registry} unreachable or failing: {err.last} "
                f"(after {err.attempts} attempts)",
                key="registry",
                hint="is the registry up and the host:port right? throttled? try again later",
            ) from err
        except _OutOfTime:
            why = f" (last: {last[0]})" if last else ""
            raise UserError(
                f"registry {self.registry}: {method} {path} gave no complete answer within "
                f"{self.bounds.operation_s:g} s{why}",
                key="registry",
                hint="a slow or stuck registry; REGISTRY_OPERATION_TIMEOUT sets the limit (seconds)",
            ) from None
        if status == 401:
            how = f"credentials from {self.creds.source}" if self.creds else "no credentials"
            raise AuthRefused(
                f"registry {self.registry} refused access ({how})",
                key="registry",
                hint="docker login, --username with --password-stdin, or REGISTRY_USERNAME/PASSWORD",
            )
        if status == 403:
            raise AuthRefused(f"registry {self.registry} denied {method} {path}", key="registry")
        return status, hdrs, body

    # -- manifests -------------------------------------------------------------------------------------
    def manifest(self, repository: str, reference: str) -> Optional[RemoteManifest]:
        """The manifest a tag or digest names, or None when the registry has no such thing."""
        status, hdrs, body = self._call(
            "GET", f"/v2/{repository}/manifests/{reference}", {"Accept": ", ".join(MANIFEST_TYPES)}
        )
        if status == 404:
            return None
        if status != 200:
            raise UserError(f"registry {self.registry}: GET manifest {repository}:{reference} gave {status}")
        lower = {k.lower(): v for k, v in hdrs.items()}
        actual = sha256_of(body)
        if ":" in reference and reference != actual:  # asked by digest: the bytes must be those bytes
            raise ChecksFailed(
                f"registry {self.registry} answered GET {repository}@{reference} with other bytes (their "
                f"sha256 is {actual}); refused: nothing is used or written from them"
            )
        header = lower.get("docker-content-digest")
        if header and header != actual:
            raise ChecksFailed(
                f"registry {self.registry} served {repository}:{reference} with digest header {header} "
                f"but content {actual}; refused: nothing is used or written from it"
            )
        digest = actual
        media = lower.get("content-type", "").split(";")[0] or MANIFEST_TYPES[0]
        return RemoteManifest(digest, media, body, config_digest_of(body))

    def blob(self, repository: str, digest: str) -> Optional[bytes]:
        """A blob (e.g. the image config) by digest, verified against that digest; None if absent."""
        status, _hdrs, body = self._call("GET", f"/v2/{repository}/blobs/{digest}", {})
        if status == 404:
            return None
        if status != 200:
            raise UserError(f"registry {self.registry}: GET blob {repository}@{digest} gave {status}")
        if sha256_of(body) != digest:
            raise ChecksFailed(f"registry {self.registry} served blob {digest} with other content")
        return body

    def put_manifest(self, repository: str, tag: str, manifest: RemoteManifest) -> str:
        """Store these exact manifest bytes under `tag`; returns the digest the registry reports."""
        status, hdrs, body = self._call(
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            {"Content-Type": manifest.media_type},
            manifest.body,
        )
        if status not in (200, 201):
            text = body.decode("utf-8", "replace")[:300]
            raise Refused(f"registry {self.registry} refused tag {repository}:{tag}: HTTP {status} {text}")
        lower = {k.lower(): v for k, v in hdrs.items()}
        return lower.get("docker-content-digest") or manifest.digest


class _OutOfTime(Exception):
    """The operation's deadline passed before another attempt could start."""


ExistingFn = Callable[[ImageRef], Optional[RemoteManifest]]
