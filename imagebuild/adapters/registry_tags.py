"""Listing a repository's tags and deleting a manifest, over the registry v2 API (for `build.py prune`).

Kept beside imagebuild/adapters/registry.py, through its `RegistryAPI` (login, retries, errors), so that
module stays the one place that speaks HTTP to a registry.
"""

from __future__ import annotations

import json
import re
from typing import List

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.errors import UserError

PAGE = 1000
MAX_PAGES = 1000  # a million tags: a registry that keeps answering "next" past that is not trusted


def list_tags(api: RegistryAPI, repository: str) -> List[str]:
    """Every tag of `repository` (paged by the `Link: <...>; rel="next"` header); [] if it does not exist."""
    path = f"/v2/{repository}/tags/list?n={PAGE}"
    tags: List[str] = []
    for _ in range(MAX_PAGES):
        status, hdrs, body = api.call("GET", path, {})
        if status == 404:
            return tags
        if status != 200:
            raise UserError(
                f"registry {api.registry}: GET tags of {repository} gave {status}", key="registry"
            )
        try:
            tags += [str(t) for t in json.loads(body).get("tags") or []]
        except (ValueError, AttributeError) as err:
            raise UserError(f"registry {api.registry}: tags of {repository} are not JSON ({err})") from None
        link = {k.lower(): v for k, v in hdrs.items()}.get("link", "")
        found = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', link)
        if not found:
            return tags
        path = found.group(1)
    raise UserError(
        f"registry {api.registry}: over {MAX_PAGES} pages of tags in {repository}", key="registry"
    )


def delete_manifest(api: RegistryAPI, repository: str, digest: str) -> None:
    """Delete manifest `digest` (and with it every tag that names it) from `repository`."""
    status, _hdrs, _body = api.call("DELETE", f"/v2/{repository}/manifests/{digest}", {})
    if status in (200, 202, 404):
        return
    hint = "the registry must allow deletion (distribution: storage.delete.enabled: true)"
    raise UserError(
        f"registry {api.registry} refused to delete {repository}@{digest} (HTTP {status})",
        key="registry",
        hint=hint if status in (400, 405) else None,
    )
