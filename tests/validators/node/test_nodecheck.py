"""Node checks: the readers of tool output, the fail-closed rules, and the real tools of this machine
(no GPU, no EFA here: those checks must come out unknown or fail, never pass)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
from cli import VALIDATORS
from conftest import needed
from paths import IMPORT_PATH, ROOT
from preflight_util import fake_tools, run_cli

from efa_validators.node import imagecheck, nodecheck

FI_INFO_TWICE = """provider: efa
    fabric: efa
    domain: rdmap16s27-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
provider: efa
    fabric: efa-direct
    domain: rdmap16s27-rdm
    version: 122.0
    type: FI_EP_RDM
provider: efa
    fabric: efa
    domain: rdmap32s27-rdm
    type: FI_EP_RDM
provider: efa
    fabric: efa-direct
    domain: rdmap32s27-rdm
    type: FI_EP_RDM
"""


def test_fi_info_devices_counted_once_per_domain():
    domains = nodecheck.parse_fi_info(FI_INFO_TWICE)
    assert domains == {"rdmap16s27-rdm": ["efa", "efa-direct"], "rdmap32s27-rdm": ["efa", "efa-direct"]}
    assert nodecheck.check_efa_devices(0, FI_INFO_TWICE, 2)["status"] == "pass"
    bad = nodecheck.check_efa_devices(0, FI_INFO_TWICE, 32)
    assert bad["status"] == "fail" and "has 32" in bad["detail"]


def test_missing_tool_is_unknown_never_pass():
    assert nodecheck.check_gpus(None, "nvidia-smi not found on PATH", 8)["status"] == "unknown"
    assert nodecheck.check_efa_devices(None, "fi_info not found on PATH", 4)["status"] == "unknown"
    assert (
        nodecheck.verdict_of([nodecheck.check("a", "pass", ""), nodecheck.check("b", "unknown", "")])
        == "unknown"
    )


# issue 33 item 1 (audit, the sweep for more): each of the next three was judged on the part it printed


def test_an_nvidia_smi_line_that_is_not_a_gpu_row_is_unknown():
    rows = "0, NVIDIA H100 80GB HBM3, 550.54.15, 00000000:53:00.0\n1, NVIDIA H1\n"
    gpus = nodecheck.check_gpus(0, rows, None)
    assert gpus["status"] == "unknown" and "not a GPU row: 1, NVIDIA H1" in gpus["detail"], gpus


def test_fi_info_that_fails_after_listing_devices_is_unknown():
    efa = nodecheck.check_efa_devices(1, FI_INFO_TWICE, 2)
    assert efa["status"] == "unknown" and "fi_info exited 1 after listing 2" in efa["detail"], efa


def test_ldd_that_fails_resolves_nothing(tmp_path):
    text = tmp_path / "libnccl-net.so"
    text.write_text("not an ELF object\n")
    deps, why = imagecheck.ldd_resolves(str(text))  # the real ldd: "not a dynamic executable", exit 1
    assert deps is None and why.startswith("ldd exited"), why
    assert imagecheck.check_libfabric(str(text), {}, {})["status"] == "unknown"


def test_nvidia_smi_rows_against_profile():
    out = (
        "0, NVIDIA H100 80GB HBM3, 550.54.15, 00000000:53:00.0\n"
        "1, NVIDIA H100 80GB HBM3, 550.54.15, 00000000:64:00.0\n"
    )
    assert nodecheck.check_gpus(0, out, 2)["status"] == "pass"
    assert nodecheck.check_gpus(0, out, 8)["status"] == "fail"
    assert nodecheck.check_gpus(9, "NVIDIA-SMI has failed", 8)["status"] == "fail"


def test_driver_flavor():
    open_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build"
    prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Thu Mar 21 2024"
    assert nodecheck.parse_driver_flavor(open_text, None) == ("open", "550.54.15")
    assert nodecheck.parse_driver_flavor(prop, None) == ("proprietary", "535.161.08")
    assert nodecheck.parse_driver_flavor(None, "license:        Dual MIT/GPL\nversion: 560.1") == (
        "open",
        "560.1",
    )
    # EFA does GPUDirect without nvidia_peermem: its absence is evidence, not a failure
    assert nodecheck.check_kernel_driver(prop, None, False, True)["status"] == "pass"
    assert nodecheck.check_kernel_driver(prop, None, True, True)["status"] == "pass"
    assert nodecheck.check_kernel_driver(None, None, None, True)["status"] == "unknown"
    res = nodecheck.check_kernel_driver(open_text, None, False, True, efa_nv_peermem_loaded=False)
    assert res["status"] == "pass" and "efa_nv_peermem" in res["detail"]


def _node_tree(root, proc_version, modules, p2p):
    """A node's /proc and /sys as the NVIDIA and EFA drivers lay them out (p2p: amzn-drivers efa_sysfs.c)."""
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(proc_version + "\nGCC version:  gcc 11\n")
    for module in modules:
        (root / "sys/module" / module).mkdir(parents=True)
    for i, provider in enumerate(p2p):
        _rdma_device(root, "rdmap%ds27" % (16 + i), "efa", provider)


