"""Skip by the registry: is this content tag already in the target registry, built from this content?

A fresh CI runner skips what another runner already built and pushed (the look-up `build --registry/--ecr`
passes to every variant after the engine had no image for its content tag).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

from imagebuild.adapters.registry import ExistingFn, ImageRef, Log, split_ref
from imagebuild.variant import HASH_LABEL


@dataclass(frozen=True)
class RemoteHit:
    """The content tag found in the target registry: its pushed ref, manifest digest and image id."""

    ref: str
    digest: str
    image_id: str


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
