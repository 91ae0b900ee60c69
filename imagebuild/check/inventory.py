"""In-container probe: what the dynamic loader and NCCL would really find. Prints one JSON object.

Copied into a container of the image under test and run by the image's own python, so it must stay
standard library only and Python 3.8 compatible. It only looks; every fact it cannot see is null.
Where the loader would look is efa_validators.node.nodecheck's lookup (copied beside this file), the same one
node-check uses on the cluster.

  python3 inventory.py libs SONAME...   candidates on the library search path, and what dlopen resolves
  python3 inventory.py nccl-version [PATH]  ncclGetVersion() through ctypes (of PATH, else the loader's
                                        libnccl.so.2), and the library it came from
  python3 inventory.py framework-nccl [--import]  the NCCL a framework loads: `import torch` (--import),
                                        else what torch's wheel finds without it (nvidia/nccl/lib)
  python3 inventory.py plugin           the net plugin NCCL's search rules would load
  python3 inventory.py find NAME...     regular files with these names (globs) anywhere on the root fs
  python3 inventory.py header FILE      NCCL_MAJOR/MINOR/PATCH macros of an nccl.h
  python3 inventory.py grep FILE REGEX  first match of a byte regex in a file (version strings in a .so)
"""

import ctypes
import fnmatch
import json
import os
import re
import sys

from efa_validators.node.nodecheck import ldconfig_cache, library_candidates, plugin_names

SKIP_TOP = ("/proc", "/sys", "/dev", "/run", "/tmp/efa-image-build-checks")


def _loaded_paths(names):
    """Files mapped into this process whose basename starts with one of `names`."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    base = os.path.basename(parts[5])
                    if any(base.startswith(n) for n in names) and parts[5] not in found:
                        found.append(parts[5])
    except OSError:
        return None
    return found


def _dlopen(name):
    """(resolved path, error): the file the loader picks for `name`, through its real search rules."""
    before = set(_loaded_paths([""]) or [])
    try:
        ctypes.CDLL(name, mode=getattr(os, "RTLD_LAZY", 1) | getattr(os, "RTLD_LOCAL", 0))
    except OSError as err:
        return None, str(err)
    after = _loaded_paths([""]) or []
    stem = os.path.basename(name).split(".so")[0]
    new = [p for p in after if p not in before and os.path.basename(p).startswith(stem)]
    if not new:  # already loaded earlier in this process (or a symlink name): match by stem
        new = [p for p in after if os.path.basename(p).startswith(stem)]
    return (new[0] if new else None), None


def libs(sonames):
    cache = ldconfig_cache()
    result = {}
    for soname in sonames:
        candidates = [
            {"path": p, "via": via} for p, via in library_candidates(soname, dict(os.environ), cache)
        ]
        real = []
        for c in candidates:
            c["real"] = os.path.realpath(c["path"])
            if c["real"] not in real:
                real.append(c["real"])
        resolved, error = _dlopen(soname)
        result[soname] = {
            "candidates": candidates,
            "distinct": real,
            "resolved": resolved,
            "resolved_real": os.path.realpath(resolved) if resolved else None,
            "error": error,
            "ldconfig_seen": cache is not None,
        }
    return result


def _nccl_code(lib):
    code = ctypes.c_int(0)
    rc = lib.ncclGetVersion(ctypes.byref(code))
    return (code.value, None) if rc == 0 else (None, "ncclGetVersion returned %d" % rc)


def nccl(name="libnccl.so.2"):
    path, error = _dlopen(name)
    if error:
        return {"path": None, "code": None, "version": None, "error": error}
    code, error = _nccl_code(ctypes.CDLL(name))
    # NCCL 2.9 changed the encoding: MAJOR*10000 + MINOR*100 + PATCH (before: MAJOR*1000 + MINOR*100 + PATCH)
    return {"path": path, "code": code, "version": _version_of(code), "error": error}


def _version_of(code):
    if code is None:
        return None
    if code >= 10000:
        return "%d.%d.%d" % (code // 10000, (code % 10000) // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, (code % 1000) // 100, code % 100)


def framework_nccl(torch):
    """Which libnccl a framework's process maps. With torch: `import torch` (its CUDA build links
    libnccl.so.2, loaded at import) and /proc/self/maps. Without torch: what torch's wheel would find, the
    nvidia/nccl/lib/libnccl.so.2 of the first sys.path entry that has one (where its libraries' RPATH
    `$ORIGIN/../../nvidia/nccl/lib` and its `_preload_cuda_deps` look), opened by path."""
    out = {"via": None, "loaded": [], "version": None, "framework": None, "error": None}
    if torch:
        out["via"] = "import torch"
        try:
            import torch as t  # noqa: F401  (the probe is the import)

            out["framework"] = t.__version__
        except Exception as err:  # noqa: BLE001 - any import failure is the finding
            out["error"] = "import torch failed: %r" % (err,)
            return out
    else:
        for d in sys.path:
            cand = os.path.join(d, "nvidia/nccl/lib/libnccl.so.2")
            if d and os.path.exists(cand):
                out["via"] = "sys.path nvidia/nccl/lib (torch's wheel lookup; torch not installed)"
                try:
                    ctypes.CDLL(cand, mode=getattr(os, "RTLD_LAZY", 1) | getattr(os, "RTLD_LOCAL", 0))
                except OSError as err:
                    out["error"] = str(err)
                    return out
                break
        else:
            out["error"] = "no nvidia/nccl/lib/libnccl.so.2 on sys.path"
            return out
    out["loaded"] = [p for p in (_loaded_paths(["libnccl.so"]) or []) if "libnccl-net" not in p]
    if out["loaded"]:
        try:
            code, err = _nccl_code(ctypes.CDLL(out["loaded"][0]))
        except (OSError, AttributeError) as e:
            code, err = None, str(e)
        out["version"], out["error"] = _version_of(code), err
    return out


def plugin():
    """The library NCCL's plugin search (efa_validators.node.nodecheck.plugin_names) makes the loader open."""
    env = os.environ.get("NCCL_NET_PLUGIN")
    tried = []
    for name in plugin_names(dict(os.environ)):
        path, error = _dlopen(name)
        tried.append({"name": name, "resolved": path, "error": error})
        if path:
            return {"env": env, "resolved": path, "resolved_real": os.path.realpath(path), "tried": tried}
    return {"env": env, "resolved": None, "resolved_real": None, "tried": tried}


