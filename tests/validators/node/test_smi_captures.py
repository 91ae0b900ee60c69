"""The `nvidia-smi -q -x` reader (efa_validators/node/smi.py) on real captures (issue 39 items 1-2):
../shared/gpu-captures by path (skipped with the reason in a clone without it, failed in CI), fault fixtures
derived from them in memory (each test names the fields it changes), and our own small fixtures in
tests/fixtures/gpuhealth/ for a clone without ../shared."""

import re
import xml.etree.ElementTree as ET

import pytest
from conftest import gpu_capture, gpu_captures_index
from paths import ROOT

from efa_validators.node import gpuhealth
from efa_validators.node.verdict import REMEDIES

FIX = ROOT / "tests" / "fixtures" / "gpuhealth"
DEPRECATED = "Requested functionality has been deprecated"
# the elements each check reads: a check may stay unknown on a healthy capture only where the capture does not
# report them (absent, N/A, or deprecated) on some GPU
READS = {
    "gpu-ecc": ("ecc_mode/current_ecc",),
    "gpu-row-remap": ("remapped_rows/remapped_row_pending", "retired_pages/pending_retirement"),
    "gpu-pcie-link": ("pci/pci_gpu_link_info/link_widths/current_link_width",),
    "gpu-clocks": ("clocks_event_reasons/*", "clocks_throttle_reasons/*"),
    "gpu-persistence": ("persistence_mode",),
    "gpu-reset": ("gpu_recovery_action", "gpu_reset_status/reset_required"),
    "gpu-fabric": ("fabric/state",),
}
# healthy="unknown" in the index: what we decide, and why
DECIDED = {
    # R515 A10G on AWS g5: x8 of a x16 slot on the node's one GPU is how g5 is wired (AWS), so PCIe passes
    # with a note; R515 prints neither gpu_reset_status/gpu_recovery_action nor <fabric>: those stay unknown
    # (no evidence is no pass). Nothing fails.
    "02-telegraf-a10g-515.xml": {
        "gpu-ecc": "pass",
        "gpu-row-remap": "pass",
        "gpu-pcie-link": "pass",
        "gpu-clocks": "pass",
        "gpu-persistence": "pass",
        "gpu-reset": "unknown",
        "gpu-fabric": "unknown",
    },
    # R595 T4 on AWS g4dn: aggregate DRAM correctable 1 is no uncorrectable error; x8 of x16 on the node's
    # one GPU is g4dn's wiring. Every check passes.
    "13-k8stestinfra-t4.xml": {name: "pass" for name in READS},
}


def _xml_rows():
    return [row for row in gpu_captures_index() if row["kind"] == "nvidia-smi-xml"]


def _capture(name: str) -> str:
    return gpu_capture(name).read_text()


def _by_name(checks):
    return {c["name"]: c for c in checks}


def _unreported(xml: str, paths) -> bool:
    """No GPU of the capture reports any of the paths with a value (absent, N/A or deprecated on each)."""
    for gpu in ET.fromstring(xml).findall("gpu"):
        for path in paths:
            for node in gpu.findall(path):
                if (node.text or "").strip() not in ("", "N/A", DEPRECATED):
                    return False
    return True


def test_every_healthy_capture_fails_nothing_and_leaves_unknown_only_what_its_driver_does_not_report():
    """A consumer GPU (04-, RTX 3060) reports ECC and row remapping as N/A: those two may stay unknown, and
    do; every other check of every healthy capture passes."""
    rows = [row for row in _xml_rows() if row["healthy"] is True]
    assert rows, "no healthy nvidia-smi-xml capture in the index"
    for row in rows:
        xml = _capture(row["file"])
        checks = gpuhealth.smi_checks(0, xml)
        assert [c["name"] for c in checks] == list(READS), row["file"]
        for c in checks:
            assert c["status"] != "fail", (row["file"], c)
            if c["status"] == "unknown":
                assert _unreported(xml, READS[c["name"]]), (row["file"], c)


def test_the_r570_and_r580_captures_pass_gpu_reset_on_their_recovery_action():
    """R570 prints the deprecated reset_required beside gpu_recovery_action (04-); R580 prints only the
    recovery action (07-, 09-, 13-): each GPU reads None, and gpu-reset passes on it (it was unknown)."""
    for name in ("04-telegraf-rtx3060-570.xml", "07-k8stestinfra-h100.xml", "09-k8stestinfra-gb200.xml"):
        xml = _capture(name)
        reset = _by_name(gpuhealth.smi_checks(0, xml))["gpu-reset"]
        assert reset["status"] == "pass" and "recovery action None" in reset["detail"], (name, reset)
    assert DEPRECATED in _capture("04-telegraf-rtx3060-570.xml")
    assert "<gpu_reset_status>" not in _capture("09-k8stestinfra-gb200.xml")


