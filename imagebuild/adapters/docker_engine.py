"""The docker engine through the docker SDK: the one client factory (`connect`) and the look-ups the
pipeline needs by image id (`find_image`, `missing_image`, `ensure_local`, `image_labels`) and the
logins of a docker config (`config_login`), what a base tag names in its registry now
(`current_digest`). Builds,
containers and imports go through the client `connect` returns."""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Callable, Dict, Iterator, List, Optional

from imagebuild.errors import UserError


def connect(timeout: int = 600) -> Any:
    """A client for the engine, or one clear UserError (exit 2) that says how to start one."""
    import docker

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as err:  # noqa: BLE001 - any failure here means the same thing to the user
        raise UserError(
            f"cannot reach the docker engine at {host}: {type(err).__name__}",
            key="DOCKER_HOST",
            hint="start it (`systemctl start docker`, or `dockerd > /var/log/dockerd.log 2>&1 &` as root), "
            "or point DOCKER_HOST at a running engine",
        ) from None
    return client


def find_image(client: Any, ref: str, api_error_is_absent: bool = False) -> Any:
    """The engine's image of `ref`, or None when it has none (or, if asked, when the engine errs on it)."""
    import docker

    errors = (docker.errors.ImageNotFound,) + ((docker.errors.APIError,) if api_error_is_absent else ())
    try:
        return client.images.get(ref)
    except errors:
        return None


def missing_image(client: Any, ref: str) -> Optional[str]:
    """None when the engine has `ref`; else why not (not found, or the engine's own error)."""
    try:
        client.images.get(ref)
    except Exception as err:  # noqa: BLE001 - docker.errors.ImageNotFound and friends
        return str(err)
    return None


def start(container: Any) -> Optional[str]:
    """Start a created container: None, or why the engine refused (an image with no /bin/sh, say)."""
    import docker

    try:
        container.start()
    except docker.errors.APIError as err:
        return str(err.explanation or err)
    return None


def ensure_local(client: Any, image_id: str, pushed: List[str], say: Callable[[str], None] = print) -> None:
    """A variant another runner built (here: skipped, found in the registry) is pulled by digest."""
    import docker

    if find_image(client, image_id) is not None:
        return
    for ref in pushed:
        say(f"pull {ref} (built by another runner)")
        try:
            image = client.images.pull(ref)
        except docker.errors.APIError as err:
            raise UserError(f"cannot pull {ref}: {err.explanation or err}", key="pushed") from None
        if image.id == image_id:
            return
        raise UserError(f"{ref} is image {image.id}, the summary says {image_id}", key="pushed")


def image_labels(image_id: str) -> Optional[Dict[str, str]]:
    """Labels from the local engine, when it has the image (ECR gives no config blob to read)."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        return client.images.get(image_id).labels or {}
    except Exception:  # noqa: BLE001 - no engine or no such image: the caller falls back to the lock file
        return None


def config_login(registry: str, docker_config: Optional[str] = None) -> Dict[str, Any]:
    """The login a docker config (DIR or FILE; default ~/.docker/config.json) holds for `registry`, or {}.
    A broken config raises; the caller names the file."""
    import docker.auth

    path = docker_config
    if path and not os.path.lexists(path):
        return {}  # as docker: no config at all is no login (the caller then says there are no credentials)
    if path and os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if path:  # read bounded here (a FIFO or /dev/zero is exit 2 naming it), parsed by the SDK from the text
        from imagebuild.safefile import read_text

        doc = json.loads(read_text(path, key="--docker-config"))
        if not isinstance(doc, dict):
            raise ValueError("a docker config is a JSON object")
        return docker.auth.load_config(config_dict=doc).resolve_authconfig(registry) or {}
    return docker.auth.load_config(path).resolve_authconfig(registry) or {}


def current_digest(client: Any, ref: str) -> str:
    """The manifest digest `ref` (`[host/]repo:tag`) names in its registry now, without pulling anything.

    One request through the engine's distribution endpoint (docker SDK `images.get_registry_data`): the
    engine speaks to the registry as a pull would (its insecure-registry and TLS settings) with the login
    the client's docker config holds for that host (credential helpers included), so DLC bases behind
    `docker login` and unqualified names are looked up the same way the build will pull them. For a
    multi-platform tag this is the index digest, the one `docker pull` records in RepoDigests.
    """
    import docker
    import requests

    from imagebuild.errors import redact

    try:
        return str(client.images.get_registry_data(ref).id)
    except docker.errors.NotFound as err:
        raise BaseUnconfirmed(f"the registry has no such tag ({redact(_engine_reason(err))})") from None
    except docker.errors.APIError as err:
        reason = redact(_engine_reason(err))
        if classify_push_error(reason) == "auth":
            raise BaseUnconfirmed(f"the registry refused access, check `docker login` ({reason})") from None
        raise BaseUnconfirmed(f"the registry could not be asked ({reason})") from None
    except (docker.errors.DockerException, requests.RequestException) as err:
        raise BaseUnconfirmed(f"the engine could not ask the registry ({redact(str(err))})") from None


def _engine_reason(err: Any) -> str:
    text = err.explanation if isinstance(getattr(err, "explanation", None), str) else str(err)
    return " ".join(text.split())[:300]


# -- what a docker engine push error means --------------------------------------------------------------
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


# -- the base's current digest (adapters.docker_engine.current_digest asks the registry) -----------------
class BaseUnconfirmed(Exception):
    """The registry could not say what a base tag names now; the message is the reason (no credential)."""


@contextlib.contextmanager
def temporary_tag(
    client: Any, image_id: str, name: str, tag: str, log: Callable[[str], None]
) -> Iterator[None]:
    """`name:tag` on image `image_id` while the block runs, and the engine's tags as they were after it.

    The engine pushes only a tag it holds, so a push adds `HOST/REPO:TAG`; left behind, every push added
    registry-qualified tags the user never made, and `docker images` filled with them (issue 42). A tag the
    user had already is kept (re-pointed to the image it named, if that was another one); only a tag added
    here is removed, and only the tag (noprune: the image and its other tags stay). An image with no tag of
    its own keeps the added one: the engine deletes an image with its last tag."""
    import docker.errors

    ref = f"{name}:{tag}"
    try:
        before: Optional[str] = str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        before = None
    client.images.get(image_id).tag(name, tag)
    try:
        yield
    finally:
        try:
            if before is None:
                others = [t for t in client.images.get(image_id).tags if t != ref]
                if others:  # an image's last tag stays: untagged, the engine would delete it
                    client.images.remove(ref, noprune=True)
            elif before != image_id:
                client.images.get(before).tag(name, tag)
        except docker.errors.APIError as err:  # what was pushed stands; a tag left over is said, not fatal
            log(f"  {ref}: the engine tag added for the push was not removed ({err})")
