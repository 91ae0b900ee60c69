"""Node checks before a job: is this node able to run NCCL over EFA with GPUDirect RDMA at all?

Each check is pass, fail or unknown with the evidence it saw. A tool that is missing or a file that cannot
be read makes the check unknown, never pass: a node that could not be inspected is not a good node.
The readers of tool output (`parse_*`) are pure functions; `run_checks` does the I/O.
"""

import contextlib
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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple  # noqa: F401 (type comments)

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


# Set by `bounded` (the drop-in modes, node/dropin.py): every tool gets at most `tool` seconds and none runs
# past `deadline` (time.monotonic()); the tools running now, so a signal handler can end their groups.
_BOUND = {"deadline": None, "tool": None}  # type: Dict[str, Optional[float]]
_RUNNING = set()  # type: Set[subprocess.Popen[bytes]]
_HUNG = {}  # type: Dict[str, str]  # within `bounded`: a tool that did not answer in its time, and why


@contextlib.contextmanager
def bounded(total: float, per_tool: float) -> Iterator[None]:
    """Within it, each tool gets min(its own limit, `per_tool`, what is left of `total` from now); a tool
    asked for after the deadline is not started (unknown, saying so). Why: a scheduler's health hook is killed
    at a fixed limit (slurmd: 60 s) and our tools run in their own sessions, out of reach of that kill."""
    before = dict(_BOUND)
    _BOUND.update(deadline=time.monotonic() + total, tool=per_tool)
    _HUNG.clear()
    try:
        yield
    finally:
        _BOUND.update(before)
        _HUNG.clear()


def _time_for(timeout: float) -> float:
    deadline, per_tool = _BOUND["deadline"], _BOUND["tool"]
    if per_tool is not None:
        timeout = min(timeout, per_tool)
    if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
    return timeout


HOOK_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)  # what ends a health hook (node/dropin.py)


def _unblock() -> None:
    """In the tool, before exec: its signals as usual (a blocked mask would outlive exec)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HOOK_SIGNALS)


def end_running() -> None:
    """SIGKILL to the group of every tool running now (a signal handler's last act before it exits)."""
    for proc in list(_RUNNING):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_tool(
    argv: Sequence[str], timeout: float = TOOL_TIMEOUT, limit: int = TOOL_OUTPUT_MAX
) -> Tuple[Optional[int], str]:
    """(exit code, output) or (None, why) when the tool is missing, hangs, or writes more than `limit` bytes.

    Read in chunks against a deadline: a tool that floods its output is stopped at the cap (its whole output
    was kept before, 1.2 GB for a 300 MB one), a truncated output is never judged."""
    if shutil.which(argv[0]) is None:
        return None, "%s not found on PATH" % argv[0]
    timeout = _time_for(timeout)
    if timeout <= 0:
        return None, "%s not run: the node-check deadline had passed" % argv[0]
    if (
        argv[0] in _HUNG
    ):  # bounded: a tool that hung once is not waited for again (nvidia-smi is asked 4 times)
        return None, "%s not run again: %s" % (argv[0], _HUNG[argv[0]])
    # bounded: the hook's signals wait while a tool starts, so its handler sees every tool it must end
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HOOK_SIGNALS) if _BOUND["deadline"] else None
    try:  # its own process group: a tool that hangs is ended with everything it started
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_unblock if held is not None else None,
        )
        _RUNNING.add(proc)
    except OSError as err:
        return None, "%s could not run: %s" % (argv[0], err)
    finally:
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        rc, out = _read_tool(proc, argv, timeout, limit)
    finally:
        _RUNNING.discard(proc)
    if rc is None and _BOUND["deadline"] is not None and "did not answer" in out:
        _HUNG[argv[0]] = out
    return rc, out


