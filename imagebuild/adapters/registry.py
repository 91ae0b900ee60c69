"""Push images by digest to any OCI registry, and read/write manifests through the registry's v2 HTTP API.

The docker SDK pushes (the engine does the layer upload); the v2 API, spoken here with urllib, answers the
questions a release needs without pulling anything: does this tag exist, which image (config digest) does a
digest name, and "put this exact manifest under that tag" (promotion keeps the digest byte for byte).

Credentials come from flags/env or the docker config (`~/.docker/config.json`, credential helpers included,
via the docker SDK). They are passed per request and never written anywhere: not to a file, a label, a log
line or a summary. `Credentials.__repr__` hides the secret so an accidental print cannot leak it.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

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


_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def split_ref(ref: str, key: str = "image") -> ImageRef:
    """Parse an image reference; a first path part with '.' or ':' (or 'localhost') is the registry host."""
    text = ref.strip()
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise UserError(
                f"bad digest in image reference {ref!r}", key=key, hint="expected sha256:<64 hex>"
            )
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DEFAULT_REGISTRY, text
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise UserError(f"bad tag {tag!r} in image reference {ref!r}", key=key)
    if not path or not _REPO_RE.match(path):
        raise UserError(
            f"bad repository name {path!r} in image reference {ref!r}",
            key=key,
            hint="lowercase letters, digits and separators . _ - /",
        )
    return ImageRef(registry, path, tag, digest)


def check_tag(tag: str, key: str = "tag") -> str:
    if not _TAG_RE.match(tag):
        raise UserError(
            f"bad tag {tag!r}", key=key, hint="1-128 of letters, digits, _ . - (not starting . -)"
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
        timeout: float = 30.0,
        log: Optional[Log] = None,
    ) -> None:
        self.registry = registry
        self.creds = creds
        self.base = f"{scheme_for(registry, plain_http)}://{registry}"
        self.policy = policy
        self.timeout = timeout
        self.log = log
        self._auth: Optional[str] = None

    # -- transport -------------------------------------------------------------------------------------
    def _once(self, method: str, path: str, headers: Dict[str, str], data: Optional[bytes]):
        url = self.base + path
        for _ in range(2):  # second pass only after an auth challenge
            hdrs = dict(headers)
            if self._auth:
                hdrs["Authorization"] = self._auth
            req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
            try:
                resp = urllib.request.urlopen(req, timeout=self.timeout)
                return resp.status, dict(resp.headers.items()), resp.read()
            except urllib.error.HTTPError as err:
                body = err.read() if method != "HEAD" else b""
                if err.code == 401 and self._auth is None:
                    self._auth = self._answer_challenge(err.headers.get("WWW-Authenticate", ""), path)
                    if self._auth:
                        continue
                if err.code == 429 or err.code >= 500:
                    raise Retryable(
                        f"{method} {url}: HTTP {err.code}", parse_retry_after(err.headers.get("Retry-After"))
                    ) from err
                return err.code, dict(err.headers.items()), body
            except (urllib.error.URLError, socket.timeout, ConnectionError) as err:
                reason = getattr(err, "reason", err)
                raise Retryable(f"{method} {url}: {reason}") from err
        return 401, {}, b""

    def _answer_challenge(self, header: str, path: str) -> Optional[str]:
        scheme, params = _parse_challenge(header)
        if scheme == "basic":
            return self.creds.basic_header() if self.creds else None
        if scheme == "bearer" and params.get("realm"):
            query = {k: v for k, v in params.items() if k in ("service", "scope")}
            if "scope" not in query:
                repo = path.split("/manifests/")[0].replace("/v2/", "", 1)
                query["scope"] = f"repository:{repo}:pull,push"
            url = params["realm"] + "?" + urllib.parse.urlencode(query)
            req = urllib.request.Request(url)
            if self.creds:
                req.add_header("Authorization", self.creds.basic_header())
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    doc = json.loads(resp.read())
            except (urllib.error.URLError, ValueError):
                return None
            token = doc.get("token") or doc.get("access_token")
            return f"Bearer {token}" if token else None
        return None

    def _call(self, method: str, path: str, headers: Dict[str, str], data: Optional[bytes] = None):
        def on_retry(n: int, wait: float, err: BaseException) -> None:
            if self.log:
                self.log(f"  registry {self.registry}: {err}; retry {n} in {wait:.1f}s")

        try:
            status, hdrs, body = call_with_retry(
                lambda: self._once(method, path, headers, data), self.policy, on_retry=on_retry
            )
        except RetriesExhausted as err:
            raise UserError(
                f"registry {self.registry} unreachable or failing: {err.last} "
                f"(after {err.attempts} attempts)",
                key="registry",
                hint="is the registry up and the host:port right? throttled? try again later",
            ) from err
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
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        digest = lower.get("docker-content-digest") or actual
        if digest != actual:
            raise ChecksFailed(
                f"registry {self.registry} served {repository}:{reference} with digest header {digest} "
                f"but content {actual}"
            )
        media = lower.get("content-type", "").split(";")[0] or MANIFEST_TYPES[0]
        return RemoteManifest(digest, media, body, config_digest_of(body))

    def blob(self, repository: str, digest: str) -> Optional[bytes]:
        """A blob (e.g. the image config) by digest, verified against that digest; None if absent."""
        status, _hdrs, body = self._call("GET", f"/v2/{repository}/blobs/{digest}", {})
        if status == 404:
            return None
        if status != 200:
            raise UserError(f"registry {self.registry}: GET blob {repository}@{digest} gave {status}")
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
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


ExistingFn = Callable[[ImageRef], Optional[RemoteManifest]]
