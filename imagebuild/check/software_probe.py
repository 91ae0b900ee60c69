"""In-container probe: the training code's content hash and the installed Python distributions, as JSON.

Run by the image's own python (`python3 -c <this file> CODE_DIR`), so it is standard library only and
Python 3.8 compatible. It only reads. The code hash is sha256 over the sorted lines `<path>\\0<sha256>\\n` of
the files under CODE_DIR (paths relative to it, `/`-separated; `__pycache__`, `.pyc` and `.pyo` left out, as
render leaves them out of the build context), so it can be recomputed from the source folder.
"""

import hashlib
import json
import os
import re
import sys

SKIP_DIRS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def code_hash(top):
    """{path, sha256, files} of the code folder, or None where the image has none."""
    if not top or not os.path.isdir(top):
        return None
    lines = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if name.endswith((".pyc", ".pyo")) or not os.path.isfile(full):
                continue
            rel = os.path.relpath(full, top).replace(os.sep, "/")
            lines.append(rel + "\0" + file_sha256(full) + "\n")
    total = hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()
    return {"path": top, "sha256": "sha256:" + total, "files": len(lines)}


def python_packages():
    """{normalized name: version} of every distribution the interpreter sees, the first on sys.path winning
    (the one `import` gets)."""
    try:
        import importlib.metadata as metadata
    except ImportError:  # older than 3.8: nothing to say
        return None
    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip()
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    return dict(sorted(found.items()))


def main(argv):
    code_dir = argv[1] if len(argv) > 1 else ""
    doc = {
        "python": sys.version.split()[0],
        "code": code_hash(code_dir),
        "python_packages": python_packages(),
    }
    print(json.dumps(doc, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