def _read_tool(
    proc: "subprocess.Popen[bytes]", argv: Sequence[str], timeout: float, limit: int
) -> Tuple[Optional[int], str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    chunks, size = [], 0  # type: List[bytes], int
    late = "%s did not answer within %gs" % (argv[0], round(timeout, 1))
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


def check_gpus(
    rc: Optional[int], out: str, expected: Optional[int], seen: Optional[Dict[str, Optional[int]]] = None
) -> Check:
    """The GPUs nvidia-smi lists against the instance profile; `seen` (gpu_presence) decides what a
    shortfall asks for (gpu_shortfall)."""
    from efa_validators.node.presence import gpu_shortfall  # nodecheck alone (in images) never fails a GPU

    src = "nvidia-smi --query-gpu"
    seen = seen if seen is not None else {}
    if rc is None:
        return check("gpus", "unknown", out, [ev(src, out)])
    gpus = parse_nvidia_smi(out)
    evidence = [ev(src, line) for line in out.splitlines()[:16] if line.strip()]
    if rc != 0 or not gpus:
        remedy, why = gpu_shortfall(0, expected, seen)
        if remedy == "reboot-node" and seen.get("dev") == 0 and seen.get("bus") is None:
            remedy, why = "configure", "no /dev/nvidiaN in this container: its GPUs were not passed in"
        said = "nvidia-smi exited %d: the driver does not answer" % rc if rc else "nvidia-smi lists no GPU"
        return check("gpus", "fail", "%s; %s" % (said, why), evidence + [ev("node", why)], remedy)
    odd = [line for line in out.splitlines() if line.strip() and not parse_nvidia_smi(line)]
    if odd:  # a row cut or not of the asked format: the count would be judged on a part
        why = "%d line(s) of nvidia-smi not a GPU row: %s" % (len(odd), odd[0][:120])
        return check("gpus", "unknown", why, evidence)
    drivers = sorted({g["driver"] for g in gpus})
    detail = "%d GPU(s) (%s), driver %s" % (len(gpus), gpus[0]["name"], "/".join(drivers))
    if expected is not None and len(gpus) != expected:
        if len(gpus) > expected:  # more GPUs than the instance has: the profile or --instance-type is wrong
            remedy, why = "configure", "more GPUs than the profile: is --instance-type this node's type?"
        else:
            remedy, why = gpu_shortfall(len(gpus), expected, seen)
        return check(
            "gpus",
            "fail",
            detail + "; the instance type has %d; %s" % (expected, why),
            evidence + [ev("node", why)],
            remedy,
        )
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

    It never fails, so it carries no remedy: a driver or peer-memory module that is missing is judged where
    it matters, by gdr-capability (configure) and by gpus (no driver loaded: configure).
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
    """The EFA devices libfabric's efa provider lists (EFA only: the provider opens no other device).

    A fail is configure, never hardware: how many EFA devices a node has is set when it is launched (one
    per EFA network interface given at launch: AWS EC2 user guide, "Maximize network bandwidth on Amazon EC2
    instances with multiple network cards",
    docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html), and how many a container sees is
    set by its runtime (/dev/infiniband, the pod's vpc.amazonaws.com/efa); libfabric finding none in a
    container without /dev/infiniband is a mount. A replaced node launched the same way shows the same."""
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
            "configure",
        )
    if rc != 0:  # devices listed, yet fi_info failed: the list may be cut short
        why = "fi_info exited %d after listing %d device(s)" % (rc, len(domains))
        return check("efa-devices", "unknown", why, evidence)
    detail = "%d EFA device(s)" % len(domains)
    if expected is not None and len(domains) != expected:
        why = "; the instance type has %d (the node's EFA interfaces, or those passed into the container)"
        return check("efa-devices", "fail", detail + why % expected, evidence, "configure")
    if expected is None:
        detail += " (no instance type given: count not judged)"
    return check("efa-devices", "pass", detail, evidence)


# The driver an RDMA device is bound to: its PCI device's `driver` link (Linux driver model,
# /sys/class/infiniband/<dev>/device/driver -> .../bus/pci/drivers/<name>). The EFA driver registers as `efa`
# (amzn/amzn-drivers@6fc63641 kernel/linux/efa/src/efa_main.c: DRV_MODULE_NAME, PCI ids 1d0f:efa0-efa2).
# p6-b200/p6-b300 show ConnectX devices (driver mlx5_core, for NVLink subnet management, no device/p2p) beside
# their EFA devices (../shared/FIELD-NOTES.md, "GPU health on today's drivers"): only `efa` devices are EFA.
EFA_DRIVER = "efa"