def test_each_capture_the_index_cannot_call_healthy_is_judged_as_decided():
    rows = [row for row in _xml_rows() if row["healthy"] == "unknown"]
    undecided = sorted({row["file"] for row in rows} - set(DECIDED))
    assert not undecided, "decide these captures in DECIDED: %s" % undecided
    for row in rows:
        xml = _capture(row["file"])
        checks = _by_name(gpuhealth.smi_checks(0, xml))
        assert {n: c["status"] for n, c in checks.items()} == DECIDED[row["file"]], row["file"]
        for name, c in checks.items():
            if c["status"] == "unknown":
                assert _unreported(xml, READS[name]), (row["file"], c)
        pcie = checks["gpu-pcie-link"]["detail"]
        assert "x8/x16" in pcie and "the platform's wiring" in pcie, pcie


def _edit(xml: str, gpu: int, element: str, value: str) -> str:
    """The capture with `<element>` of its `gpu`-th <gpu> block (0-based, document order) set to `value`."""
    blocks = re.split(r"(?=<gpu id=)", xml)
    head, gpus = blocks[0], blocks[1:]
    changed, n = re.subn(
        r"(<%s>)[^<]*(</%s>)" % (element, element), r"\g<1>%s\g<2>" % value, gpus[gpu], count=1
    )
    assert n == 1, (element, gpu)
    gpus[gpu] = changed
    return head + "".join(gpus)


def _one(xml: str, name: str):
    return _by_name(gpuhealth.smi_checks(0, xml))[name]


def _fails(c, gpu_label: str, said: str, remedy: str) -> None:
    assert c["status"] == "fail" and c["remedy"] == remedy, c
    assert gpu_label in c["detail"] and said in c["detail"], c
    assert any(gpu_label in e["text"] and said in e["text"] for e in c["evidence"]), c


def _label(xml: str, gpu: int) -> str:
    """How the checks name the `gpu`-th <gpu> of a capture (its minor number and bus id)."""
    parsed = gpuhealth.parse_smi_xml(xml)[gpu]
    return "GPU %s (%s)" % (parsed["index"], parsed["bus"])


@pytest.mark.parametrize(
    "action, remedy",
    [
        ("Node Reboot", "reboot-node"),
        ("Reboot", "reboot-node"),
        ("GPU Reset", "reset-gpu"),
        ("Reset", "reset-gpu"),
        ("Drain P2P", "reset-gpu"),
        ("Drain and Reset", "reset-gpu"),
    ],
)
def test_a_recovery_action_on_the_gb200_capture_fails_with_its_class(action, remedy):
    """Changed: GPU 1's gpu_recovery_action None -> `action` (09-k8stestinfra-gb200.xml)."""
    xml = _capture("09-k8stestinfra-gb200.xml")
    reset = _one(_edit(xml, 1, "gpu_recovery_action", action), "gpu-reset")
    _fails(reset, _label(xml, 1), "recovery action %s" % action, remedy)


def test_a_recovery_action_nvidia_does_not_document_is_unknown():
    """Changed: GPU 1's gpu_recovery_action None -> "Power Cycle" (09-k8stestinfra-gb200.xml)."""
    xml = _edit(_capture("09-k8stestinfra-gb200.xml"), 1, "gpu_recovery_action", "Power Cycle")
    reset = _one(xml, "gpu-reset")
    assert reset["status"] == "unknown" and "Power Cycle" in reset["detail"], reset


@pytest.mark.parametrize(
    "element, value, said, remedy",
    [
        ("route_unhealthy", "True", "route_unhealthy True", "reset-gpu"),
        ("bandwidth", "Degraded", "bandwidth Degraded", "reset-gpu"),
        (
            "incorrect_configuration",
            "Incorrect SysGUID",
            "incorrect_configuration Incorrect SysGUID",
            "configure",
        ),
        ("incorrect_configuration", "Insufficient NVLinks", "Insufficient NVLinks", "reset-gpu"),
        ("summary", "Unhealthy", "summary Unhealthy", "reset-gpu"),
    ],
)
def test_a_fabric_health_fault_on_the_gb200_capture_fails_with_its_class(element, value, said, remedy):
    """Changed: GPU 1's fabric/health/`element` -> `value` (09-k8stestinfra-gb200.xml)."""
    xml = _edit(_capture("09-k8stestinfra-gb200.xml"), 1, element, value)
    _fails(_one(xml, "gpu-fabric"), _label(_capture("09-k8stestinfra-gb200.xml"), 1), said, remedy)