def _rdma_device(root, name, driver, p2p=None, uverbs=None):
    """One RDMA device as sysfs lays it out: /sys/class/infiniband/<name>/device is its PCI device, whose
    `driver` links to /sys/bus/pci/drivers/<driver>; `p2p` (the EFA driver's) where given; `uverbs` N: its
    /sys/class/infiniband_verbs/uverbsN (device -> the same PCI device) and /dev/infiniband/uverbsN."""
    drivers = root / "sys/bus/pci/drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    pci = root / "sys/devices/pci0000:00" / ("0000:%s" % name)
    pci.mkdir(parents=True)
    (pci / "driver").symlink_to(os.path.relpath(drivers, pci))
    if p2p is not None:
        (pci / "p2p").write_text(p2p)
    ib = root / "sys/class/infiniband" / name
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(os.path.relpath(pci, ib))
    if uverbs is not None:
        verbs = root / "sys/class/infiniband_verbs" / ("uverbs%d" % uverbs)
        verbs.mkdir(parents=True)
        (verbs / "device").symlink_to(os.path.relpath(pci, verbs))
        (verbs / "ibdev").write_text(name + "\n")
        (root / "dev/infiniband").mkdir(parents=True, exist_ok=True)
        (root / "dev/infiniband" / ("uverbs%d" % uverbs)).write_text("")


@pytest.mark.parametrize(
    "proc_version, modules, provider",
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Thu Mar 21 2024",
            ["nvidia", "efa"],
            "NVIDIA\n",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build",
            ["nvidia", "efa", "efa_nv_peermem"],
            "NVIDIA peermem\n",
        ),
    ],
)
def test_healthy_p5_node_without_nvidia_peermem_passes_the_driver_and_gdr_checks(
    tmp_path, proc_version, modules, provider
):
    """The issue's case: a p5 whose EFA driver reports an NVIDIA p2p provider, no nvidia_peermem loaded."""
    _node_tree(tmp_path, proc_version, modules, [provider] * 32)
    report = nodecheck.run_checks(
        "p5.48xlarge", env={"EFA_IMAGE_LOCK": str(tmp_path / "none")}, root=str(tmp_path)
    )
    by = {c["name"]: c for c in report["checks"]}
    assert by["nvidia-kernel-driver"]["status"] == "pass", by["nvidia-kernel-driver"]
    shown = {(e["file"], e["text"]) for e in by["nvidia-kernel-driver"]["evidence"]}
    assert ("/sys/module/nvidia_peermem", "not loaded") in shown
    assert by["gdr-capability"]["status"] == "pass" and "32 EFA device(s)" in by["gdr-capability"]["detail"]


def test_gdr_fails_on_a_device_without_an_nvidia_provider(tmp_path):
    _node_tree(
        tmp_path, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08", ["nvidia"], ["NVIDIA\n", "\n"]
    )
    _rdma_device(tmp_path, "rdmap18s27", "efa", "NEURON\n")
    res = nodecheck.check_gdr(str(tmp_path), gdr_required=True)
    assert res["status"] == "fail" and "rdmap17s27, rdmap18s27" in res["detail"]
    assert any("not an NVIDIA provider" in e["text"] for e in res["evidence"])


