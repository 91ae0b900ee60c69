"""Set-ups the release tests share (push, attest, release, prune, image indexes): the images they make, the
keys they sign with and the `build.py` calls that bring a registry to the state a test starts from.

Helpers only, no fixtures and no assertions of what a test is about: a helper asserts only that its own
set-up step worked, so a failure points at the step and not at the test's subject.
"""

from __future__ import annotations

import io
import json
import secrets
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from cli import Result, build_py
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from services import LOCK_LABEL, RUN, build_arm64_scratch, small_lock, summary_entry, write_summary

from imagebuild.adapters import oci_artifacts as oci
from imagebuild.variant import HASH_LABEL


def make_keys(folder: Path, name: str) -> Tuple[Path, Path]:
    """An ed25519 key pair as PEM files (private PKCS#8, public SubjectPublicKeyInfo)."""
    key = Ed25519PrivateKey.generate()
    private = folder / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public = folder / f"{name}.pub.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def signing(tmp_path: Path) -> Tuple[Path, Path, Path]:
    """(private key, public key, matrix) for `push --sign-key` and `attest`: the team's key pair and a matrix
    of no variants (attest reads the matrix only for what the summary's variants do not carry)."""
    key, pub = make_keys(tmp_path, "team")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("variants: []\n")
    return key, pub, matrix


def fallback(api, repo: str, digest: str, kind: str):
    """The manifest under the `sha256-<hex>.<kind>` tag of `digest` (no referrers API), or None."""
    return api.manifest(repo, oci.fallback_tag(digest, kind))


def content_image(client, local_base: str, repo: str, n: int):
    """A real image as the builder leaves one: its hash label, its content tag `repo:<versions>-<hash12>`;
    (image, tag)."""
    chash = secrets.token_hex(32)
    lock = json.dumps(small_lock(f"prune-{n}"), sort_keys=True)
    dockerfile = (
        f"FROM {local_base}\nLABEL {HASH_LABEL}={chash} {LOCK_LABEL}={json.dumps(lock)} "
        f"org.efa-image-build.test-run={RUN}\n"
    )
    tag = f"nccl2.27.7-{chash[:12]}"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=f"{repo}:{tag}", rm=True)
    return image, tag


def remove_images(client, images: Iterable) -> None:
    """Removes each image (by id, every tag); one a test already pruned is passed over."""
    for image in images:
        try:
            client.images.remove(image.id, force=True)
        except Exception:  # noqa: BLE001 - already pruned
            pass


def push_summary(host: str, path: Path, entries: List[dict], *extra: object) -> List[dict]:
    """Writes a build summary of `entries` at `path` and pushes it to `host`; the entries as push left them
    (their digests and pushed tags)."""
    write_summary(path, entries)
    res = build_py("push", "--summary", str(path), "--registry", host, *extra)
    assert res.rc == 0, res.err
    return json.loads(path.read_text())["variants"]


def push_content_images(
    host: str, path: Path, prefix: str, made: Iterable, repos: Iterable[str]
) -> List[dict]:
    """Pushes the content images `made` ((image, tag) pairs, each in its repository of `repos`) as a build
    summary at `path` of variants `<prefix><n>`; the entries as push left them."""
    entries = [
        summary_entry(f"{prefix}{n}", img, tags=[f"{repo}:{tag}"])
        for n, ((img, tag), repo) in enumerate(zip(made, repos))
    ]
    return push_summary(host, path, entries)


def release(host: str, summary: Path, checks: Path, records: Path, *extra: object) -> Result:
    """`build.py release` of `summary` gated by `checks`, its records in `records`, to `host`."""
    argv = ["release", "--summary", str(summary), "--checks", str(checks), "--records", str(records)]
    return build_py(*argv, "--registry", host, *extra)


def prune_argv(host: str, summary: Path, records: Path) -> List[str]:
    """`build.py prune` keeping what the latest build `summary` and the release `records` name."""
    return ["prune", "--summary", str(summary), "--records", str(records), "--registry", host]


def arm64_locked(
    client, name: str, labels: Optional[dict] = None, tag: Optional[str] = None, files=None, **lock
):
    """A small arm64 image (FROM scratch: no emulation) whose lock label is `small_lock(name)` with `lock`'s
    keys over it, and `labels` besides."""
    text = json.dumps(dict(small_lock(name), **lock), sort_keys=True)
    return build_arm64_scratch(client, {**(labels or {}), LOCK_LABEL: text}, tag=tag, files=files)