def test_a_fabric_recovery_in_progress_is_unknown_and_n_a_health_is_no_fault():
    """Changed: GPU 1's route_recovery_in_progress False -> True; then (the H100 capture, unchanged) every
    health field N/A: registration completed passes."""
    xml = _edit(_capture("09-k8stestinfra-gb200.xml"), 1, "route_recovery_in_progress", "True")
    fabric = _one(xml, "gpu-fabric")
    assert fabric["status"] == "unknown" and "route_recovery_in_progress=True" in fabric["detail"], fabric
    h100 = _capture("07-k8stestinfra-h100.xml")
    assert "<summary>N/A</summary>" in h100
    assert _one(h100, "gpu-fabric")["status"] == "pass"


def test_repair_pending_fails_reset_gpu_and_unrepairable_memory_replace_hardware_the_worst_wins():
    """Changed: GPU 1's channel_repair_pending No -> Yes (reset-gpu); then also GPU 2's unrepairable_memory
    No -> Yes: the check asks for the most severe remedy of its failing GPUs (replace-hardware)."""
    gb200 = _capture("09-k8stestinfra-gb200.xml")
    for pending in ("channel_repair_pending", "tpc_repair_pending"):
        edited = _edit(gb200, 1, pending, "Yes")
        _fails(_one(edited, "gpu-row-remap"), _label(gb200, 1), pending + "=Yes", "reset-gpu")
    xml = _edit(gb200, 1, "channel_repair_pending", "Yes")
    both = _one(_edit(xml, 2, "unrepairable_memory", "Yes"), "gpu-row-remap")
    assert both["status"] == "fail" and both["remedy"] == "replace-hardware", both
    assert _label(gb200, 1) in both["detail"] and "cannot repair" in both["detail"], both


def test_one_h100_link_narrower_than_its_peers_fails_replace_hardware():
    """Changed: GPU 3's current_link_width 16x -> 8x (07-k8stestinfra-h100.xml); its seven peers stay x16."""
    xml = _capture("07-k8stestinfra-h100.xml")
    pcie = _one(_edit(xml, 3, "current_link_width", "8x"), "gpu-pcie-link")
    _fails(
        pcie, _label(_capture("07-k8stestinfra-h100.xml"), 3), "narrower than its peers", "replace-hardware"
    )
    assert pcie["detail"].count("GPU ") == 1, pcie  # the peers are not named


def test_every_h100_link_equally_below_its_slot_is_the_platforms_wiring():
    """Changed: every GPU's current_link_width 16x -> 8x (07-k8stestinfra-h100.xml): passes, saying so."""
    xml = _capture("07-k8stestinfra-h100.xml")
    for gpu in range(8):
        xml = _edit(xml, gpu, "current_link_width", "8x")
    pcie = _one(xml, "gpu-pcie-link")
    assert pcie["status"] == "pass" and "every GPU of this node at x8 of x16" in pcie["detail"], pcie


def test_a_gpu_in_a_narrower_slot_is_not_judged_against_the_wider_slots_peers():
    """Changed: GPU 3's max_link_width and current_link_width 16x -> 8x (07-k8stestinfra-h100.xml): a card in
    an x8 slot at x8 beside x16 cards is no narrow link."""
    xml = _edit(
        _edit(_capture("07-k8stestinfra-h100.xml"), 3, "max_link_width", "8x"), 3, "current_link_width", "8x"
    )
    assert _one(xml, "gpu-pcie-link")["status"] == "pass"


def test_persistence_off_on_the_h100_capture_is_a_setting_that_passes():
    """Changed: every GPU's persistence_mode Enabled -> Disabled (07-k8stestinfra-h100.xml)."""
    xml = _capture("07-k8stestinfra-h100.xml")
    for gpu in range(8):
        xml = _edit(xml, gpu, "persistence_mode", "Disabled")
    checks = gpuhealth.smi_checks(0, xml)
    assert [c["status"] for c in checks] == ["pass"] * len(checks), checks
    persistence = _by_name(checks)["gpu-persistence"]
    assert "persistence mode Disabled" in persistence["detail"], persistence
    assert "nvidia-smi -pm 1" in persistence["detail"] and "nvidia-persistenced" in persistence["detail"]