def rdma_driver(device_dir: str) -> Optional[str]:
    """The driver name of `device_dir` (a sysfs RDMA or uverbs entry), or None where no link says."""
    try:
        return os.path.basename(os.readlink(os.path.join(device_dir, "device", "driver")))
    except OSError:
        return None


def check_dev_infiniband(root: str = "/") -> Check:
    """/dev/infiniband holds a uverbs node for an EFA device: the container was given the EFA devices.

    Which device a uverbsN is comes from sysfs (/sys/class/infiniband_verbs/uverbsN/device/driver): a uverbs
    of another driver (p6's ConnectX) is not an EFA device; one whose driver sysfs does not show is counted
    and said so (efa-devices and gdr-capability judge EFA itself). A fail is configure: a device not mounted
    into the container is a setting (`--device /dev/infiniband/uverbsN`, the EFA device plugin)."""
    path = os.path.join(root, "dev/infiniband")
    if not os.path.isdir(path):
        return check(
            "dev-infiniband",
            "fail",
            "%s is missing: pass the EFA devices into the container" % path,
            [ev(path, "no such directory")],
            "configure",
        )
    entries = sorted(os.listdir(path))
    uverbs = [e for e in entries if e.startswith("uverbs")]
    evidence = [ev(path, " ".join(entries) or "(empty)")]
    efa, other, unseen = [], [], []
    for name in uverbs:
        driver = rdma_driver(os.path.join(root, "sys/class/infiniband_verbs", name))
        (efa if driver == EFA_DRIVER else unseen if driver is None else other).append(name)
        if driver is not None:
            evidence.append(ev("/sys/class/infiniband_verbs/%s/device/driver" % name, driver))
    if not efa and not unseen:
        why = "%s has no uverbs device of an EFA device" % path
        if other:
            why += " (%s: another driver's, not EFA)" % ", ".join(other)
        return check("dev-infiniband", "fail", why, evidence, "configure")
    detail = "%d EFA uverbs device(s)" % len(efa)
    if unseen:
        detail = "%d uverbs device(s), %d whose driver sysfs does not show (counted)" % (
            len(efa) + len(unseen),
            len(unseen),
        )
    if other:
        detail += "; %d of another driver not counted (%s)" % (len(other), ", ".join(other))
    return check("dev-infiniband", "pass", detail, evidence)


def check_memlock(limits: Optional[Tuple[int, int]] = None) -> Check:
    """EFA registers large buffers; anything short of unlimited fails registration under load. A fail is
    configure: a limit of the process (its launcher, container runtime or slurmd), never the hardware."""
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
        "configure",
    )


