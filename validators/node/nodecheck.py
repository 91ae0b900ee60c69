"""Node checks before a job: is this node able to run NCCL over EFA with GPUDirect RDMA at all?

Each check is pass, fail or unknown with the evidence it saw. A tool that is missing or a file that cannot
be read makes the check unknown, never pass: a node that could not be inspected is not a good node.
The readers of tool output (`parse_*`) are pure functions; `run_checks` does the I/O.
"""

import glob
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import stat
import subprocess
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

SCHEMA = "efa-image-build/node-check/v1"
# The lock every image carries (efa_validators.run.imagebind has the same two: this module is copied
# alone into images under check, so it imports nothing of the package; tests/test_house.py holds them equal).
LOCK_PATH = "/opt/efa-image-build/variant.lock.json"
LOCK_ENV = "EFA_IMAGE_LOCK"
TOOL_TIMEOUT = 30.0
# The most a tool may write before its output is dropped unread (the check is then unknown, never judged on
# a part). The largest output read here is `nvidia-smi -q -x`: a few tens of KB a GPU in the nvsmi DTD's
# layout (our 8-GPU fixture, with the elements read, is 25 KB), a few hundred bytes more per listed process:
# well under 1 MB on an 8-GPU node. `ldconfig -p`, `fi_info` on 32 EFA devices, `ldd` are smaller still.
# The kernel log has its own cap (gpuhealth.KERNEL_LOG_MAX).
TOOL_OUTPUT_MAX = 8 << 20
FILE_MAX = 4 << 20  # a variant lock, /proc/driver/nvidia/version, a sysfs p2p entry: a few KB at most
READ_CHUNK = 1 << 16

Check = Dict[str, Any]


# What a failing check asks of whoever runs the node, mildest first (issue 39): a setting to fix and rerun, a
# GPU reset, a node reboot, a hardware replacement. A scheduler acts in proportion to it (run/drain.py): only
# "replace-hardware" asks for a new node. Sources per check: its reader's docstring.
REMEDIES = ("configure", "reset-gpu", "reboot-node", "replace-hardware")


def check(
    name: str,
    status: str,
    detail: str,
    evidence: Optional[List[Dict[str, Any]]] = None,
    remedy: Optional[str] = None,
) -> Check:
    """One check of the report; `remedy` (one of REMEDIES) is what a fail asks for, None otherwise."""
    assert status in ("pass", "fail", "unknown")
    assert remedy is None or remedy in REMEDIES, remedy
    return {
        "name": name,
        "status": status,
        "detail": detail,
        "evidence": evidence or [],
        "remedy": remedy if status == "fail" else None,
    }


def ev(source: str, text: str, line: Optional[int] = None) -> Dict[str, Any]:
    return {"file": source, "line": line, "text": text[:500]}


def run_tool(
    argv: Sequence[str], timeout: float = TOOL_TIMEOUT, limit: int = TOOL_OUTPUT_MAX
) -> Tuple[Optional[int], str]:
    """(exit code, output) or (None, why) when the tool is missing, hangs, or writes more than `limit` bytes.

    Read in chunks against a deadline: a tool that floods its output is stopped at the cap (its whole output
    was kept before, 1.2 GB for a 300 MB one), a truncated output is never judged."""
    if shutil.which(argv[0]) is None:
        return None, "%s not found on PATH" % argv[0]
    try:  # its own process group: a tool that hangs is ended with everything it started
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as err:
        return None, "%s could not run: %s" % (argv[0], err)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    chunks, size = [], 0  # type: List[bytes], int
    late = "%s did not answer within %gs" % (argv[0], timeout)
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            end_group(proc)
            return None, late
        data = os.read(proc.stdout.fileno(), READ_CHUNK)
        if not data:
            break
        size += len(data)
        if size > limit:
            end_group(proc)
            return None, "%s wrote more than %d bytes (the cap on a tool's output): not judged" % (
                argv[0],
                limit,
            )
        chunks.append(data)
    try:  # end of output: the tool itself still has to exit within its time
        rc = proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        end_group(proc)
        return None, late
    proc.stdout.close()
    return rc, b"".join(chunks).decode("utf-8", "replace")


