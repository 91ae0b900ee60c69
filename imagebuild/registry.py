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
from typing import Any, Callable, Dict, List, Optional, Tuple

from imagebuild.errors import ChecksFailed, UserError
from imagebuild.jsonfile import write_json_atomic as write_json_atomic
from imagebuild.retry import (
    DEFAULT_POLICY,
    RetriesExhausted,
    Retryable,
    RetryPolicy,
    call_with_retry,
    parse_retry_after,
)
from imagebuild.summary import load_summary as load_summary

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


# -- pushing with the docker engine ------------------------------------------------------------------------
_AUTH_WORDS = ("unauthorized", "authentication required", "denied", "no basic auth credentials", "forbidden")
_DOWN_WORDS = ("connection refused", "no such host", "dial tcp", "i/o timeout", "connection reset", "eof")
_THROTTLE_RE = re.compile(
    r"\b(429|5\d\d)\b|toomanyrequests|too many requests|service unavailable|bad gateway"
)
_EXISTS_WORDS = ("tag invalid", "immutable", "already exists")


def classify_push_error(message: str) -> str:
    """auth | exists | retry | down | other: what a docker engine push error means for the caller."""
    low = message.lower()
    if any(w in low for w in _AUTH_WORDS):
        return "auth"
    if any(w in low for w in _EXISTS_WORDS):
        return "exists"
    if _THROTTLE_RE.search(low):
        return "retry"
    if any(w in low for w in _DOWN_WORDS):
        return "down"
    return "other"


@dataclass
class PushResult:
    ref: str
    digest: str
    skipped: bool = False  # the tag already named this very image: nothing pushed


ExistingFn = Callable[[ImageRef], Optional[RemoteManifest]]


def push_image(
    client: Any,
    image_id: str,
    target: ImageRef,
    creds: Optional[Credentials],
    *,
    existing: ExistingFn,
    force: bool = False,
    policy: RetryPolicy = DEFAULT_POLICY,
    log: Log = lambda _m: None,
) -> PushResult:
    """Push local image `image_id` as `target` (which must carry a tag) and return the registry digest.

    Before pushing, `existing(target)` asks the registry what the tag holds now: the same image (config
    digest == image id) is a no-op; a different one is refused unless `force`. The registry is asked, never
    assumed: if it cannot answer, nothing is pushed.
    """
    assert target.tag, "push target needs a tag"
    current = existing(target)
    if current is not None:
        if current.config_digest == image_id:
            log(f"  {target}: already holds this image ({current.digest}); nothing to push")
            return PushResult(str(target), current.digest, skipped=True)
        if not force:
            raise Refused(
                f"{target} already exists in the registry with another image "
                f"({current.digest}, config {current.config_digest}); not overwriting",
                # hint in message: Refused is exit 1
            )
        log(f"  {target}: overwriting {current.digest} (--force)")
    image = client.images.get(image_id)
    image.tag(target.name, target.tag)

    def attempt() -> str:
        digest = None
        last_status: Dict[str, str] = {}
        for chunk in client.images.push(
            target.name,
            target.tag,
            stream=True,
            decode=True,
            auth_config=creds.auth_config() if creds else None,
        ):
            if "error" in chunk or "errorDetail" in chunk:
                msg = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")
                kind = classify_push_error(msg)
                if kind in ("retry", "down"):
                    raise Retryable(f"push {target}: {msg}")
                if kind == "auth":
                    how = f"credentials from {creds.source}" if creds else "no credentials"
                    raise AuthRefused(
                        f"registry {target.registry} refused the push of {target} ({how}): {msg}",
                        key="registry",
                        hint="docker login, --username with --password-stdin, or REGISTRY_USERNAME/PASSWORD",
                    )
                if kind == "exists":
                    raise Refused(f"registry refused to overwrite {target}: {msg}")
                raise ChecksFailed(f"push {target} failed: {msg}")
            aux = chunk.get("aux") or {}
            if aux.get("Digest"):
                digest = aux["Digest"]
            layer, status = chunk.get("id"), chunk.get("status")
            if (
                layer
                and status in ("Pushed", "Layer already exists", "Mounted from")
                and (last_status.get(layer) != status)
            ):
                last_status[layer] = status
                log(f"  {target.name} layer {layer}: {status}")
        if not digest:  # older engines: the digest only shows in RepoDigests after the push
            repo_digests = client.images.get(image_id).attrs.get("RepoDigests") or []
            digest = next((d.split("@", 1)[1] for d in repo_digests if d.startswith(target.name + "@")), None)
        if not digest:
            raise ChecksFailed(f"push {target}: the engine reported no digest")
        return digest

    def on_retry(n: int, wait: float, err: BaseException) -> None:
        log(f"  {err}; retry {n} in {wait:.1f}s")

    try:
        digest = call_with_retry(attempt, policy, on_retry=on_retry)
    except RetriesExhausted as err:
        raise UserError(
            f"could not push {target}: {err.last} (after {err.attempts} attempts)",
            key="registry",
            hint="is the registry up and reachable from the docker engine? throttled? try again later",
        ) from err
    log(f"  {target}: pushed, digest {digest}")
    return PushResult(str(target), digest)


