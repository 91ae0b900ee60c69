"""Render Variants into build/<variant>/{Dockerfile, variant.lock.json, context/...}: the folders.

Pure in the core: `render_variant` returns the files as bytes in memory (jinja2 with StrictUndefined, so a
missing value is an error, never an empty string; output depends only on the Variant and the files it copies).
`write` is the only I/O: a variant whose folder already holds these bytes is left as it is (mtime included);
the others are written to a temporary folder next to the output and then moved into place one variant at a
time, so bad input (which fails before `write`) writes nothing, a crash leaves the old output, and a reader
never sees half a variant folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from imagebuild.errors import UserError
from imagebuild.render import shipped
from imagebuild.render.dockerfile import dockerfile
from imagebuild.safefile import read_regular, read_regular_stat
from imagebuild.variant import Variant

SKIP_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


MAX_TREE_FILES = 20_000  # a training folder with more is a dataset or a virtualenv, not code
MAX_TREE_BYTES = 1024**3  # all of a folder's files together: everything read here is held in memory
MANIFEST_SCHEMA = "efa-image-build/context-manifest/v1"


def _tree(src: Path, key: str = "training.source_dir", own_links: bool = False) -> Dict[str, bytes]:
    """Every regular file under `src` by relative path. Anything else (a symlink, which could point at
    ~/.aws/credentials or /proc/self/environ; a FIFO, which would hang the read; a device) is a UserError
    naming the path: the build context ships into an image, so nothing is followed and nothing skipped
    silently. The file type is checked on the open descriptor before reading (safefile.read_regular).
    `own_links` (the user's training folder): a file with more hard links than this walk found names for is
    refused too, as the same leak as a symlink out (see `_refuse_links_out`)."""
    out: Dict[str, bytes] = {}
    links: Dict[Tuple[int, int], Tuple[int, List[str]]] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(src, onerror=_walk_error(key)):
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise UserError(
                    "a symlink in the build context (only regular files are copied)",
                    file=os.path.join(dirpath, d),
                    key=key,
                )
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_NAMES)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = Path(dirpath) / name
            if len(out) >= MAX_TREE_FILES:
                raise UserError(f"more than {MAX_TREE_FILES} files", file=str(src), key=key)
            data, info = read_regular_stat(str(full), MAX_TREE_BYTES - total, key=key, follow=False)
            total += len(data)
            out[str(full.relative_to(src))] = data
            if own_links and info.st_nlink > 1:
                links.setdefault((info.st_dev, info.st_ino), (info.st_nlink, []))[1].append(str(full))
    _refuse_links_out(links, key)
    return out


def _refuse_links_out(links: Dict[Tuple[int, int], Tuple[int, List[str]]], key: str) -> None:
    """Refuse a file whose other hard links were not all found in the walk: a hard link to a file outside
    the folder (~/.aws/credentials) copies it in as a symlink would. Where the other names are cannot be
    learned cheaply, but that they are all inside can: the walk found as many names as the inode's link
    count. `links`: (device, inode) -> (link count, the names found)."""
    for count, names in links.values():
        if len(names) < count:
            raise UserError(
                f"a hard link to a file outside the training folder ({count} links, {len(names)} of them "
                "in the folder); only files of the folder itself are copied",
                file=names[0],
                key=key,
                hint="replace the link with a copy of the file (cp, not cp -l or ln)",
            )


def _walk_error(key: str):
    def raise_it(err: OSError) -> None:
        raise UserError(f"cannot read folder: {err.strerror}", file=err.filename, key=key)

    return raise_it


def _inside(folder: Path, root: Path, v: Variant) -> Path:
    """`folder` with symlinks resolved, refused unless it lies inside `root` (the matrix's folder)."""
    real, top = folder.resolve(), root.resolve()
    if real != top and top not in real.parents:
        raise UserError(
            f"training code at {real} is outside the matrix's folder {top}",
            file=v.matrix,
            key="training.source_dir",
        )
    return real


def context_manifest(files: Dict[str, bytes], digests: Optional[Dict[int, tuple]] = None) -> bytes:
    """`context.manifest.json`: every file this render put in the build context, with its sha256 and size,
    so what went into an image can be audited (artifacts are pinned by sha256 in the lock already).
    `digests` (id -> (bytes, sha256)) hashes the validators and training files shared by variants once."""
    digests = {} if digests is None else digests

    def sha256(data: bytes) -> str:
        known = digests.get(id(data))
        if known is None or known[0] is not data:
            known = digests[id(data)] = (data, hashlib.sha256(data).hexdigest())
        return known[1]

    entries = [
        {"path": rel[len("context/") :], "sha256": sha256(data), "size": len(data)}
        for rel, data in sorted(files.items())
        if rel.startswith("context/")
    ]
    doc = {"schema": MANIFEST_SCHEMA, "files": entries}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def render_variant(
    v: Variant,
    matrix_dir: str,
    trees: Optional[Dict[str, Dict[str, bytes]]] = None,
    digests: Optional[Dict[int, tuple]] = None,
) -> Dict[str, bytes]:
    """All files of build/<variant>/ as {relative path: bytes}; nothing is written.

    `trees` caches folders read once per render (validators, training code shared by many variants), and
    `digests` their sha256 (context_manifest).
    """
    trees = {} if trees is None else trees

    def tree_of(src: Path, key: str, own_links: bool = False) -> Dict[str, bytes]:
        cache_key = str(src.resolve())
        if cache_key not in trees:
            trees[cache_key] = _tree(src, key, own_links)
        return trees[cache_key]

    lock = v.lock_json().encode()
    files: Dict[str, bytes] = {
        "Dockerfile": dockerfile(v).encode(),
        "variant.lock.json": lock,
        "context/variant.lock.json": lock,
        "context/artifacts/.keep": b"",
    }
    for rel, data in tree_of(shipped.validators(), "validators").items():
        files[f"context/validators/{rel}"] = data
    if v.training is not None:
        src = _inside(Path(matrix_dir) / v.training.source_dir, Path(matrix_dir), v)
        for rel, data in tree_of(src, "training.source_dir", own_links=True).items():
            files[f"context/training/{rel}"] = data
    files["context.manifest.json"] = context_manifest(files, digests)
    return files


# What `build` adds to a rendered variant (staged artifacts, SHA256SUMS, the build CA): not render's, so a
# variant render finds unchanged keeps them, and the build after it re-links nothing.
BUILD_OWNED = ("context/artifacts/", "context/certs/")
INDEX = "rendered.json"  # the variants of the last render in --out (build picks these, not older folders)
INDEX_SCHEMA = "efa-image-build/rendered/v1"


@dataclass(frozen=True)
class Written:
    path: str
    changed: bool  # False: the folder already held these bytes and was not touched


def write(out_dir: str, rendered: Dict[str, Dict[str, bytes]]) -> List[Written]:
    """Write the variants whose folder differs from what is rendered: temp folder first, one rename each.
    Then `<out>/rendered.json` names the variants of this render.

    Any OS error (read-only, full, a file where a folder must be) is a UserError naming the path, and
    the staging folder is removed: the old output stays as it was.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create output folder: {err.strerror}", file=str(out), key="--out") from None
    try:
        written = _write_staged(out, rendered)
        _write_index(out, list(rendered))
        return written
    except OSError as err:
        where = str(err.filename) if err.filename else str(out)
        raise UserError(f"cannot write: {err.strerror or err}", file=where, key="--out") from None


def rendered_names(out_dir: str) -> Optional[List[str]]:
    """The variants the last render wrote to `out_dir`, or None where no render left its index."""
    try:
        doc = json.loads(read_regular(str(Path(out_dir) / INDEX), follow=False))
    except (UserError, ValueError):
        return None
    names = doc.get("variants") if isinstance(doc, dict) and doc.get("schema") == INDEX_SCHEMA else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else None


def _write_index(out: Path, names: List[str]) -> None:
    data = (json.dumps({"schema": INDEX_SCHEMA, "variants": names}, indent=1) + "\n").encode()
    path = out / INDEX
    if _same_bytes(path, data):
        return
    tmp = out / f".{INDEX}.{os.getpid()}.tmp"
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _same_bytes(path: Path, data: bytes) -> bool:
    """`path` is a regular file (no symlink followed, a FIFO never waited on) holding exactly `data`."""
    try:
        return read_regular(str(path), len(data), follow=False) == data
    except UserError:
        return False  # missing, another kind of file, or longer: not the same


def unchanged(vdir: Path, files: Dict[str, bytes], verified: Optional[Dict[tuple, bytes]] = None) -> bool:
    """True when `vdir` holds exactly `files`, byte for byte, as regular files without the exec bit, plus
    only what build adds (BUILD_OWNED). `verified` maps a file's (dev, inode, size, mtime) to the bytes
    object it was found equal to, so hard links shared by many variants are read once."""
    verified = {} if verified is None else verified
    try:
        if not stat.S_ISDIR(os.lstat(vdir).st_mode):
            return False  # a symlink or file where the folder goes: replace it, as a render always did
    except OSError:
        return False
    for rel, data in files.items():
        try:
            st = os.lstat(vdir / rel)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o111 or st.st_size != len(data):
            return False
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if verified.get(key) is not data:
            if not _same_bytes(vdir / rel, data):
                return False
            verified[key] = data
    dirs = {rel[: i + 1] for rel in files for i, ch in enumerate(rel) if ch == "/"}
    try:
        return _only_rendered(str(vdir), "", files, dirs)
    except OSError:
        return False


def _only_rendered(top: str, prefix: str, files: Dict[str, bytes], dirs: set) -> bool:
    """No entry under `top` but the files and folders render put there (BUILD_OWNED aside): a file it no
    longer renders, a stray, a symlink or a FIFO means the folder is written again."""
    with os.scandir(os.path.join(top, prefix) if prefix else top) as entries:
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                rel += "/"
                if rel.startswith(BUILD_OWNED):
                    continue
                if rel not in dirs or not _only_rendered(top, rel, files, dirs):
                    return False
            elif not (entry.is_file(follow_symlinks=False) and rel in files):
                return False
    return True


def _write_staged(out: Path, rendered: Dict[str, Dict[str, bytes]]) -> List[Written]:
    verified: Dict[tuple, bytes] = {}
    todo = [name for name, files in rendered.items() if not unchanged(out / name, files, verified)]
    changed = set(todo)
    written = [Written(str(out / name), name in changed) for name in rendered]
    if not todo:
        return written
    staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out))
    seen: Dict[int, Tuple[bytes, str]] = {}
    made = set()
    try:
        for name in todo:
            vdir = os.path.join(staging, name)
            for rel, data in rendered[name].items():
                path = os.path.join(vdir, rel)
                parent = os.path.dirname(path)
                if parent not in made:
                    os.makedirs(parent, exist_ok=True)
                    made.add(parent)
                first = seen.get(id(data))
                if first is not None and first[0] is data:
                    os.link(first[1], path)  # the same bytes (validators, training, lock): one inode
                else:
                    with open(path, "wb") as f:
                        f.write(data)
                    seen[id(data)] = (data, path)
        for name in todo:
            final = out / name
            if final.exists():
                os.replace(final, staging / f".old-{name}")
            os.replace(staging / name, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def render_all(variants: Sequence[Variant], matrix_dir: str) -> Dict[str, Dict[str, bytes]]:
    trees: Dict[str, Dict[str, bytes]] = {}
    digests: Dict[int, tuple] = {}
    return {v.name: render_variant(v, matrix_dir, trees, digests) for v in variants}