def test_gdr_and_dev_infiniband_from_a_sysfs_tree(tmp_path):
    """The EFA sysfs cannot exist on this machine: the readers are checked on a tree laid out like it."""
    for dev, p2p in (("rdmap16s27", "NVIDIA\n"), ("rdmap32s27", "")):
        _rdma_device(tmp_path, dev, "efa", p2p)
    res = nodecheck.check_gdr(str(tmp_path), gdr_required=True)
    assert res["status"] == "fail" and "rdmap32s27" in res["detail"]
    (tmp_path / "sys/class/infiniband/rdmap32s27/device/p2p").write_text("NVIDIA\n")
    assert nodecheck.check_gdr(str(tmp_path), True)["status"] == "pass"
    assert nodecheck.check_dev_infiniband(str(tmp_path))["status"] == "fail"
    (tmp_path / "dev/infiniband").mkdir(parents=True)
    (tmp_path / "dev/infiniband/uverbs0").write_text("")
    assert nodecheck.check_dev_infiniband(str(tmp_path))["status"] == "pass"


def test_memlock():
    inf = resource.RLIM_INFINITY
    assert nodecheck.check_memlock((inf, inf))["status"] == "pass"
    assert nodecheck.check_memlock((8 << 20, inf))["status"] == "fail"


def test_env_policy_from_lock():
    lock = {
        "name": "v",
        "env": [
            {"name": "FI_PROVIDER", "value": "efa", "reason": "r"},
            {"name": "LD_LIBRARY_PATH", "value": "/opt/a/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"},
        ],
        "env_forbidden": [{"name": "NCCL_ALGO", "reason": "leave unset"}],
    }
    good = {"FI_PROVIDER": "efa", "LD_LIBRARY_PATH": "/opt/a/lib:/usr/lib"}
    assert imagecheck.check_env_policy(lock, "L", good)["status"] == "pass"
    bad = dict(good, NCCL_ALGO="Ring", FI_PROVIDER="tcp")
    res = imagecheck.check_env_policy(lock, "L", bad)
    assert res["status"] == "fail" and "FI_PROVIDER" in res["detail"] and "NCCL_ALGO" in res["detail"]
    assert imagecheck.check_env_policy(None, "L", good)["status"] == "unknown"


def test_env_policy_accepts_a_site_value_for_an_overridable_default():
    """NCCL_SOCKET_IFNAME is a default the cluster may replace (a k8s manifest, SageMaker's interface)."""
    lock = {
        "name": "v",
        "env": [
            {"name": "NCCL_SOCKET_IFNAME", "value": "^docker,lo,veth,virbr", "overridable": True},
            {"name": "FI_PROVIDER", "value": "efa"},
        ],
    }
    res = imagecheck.check_env_policy(lock, "L", {"NCCL_SOCKET_IFNAME": "eth0", "FI_PROVIDER": "efa"})
    assert res["status"] == "pass" and "site setting" in json.dumps(res["evidence"])
    res = imagecheck.check_env_policy(lock, "L", {"NCCL_SOCKET_IFNAME": "eth0", "FI_PROVIDER": "tcp"})
    assert res["status"] == "fail" and "FI_PROVIDER" in res["detail"] and "SOCKET" not in res["detail"]


def test_plugin_and_libfabric_found_the_way_the_loader_does(tmp_path):
    """A real .so named like the plugin, linked against this machine's libfabric, on LD_LIBRARY_PATH. No gcc:
    a skip on a developer's machine, a failure in CI (scripts/setup-host.sh installs it)."""
    if shutil.which("gcc") is None:
        needed("gcc", "apt install gcc libfabric-dev (scripts/setup-host.sh): builds a real shared object")
    src = tmp_path / "p.c"
    src.write_text("#include <rdma/fabric.h>\nint probe(void){return (int)fi_version();}\n")
    lib = tmp_path / "libnccl-net.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src), "-lfabric"], check=True, timeout=60)
    env = {"LD_LIBRARY_PATH": str(tmp_path)}
    rc, out = nodecheck.run_tool(["ldconfig", "-p"])
    cache = nodecheck.parse_ldconfig(out) if rc == 0 else None
    plugin, path = imagecheck.check_plugin(env, cache)
    assert plugin["status"] == "pass" and path == str(lib)
    fab = imagecheck.check_libfabric(path, env, cache)
    assert fab["status"] == "pass" and "libfabric.so.1" in json.dumps(fab["evidence"])
    named = imagecheck.check_plugin({"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": str(tmp_path)}, cache)[0]
    assert named["status"] == "fail" and "libnccl-net-ofi.so" in named["detail"]