def find(patterns):
    hits = []
    for top, dirs, files in os.walk("/"):
        if top == "/":
            dirs[:] = [d for d in dirs if "/" + d not in SKIP_TOP]
        for name in files:
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                p = os.path.join(top, name)
                if os.path.isfile(p) and not os.path.islink(p):
                    hits.append(p)
    return {"files": sorted(hits)}


def header(path):
    out = {"path": path, "major": None, "minor": None, "patch": None, "version": None}
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError as err:
        out["error"] = str(err)
        return out
    for key in ("major", "minor", "patch"):
        m = re.search(r"^#define\s+NCCL_" + key.upper() + r"\s+(\d+)", text, re.M)
        out[key] = int(m.group(1)) if m else None
    if None not in (out["major"], out["minor"], out["patch"]):
        out["version"] = "{major}.{minor}.{patch}".format(**out)
    return out


def grep(path, regex):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        return {"match": None, "error": str(err)}
    m = re.search(regex.encode(), data)
    return {
        "match": m.group(0).decode("utf-8", "replace") if m else None,
        "groups": (
            [g.decode("utf-8", "replace") if g is not None else None for g in m.groups()] if m else []
        ),
    }


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    verb, rest = argv[0], argv[1:]
    if verb == "libs":
        out = libs(rest)
    elif verb == "nccl-version":
        out = nccl(*rest[:1])
    elif verb == "framework-nccl":
        out = framework_nccl("--import" in rest)
    elif verb == "plugin":
        out = plugin()
    elif verb == "find":
        out = find(rest)
    elif verb == "header":
        out = header(rest[0])
    elif verb == "grep":
        out = grep(rest[0], rest[1])
    else:
        print(f"unknown verb {verb!r}", file=sys.stderr)
        return 2
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
