"""Channels: moving tags (`dev`, `staging`) beside release tags, which never move.

A channel is a tag name, declared in the matrix (`channels:`, carried by the lock and the build summary) or
given to `build.py release --channel`. Push never writes one (a pushed `:dev` would name a digest no gate
has seen); only a release, after the gate, moves it, and only from the digest the release records say it
names (or from nothing): a tag another tool moved, or a release tag, is refused. Each release record carries
every channel's history forward, so the newest record says where each channel has been.

Pure functions; the registry calls stay in imagebuild/release/promote.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from imagebuild.errors import command


def entry_channels(entry: Dict[str, Any]) -> List[str]:
    """The channels of a build summary entry: its `channels`, else its lock file's (older summaries)."""
    if isinstance(entry.get("channels"), list):
        return [str(c) for c in entry["channels"]]
    lock = entry.get("lock")
    if lock and Path(lock).is_file():
        try:
            return [str(c) for c in json.loads(Path(lock).read_text()).get("channels") or []]
        except (OSError, ValueError, AttributeError):
            return []
    return []


def names_channel(ref: str, channels: Sequence[str]) -> bool:
    """Whether image reference `ref` (`repo:tag`; no tag is `latest`) is tagged with one of `channels`:
    push and bake leave such a tag out, so that only a release, after the gate, moves it."""
    from imagebuild.adapters.registry import split_ref

    return (split_ref(ref, key="tags").tag or "latest") in channels


def recorded(previous: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The channel entries of a release record (`repository`, `tag`, `digest`, `history`)."""
    items = (previous or {}).get("channels")
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def recorded_digest(previous: Optional[Dict[str, Any]], repository: str, tag: str) -> Optional[str]:
    """The digest the release records last put under `repository:tag` as a channel, or None."""
    for item in recorded(previous):
        if item.get("repository") == repository and item.get("tag") == tag:
            return item.get("digest")
    return None


def released_tags(previous: Optional[Dict[str, Any]], repository: str) -> List[str]:
    """Release tags the records know in `repository` (the newest record's, which names its own only)."""
    tags: List[str] = []
    for repo in (previous or {}).get("repositories") or []:
        if isinstance(repo, dict) and repo.get("repository") == repository:
            tags += [str(t) for t in repo.get("tags") or []]
    return tags


def parse_adopted(given: Sequence[str]) -> Dict[str, str]:
    """`--adopt-channel TAG@sha256:HEX` (repeatable) -> {tag: digest}; bad input is exit 2."""
    import re

    from imagebuild.errors import UserError

    out: Dict[str, str] = {}
    for text in given:
        tag, _, digest = text.partition("@")
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag) or not re.fullmatch(
            r"sha256:[0-9a-f]{64}", digest
        ):
            raise UserError(
                f"{text!r} is not CHANNEL@sha256:<64 hex>",
                key="--adopt-channel",
                hint="the channel's tag and the digest it names now (the refusal of the release says both)",
            )
        out[tag] = digest
    return out


def move_refusal(
    repository: str,
    tag: str,
    current: Optional[str],
    digest: str,
    previous: Optional[Dict[str, Any]],
    adopted: Optional[str] = None,
) -> Optional[str]:
    """Why channel `repository:tag`, naming `current` now, may not move to `digest`; None if it may.

    It may when the tag is free, or names what the last release record put there as this channel (or
    already `digest`, once the records know it as a channel), or what `--adopt-channel TAG@DIGEST` says it
    names (`adopted`: a channel no record knows, adopted after checking its digest; the new record then
    knows it). Anything else is refused, whatever digest it holds: it was moved outside a release (a push,
    another tool) or is a release tag, which never moves.
    """
    if tag in released_tags(previous, repository):
        return f"{repository}:{tag} is a release tag of the previous release; release tags never move"
    if current is None:
        return None
    was = recorded_digest(previous, repository, tag)
    if was is not None and current in (was, digest):
        return None
    if was is None and adopted is not None:
        if current == adopted:
            return None
        return (
            f"channel {repository}:{tag} names {current}, not {adopted} as --adopt-channel says: it is not "
            "adopted (check which image it names, then give that digest)"
        )
    if was is None:
        return (
            f"channel {repository}:{tag} already exists ({current}) but no release record knows it as a "
            "channel (none this release reads: records kept on another machine, or a tag pushed outside a "
            "release). If it is your channel and not a release tag, adopt it: "
            f"`{command('release', '--adopt-channel', f'{tag}@{current}')}` with the same arguments records "
            "it after checking it still names that digest; otherwise choose another channel name"
        )
    return (
        f"channel {repository}:{tag} names {current}, but the last release put {was} there: it was moved "
        "outside a release; delete that tag in the registry or choose another channel name"
    )


def carry_forward(
    previous: Optional[Dict[str, Any]], moves: Sequence[Dict[str, Any]], released_at: str
) -> List[Dict[str, Any]]:
    """Every channel of the previous record, updated with this release's `moves` (`repository`, `tag`,
    `from`, `to`, `moved`): the new record's `channels`, each with its whole history, oldest first."""
    out = {
        (c.get("repository"), c.get("tag")): dict(c, history=list(c.get("history") or []))
        for c in recorded(previous)
    }
    for m in moves:
        key = (m["repository"], m["tag"])
        item = out.setdefault(
            key, {"repository": m["repository"], "tag": m["tag"], "digest": None, "history": []}
        )
        if m["moved"] or item.get("digest") != m["to"]:
            item["history"].append({"digest": m["to"], "from": m["from"], "released_at": released_at})
        item["digest"] = m["to"]
    return [out[k] for k in sorted(out)]