def end_group(proc: "subprocess.Popen[bytes]") -> None:
    """SIGKILL to the tool's whole process group (its children hold the pipe and would outlive it), then
    collect it; a grandchild that left the group keeps the pipe open, so the pipe is not read again."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.stdout is not None:
        proc.stdout.close()
    proc.wait()


def read_text(path: str, limit: int = FILE_MAX) -> Optional[str]:
    """A small regular file's text (a lock, a /proc or /sys entry), or None: unreadable, not a regular file
    (a FIFO would block open() forever, /dev/zero never ends: checked on a non-blocking descriptor, as
    efa_validators/run/smallfile.py does; this module imports nothing of the package), or over `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        chunks, size = [], 0  # type: List[bytes], int
        while size <= limit:  # /proc and /sys report no size: read to the end, up to the cap
            data = os.read(fd, READ_CHUNK)
            if not data:
                return b"".join(chunks).decode("utf-8", "replace")
            chunks.append(data)
            size += len(data)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


# ---- GPUs and driver -------------------------------------------------------------------------------


def parse_nvidia_smi(text: str) -> List[Dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            gpus.append(
                {
                    "index": parts[0],
                    "name": parts[1],
                    "driver": parts[2],
                    "bus": parts[3] if len(parts) > 3 else "",
                }
            )
    return gpus


def check_gpus(rc: Optional[int], out: str, expected: Optional[int]) -> Check:
    src = "nvidia-smi --query-gpu"
    if rc is None:
        return check("gpus", "unknown", out, [ev(src, out)])
    gpus = parse_nvidia_smi(out)
    evidence = [ev(src, line) for line in out.splitlines()[:16] if line.strip()]
    if rc != 0:
        return check("gpus", "fail", "nvidia-smi exited %d: the driver does not answer" % rc, evidence)
    if not gpus:
        return check("gpus", "fail", "nvidia-smi lists no GPU", evidence)
    odd = [line for line in out.splitlines() if line.strip() and not parse_nvidia_smi(line)]
    if odd:  # a row cut or not of the asked format: the count would be judged on a part
        why = "%d line(s) of nvidia-smi not a GPU row: %s" % (len(odd), odd[0][:120])
        return check("gpus", "unknown", why, evidence)
    drivers = sorted({g["driver"] for g in gpus})
    detail = "%d GPU(s) (%s), driver %s" % (len(gpus), gpus[0]["name"], "/".join(drivers))
    if expected is not None and len(gpus) != expected:
        return check("gpus", "fail", detail + "; the instance type has %d" % expected, evidence)
    return check("gpus", "pass", detail, evidence)


_OPEN_MODULE = re.compile(r"Open Kernel Module", re.I)
_NVRM = re.compile(r"NVRM version:.*?(\d+\.\d+(?:\.\d+)?)")


def parse_driver_flavor(
    proc_version: Optional[str], modinfo: Optional[str]
) -> Tuple[Optional[str], Optional[str]]:
    """('open'|'proprietary'|None, version or None) from /proc/driver/nvidia/version or `modinfo nvidia`."""
    version = None
    if proc_version:
        m = _NVRM.search(proc_version)
        version = m.group(1) if m else None
        if _OPEN_MODULE.search(proc_version):
            return "open", version
        if "Kernel Module" in proc_version:
            return "proprietary", version
    if modinfo:
        lic = re.search(r"^license:\s*(.+)$", modinfo, re.M)
        ver = re.search(r"^version:\s*(\S+)$", modinfo, re.M)
        version = version or (ver.group(1) if ver else None)
        if lic:
            return ("open" if "GPL" in lic.group(1) else "proprietary"), version
    return None, version


def check_kernel_driver(
    proc_version: Optional[str],
    modinfo: Optional[str],
    peermem_loaded: Optional[bool],
    gdr_required: Optional[bool],
    efa_nv_peermem_loaded: Optional[bool] = None,
) -> Check:
    """Which NVIDIA kernel driver runs; its peer-memory modules are evidence, never a failure.

    GPUDirect RDMA over EFA does not go through nvidia_peermem (the Mellanox/ib_core peer-memory client):
    the EFA kernel driver talks to the NVIDIA driver itself (amzn/amzn-drivers kernel/linux/efa
    RELEASENOTES.md r1.6.0 "Add NVIDIA GPUDirect RDMA support"), and with the open NVIDIA driver AWS's
    efa_nv_peermem links the two (kernel/linux/efa_nv_peermem/README). Whether GDR works is what the EFA
    driver reports in /sys/class/infiniband/*/device/p2p: the `gdr-capability` check.
    """
    flavor, version = parse_driver_flavor(proc_version, modinfo)
    evidence = []
    if proc_version:
        evidence.append(ev("/proc/driver/nvidia/version", proc_version.strip().splitlines()[0]))
    if modinfo:
        evidence += [
            ev("modinfo nvidia", line)
            for line in modinfo.splitlines()
            if line.startswith(("license", "version"))
        ]
    for module, loaded in (("nvidia_peermem", peermem_loaded), ("efa_nv_peermem", efa_nv_peermem_loaded)):
        if loaded is not None:
            evidence.append(ev("/sys/module/" + module, "loaded" if loaded else "not loaded"))
    if flavor is None:
        return check("nvidia-kernel-driver", "unknown", "kernel driver not visible from here", evidence)
    detail = "%s kernel module %s" % (flavor, version or "(version not shown)")
    if gdr_required:
        detail += "; GPUDirect over EFA is judged by gdr-capability (the EFA driver's p2p provider)"
        if flavor == "open" and efa_nv_peermem_loaded is False:
            detail += "; efa_nv_peermem, which links the open driver to EFA, is not loaded"
    return check("nvidia-kernel-driver", "pass", detail, evidence)


# ---- EFA -------------------------------------------------------------------------------------------


def parse_fi_info(text: str) -> Dict[str, List[str]]:
    """domain -> fabrics, for the efa provider blocks of `fi_info -p efa -t FI_EP_RDM`.

    Newer libfabric lists every device twice (fabric `efa` and `efa-direct`): devices are domains."""
    domains = {}  # type: Dict[str, List[str]]
    provider = fabric = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("provider:"):
            provider, fabric = line.split(":", 1)[1].strip(), None
        elif line.startswith("fabric:"):
            fabric = line.split(":", 1)[1].strip()
        elif line.startswith("domain:") and provider is not None and provider.split(";")[0] == "efa":
            domain = line.split(":", 1)[1].strip()
            domains.setdefault(domain, [])
            if fabric and fabric not in domains[domain]:
                domains[domain].append(fabric)
    return domains


def check_efa_devices(rc: Optional[int], out: str, expected: Optional[int]) -> Check:
    src = "fi_info -p efa -t FI_EP_RDM"
    if rc is None:
        return check("efa-devices", "unknown", out, [ev(src, out)])
    domains = parse_fi_info(out)
    evidence = [
        ev(src, "domain: %s (fabrics %s)" % (d, ", ".join(f) or "?")) for d, f in sorted(domains.items())
    ]
    if not domains:
        first = next((line for line in out.splitlines() if line.strip()), "(no output)")
        return check(
            "efa-devices",
            "fail",
            "libfabric finds no efa device (exit %d): NCCL would fall back to sockets" % rc,
            [ev(src, first)],
        )
    if rc != 0:  # devices listed, yet fi_info failed: the list may be cut short
        why = "fi_info exited %d after listing %d device(s)" % (rc, len(domains))
        return check("efa-devices", "unknown", why, evidence)
    detail = "%d EFA device(s)" % len(domains)
    if expected is not None and len(domains) != expected:
        return check("efa-devices", "fail", detail + "; the instance type has %d" % expected, evidence)
    if expected is None:
        detail += " (no instance type given: count not judged)"
    return check("efa-devices", "pass", detail, evidence)


def check_dev_infiniband(root: str = "/") -> Check:
    path = os.path.join(root, "dev/infiniband")
    if not os.path.isdir(path):
        return check(
            "dev-infiniband",
            "fail",
            "%s is missing: pass the EFA devices into the container" % path,
            [ev(path, "no such directory")],
        )
    entries = sorted(os.listdir(path))
    uverbs = [e for e in entries if e.startswith("uverbs")]
    evidence = [ev(path, " ".join(entries) or "(empty)")]
    if not uverbs:
        return check("dev-infiniband", "fail", "%s has no uverbs device" % path, evidence)
    return check("dev-infiniband", "pass", "%d uverbs device(s)" % len(uverbs), evidence)


def check_memlock(limits: Optional[Tuple[int, int]] = None) -> Check:
    """EFA registers large buffers; anything short of unlimited fails registration under load."""
    soft, hard = limits if limits is not None else resource.getrlimit(resource.RLIMIT_MEMLOCK)
    inf = resource.RLIM_INFINITY

    def show(v: int) -> str:
        return "unlimited" if v == inf else "%d KiB" % (v // 1024)

    evidence = [ev("getrlimit(RLIMIT_MEMLOCK)", "soft %s, hard %s" % (show(soft), show(hard)))]
    if soft == inf:
        return check("memlock", "pass", "unlimited", evidence)
    return check(
        "memlock",
        "fail",
        "locked-memory limit is %s, not unlimited (ulimit -l unlimited / --ulimit memlock=-1)" % show(soft),
        evidence,
    )


def check_gdr(root: str = "/", gdr_required: Optional[bool] = None) -> Check:
    """GDR capability as the EFA kernel driver exposes it: /sys/class/infiniband/<dev>/device/p2p holds
    the provider, `NVIDIA` (or `NVIDIA peermem` through efa_nv_peermem), `NEURON`, or nothing
    (amzn/amzn-drivers kernel/linux/efa src/efa_sysfs.c, src/efa_nvmem_impl.h; sysfs since r2.6.0).
    Only an NVIDIA provider gives GPUDirect to GPUs."""
    base = os.path.join(root, "sys/class/infiniband")
    devices = sorted(glob.glob(os.path.join(base, "*")))
    if not devices:
        return check("gdr-capability", "unknown", "no RDMA device under %s" % base)
    evidence = []
    capable, missing = [], []
    for dev in devices:
        p2p = read_text(os.path.join(dev, "device", "p2p"))
        name = os.path.basename(dev)
        if p2p is None:
            missing.append(name)
            evidence.append(ev(os.path.join(dev, "device/p2p"), "missing"))
        elif p2p.strip().startswith("NVIDIA"):
            capable.append(name)
            evidence.append(ev(os.path.join(dev, "device/p2p"), p2p.strip().replace("\n", " ")))
        elif p2p.strip():
            missing.append(name)
            evidence.append(ev(os.path.join(dev, "device/p2p"), p2p.strip() + " (not an NVIDIA provider)"))
        else:
            missing.append(name)
            evidence.append(ev(os.path.join(dev, "device/p2p"), "(empty: no peer-memory provider)"))
    if missing:
        status = "fail" if gdr_required is not False else "unknown"
        return check(
            "gdr-capability",
            status,
            "%d of %d device(s) without an NVIDIA p2p provider: %s (EFA driver without GPUDirect, or the "
            "NVIDIA module not loaded; with the open driver, efa_nv_peermem)"
            % (len(missing), len(devices), ", ".join(missing)),
            evidence,
        )
    return check(
        "gdr-capability", "pass", "all %d device(s) report an NVIDIA p2p provider" % len(devices), evidence
    )


# ---- the image: env policy, NCCL's plugin and libfabric ------------------------------------------


def load_lock(env: Dict[str, str]) -> Tuple[Optional[Dict[str, Any]], str]:
    """(lock or None, where it was looked for / read from)."""
    path = env.get(LOCK_ENV) or LOCK_PATH
    text = read_text(path)
    if text is None:
        if os.path.lexists(path):
            return {"_error": "not a regular file of at most %d bytes, or unreadable" % FILE_MAX}, path
        return None, path
    try:
        lock = json.loads(text)
    except ValueError as err:
        return {"_error": "not JSON: %s" % err}, path
    return (lock if isinstance(lock, dict) else {"_error": "not a JSON object"}), path


def _env_matches(want: Optional[str], have: Optional[str]) -> bool:
    """A value like `/opt/x/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}` was expanded by the image's ENV:
    it holds if every literal path of it is still in the list; a plain value must be equal."""
    if want is None:
        return have is None
    if "$" not in want:
        return have == want
    if have is None:
        return False
    literal = re.sub(r"\$\{[^}]*\}+|\$[A-Za-z_][A-Za-z0-9_]*", ":", want)
    parts = [p for p in literal.split(":") if p and p != "+"]
    return all(p in have.split(":") for p in parts)


def check_env_policy(lock: Optional[Dict[str, Any]], where: str, env: Dict[str, str]) -> Check:
    """The env the image was built with (the lock's `env`, `env_forbidden`) must still hold at run time:
    a launcher or job spec that drops or overrides one silently changes NCCL's behaviour."""
    if lock is None:
        return check("env-policy", "unknown", "no variant lock at %s (set %s)" % (where, LOCK_ENV))
    if "_error" in lock:
        return check("env-policy", "unknown", "variant lock %s unreadable: %s" % (where, lock["_error"]))
    wrong, evidence = [], []
    for item in lock.get("env") or []:
        name, value = item.get("name"), item.get("value")
        if not name:
            continue
        have = env.get(name)
        if item.get("overridable") and not _env_matches(value, have):
            # a site default (NCCL_SOCKET_IFNAME): the cluster's own interface names may replace it
            evidence.append(
                ev(where, "%s: image default %r, the job sets %r (a site setting)" % (name, value, have))
            )
            continue
        if not _env_matches(value, have):
            wrong.append(name)
            evidence.append(
                ev(where, "%s: image sets %r, now %r (%s)" % (name, value, have, item.get("reason", "")))
            )
    for item in lock.get("env_forbidden") or []:
        name = item.get("name")
        if name and name in env:
            wrong.append(name)
            evidence.append(
                ev(where, "%s=%r is set but forbidden: %s" % (name, env[name], item.get("reason", "")))
            )
    count = len(lock.get("env") or []) + len(lock.get("env_forbidden") or [])
    if wrong:
        return check("env-policy", "fail", "differs from the image's policy: %s" % ", ".join(wrong), evidence)
    return check(
        "env-policy",
        "pass",
        "%d rule(s) of %s hold (variant %s)" % (count, where, lock.get("name")),
        evidence,
    )


def parse_ldconfig(text: str, machine: Optional[str] = None) -> Dict[str, List[str]]:
    """soname -> paths from `ldconfig -p`, this machine's ABI only (first is what the loader picks)."""
    machine = machine or os.uname().machine
    tag = {"x86_64": "x86-64", "aarch64": "AArch64"}.get(machine)
    libs = {}  # type: Dict[str, List[str]]
    for line in text.splitlines():
        m = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and (tag is None or tag in m.group(2)):
            libs.setdefault(m.group(1), []).append(m.group(3))
    return libs


# Debian's multiarch tuple by `uname -m` (as imagebuild/catalog/platforms.py; validators import nothing of it)
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def default_lib_dirs(machine: Optional[str] = None) -> Tuple[str, ...]:
    """The loader's own directories, after LD_LIBRARY_PATH and the cache (glibc's trusted dirs, plus this
    machine's Debian/Ubuntu multiarch dirs that a cache-less image still resolves through)."""
    tuple_ = MULTIARCH.get(machine or os.uname().machine)
    multi = ("/lib/" + tuple_, "/usr/lib/" + tuple_) if tuple_ else ()
    return ("/lib", "/usr/lib", "/lib64", "/usr/lib64") + multi


def ldconfig_cache() -> Optional[Dict[str, List[str]]]:
    """The loader cache (`ldconfig -p`, this ABI only), or None where ldconfig cannot run."""
    rc, out = run_tool(["ldconfig", "-p"])
    if rc is None and os.path.exists("/sbin/ldconfig"):
        rc, out = run_tool(["/sbin/ldconfig", "-p"])
    return parse_ldconfig(out) if rc == 0 else None


def plugin_names(env: Dict[str, str]) -> List[str]:
    """The file names NCCL tries to dlopen for its net plugin.

    NCCL_NET_PLUGIN=x: `libnccl-net-x.so` then `x` itself (newer NCCL); a path or a .so name is tried as
    given; `none` loads no plugin; unset: `libnccl-net.so`."""
    value = env.get("NCCL_NET_PLUGIN")
    if value:
        if value.lower() == "none":
            return []
        if "/" in value or value.endswith(".so"):
            return [value]
        return ["libnccl-net-%s.so" % value, value]
    return ["libnccl-net.so"]


def library_candidates(
    name: str, env: Dict[str, str], ldcache: Optional[Dict[str, List[str]]]
) -> List[Tuple[str, str]]:
    """(path, via) for every copy of `name` the loader could find, in its order: LD_LIBRARY_PATH, the cache
    (`ldconfig`), its default dirs. The one lookup both node-check and the image's static checks use."""
    if os.sep in name:
        return [(name, "path")] if os.path.exists(name) else []
    found = []
    for d in [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]:
        path = os.path.join(d, name)
        if os.path.exists(path):
            found.append((path, "LD_LIBRARY_PATH"))
    found += [(p, "ldconfig") for p in (ldcache or {}).get(name, [])]
    for d in default_lib_dirs():
        path = os.path.join(d, name)
        if os.path.exists(path):
            found.append((path, "default"))
    return found


def find_library(name: str, env: Dict[str, str], ldcache: Optional[Dict[str, List[str]]]) -> List[str]:
    """Where the dynamic loader would find `name`, in its order, one path per distinct file."""
    seen = set()
    out = []
    for p, _ in library_candidates(name, env, ldcache):
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            out.append(p)
    return out


def ldd_resolves(lib: str) -> Tuple[Optional[Dict[str, Optional[str]]], str]:
    """soname -> path (None = "not found") for a shared object, by `ldd`; (None, why) without ldd."""
    rc, out = run_tool(["ldd", lib])
    if rc is None:
        return None, out
    if rc != 0:  # not a dynamic object, or ldd itself failed: what it printed is no resolution
        return None, "ldd exited %d: %s" % (rc, out.strip()[:200])
    deps = {}  # type: Dict[str, Optional[str]]
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return deps, out


def check_plugin(env: Dict[str, str], ldcache: Optional[Dict[str, List[str]]]) -> Tuple[Check, Optional[str]]:
    """Which net plugin NCCL will load; none means NCCL silently uses its socket transport."""
    names = plugin_names(env)
    if not names:
        return check(
            "nccl-net-plugin", "fail", "NCCL_NET_PLUGIN=none: NCCL will not load the EFA plugin"
        ), None
    evidence = []
    for name in names:
        hits = find_library(name, env, ldcache)
        for h in hits:
            evidence.append(ev("loader search", "%s -> %s (%s)" % (name, h, os.path.realpath(h))))
        if hits:
            others = []
            if ldcache is not None:
                others = sorted(k for k in ldcache if k.startswith("libnccl-net") and k != name)
            detail = "NCCL will load %s" % hits[0]
            if len(hits) > 1:
                detail += " (%d copies on the search path; the first wins)" % len(hits)
            if others:
                detail += "; also installed: %s" % ", ".join(others)
            return check("nccl-net-plugin", "pass", detail, evidence), hits[0]
    where = "LD_LIBRARY_PATH=%s" % env.get("LD_LIBRARY_PATH", "")
    if ldcache is None:
        return (
            check(
                "nccl-net-plugin",
                "unknown",
                "%s not on %s and ldconfig unavailable" % (" or ".join(names), where),
            ),
            None,
        )
    return (
        check(
            "nccl-net-plugin",
            "fail",
            "%s not found on %s or in the ldconfig cache: NCCL would use sockets"
            % (" or ".join(names), where),
            [ev("ldconfig -p", "no %s" % n) for n in names],
        ),
        None,
    )


def check_libfabric(
    plugin: Optional[str], env: Dict[str, str], ldcache: Optional[Dict[str, List[str]]]
) -> Check:
    """The libfabric the plugin binds to at run time; two libfabrics on the path is a known failure."""
    copies = find_library("libfabric.so.1", env, ldcache)
    evidence = [ev("loader search", "libfabric.so.1 -> %s (%s)" % (c, os.path.realpath(c))) for c in copies]
    if plugin is not None:
        deps, out = ldd_resolves(plugin)
        if deps is None:
            return check("libfabric", "unknown", "cannot run ldd on the plugin: %s" % out, evidence)
        missing = sorted(k for k, v in deps.items() if v is None)
        evidence += [
            ev("ldd %s" % plugin, line.strip())
            for line in out.splitlines()
            if "fabric" in line or "not found" in line
        ]
        if missing:
            return check(
                "libfabric", "fail", "the plugin's libraries are not found: %s" % ", ".join(missing), evidence
            )
        bound = deps.get("libfabric.so.1")
        if bound is None:
            return check("libfabric", "unknown", "the plugin does not link libfabric.so.1 directly", evidence)
        detail = "the plugin binds %s" % bound
        if len(copies) > 1:
            detail += "; other copies on the search path: %s" % ", ".join(c for c in copies if c != bound)
        return check("libfabric", "pass", detail, evidence)
    if not copies:
        status = "fail" if ldcache is not None else "unknown"
        return check("libfabric", status, "no libfabric.so.1 on the loader's path", evidence)
    detail = "the loader would pick %s (plugin not found, so not confirmed by ldd)" % copies[0]
    return check("libfabric", "unknown", detail, evidence)


# ---- all together ----------------------------------------------------------------------------------


def verdict_of(checks: List[Check]) -> str:
    statuses = [c["status"] for c in checks]
    if "fail" in statuses:
        return "fail"
    if "unknown" in statuses or not statuses:
        return "unknown"
    return "pass"


DCGM_TIMEOUT = {1: 120.0, 2: 900.0}  # dcgmi diag: level 1 takes seconds, level 2 a few minutes


def run_checks(
    instance_type: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    root: str = "/",
    dcgm_level: Optional[int] = None,
) -> Dict[str, Any]:
    """Every check on this node -> the node-check report. `dcgm_level` None: DCGM level 1 where dcgmi is
    installed; 0: no DCGM."""
    env = dict(os.environ if env is None else env)
    profile = None
    if instance_type:
        from efa_validators.judge.profiles import get_profile

        profile = get_profile(instance_type)
    gpus_expected = profile.gpus if profile else None
    efa_expected = profile.efa_devices if profile else None
    gdr_required = profile.gdr_required if profile else None

    checks = []
    rc, out = run_tool(
        ["nvidia-smi", "--query-gpu=index,name,driver_version,pci.bus_id", "--format=csv,noheader"]
    )
    checks.append(check_gpus(rc, out, gpus_expected))
    # imported here: this module is also copied alone (without gpuhealth) into images under check
    from efa_validators.node import gpuhealth

    level = gpuhealth.dcgm_level_for(dcgm_level, shutil.which("dcgmi") is not None)

    def tool(argv: Sequence[str]) -> Tuple[Optional[int], str]:
        diag = list(argv[:2]) == ["dcgmi", "diag"]
        timeout = DCGM_TIMEOUT.get(level or 1, TOOL_TIMEOUT) if diag else TOOL_TIMEOUT
        limit = gpuhealth.KERNEL_LOG_MAX if argv[0] in gpuhealth.KERNEL_LOG_TOOLS else TOOL_OUTPUT_MAX
        return run_tool(argv, timeout, limit)

    checks += gpuhealth.gpu_health_checks(
        tool, level, profile.nvlink if profile else None, profile.name if profile else ""
    )
    mrc, mout = run_tool(["modinfo", "nvidia"])
    peermem = efa_nv = None  # type: Optional[bool]
    if os.path.isdir(os.path.join(root, "sys/module")):
        peermem = os.path.isdir(os.path.join(root, "sys/module/nvidia_peermem"))
        efa_nv = os.path.isdir(os.path.join(root, "sys/module/efa_nv_peermem"))
    checks.append(
        check_kernel_driver(
            read_text(os.path.join(root, "proc/driver/nvidia/version")),
            mout if mrc == 0 else None,
            peermem,
            gdr_required,
            efa_nv,
        )
    )
    rc, out = run_tool(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    checks.append(check_efa_devices(rc, out, efa_expected))
    checks.append(check_dev_infiniband(root))
    checks.append(check_memlock())
    checks.append(check_gdr(root, gdr_required))
    lock, where = load_lock(env)
    checks.append(check_env_policy(lock, where, env))
    ldcache = ldconfig_cache()
    plugin_check, plugin = check_plugin(env, ldcache)
    checks.append(plugin_check)
    checks.append(check_libfabric(plugin, env, ldcache))
    if instance_type and profile is None:
        checks.append(check("instance-profile", "unknown", "no profile for instance type %r" % instance_type))
    return {
        "schema": SCHEMA,
        "verdict": verdict_of(checks),
        "host": socket.gethostname(),
        "node": env.get("NODE_NAME") or None,  # the Kubernetes node (spec.nodeName): drain acts on it
        "instance_type": instance_type,
        "checks": checks,
    }


# control characters a tool's output may carry into a detail (ESC sequences...): shown escaped on a terminal,
# as efa_validators/report/printable.py does (this module imports nothing of the package: copied alone)
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _printable(text: object) -> str:
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group(0)) if ord(m.group(0)) < 0x100
                        else "\\u%04x" % ord(m.group(0)), str(text))  # fmt: skip


def format_text(report: Dict[str, Any]) -> str:
    lines = ["node-check on %s: %s" % (report.get("host"), report["verdict"])]
    for c in report["checks"]:
        lines.append("  %-8s %-22s %s" % (c["status"], c["name"], _printable(c["detail"])))
    return "\n".join(lines) + "\n"
