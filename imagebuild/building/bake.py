"""A docker-bake file (JSON) of rendered variants, for `docker buildx bake` on remote builders.

Pure: the caller has rendered and staged each variant (imagebuild.building.context) and passes what the image
is (context, tags, labels); this module shapes and checks the file. The attribute names and types follow
buildx's `bake.Target` (docker/buildx bake/bake.go, the `json:` names; read at commit 461836b, 2026-08) and
the Bake file reference (docs.docker.com/build/bake/reference): `target.<name>` objects, a `group.default`
naming them, target names of `[a-zA-Z0-9_-]+` (bake.go validTargetNameChars). `context` is relative to the
directory `docker buildx bake` runs in and `dockerfile` relative to the context.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

SCHEMA_SOURCE = "docker/buildx bake/bake.go type Target (json names), docs.docker.com/build/bake/reference"
TARGET_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
# attribute -> JSON shape: "str", "bool", "list" (of strings), "map" (string -> string or null), "strmap"
# (string -> string), "cache" (list of strings or objects), as bake.go declares them. Only the attributes
# bake knows are accepted.
TARGET_ATTRS: Dict[str, str] = {
    "description": "str",
    "inherits": "list",
    "annotations": "list",
    "attest": "cache",
    "context": "str",
    "contexts": "strmap",  # map[string]string: unlike args and labels (map[string]*string), no null
    "dockerfile": "str",
    "dockerfile-inline": "str",
    "args": "map",
    "labels": "map",
    "tags": "list",
    "cache-from": "cache",
    "cache-to": "cache",
    "target": "str",
    "secret": "cache",
    "ssh": "cache",
    "platforms": "list",
    "output": "cache",
    "pull": "bool",
    "no-cache": "bool",
    "network": "str",
    "no-cache-filter": "list",
    "shm-size": "str",
    "ulimits": "list",
    "call": "str",
    "entitlements": "list",
    "extra-hosts": "map",
}
TOP_KEYS = ("group", "target", "variable", "function")


def target_name(variant: str) -> str:
    """A bake target name for a variant name (dots and other characters become `_`)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", variant)


def cache_specs(cache_from: Sequence[str], cache_to: Sequence[str]) -> Dict[str, List[str]]:
    """bake's cache attributes: an image ref means a registry cache; an inline cache when none is exported."""
    out: Dict[str, List[str]] = {}
    if cache_from:
        out["cache-from"] = [r if "=" in r else f"type=registry,ref={r}" for r in cache_from]
    out["cache-to"] = [r if "=" in r else f"type=registry,ref={r},mode=max" for r in cache_to] or [
        "type=inline"
    ]
    return out


def bake_target(
    context: str,
    tags: Sequence[str],
    labels: Mapping[str, str],
    args: Mapping[str, str],
    platforms: Sequence[str],
    cache_from: Sequence[str] = (),
    cache_to: Sequence[str] = (),
    description: Optional[str] = None,
    contexts: Optional[Mapping[str, str]] = None,
    dockerfile_inline: Optional[str] = None,
) -> Dict[str, Any]:
    """One target: the staged context of a rendered variant, its Dockerfile beside it (or `dockerfile_inline`:
    the one `build` sends, when it differs: the build CA in builder stages), tags and labels; `contexts`
    named contexts (`base_context`)."""
    dockerfile = {"dockerfile": "../Dockerfile"}
    if dockerfile_inline:
        dockerfile = {"dockerfile-inline": dockerfile_inline}
    target: Dict[str, Any] = {
        "context": context,
        **dockerfile,
        "tags": list(tags),
        "labels": dict(labels),
        "platforms": list(platforms),
    }
    if args:
        target["args"] = dict(args)
    if description:
        target["description"] = description
    if contexts:
        target["contexts"] = dict(contexts)
    target.update(cache_specs(cache_from, cache_to))
    return target


def base_context(from_ref: str, pinned: str) -> Dict[str, str]:
    """The named context that makes `FROM from_ref` build from `pinned` (`repo@sha256:...`), the base whose
    digest is in the content hash, whatever the tag names when a remote builder runs the file later.

    A named context overrides a FROM of the same name (docs.docker.com/build/bake/contexts, "Pinning alpine
    image"); buildx and BuildKit both compare the names in their familiar form without `:latest`
    (docker/buildx parseContextNames, moby/buildkit frontend/dockerui NamedContext), so the ref as written
    matches the FROM once its build args are filled in.
    """
    return {from_ref: f"docker-image://{pinned}"}


def bake_file(targets: Mapping[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The file: every target, and the `default` group that `docker buildx bake` builds with no names."""
    names = sorted(targets)
    return {"group": {"default": {"targets": names}}, "target": {n: targets[n] for n in names}}


def _shape_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind in ("map", "strmap"):
        return isinstance(value, dict) and all(
            isinstance(k, str) and (isinstance(v, str) or (v is None and kind == "map"))
            for k, v in value.items()
        )
    return isinstance(value, list) and all(isinstance(v, (str, dict)) for v in value)


def validate(doc: Any) -> List[str]:
    """Problems with a bake JSON file against bake's documented shape ([] when it is well formed)."""
    if not isinstance(doc, dict):
        return ["the file is not a JSON object"]
    problems = [f"unknown top-level key {k!r}" for k in doc if k not in TOP_KEYS]
    targets = doc.get("target")
    if not isinstance(targets, dict) or not targets:
        return problems + ["no `target` object"]
    for name, target in targets.items():
        if not TARGET_NAME.fullmatch(name):
            problems.append(f"target {name!r}: name must match {TARGET_NAME.pattern}")
        if not isinstance(target, dict):
            problems.append(f"target {name!r}: not an object")
            continue
        for key, value in target.items():
            kind = TARGET_ATTRS.get(key)
            if kind is None:
                problems.append(f"target {name!r}: unknown attribute {key!r}")
            elif not _shape_ok(kind, value):
                problems.append(f"target {name!r}: {key} is not a {kind}")
    for gname, group in (doc.get("group") or {}).items():
        members = group.get("targets") if isinstance(group, dict) else None
        if not isinstance(members, list):
            problems.append(f"group {gname!r}: no targets list")
            continue
        problems += [f"group {gname!r}: names unknown target {m!r}" for m in members if m not in targets]
    return problems


def buildx_print(path: Path) -> None:
    """Where buildx exists, let bake itself read the file (`--print` builds nothing)."""
    from imagebuild.building.buildkit import detect
    from imagebuild.errors import UserError

    choice = detect("auto")
    if choice.kind != "buildx":
        print(f"bake: checked against bake's schema (no buildx here: {choice.reason})")
        return
    proc = subprocess.run(
        [choice.cli, "buildx", "bake", "-f", str(path), "--print"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise UserError(f"docker buildx bake --print refused the file: {proc.stderr.strip()}", file=str(path))
    print(f"bake: docker buildx bake --print accepted {path}")