@pytest.mark.parametrize(
    "element, value, check, said, remedy",
    [
        ("current_ecc", "Disabled", "gpu-ecc", "ECC is Disabled", "configure"),
        ("sram_threshold_exceeded", "Yes", "gpu-ecc", "over NVIDIA's threshold", "replace-hardware"),
        ("remapped_row_pending", "Yes", "gpu-row-remap", "row remap is pending", "reset-gpu"),
        ("remapped_row_failure", "Yes", "gpu-row-remap", "row remapping failed", "replace-hardware"),
        (
            "clocks_event_reason_hw_power_brake_slowdown",
            "Active",
            "gpu-clocks",
            "hw_power_brake",
            "replace-hardware",
        ),
        (
            "clocks_event_reason_hw_thermal_slowdown",
            "Active",
            "gpu-clocks",
            "hw_thermal_slowdown",
            "replace-hardware",
        ),
        (
            "clocks_event_reason_sw_thermal_slowdown",
            "Active",
            "gpu-clocks",
            "sw_thermal_slowdown",
            "replace-hardware",
        ),
    ],
)
def test_a_memory_or_clock_fault_on_the_h100_capture_fails_with_its_class(
    element, value, check, said, remedy
):
    """Changed: GPU 3's `element` -> `value` (07-k8stestinfra-h100.xml)."""
    xml = _edit(_capture("07-k8stestinfra-h100.xml"), 3, element, value)
    _fails(_one(xml, check), _label(_capture("07-k8stestinfra-h100.xml"), 3), said, remedy)


def test_a_volatile_uncorrectable_count_on_the_h100_capture_fails_reset_gpu():
    """Changed: GPU 3's volatile dram_uncorrectable 0 -> 2 (the first dram_uncorrectable of its block is the
    volatile one, 07-k8stestinfra-h100.xml)."""
    xml = _capture("07-k8stestinfra-h100.xml")
    blocks = re.split(r"(?=<gpu id=)", xml)
    assert (
        blocks[4].index("<volatile>")
        < blocks[4].index("<dram_uncorrectable>")
        < blocks[4].index("<aggregate>")
    )
    ecc = _one(_edit(xml, 3, "dram_uncorrectable", "2"), "gpu-ecc")
    _fails(ecc, _label(_capture("07-k8stestinfra-h100.xml"), 3), "volatile.dram_uncorrectable=2", "reset-gpu")


def test_a_lost_gpu_fails_gpu_reset_asking_for_a_reboot_and_nothing_else_of_it_is_judged():
    """Changed: GPU 3's persistence_mode, current_ecc, current_link_width and fabric state -> "GPU is lost",
    as nvidia-smi prints an element of a GPU NVML reports lost (07-k8stestinfra-h100.xml)."""
    xml = _capture("07-k8stestinfra-h100.xml")
    for element in ("persistence_mode", "current_ecc", "current_link_width", "state"):
        xml = _edit(xml, 3, element, "GPU is lost")
    checks = _by_name(gpuhealth.smi_checks(0, xml))
    _fails(checks["gpu-reset"], _label(xml, 3), "GPU is lost", "reboot-node")
    for name in ("gpu-ecc", "gpu-pcie-link", "gpu-persistence", "gpu-fabric"):
        assert checks[name]["status"] == "unknown" and _label(xml, 3) in checks[name]["detail"], checks[name]


def test_hw_slowdown_alone_is_unknown_never_a_replacement():
    """Changed: GPU 3's clocks_event_reason_hw_slowdown Not Active -> Active (07-k8stestinfra-h100.xml):
    NVIDIA's manual says HW Slowdown may also show during a PState or clock change."""
    xml = _edit(_capture("07-k8stestinfra-h100.xml"), 3, "clocks_event_reason_hw_slowdown", "Active")
    clocks = _one(xml, "gpu-clocks")
    assert clocks["status"] == "unknown" and "hw_slowdown alone" in clocks["detail"], clocks


def test_r570_deprecated_reset_status_without_a_recovery_action_is_unknown():
    """Changed: the RTX 3060 capture's gpu_recovery_action element removed (04-telegraf-rtx3060-570.xml):
    the deprecated reset_required beside it says nothing."""
    xml = _capture("04-telegraf-rtx3060-570.xml")
    gone = re.sub(r"\s*<gpu_recovery_action>[^<]*</gpu_recovery_action>", "", xml)
    assert gone != xml
    reset = _one(gone, "gpu-reset")
    assert reset["status"] == "unknown" and DEPRECATED in reset["detail"], reset