def check_gdr(root: str = "/", gdr_required: Optional[bool] = None) -> Check:
    """GDR capability as the EFA kernel driver exposes it: /sys/class/infiniband/<dev>/device/p2p holds
    the provider, `NVIDIA` (or `NVIDIA peermem` through efa_nv_peermem), `NEURON`, or nothing
    (amzn/amzn-drivers kernel/linux/efa src/efa_sysfs.c, src/efa_nvmem_impl.h; sysfs since r2.6.0).
    Only an NVIDIA provider gives GPUDirect to GPUs. Only EFA devices (driver `efa`, rdma_driver) are read:
    p6's ConnectX devices have no p2p and are no part of it. A device whose driver sysfs does not show makes
    the check unknown (it cannot be told EFA or not).

    Remedy: the provider is the EFA driver's and its companion modules' (the NVIDIA driver, efa_nv_peermem
    with the open driver), registered for the driver as a whole: none on every EFA device is configure
    (install an EFA driver with GPUDirect, load the module); some devices with it and some without is a state
    no setting explains, reboot-node (the drivers load again, in order)."""
    base = os.path.join(root, "sys/class/infiniband")
    devices = sorted(glob.glob(os.path.join(base, "*")))
    if not devices:
        return check("gdr-capability", "unknown", "no RDMA device under %s" % base)
    evidence = []
    capable, missing, others, unseen = [], [], [], []
    for dev in devices:
        name = os.path.basename(dev)
        driver = rdma_driver(dev)
        if driver != EFA_DRIVER:
            (unseen if driver is None else others).append(name)
            said = (
                "no driver link" if driver is None else "driver %s: not an EFA device, not counted" % driver
            )
            evidence.append(ev(os.path.join(dev, "device/driver"), said))
            continue
        p2p = read_text(os.path.join(dev, "device", "p2p"))
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
    if unseen:
        why = "%d RDMA device(s) whose driver sysfs does not show (%s): EFA devices cannot be told apart" % (
            len(unseen),
            ", ".join(unseen),
        )
        return check("gdr-capability", "unknown", why, evidence)
    efa = len(capable) + len(missing)
    if not efa:
        why = "no EFA device under %s (%d of another driver)" % (base, len(others))
        return check("gdr-capability", "unknown", why, evidence)
    not_counted = " (%d non-EFA device(s) not counted)" % len(others) if others else ""
    if missing:
        status = "fail" if gdr_required is not False else "unknown"
        return check(
            "gdr-capability",
            status,
            "%d of %d EFA device(s) without an NVIDIA p2p provider: %s (EFA driver without GPUDirect, or the "
            "NVIDIA module not loaded; with the open driver, efa_nv_peermem)%s"
            % (len(missing), efa, ", ".join(missing), not_counted),
            evidence,
            "reboot-node" if capable else "configure",
        )
    return check(
        "gdr-capability",
        "pass",
        "all %d EFA device(s) report an NVIDIA p2p provider%s" % (efa, not_counted),
        evidence,
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
    image_checks: Optional[Callable[[Dict[str, str]], List[Check]]] = None,
    dcgm_diag: bool = True,
) -> Dict[str, Any]:
    """Every check on this node -> the node-check report. `dcgm_level` None: DCGM level 1 where dcgmi is
    installed; 0: no DCGM. `image_checks`: the checks of the image (imagecheck.image_checks: env-policy,
    nccl-net-plugin, libfabric), given by the caller (that module imports this one); the CLI gives them, a
    scheduler's health hook does not (it runs on the host, outside any job's image). `dcgm_diag` False never
    runs `dcgmi diag` (seconds to minutes, longer than a health hook is given) but still reads
    `dcgmi health` where dcgmi is installed (unless `dcgm_level` is 0)."""
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
    from efa_validators.node.presence import gpu_presence

    checks.append(check_gpus(rc, out, gpus_expected, gpu_presence(read_text, root)))
    # imported here: this module is also copied alone (without gpuhealth) into images under check
    from efa_validators.node import gpuhealth

    level = gpuhealth.dcgm_level_for(dcgm_level, shutil.which("dcgmi") is not None)

    def tool(argv: Sequence[str]) -> Tuple[Optional[int], str]:
        diag = list(argv[:2]) == ["dcgmi", "diag"]
        timeout = DCGM_TIMEOUT.get(level or 1, TOOL_TIMEOUT) if diag else TOOL_TIMEOUT
        limit = gpuhealth.KERNEL_LOG_MAX if argv[0] in gpuhealth.KERNEL_LOG_TOOLS else TOOL_OUTPUT_MAX
        return run_tool(argv, timeout, limit)

    checks += gpuhealth.gpu_health_checks(
        tool,
        level if dcgm_diag else None,
        profile.nvlink if profile else None,
        profile.name if profile else "",
    )
    if level and not dcgm_diag:  # the health watches only: a read of what DCGM saw, in the tools' time
        checks.append(gpuhealth.dcgm_health_check(*tool(list(gpuhealth.DCGM_HEALTH))))
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
    if image_checks is not None:
        checks += image_checks(env)
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
