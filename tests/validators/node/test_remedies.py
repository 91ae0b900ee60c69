"""issue 39 items 3 and 5 for node-check's own checks (gpuhealth's are tested beside it): every fail carries a
remedy in proportion to what the node shows, and EFA is counted by its driver, so p6-b200/b300's ConnectX
devices (no p2p) neither fail gdr-capability nor pass for a missing EFA uverbs."""

from __future__ import annotations

import ast
import resource
import subprocess
import sys

import pytest
from paths import IMPORT_PATH, ROOT
from test_nodecheck import _rdma_device

from efa_validators.node import imagecheck, nodecheck, presence

FI_INFO_ONE = "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    type: FI_EP_RDM\n"


def _p6_b200(root, efa=8, connectx=4, p2p="NVIDIA\n"):
    """A p6-b200.48xlarge's RDMA devices as sysfs shows them: 8 EFA devices (the profile's efa_devices; driver
    efa, device/p2p from the EFA driver) beside ConnectX devices for NVLink subnet management (driver
    mlx5_core, no device/p2p), each with its uverbs node (../shared/FIELD-NOTES.md, "GPU health on today's
    drivers": only devices whose driver is efa are EFA). The ConnectX count here is illustrative."""
    for i in range(efa):
        _rdma_device(root, "rdmap%ds0" % (80 + i), "efa", p2p, uverbs=i)
    for i in range(connectx):
        _rdma_device(root, "mlx5_%d" % i, "mlx5_core", None, uverbs=efa + i)


def test_p6_b200_connectx_devices_are_not_counted_and_do_not_fail_gdr(tmp_path):
    """On main gdr-capability read every /sys/class/infiniband device: the ConnectX ones have no p2p, so a
    healthy p6-b200 failed (12 devices, 4 without a provider)."""
    _p6_b200(tmp_path)
    gdr = nodecheck.check_gdr(str(tmp_path), gdr_required=True)
    assert gdr["status"] == "pass", gdr
    assert "all 8 EFA device(s)" in gdr["detail"] and "4 non-EFA device(s) not counted" in gdr["detail"]
    shown = [e["text"] for e in gdr["evidence"]]
    assert "driver mlx5_core: not an EFA device, not counted" in shown
    dev = nodecheck.check_dev_infiniband(str(tmp_path))
    assert dev["status"] == "pass" and dev["detail"].startswith("8 EFA uverbs device(s)"), dev
    assert "4 of another driver not counted" in dev["detail"]


def test_a_container_given_only_the_connectx_uverbs_fails_dev_infiniband(tmp_path):
    """/dev/infiniband/uverbsN of a ConnectX device is not an EFA device: on main any uverbs passed."""
    _p6_b200(tmp_path, efa=0, connectx=2)
    dev = nodecheck.check_dev_infiniband(str(tmp_path))
    assert dev["status"] == "fail" and dev["remedy"] == "configure", dev
    assert "uverbs0, uverbs1: another driver's, not EFA" in dev["detail"]


def test_gdr_remedy_by_what_the_efa_devices_show(tmp_path):
    _p6_b200(tmp_path / "none", p2p="")
    gdr = nodecheck.check_gdr(str(tmp_path / "none"), gdr_required=True)
    assert gdr["status"] == "fail" and gdr["remedy"] == "configure" and "8 of 8 EFA" in gdr["detail"], gdr
    _p6_b200(tmp_path / "mixed", efa=2, p2p="NVIDIA\n")
    (tmp_path / "mixed/sys/devices/pci0000:00/0000:rdmap81s0/p2p").write_text("\n")
    gdr = nodecheck.check_gdr(str(tmp_path / "mixed"), gdr_required=True)
    assert gdr["status"] == "fail" and gdr["remedy"] == "reboot-node" and "1 of 2 EFA" in gdr["detail"], gdr


def test_an_rdma_device_whose_driver_is_not_shown_leaves_gdr_unknown(tmp_path):
    (tmp_path / "sys/class/infiniband/rdmap16s27/device").mkdir(parents=True)
    (tmp_path / "sys/class/infiniband/rdmap16s27/device/p2p").write_text("NVIDIA\n")
    gdr = nodecheck.check_gdr(str(tmp_path), gdr_required=True)
    assert gdr["status"] == "unknown" and "cannot be told apart" in gdr["detail"], gdr


def _gpu_tree(root, on_bus=8, nodes=8, driver=True):
    """sysfs PCI entries (vendor, class as the kernel prints them), /dev/nvidiaN and /proc/driver/nvidia."""
    for i in range(on_bus):
        d = root / "sys/bus/pci/devices" / ("0000:%02x:00.0" % (0x10 + i))
        d.mkdir(parents=True)
        (d / "vendor").write_text("0x10de\n")
        (d / "class").write_text("0x030200\n")
    switch = root / "sys/bus/pci/devices/0000:05:00.0"  # an NVSwitch: NVIDIA's, a bridge, not a GPU
    switch.mkdir(parents=True)
    (switch / "vendor").write_text("0x10de\n")
    (switch / "class").write_text("0x068000\n")
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for i in range(nodes):
        (root / "dev" / ("nvidia%d" % i)).write_text("")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    if driver:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text("NVRM version: NVIDIA UNIX Open Kernel Module\n")


SEVEN = "".join(
    "%d, NVIDIA H100 80GB HBM3, 570.86.15, 00000000:%02X:00.0\n" % (i, 0x10 + i) for i in range(7)
)