# our own fixtures (tests/fixtures/gpuhealth/, written by us in the shape of the captures above), for a clone
# without ../shared


def test_a_healthy_r580_b200_with_persistence_off_passes_every_check():
    """R580: no gpu_reset_status, gpu_recovery_action None, fabric health Healthy/Full; persistence off."""
    checks = _by_name(gpuhealth.smi_checks(0, (FIX / "smi-r580-b200-persistence-off.xml").read_text()))
    assert {n: c["status"] for n, c in checks.items()} == {n: "pass" for n in READS}, checks
    assert "persistence mode Disabled" in checks["gpu-persistence"]["detail"]
    assert "recovery action None" in checks["gpu-reset"]["detail"]


def test_r570_deprecated_reset_fields_beside_recovery_action_none_pass():
    xml = (FIX / "smi-r570-deprecated-reset.xml").read_text()
    assert DEPRECATED in xml
    checks = _by_name(gpuhealth.smi_checks(0, xml))
    assert {n: c["status"] for n, c in checks.items()} == {n: "pass" for n in READS}, checks


@pytest.mark.parametrize(
    "action, status, remedy",
    [
        ("None", "pass", None),
        ("Node Reboot", "fail", "reboot-node"),
        ("Drain P2P", "fail", "reset-gpu"),
        ("Drain and Reset", "fail", "reset-gpu"),
        ("GPU Reset", "fail", "reset-gpu"),
        ("Recover Everything", "unknown", None),
    ],
)
def test_each_recovery_action_on_our_r580_fixture(action, status, remedy):
    xml = (FIX / "smi-r580-b200-persistence-off.xml").read_text()
    reset = _one(_edit(xml, 1, "gpu_recovery_action", action), "gpu-reset")
    assert (reset["status"], reset["remedy"]) == (status, remedy), reset


def test_a_fabric_fault_and_a_repair_on_our_r580_fixture_and_the_fold_takes_the_worst_remedy():
    xml = (FIX / "smi-r580-b200-persistence-off.xml").read_text()
    fabric = _one(_edit(xml, 0, "route_unhealthy", "True"), "gpu-fabric")
    assert (fabric["status"], fabric["remedy"]) == ("fail", "reset-gpu"), fabric
    two = _edit(_edit(xml, 0, "tpc_repair_pending", "Yes"), 1, "unrepairable_memory", "Yes")
    remap = _one(two, "gpu-row-remap")
    assert (remap["status"], remap["remedy"]) == ("fail", "replace-hardware"), remap
    assert "GPU 0" in remap["detail"] and "GPU 1" in remap["detail"], remap


def test_every_failing_check_of_the_faults_fixture_carries_a_remedy():
    for c in gpuhealth.smi_checks(0, (FIX / "smi-faults.xml").read_text()):
        assert (c["remedy"] in REMEDIES) == (c["status"] == "fail"), c


@pytest.mark.parametrize("total, status", [("0", "pass"), ("2", "fail")])
def test_the_pascal_layout_double_bit_total_is_the_uncorrectable_count(total, status):
    """Pascal and older drivers print volatile/{single_bit,double_bit}/total (netdata/netdata@04b1cf54
    tesla-p100.xml, R510): our R570 fixture with GPU 0's volatile block rewritten in that layout."""
    xml = (FIX / "smi-r570-deprecated-reset.xml").read_text()
    old = re.search(r"<volatile>.*?</volatile>", xml, flags=re.S).group(0)
    pascal = (
        "<volatile><single_bit><device_memory>0</device_memory><total>0</total></single_bit>"
        "<double_bit><device_memory>%s</device_memory><total>%s</total></double_bit></volatile>"
        % (total, total)
    )
    ecc = _one(xml.replace(old, pascal, 1), "gpu-ecc")
    assert ecc["status"] == status, ecc
    if status == "fail":
        assert "volatile.double_bit=2" in ecc["detail"] and ecc["remedy"] == "reset-gpu", ecc


def test_the_check_shape_copies_agree():
    """nodecheck runs alone inside images under check, so it keeps its own check(); verdict.py is the copy
    the GPU readers share: same remedies, same dict."""
    from efa_validators.node import nodecheck, verdict

    assert verdict.REMEDIES == nodecheck.REMEDIES
    for status, remedy in (("fail", "reset-gpu"), ("pass", None), ("unknown", None)):
        args = ("gpu-x", status, "why", [verdict.ev("src", "text")], remedy)
        assert verdict.check(*args) == nodecheck.check(*args)
