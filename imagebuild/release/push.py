"""Push a built image to a registry with the docker engine, by digest, and record it in the build summary.

The engine does the layer upload (docker SDK); before it, the registry is asked what the tag holds now, so a
tag is never moved silently (imagebuild.adapters.registry speaks to the registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from imagebuild.adapters.docker_engine import classify_push_error, temporary_tag
from imagebuild.adapters.registry import (
    AuthRefused,
    Credentials,
    ExistingFn,
    ImageRef,
    Log,
    Refused,
    split_ref,
)
from imagebuild.errors import ChecksFailed, UserError
from imagebuild.retry import DEFAULT_POLICY, RetriesExhausted, Retryable, RetryPolicy, call_with_retry


@dataclass
class PushResult:
    ref: str
    digest: str
    skipped: bool = False  # the tag already named this very image: nothing pushed


def push_image(
    client: Any,
    image_id: str,
    target: ImageRef,
    creds: Optional[Credentials],
    *,
    existing: ExistingFn,
    force: bool = False,
    write_once: bool = False,
    policy: RetryPolicy = DEFAULT_POLICY,
    log: Log = lambda _m: None,
) -> PushResult:
    """Push local image `image_id` as `target` (which must carry a tag) and return the registry digest.

    Before pushing, `existing(target)` asks the registry what the tag holds now: the same image (config
    digest == image id) is a no-op; a different one is refused unless `force`. A `write_once` tag (the
    matrix's own: a content tag, twins' shared tag) is refused even with `force`: another image under the
    same content's tag is a build that did not reproduce, and moving the tag would re-point what earlier
    runs and releases named. The registry is asked, never assumed: if it cannot answer, nothing is pushed.
    """
    assert target.tag, "push target needs a tag"
    current = existing(target)
    if current is not None:
        if current.config_digest == image_id:
            log(f"  {target}: already holds this image ({current.digest}); nothing to push")
            return PushResult(str(target), current.digest, skipped=True)
        held = f"{target} already exists in the registry with another image ({current.digest}, config " + (
            f"{current.config_digest}); not overwriting"
        )
        if write_once:  # the hint is in the message: Refused is exit 1
            raise Refused(
                f"{held}: a tag of the matrix is write-once, --force or not (`build --force` gives a "
                "rebuild its own -r<id> tag; `--tag` extras are the ones --force moves)"
            )
        if not force:
            raise Refused(held)
        log(f"  {target}: overwriting {current.digest} (--force)")
    with temporary_tag(client, image_id, target.name, target.tag, log):
        return _push_tagged(client, image_id, target, creds, policy, log)


def _push_tagged(
    client: Any,
    image_id: str,
    target: ImageRef,
    creds: Optional[Credentials],
    policy: RetryPolicy,
    log: Log,
) -> PushResult:
    """The engine's push of the tagged image, retried; the digest the registry gave it."""

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