def test_node_check_cli_on_this_machine(tmp_path):
    """This machine's own tools, but for an nvidia-smi whose driver does not answer (the same everywhere, a
    GPU runner too): that alone fails the node."""
    env = fake_tools(tmp_path / "bin", {"nvidia-smi": "echo 'NVIDIA-SMI has failed'; exit 9"})
    out = tmp_path / "n.json"
    proc, _ = run_cli(
        ["node-check", "--instance-type", "p5.48xlarge", "--json", str(out)],
        env=dict(env, EFA_IMAGE_LOCK=str(tmp_path / "none.json")),
    )
    report = json.loads(out.read_text())
    by = {c["name"]: c for c in report["checks"]}
    assert report["verdict"] == "fail" and proc.returncode == 1
    assert by["gpus"]["status"] == "fail" and "exited 9" in by["gpus"]["detail"]
    assert by["env-policy"]["status"] == "unknown"
    if not os.path.isdir("/dev/infiniband"):
        assert by["dev-infiniband"]["status"] == "fail"
    assert all(c["status"] in ("pass", "fail", "unknown") for c in report["checks"])


def test_node_check_unknown_instance_type_is_usage_error():
    proc, _ = run_cli(["node-check", "--instance-type", "p99.bogus"])
    assert proc.returncode == 2 and "no such instance profile" in proc.stderr


def test_a_timed_out_tool_is_ended_with_its_whole_process_group(tmp_path):
    """issue 32 item 6: on a timeout only the tool itself was killed; a child it started ran on."""
    pidfile = tmp_path / "grandchild.pid"
    script = "sleep 300 >/dev/null 2>&1 & echo $! > %s; wait" % pidfile
    rc, why = nodecheck.run_tool(["sh", "-c", script], timeout=1.0)
    assert rc is None and "did not answer within 1s" in why
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _alive(pid)
    if left:  # this test's own child: never left running
        os.kill(pid, signal.SIGKILL)
    assert not left, "the tool's child %d outlived the timeout" % pid


def _alive(pid: int) -> bool:
    """A live process, not a zombie waiting for its parent (init reaps it in its own time)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def test_node_check_text_shows_control_bytes_escaped():
    check = {"status": "fail", "name": "x", "detail": "\x1b[31mred\x1b[0m\r\u202eevil"}
    report = {"host": "h", "verdict": "fail", "checks": [check]}
    text = nodecheck.format_text(report)
    assert "\\x1b[31mred\\x1b[0m\\x0d\\u202eevil" in text and "\x1b" not in text and "\r" not in text


# Measures the peak memory of a command, a child of its own (RUSAGE_CHILDREN of this fresh interpreter holds
# that command and what it waited for, nothing of the test session), under a 1 GiB address-space limit, so an
# unbounded read fails fast here instead of filling the shared machine.
PEAK_RSS = """
import resource, subprocess, sys, time
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
start = time.monotonic()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
                      preexec_fn=limit)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.monotonic() - start, proc.returncode)
