"""What a pre-flight report says it proved: the image (reference and digest) and the variant lock inside it.

Why: `build.py release --require-preflight` promotes a digest only on a report that names it. The recipe
passes the digest (`--image REF@sha256:D`); the lock the image carries (written at build, read here inside
the container) says which variant ran, so a report from another image under the right digest's name is
caught by the release gate comparing locks. A replayed recording proves nothing about any image: no binding.
Standard library only (it runs inside every image).
"""

import hashlib
import json
import os
from typing import Any, Dict, Optional

LOCK_PATH = "/opt/efa-image-build/variant.lock.json"  # where every image built by the tool carries its lock
LOCK_ENV = "EFA_IMAGE_LOCK"  # another path to it (tests, images laid out differently)


def parse_image_ref(text: str) -> str:
    """`REF@sha256:<64 hex>`, as given; ValueError otherwise (a tag names no one image)."""
    ref, sep, digest = text.rpartition("@")
    hexpart = digest[len("sha256:") :]
    if not (sep and ref and digest.startswith("sha256:") and len(hexpart) == 64) or any(
        c not in "0123456789abcdef" for c in hexpart
    ):
        raise ValueError("expected REF@sha256:<64 hex digits>, got %r" % text)
    return text


def lock_sha256(lock: Dict[str, Any]) -> str:
    """The lock's identity: sha256 of its canonical JSON (sorted keys, no spaces), the same on both sides."""
    text = json.dumps(lock, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def image_lock(env: Optional[Dict[str, str]] = None) -> Optional[Dict[str, Any]]:
    """{name, sha256, path} of the lock this process's image carries; None where there is none."""
    path = (env if env is not None else os.environ).get(LOCK_ENV) or LOCK_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            lock = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(lock, dict):
        return None
    return {"name": lock.get("name"), "sha256": lock_sha256(lock), "path": path}


def binding(ref: str, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """The report's `image`: the reference and digest the recipe named, and the lock found in the image."""
    return {"ref": ref, "digest": ref.rpartition("@")[2], "lock": image_lock(env)}
