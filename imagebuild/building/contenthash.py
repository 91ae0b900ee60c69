"""The content hash of a rendered variant and the tags it names: what makes a build skippable.

A variant folder's Dockerfile, lock and context files (sorted, stable across hosts) and its base's identity
hash to one sha256; the image is tagged `<repo>:<versions>-<hash12>`, so a hash that already has an image is
skipped with no work. The memo beside the folder keeps unchanged large files from being read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from imagebuild.components import REGISTRY
from imagebuild.safefile import atomic_file

# Bumped when the labels the builder adds or what the hash covers change meaning: an image built under an
# older scheme is rebuilt. v4: the base's identity (registry digest, engine image id or pin) is hashed.
HASH_SCHEME = "efa-image-build/context-hash/v4\n"
# Excluded from the content hash: the CA only lets builder stages reach the network through a proxy; it is
# never in the final image, so an image built behind one proxy is the same image as one built without.
_UNHASHED_DIRS = ("certs",)

# Version abbreviations in tags, in the blocks' tag order (short: docker tags stop at 128 characters).
_TAG_PARTS = tuple((b.name, b.tag[1]) for b in sorted((b for b in REGISTRY if b.tag), key=lambda b: b.tag))


def _hashed_files(variant_dir: Path) -> List[Tuple[str, Path]]:
    """(name in the hash, path) of the Dockerfile and every context file, sorted."""
    # The lock rides in a label, so it is part of what the image is, even where the Dockerfile is unchanged.
    out = [
        ("Dockerfile", variant_dir / "Dockerfile"),
        ("variant.lock.json", variant_dir / "variant.lock.json"),
    ]
    ctx = variant_dir / "context"
    for dirpath, dirnames, filenames in os.walk(ctx):
        rel_dir = Path(dirpath).relative_to(ctx)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in _UNHASHED_DIRS]
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.startswith(".tmp-") or name.endswith(".pyc"):
                continue
            out.append(((rel_dir / name).as_posix(), Path(dirpath) / name))
    return sorted(out)


def context_hash(
    variant_dir: Path, memo: Optional[Dict[str, list]] = None, base: Optional[str] = None
) -> str:
    """sha256 over (path, exec bit, content sha256) of each file: what docker would see, in a stable order,
    and over `base`, what the FROM's tag names now (`resolve_base`): the Dockerfile names the base by tag,
    so without it a base re-published under the same tag would keep the old content tag.

    `memo` maps path -> [size, mtime_ns, ino, sha] so an unchanged 300 MB wheel is not re-read on a no-op.
    """
    top = hashlib.sha256(HASH_SCHEME.encode())
    if base:
        top.update(f"base\0{base}\n".encode())
    for name, path in _hashed_files(variant_dir):
        if not path.exists() and name == "variant.lock.json":
            continue
        if path.is_symlink():
            digest, mode = "link:" + os.readlink(path), "l"
        else:
            st = path.stat()
            key = [st.st_size, st.st_mtime_ns, st.st_ino]
            cached = (memo or {}).get(str(path))
            if cached and cached[:3] == key:
                digest = cached[3]
            else:
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                digest = h.hexdigest()
                if memo is not None:
                    memo[str(path)] = key + [digest]
            mode = "x" if st.st_mode & 0o111 else "-"
        top.update(f"{name}\0{mode}\0{digest}\n".encode())
    return top.hexdigest()


def _tag_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def version_tag(lock: dict) -> str:
    """`nccl2.27.3-ofi1.16.0-...` from the lock's component versions (only those present)."""
    comps = lock.get("components") or {}
    parts = []
    for name, abbr in _TAG_PARTS:
        ver = (comps.get(name) or {}).get("version")
        if ver:
            parts.append(abbr + _tag_safe(str(ver)))
    return "-".join(parts) or "noversions"


def repositories(lock: dict) -> List[str]:
    """Repositories named by the lock's tags (`repo:tag`), or one made from the variant name."""
    repos = []
    for tag in lock.get("tags") or []:
        repo = split_repo_tag(str(tag))[0]
        if repo not in repos:
            repos.append(repo)
    return repos or [f"efa-image-build/{_tag_safe(lock.get('name', 'variant')).lower()}"]


def split_repo_tag(ref: str) -> Tuple[str, str]:
    """(repository, tag) of `repo[:tag]`; no tag is `latest` (a registry port's colon is not a tag)."""
    slash, colon = ref.rfind("/"), ref.rfind(":")
    return (ref[:colon], ref[colon + 1 :]) if colon > slash else (ref, "latest")


# The `tags` placeholder for the content hash (imagebuild.matrix.expand keeps it for the build to fill).
CONTENT_HASH = "{content_hash}"


def image_tags(lock: dict, chash: str, rebuild: Optional[str] = None) -> List[str]:
    """The content tag first (`repo:<versions>-<hash12>`, write-once), then the lock's own tags with
    `{content_hash}` filled (the load refuses any other tag but a channel's: write-once and moving at once
    would be refused on the next commit's push).

    `rebuild` (an image id): a `build --force` whose content already has an image; its tags become
    `...-r<id8>-<hash12>`, so the write-once tags of the first image are never re-pointed (they would then be
    refused on push) and the rebuild's own tags still end in the hash (prune knows them as content tags)."""
    token = f"r{rebuild.split(':')[-1][:8]}-{chash[:12]}" if rebuild else chash[:12]
    vt = version_tag(lock)
    content = [f"{repo}:{vt[: 128 - len(token) - 1]}-{token}" for repo in repositories(lock)]
    own = [str(t).replace(CONTENT_HASH, token) for t in lock.get("tags") or []]
    return content + [t for t in own if t not in content]


def hash_memo_path(variant_dir: Path) -> Path:
    """Beside the variant folder, not in it: a render replaces the folder of a changed variant, and the memo
    must outlive that so the re-staged wheels (hard links: same inode and mtime) are not read again."""
    return variant_dir.parent / ".hash-memo" / f"{variant_dir.name}.json"


def memo_hash(variant_dir: Path, base: Optional[str] = None) -> str:
    """context_hash with its memo read from and written back to hash_memo_path."""
    memo_path = hash_memo_path(variant_dir)
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    chash = context_hash(variant_dir, memo, base)
    with atomic_file(memo_path) as tmp:
        tmp.write_text(json.dumps(memo))
    return chash