@pytest.mark.parametrize(
    "on_bus, nodes, driver, rc, out, remedy, said",
    [
        (8, 7, True, 0, SEVEN, "configure", "not all GPUs were passed into this container"),
        (7, 7, True, 0, SEVEN, "replace-hardware", "a GPU is missing from the PCI bus"),
        (8, 8, True, 0, SEVEN, "reboot-node", "the driver lists 7 of the GPUs"),
        (8, 8, False, 9, "NVIDIA-SMI has failed", "configure", "no NVIDIA kernel driver is loaded"),
        (8, 8, True, 9, "NVIDIA-SMI has failed", "reboot-node", "the driver lists 0 of the GPUs"),
        (8, 0, True, 9, "NVIDIA-SMI has failed", "configure", "not all GPUs were passed into this container"),
    ],
)
def test_a_gpu_shortfall_asks_for_what_the_node_shows(tmp_path, on_bus, nodes, driver, rc, out, remedy, said):
    """On main a short count was a fail with nothing to say which: drain --for hyperpod replaced the node for
    a container that was not given its GPUs."""
    _gpu_tree(tmp_path, on_bus, nodes, driver)
    seen = presence.gpu_presence(nodecheck.read_text, str(tmp_path))
    assert seen == {"bus": on_bus, "dev": nodes, "driver": int(driver)}
    gpus = nodecheck.check_gpus(rc, out, 8, seen)
    assert gpus["status"] == "fail" and gpus["remedy"] == remedy and said in gpus["detail"], gpus


def test_more_gpus_than_the_profile_is_a_setting():
    gpus = nodecheck.check_gpus(0, SEVEN, 4, {})
    assert gpus["status"] == "fail" and gpus["remedy"] == "configure" and "--instance-type" in gpus["detail"]


def test_every_fail_of_the_node_and_image_checks_carries_a_remedy(tmp_path):
    lock = {"name": "v", "env": [{"name": "FI_PROVIDER", "value": "efa"}]}
    fails = {
        "efa-devices none": nodecheck.check_efa_devices(1, "fi_getinfo: -61 (No data available)", 8),
        "efa-devices short": nodecheck.check_efa_devices(0, FI_INFO_ONE, 8),
        "dev-infiniband": nodecheck.check_dev_infiniband(str(tmp_path)),
        "memlock": nodecheck.check_memlock((64 << 10, resource.RLIM_INFINITY)),
        "env-policy": imagecheck.check_env_policy(lock, "L", {"FI_PROVIDER": "tcp"}),
        "plugin none": imagecheck.check_plugin({"NCCL_NET_PLUGIN": "none"}, {})[0],
        "plugin missing": imagecheck.check_plugin({"LD_LIBRARY_PATH": str(tmp_path)}, {})[0],
    }
    for what, c in fails.items():
        assert c["status"] == "fail" and c["remedy"] == "configure", (what, c)


def test_a_bounded_node_check_starts_no_tool_after_its_deadline(tmp_path):
    """The drop-in modes' bound: each tool gets at most its share, and none is started once the whole time is
    spent (a hung tool cannot take a health hook past the limit its scheduler kills it at)."""
    with nodecheck.bounded(0.5, 10.0):
        rc, why = nodecheck.run_tool(["sleep", "30"])
        assert rc is None and why == "sleep did not answer within 0.5s", why
        rc, why = nodecheck.run_tool(["true"])
        assert rc is None and why == "true not run: the node-check deadline had passed", why
    assert nodecheck.run_tool(["true"]) == (0, "")  # outside it, as before


def test_a_bounded_node_check_waits_for_a_hung_tool_once(tmp_path):
    """nvidia-smi is asked four times (query, -q -x, nvlink -s, nvlink -e): hung, it cost 4 x 10 s of a health
    hook's 60 s (bench/bench_healthcheck.py: 40.3 s); within `bounded` a tool that hung is not asked again."""
    with nodecheck.bounded(30.0, 0.5):
        assert nodecheck.run_tool(["sleep", "30"]) == (None, "sleep did not answer within 0.5s")
        rc, why = nodecheck.run_tool(["sleep", "0"])
        assert rc is None and why == "sleep not run again: sleep did not answer within 0.5s", why
        assert nodecheck.run_tool(["true"]) == (0, "")
    assert nodecheck.run_tool(["sleep", "0"]) == (0, "")  # outside it, asked as before


def test_a_bounded_tool_starts_with_no_signal_blocked():
    """The hook's signals wait while a tool starts (so its handler knows every tool to end); the tool itself
    must not inherit that mask across exec."""
    with nodecheck.bounded(30.0, 10.0):
        rc, out = nodecheck.run_tool(["grep", "^SigBlk", "/proc/self/status"])
    assert rc == 0 and out.split() == ["SigBlk:", "0" * 16], out


def test_run_checks_leaves_the_image_checks_to_its_caller(tmp_path):
    """A health hook runs on the host, outside any image: env-policy, plugin and libfabric are the image's,
    run only where the caller gives them (the node-check CLI does)."""
    code = (
        "from efa_validators.node import nodecheck\n"
        "r = nodecheck.run_checks(env={}, root=%r, dcgm_level=0)\n"
        "print(sorted(c['name'] for c in r['checks']))\n" % str(tmp_path)
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/nonexistent", "PYTHONPATH": IMPORT_PATH},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = ast.literal_eval(proc.stdout)
    assert "gpus" in names and not {"env-policy", "nccl-net-plugin", "libfabric"} & set(names), names
