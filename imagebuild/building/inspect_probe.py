"""In-container half of `build.py inspect-base` for what only python can see. Prints one JSON object.

Run by inspect_probe.sh with the image's own interpreter: standard library only, Python 3.8+.
Every NCCL library found (system dirs, /opt, and site-packages, where the nvidia-nccl-cuNN wheel that
torch depends on puts nvidia/nccl/lib/libnccl.so.2) is loaded in its own child process and asked
ncclGetVersion() through ctypes, as the DLC's sanity check does (aws/deep-learning-containers
test/sanity/scripts/check_nccl_efa_gdrcopy.sh); a child per library keeps two NCCLs from meeting in
one process and a crash in one from hiding the others. The host decodes the version code.
"""

import json
import os
import re
import site
import subprocess
import sys

ROOTS = ("/opt", "/usr/local", "/usr/lib", "/usr/lib64", "/lib", "/lib64")
NCCL_NAME = re.compile(r"^libnccl\.so(\.\d+)*$")
CHILD_TIMEOUT = 120

_NCCL_CHILD = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "code = ctypes.c_int(0)\n"
    "rc = lib.ncclGetVersion(ctypes.byref(code))\n"
    "print(code.value if rc == 0 else 'rc=%d' % rc)\n"
)

_TORCH_CHILD = (
    "import json, torch\n"
    "out = {'version': torch.__version__, 'cuda': getattr(torch.version, 'cuda', None), 'nccl': None}\n"
    "try:\n"
    "    out['nccl'] = list(torch.cuda.nccl.version())\n"
    "except Exception as err:\n"
    "    out['nccl_error'] = '%s: %s' % (type(err).__name__, err)\n"
    "print(json.dumps(out))\n"
)


def _site_dirs():
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # old virtualenv's site module
        pass
    dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def nccl_files(roots):
    """Distinct real files named libnccl.so*, each with the first path it was seen under."""
    seen = {}
    for root in roots:
        for top, _dirs, files in os.walk(root):
            for name in files:
                if NCCL_NAME.fullmatch(name):
                    path = os.path.join(top, name)
                    seen.setdefault(os.path.realpath(path), path)
    return sorted(seen.items())


def _child(code, args):
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code] + list(args),
            capture_output=True,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return None, "timed out after %d s" % CHILD_TIMEOUT
    out = proc.stdout.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, (err[-1] if err else "exit %d" % proc.returncode)
    return out, None


def nccl(roots):
    found = []
    for real, path in nccl_files(roots):
        out, error = _child(_NCCL_CHILD, [real])
        code = int(out) if out and out.isdigit() else None
        if out and code is None:
            error = "ncclGetVersion: " + out
        found.append({"path": path, "real": real, "code": code, "error": error})
    return found


def torch():
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return None
    except (ImportError, ValueError):
        return None
    out, error = _child(_TORCH_CHILD, [])
    if error:
        return {"version": None, "error": error}
    return json.loads(out)


def main():
    sites = _site_dirs()
    roots = list(ROOTS) + [d for d in sites if not d.startswith(ROOTS)]
    print(
        json.dumps(
            {
                "executable": sys.executable,
                "version": "%d.%d.%d" % sys.version_info[:3],
                "site_packages": sites,
                "nccl": nccl(roots),
                "torch": torch(),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