sys.stderr.write(proc.stderr.decode("utf-8", "replace")[-2000:])
"""


def test_a_tool_that_never_stops_writing_is_unknown_quickly_in_bounded_memory(tmp_path):
    """issue 33 item 1 (audit): a tool's whole output was kept; a 300 MB nvidia-smi made node-check use
    1.2 GB. Now reading stops at the cap: unknown, saying so, in seconds, the process stays small."""
    env = fake_tools(tmp_path / "bin", {"nvidia-smi": "exec yes 'nvidia-smi flood 0123456789abcdef'"})
    env.update(PYTHONPATH=IMPORT_PATH, EFA_IMAGE_LOCK=str(tmp_path / "none.json"))
    out = tmp_path / "n.json"
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *VALIDATORS, "node-check", "--json", out],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    peak_kib, seconds, rc = proc.stdout.split()
    assert "Traceback" not in proc.stderr and int(rc) in (1, 3), proc.stderr
    assert float(seconds) < 30, seconds  # a flood read whole ran until the 30 s tool timeout, at least
    # the cap plus the interpreter: one cap's worth of output at most is held at a time
    assert int(peak_kib) * 1024 < nodecheck.TOOL_OUTPUT_MAX + (64 << 20), peak_kib
    by = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    said = "more than %d bytes" % nodecheck.TOOL_OUTPUT_MAX
    for name in ("gpus", "gpu-ecc", "gpu-nvlink"):
        assert by[name]["status"] == "unknown" and said in by[name]["detail"], by[name]
        assert any(said in e["text"] for e in by[name]["evidence"]), by[name]


def test_run_tool_stops_at_its_cap_and_keeps_what_fits():
    rc, why = nodecheck.run_tool(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x"], limit=4096)
    assert rc is None and "sh wrote more than 4096 bytes" in why
    rc, out = nodecheck.run_tool(["sh", "-c", "head -c 4096 /dev/zero | tr '\\0' x; exit 4"], limit=4096)
    assert rc == 4 and out == "x" * 4096


def test_a_lock_path_that_is_a_fifo_or_a_device_is_unknown_never_a_hang(tmp_path):
    """The lock (as every file node-check reads) is opened without blocking and read only if it is a regular
    file: a FIFO blocked open() forever, /dev/zero was read without end. In a child bounded in time and
    memory, so the old code fails the test instead of hanging it or filling the machine."""
    fifo = tmp_path / "lock.fifo"
    os.mkfifo(fifo)
    code = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from efa_validators.node import nodecheck\n"
        "print(json.dumps([nodecheck.load_lock({'EFA_IMAGE_LOCK': p}) for p in sys.argv[1:]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(fifo), "/dev/zero"],
        env=dict(os.environ, PYTHONPATH=IMPORT_PATH), capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for lock, where in json.loads(proc.stdout):
        checked = imagecheck.check_env_policy(lock, where, {})
        assert checked["status"] == "unknown" and "not a regular file" in checked["detail"], checked
    assert nodecheck.read_text(str(fifo)) is None and nodecheck.read_text("/dev/zero") is None
    big = tmp_path / "big.json"
    big.write_text(" " * (nodecheck.FILE_MAX + 1))
    assert nodecheck.read_text(str(big)) is None and nodecheck.read_text(str(big), nodecheck.FILE_MAX + 1)


def _nvlink_smi(nvlink_s: str) -> str:
    """A recorded nvidia-smi: the healthy p5 XML for `-q -x`, `nvlink_s` (a fixture, or "" for nothing) for
    `nvlink -s`, nothing for the rest; every call exits 0."""
    fix = ROOT / "tests" / "fixtures" / "gpuhealth"
    said = "cat '%s'" % (fix / nvlink_s) if nvlink_s else ":"
    return 'case "$*" in "-q -x") cat \'%s\' ;; "nvlink -s") %s ;; esac; exit 0' % (
        fix / "smi-healthy-p5.xml",
        said,
    )


@pytest.mark.parametrize(
    "instance_type, nvlink_s, status, said",
    [
        ("g6e.48xlarge", "", "pass", "no NVLink, as the g6e.48xlarge profile says"),
        ("g5.48xlarge", "", "pass", "no NVLink, as the g5.48xlarge profile says"),
        ("g5.48xlarge", "nvlink-s-healthy.txt", "unknown", "profile says its GPUs have no NVLink, but links"),
        ("p5.48xlarge", "", "fail", "links expected (the p5.48xlarge profile's GPUs are NVLink-connected)"),
        ("p5.4xlarge", "", "unknown", "printed nothing"),  # the profile does not say
        (None, "", "unknown", "printed nothing"),  # no instance type: unchanged
    ],
)
def test_node_check_judges_an_empty_nvlink_by_the_instance_profile(
    tmp_path, instance_type, nvlink_s, status, said
):
    """issue 33 item 1: an empty `nvidia-smi nvlink -s` left every g5/g6e node-check unknown (exit 3). With
    --instance-type, the profile's `nvlink` decides: none expected passes, expected fails. Recorded
    nvidia-smi on PATH, node-check as a user runs it."""
    env = fake_tools(tmp_path / "bin", {"nvidia-smi": _nvlink_smi(nvlink_s)})
    out = tmp_path / "n.json"
    args = ["node-check", "--dcgm-level", "0", "--json", str(out)]
    args += ["--instance-type", instance_type] if instance_type else []
    run_cli(args, env=dict(env, EFA_IMAGE_LOCK=str(tmp_path / "none.json")))
    by = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert by["gpu-ecc"]["status"] == "pass"  # the recorded tool answers
    assert by["gpu-nvlink"]["status"] == status and said in by["gpu-nvlink"]["detail"], by["gpu-nvlink"]