def pushed_refs(entry: Dict[str, Any]) -> List[ImageRef]:
    """The summary's `pushed` list (strings `host/repo:tag@sha256:...`) as refs; unparsable ones skipped."""
    refs = []
    for item in entry.get("pushed") or []:
        if isinstance(item, str) and "@" in item:
            try:
                refs.append(split_ref(item, key="pushed"))
            except UserError:
                continue
    return refs


def record_pushes(summary: Dict[str, Any], variant: str, results: List[PushResult]) -> None:
    """Set the variant's `digest` and put each pushed `ref@digest` in `pushed` (pure, in place).

    `pushed` holds strings, as the build summary's contract has it; one per ref (a re-push replaces it).
    """
    for entry in summary["variants"]:
        if entry.get("variant") == variant:
            pushed = [p for p in entry.get("pushed") or [] if isinstance(p, str)]
            for res in results:
                pushed = [p for p in pushed if p.split("@", 1)[0] != res.ref]
                pushed.append(f"{res.ref}@{res.digest}")
            entry["pushed"] = pushed
            if results:
                entry["digest"] = results[-1].digest
            return
    raise UserError(f"variant {variant!r} not in the build summary", key="variant")


# -- skip by the registry: is this content tag already there? --------------------------------------------
def content_lookup(
    host: str,
    repository_of: Callable[[str], str],
    existing: ExistingFn,
    config_of: Optional[Callable[[str, str], Optional[bytes]]] = None,
    log: Log = lambda _m: None,
) -> Callable[[str, str], Any]:
    """A look-up `(local content tag, context hash) -> RemoteHit | None` against the target registry.

    The content tag names its hash, so finding it means another runner built and pushed this content. Where
    the image config can be read (`config_of`), its context-hash label must match as well: a tag that holds
    anything else (a single-image manifest is required) is not trusted, and the variant is built.
    """
    from imagebuild.builder import HASH_LABEL, RemoteHit

    def look(content_tag: str, chash: str) -> Optional[RemoteHit]:
        local = split_ref(content_tag, key="tags")
        target = ImageRef(host, repository_of(local.repository), local.tag)
        found = existing(target)
        if found is None:
            return None
        if not found.config_digest:
            log(f"  {target}: in the registry as an index, not one image; building")
            return None
        if config_of is not None:
            try:
                labels = json.loads(config_of(target.repository, found.config_digest) or b"{}")
                labels = (labels.get("config") or {}).get("Labels") or {}
            except (ValueError, AttributeError):
                labels = {}
            if labels.get(HASH_LABEL) != chash:
                log(f"  {target}: in the registry but its {HASH_LABEL} label differs; building")
                return None
        return RemoteHit(str(target), found.digest, found.config_digest)

    return look


# -- the base's current digest (adapters.docker_engine.current_digest asks the registry) -----------------
class BaseUnconfirmed(Exception):
    """The registry could not say what a base tag names now; the message is the reason (no credential)."""
