"""GPU health in node-check (issue 33, item 1): recorded nvidia-smi/dcgmi/kernel-log outputs, written by us
from the documented formats (tests/fixtures/gpuhealth/, sources in efa_validators/node/gpuhealth.py)."""

import json
import re

import pytest
from cli import validators_process
from paths import ROOT
from preflight_util import fake_tools

from efa_validators.node import gpuhealth

FIX = ROOT / "tests" / "fixtures" / "gpuhealth"
SMI_NAMES = [name for name, _ in gpuhealth.SMI_CHECKS]


def _read(name: str) -> str:
    return (FIX / name).read_text()


def _by_name(checks):
    return {c["name"]: c for c in checks}


def test_a_healthy_p5_passes_every_check_read_from_nvidia_smi():
    checks = _by_name(gpuhealth.smi_checks(0, _read("smi-healthy-p5.xml")))
    assert sorted(checks) == sorted(SMI_NAMES)
    assert {n: c["status"] for n, c in checks.items()} == {n: "pass" for n in SMI_NAMES}
    # a lifetime uncorrectable count (row remapped since) is shown, not failed: the volatile count is what
    # says the GPU is bad now
    assert "8 GPU(s)" in checks["gpu-ecc"]["detail"]
    assert "fabric registration completed" in checks["gpu-fabric"]["detail"]


def test_each_fault_fails_its_check_naming_the_gpu_with_evidence():
    checks = _by_name(gpuhealth.smi_checks(0, _read("smi-faults.xml")))
    expected = {  # check: (GPU, what the detail says, the remedy it asks for)
        "gpu-ecc": ("GPU 0 (00000000:53:00.0)", "volatile.dram_uncorrectable=2", "reset-gpu"),
        "gpu-row-remap": ("GPU 1 (00000000:64:00.0)", "row remap is pending", "reset-gpu"),
        "gpu-pcie-link": ("GPU 2 (00000000:75:00.0)", "x8/x16", "replace-hardware"),
        "gpu-clocks": ("GPU 3 (00000000:86:00.0)", "hw_slowdown, hw_thermal_slowdown", "replace-hardware"),
        "gpu-fabric": ("GPU 5 (00000000:A8:00.0)", "in progress", "configure"),
        "gpu-reset": ("GPU 6 (00000000:B9:00.0)", "reset_required=Yes", "reset-gpu"),
    }
    for name, (gpu, why, remedy) in expected.items():
        c = checks[name]
        assert c["status"] == "fail" and c["remedy"] == remedy, c
        assert gpu in c["detail"] and why in c["detail"], c
        assert any(gpu in e["text"] for e in c["evidence"]), c
    # GPU 7's link is at gen 1 of 5 in P0 (under load): a slow link, also named
    assert "GPU 7 (00000000:CA:00.0)" in checks["gpu-pcie-link"]["detail"]
    # GPU 4's persistence mode is off: a setting, named with its fix, never a fail of the node (issue 39)
    persistence = checks["gpu-persistence"]
    assert persistence["status"] == "pass" and persistence["remedy"] is None, persistence
    assert "persistence mode Disabled" in persistence["detail"], persistence
    assert "nvidia-smi -pm 1" in persistence["detail"], persistence


def test_an_idle_link_at_a_lower_generation_passes_and_an_older_drivers_missing_element_is_unknown():
    checks = _by_name(gpuhealth.smi_checks(0, _read("smi-older-driver-idle.xml")))
    assert checks["gpu-pcie-link"]["status"] == "pass" and "idle at P8" in checks["gpu-pcie-link"]["detail"]
    assert checks["gpu-clocks"]["status"] == "pass"  # clocks_throttle_reasons, the older element name
    assert checks["gpu-fabric"]["status"] == "pass" and "N/A" in checks["gpu-fabric"]["detail"]
    assert checks["gpu-reset"]["status"] == "unknown"  # this driver reports no gpu_reset_status


def test_a_missing_or_failing_tool_and_unreadable_output_are_unknown_never_pass():
    for rc, out in ((None, "nvidia-smi not found on PATH"), (9, "NVIDIA-SMI has failed"), (0, "<html>")):
        checks = gpuhealth.smi_checks(rc, out)
        assert [c["status"] for c in checks] == ["unknown"] * len(SMI_NAMES), (rc, out)
    one_gpu = _read("smi-healthy-p5.xml").replace(
        "<current_ecc>Enabled</current_ecc>", "<current_ecc>N/A</current_ecc>"
    )
    assert _by_name(gpuhealth.smi_checks(0, one_gpu))["gpu-ecc"]["status"] == "unknown"


def test_an_element_not_reported_or_counters_that_are_no_numbers_are_unknown_never_pass():
    """A driver that writes no <fabric> says nothing of fabric manager (only N/A says there is no fabric);
    volatile ECC counters that are all N/A or not numbers are no zero count."""
    healthy = _read("smi-healthy-p5.xml")
    no_fabric = re.sub(r"<fabric>.*?</fabric>", "", healthy, flags=re.S)
    assert "<fabric>" in healthy and "<fabric>" not in no_fabric
    assert _by_name(gpuhealth.smi_checks(0, no_fabric))["gpu-fabric"]["status"] == "unknown"
    for value in ("N/A", "garbage"):
        counters = re.sub(
            r"<volatile>.*?</volatile>",
            lambda m, value=value: re.sub(r">\d+<", ">%s<" % value, m.group(0)),
            healthy,
            flags=re.S,
        )
        assert counters != healthy
        ecc = _by_name(gpuhealth.smi_checks(0, counters))["gpu-ecc"]
        assert ecc["status"] == "unknown" and "no volatile ECC counter" in ecc["detail"], (value, ecc)


def test_dcgmi_json_of_another_shape_is_unknown_never_a_crash():
    shapes = [
        {"DCGM Diagnostic": {"test_categories": ["x"]}},
        {"DCGM Diagnostic": {"test_categories": [{"category": "c", "tests": ["y"]}]}},
        {
            "DCGM Diagnostic": {
                "test_categories": [{"category": "c", "tests": [{"name": "t", "results": ["z"]}]}]
            }
        },
        {"DCGM Diagnostic": {"test_categories": [{"category": "c", "tests": {"t": {"status": "Pass"}}}]}},
    ]
    for text in [json.dumps(shape) for shape in shapes] + ["[" * 100000 + "]" * 100000]:
        checked = gpuhealth.dcgm_check(0, text, 1)
        assert checked["status"] == "unknown" and "dcgmi diag" in checked["detail"], (text[:80], checked)


def test_nvlink_down_link_and_recoveries_fail_crc_counts_are_shown():
    healthy, down = _read("nvlink-s-healthy.txt"), _read("nvlink-s-link-down.txt")
    ok = gpuhealth.nvlink_check(0, healthy, 0, _read("nvlink-e-crc-only.txt"))
    assert ok["status"] == "pass" and "144 links up" in ok["detail"] and "CRC Errors=17" in ok["detail"]
    bad = gpuhealth.nvlink_check(0, down, 0, _read("nvlink-e-crc-only.txt"))
    assert bad["status"] == "fail" and "GPU 3 link 7" in bad["detail"]
    retrained = gpuhealth.nvlink_check(0, healthy, 0, _read("nvlink-e-recovery.txt"))
    assert retrained["status"] == "fail" and "GPU 5 link 11: 3 recoveries" in retrained["detail"]
    assert gpuhealth.nvlink_check(None, "nvidia-smi not found on PATH", None, "")["status"] == "unknown"
    assert gpuhealth.nvlink_check(0, healthy, 3, "")["status"] == "unknown"  # counters unreadable
    # a tool that printed nothing is no proof of a node without NVLink (it read as a pass)
    assert gpuhealth.nvlink_check(0, "", 0, "")["status"] == "unknown"


def test_xid_by_nvidias_resolution_bucket():
    """issue 39 item 2: the catalog's immediate action decides, with its remedy (Xid 79: RESTART_BM, a node
    reboot); Xid 63, which the catalog says to ignore (the remap is applied at the next reset, which the
    row-remap check reads), no longer fails a node."""
    fallen = gpuhealth.xid_check(0, _read("dmesg-xid-79.txt"), "dmesg")
    assert fallen["status"] == "fail" and fallen["remedy"] == "reboot-node", fallen
    assert "Xid 79 (GPU has fallen off the bus: reboot-node) on 0000:75:00" in fallen["detail"], fallen
    assert any("fallen off the bus" in e["text"] for e in fallen["evidence"])
    remap = gpuhealth.xid_check(0, _read("dmesg-xid-63-pending.txt"), "dmesg")
    assert (
        remap["status"] == "pass" and "Xid 63 (GPU memory remapping event, informational)" in remap["detail"]
    )
    apps = gpuhealth.xid_check(0, _read("dmesg-xid-app-only.txt"), "dmesg")
    assert apps["status"] == "pass" and "Xid 13" in apps["detail"] and "Xid 31" in apps["detail"]
    odd = gpuhealth.xid_check(0, "[ 1.0] NVRM: Xid (PCI:0000:10:00): 999, something new\n", "dmesg")
    assert odd["status"] == "unknown" and "999" in odd["detail"]
    assert (
        gpuhealth.xid_check(1, "dmesg: read kernel buffer failed: Operation not permitted", "dmesg")["status"]
        == "unknown"
    )


def test_dcgm_fail_fails_skip_is_unknown_pass_passes():
    assert gpuhealth.dcgm_check(0, _read("dcgm-diag-r1-pass.json"), 1)["status"] == "pass"
    failed = gpuhealth.dcgm_check(226, _read("dcgm-diag-r2-fail.json"), 2)
    assert failed["status"] == "fail" and "Integration/pcie" in failed["detail"]
    skipped = gpuhealth.dcgm_check(0, _read("dcgm-diag-r2-skipped.json"), 2)
    assert skipped["status"] == "unknown" and "Hardware/memory" in skipped["detail"]
    assert (
        gpuhealth.dcgm_check(0, json.dumps({"DCGM Diagnostic": {"test_categories": []}}), 1)["status"]
        == "unknown"
    )
    assert gpuhealth.dcgm_check(None, "dcgmi not found on PATH", 1)["status"] == "unknown"
    assert gpuhealth.dcgm_check(0, "Error: unable to connect to host engine", 1)["status"] == "unknown"


def test_dcgm_runs_where_installed_and_asked_for_a_missing_dcgmi_is_unknown():
    assert gpuhealth.dcgm_level_for(None, True) == 1 and gpuhealth.dcgm_level_for(None, False) is None
    assert gpuhealth.dcgm_level_for(2, False) == 2 and gpuhealth.dcgm_level_for(0, True) is None


def test_the_whole_gpu_health_from_recorded_outputs_names_each_fault():
    """gpu_health_checks over recorded outputs, argv by argv, as node-check runs the tools."""
    outputs = {
        ("nvidia-smi", "-q", "-x"): (0, _read("smi-faults.xml")),
        ("nvidia-smi", "nvlink", "-s"): (0, _read("nvlink-s-link-down.txt")),
        ("nvidia-smi", "nvlink", "-e"): (0, _read("nvlink-e-recovery.txt")),
        ("dmesg",): (0, _read("dmesg-xid-79.txt")),
        ("dcgmi", "diag", "-r", "2", "-j"): (226, _read("dcgm-diag-r2-fail.json")),
        gpuhealth.DCGM_HEALTH: (0, _read("dcgm-health-failure.json")),
    }
    ran = []

    def run(argv):
        ran.append(tuple(argv))
        return outputs.get(tuple(argv), (None, "%s not found on PATH" % argv[0]))

    checks = _by_name(gpuhealth.gpu_health_checks(run, dcgm_level=2))
    assert {n: c["status"] for n, c in checks.items()} == {
        **{n: "fail" for n in SMI_NAMES},
        "gpu-persistence": "pass",  # a setting, never a fail (issue 39 item 2)
        "gpu-nvlink": "fail",
        "gpu-xid": "fail",
        "gpu-dcgm-diag": "fail",
        "gpu-dcgm-health": "fail",
    }
    assert set(ran) == set(outputs)


def test_node_check_without_nvidia_tools_says_unknown_for_every_gpu_check(tmp_path):
    """No NVIDIA driver tools: every GPU check is unknown (a kernel log without Xid proves nothing without a
    driver). Runs everywhere, a GPU runner too: PATH holds only an empty folder, so neither nvidia-smi nor
    dcgmi is found (this test skipped where nvidia-smi was installed)."""
    env = fake_tools(tmp_path / "bin", {}, path="")
    env["EFA_IMAGE_LOCK"] = str(tmp_path / "none.json")
    out = tmp_path / "node.json"
    proc = validators_process("node-check", "--json", str(out), env=env)
    report = json.loads(out.read_text())
    by = _by_name(report["checks"])
    gpu_checks = {n: c["status"] for n, c in by.items() if n.startswith("gpu-")}
    assert set(gpu_checks) == set(SMI_NAMES) | {"gpu-nvlink", "gpu-xid"}, gpu_checks  # no dcgmi: no diag
    assert set(gpu_checks.values()) == {"unknown"} and proc.returncode in (1, 3), (gpu_checks, proc.stderr)
    assert by["gpus"]["status"] == "unknown" and "nvidia-smi not found on PATH" in by["gpus"]["detail"]
    assert all("not found on PATH" in by[n]["detail"] for n in SMI_NAMES + ["gpu-nvlink"])


@pytest.mark.parametrize(
    "exit_code, status, said",
    [
        (226, "fail", "exited 226 (DCGM_ST_NVVS_ERROR"),  # -30: the diagnostic reported an error
        (205, "fail", "exited 205 (DCGM_ST_NVVS_ISOLATE_ERROR"),  # -51: isolate the GPU
        (242, "unknown", "exited 242"),  # -14, DCGM_ST_NO_DATA: no verdict
        (245, "unknown", "exited 245"),  # -11, DCGM_ST_TIMEOUT
    ],
)
def test_a_dcgmi_diag_that_exits_non_zero_with_every_result_pass_is_never_a_pass(
    tmp_path, exit_code, status, said
):
    """issue 33 item 1 (audit): the exit status was ignored when every result read Pass or Warn. dcgmi exits
    with its dcgmReturn_t (NVIDIA/DCGM dcgmi/main_dcgmi.cpp): -30/-51 are the diagnostic's own failure, any
    other non-zero status leaves it without a verdict. A recorded dcgmi on PATH, node-check as it runs."""
    passing = FIX / "dcgm-diag-r1-pass.json"
    env = fake_tools(tmp_path / "bin", {"dcgmi": "cat '%s'; exit %d" % (passing, exit_code)})
    env["EFA_IMAGE_LOCK"] = str(tmp_path / "none.json")
    out = tmp_path / "node.json"
    validators_process("node-check", "--json", out, env=env, timeout=60)
    dcgm = _by_name(json.loads(out.read_text())["checks"])["gpu-dcgm-diag"]
    assert dcgm["status"] == status and said in dcgm["detail"], dcgm
    assert any(e["text"].startswith("exit %d" % exit_code) for e in dcgm["evidence"]), dcgm
    assert (
        gpuhealth.dcgm_check(0, passing.read_text(), 1)["status"] == "pass"
    )  # exit 0: the same results pass


def test_an_empty_kernel_log_is_unknown_and_one_with_lines_but_no_xid_passes():
    """issue 33 item 1 (audit): an empty log read as "no Xid", a pass. A booted kernel always has messages:
    empty means cleared or hidden (journalctl -k -q as a user outside systemd-journal prints nothing)."""
    for log in ("", "\n  \n", "-- No entries --\n"):
        empty = gpuhealth.xid_check(0, log, "dmesg")
        assert empty["status"] == "unknown" and "empty" in empty["detail"], (log, empty)
    ok = gpuhealth.xid_check(0, "[    0.000000] Linux version 6.8.0-1021-aws\n-- Boot x --\n", "dmesg")
    assert ok["status"] == "pass" and ok["evidence"][0]["text"] == "1 lines read", ok


def _smi_answers(xml: str) -> str:
    """A recorded nvidia-smi: the XML for `-q -x`, nothing (exit 0) for the rest."""
    return 'case "$*" in "-q -x") cat \'%s\' ;; esac; exit 0' % (FIX / xml)


@pytest.mark.parametrize(
    "dmesg, journalctl, status, said",
    [
        ("exit 0", "exit 0", "unknown", "kernel log is empty"),  # both say nothing: not a pass
        ("exit 0", "cat '%s'" % (FIX / "dmesg-xid-app-only.txt"), "pass", "application faults only"),
        ("exit 0", "echo '[    1.0] Linux version 6.8'", "pass", "no Xid"),
        ("exec yes '[ 1.0] kernel: flood'", "echo 'No journal files were found.'; exit 1", "unknown",
         "dmesg wrote more than %d bytes" % gpuhealth.KERNEL_LOG_MAX),
    ],
    ids=["both-empty", "journal-app-xids", "journal-no-xid", "dmesg-flood"],
)  # fmt: skip
def test_the_kernel_log_as_node_check_reads_it(tmp_path, dmesg, journalctl, status, said):
    """Recorded nvidia-smi, dmesg and journalctl on PATH, node-check as it runs: an empty dmesg falls back to
    the journal, and an empty journal too is unknown; a flood is cut at KERNEL_LOG_MAX and not judged."""
    env = fake_tools(
        tmp_path / "bin",
        {"nvidia-smi": _smi_answers("smi-healthy-p5.xml"), "dmesg": dmesg, "journalctl": journalctl},
    )
    env["EFA_IMAGE_LOCK"] = str(tmp_path / "none.json")
    out = tmp_path / "node.json"
    validators_process("node-check", "--dcgm-level", "0", "--json", out, env=env, timeout=60)
    xid = _by_name(json.loads(out.read_text())["checks"])["gpu-xid"]
    assert xid["status"] == status and said in xid["detail"], xid


# issue 33 item 1 (audit, the sweep for more): each of the next three passed on the part that was there


def test_an_xml_listing_fewer_gpus_than_attached_is_unknown():
    healthy = _read("smi-healthy-p5.xml")
    seven = re.sub(r"<gpu id=.*?</gpu>\s*", "", healthy, count=1, flags=re.S)
    assert seven.count("<gpu id=") == 7
    checks = gpuhealth.smi_checks(0, seven)
    assert [c["status"] for c in checks] == ["unknown"] * len(SMI_NAMES), checks
    assert "lists 7 <gpu> of attached_gpus 8" in checks[0]["detail"]


def test_a_clock_event_reason_not_reported_is_unknown_not_judged_on_the_others():
    healthy = _read("smi-healthy-p5.xml")
    one_na = healthy.replace(
        "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>",
        "<clocks_event_reason_hw_slowdown>N/A</clocks_event_reason_hw_slowdown>",
        1,
    )
    assert one_na != healthy
    clocks = _by_name(gpuhealth.smi_checks(0, one_na))["gpu-clocks"]
    assert clocks["status"] == "unknown" and "hw_slowdown" in clocks["detail"], clocks


def test_a_reset_status_that_is_neither_yes_nor_no_is_unknown():
    odd = _read("smi-healthy-p5.xml").replace(
        "<reset_required>No</reset_required>", "<reset_required>Pending</reset_required>", 1
    )
    reset = _by_name(gpuhealth.smi_checks(0, odd))["gpu-reset"]
    assert reset["status"] == "unknown" and "reset_required=Pending" in reset["detail"], reset


def test_nvlink_a_gpu_without_links_missing_counters_or_an_unread_state_is_unknown():
    status, errors = _read("nvlink-s-healthy.txt"), _read("nvlink-e-crc-only.txt")
    bare = re.sub(r"(GPU 7: [^\n]*\n)(\s*Link [^\n]*\n)+", r"\1", status)
    assert bare != status
    assert "GPU 7 list no link" in gpuhealth.nvlink_check(0, bare, 0, errors)["detail"]
    assert gpuhealth.nvlink_check(0, bare, 0, errors)["status"] == "unknown"
    uncounted = gpuhealth.nvlink_check(0, status, 0, "")
    assert uncounted["status"] == "unknown" and "no recovery counter for 144 link(s)" in uncounted["detail"]
    odd = gpuhealth.nvlink_check(0, status.replace("Link 3: 26.562 GB/s", "Link 3: <degraded>", 1), 0, errors)
    assert odd["status"] == "unknown" and "GPU 0 link 3: <degraded>" in odd["detail"], odd


def test_an_nvlink_tool_that_prints_nothing_is_unknown_in_node_check(tmp_path):
    """A recorded nvidia-smi whose `nvlink -s` exits 0 and prints nothing: that was "no NVLink", a pass."""
    env = fake_tools(tmp_path / "bin", {"nvidia-smi": _smi_answers("smi-healthy-p5.xml")})
    env["EFA_IMAGE_LOCK"] = str(tmp_path / "none.json")
    out = tmp_path / "node.json"
    validators_process("node-check", "--dcgm-level", "0", "--json", out, env=env, timeout=60)
    by = _by_name(json.loads(out.read_text())["checks"])
    assert by["gpu-ecc"]["status"] == "pass"  # the XML was read: the recorded tool answers
    assert by["gpu-nvlink"]["status"] == "unknown" and "printed nothing" in by["gpu-nvlink"]["detail"]


def test_an_empty_dmesg_and_no_journalctl_is_unknown_naming_both(tmp_path):
    """A recorded nvidia-smi and an empty dmesg on PATH, no journalctl: unknown, saying what each gave."""
    tools = {"nvidia-smi": _smi_answers("smi-healthy-p5.xml"), "dmesg": "exit 0"}
    env = fake_tools(tmp_path / "bin", tools, path="")
    env["EFA_IMAGE_LOCK"] = str(tmp_path / "none.json")
    out = tmp_path / "node.json"
    validators_process("node-check", "--dcgm-level", "0", "--json", out, env=env, timeout=60)
    xid = _by_name(json.loads(out.read_text())["checks"])["gpu-xid"]
    assert xid["status"] == "unknown", xid
    assert "dmesg printed nothing" in xid["detail"] and "journalctl not found on PATH" in xid["detail"], xid


def _no_links(status: str) -> str:
    """`nvidia-smi nvlink -s` with every link line taken out: the GPU headers alone."""
    return "".join(line for line in status.splitlines(True) if not line.strip().startswith("Link "))


def test_nvlink_on_a_profile_without_nvlink_no_link_passes_naming_it_and_a_listed_link_is_shown():
    """issue 33 item 1: g5/g6e GPUs (A10G, L40S) are PCIe cards: an empty `nvlink -s` was unknown forever on
    them. With the profile's word (profile_data `nvlink` False) no link is the fact it states."""
    healthy, errors = _read("nvlink-s-healthy.txt"), _read("nvlink-e-crc-only.txt")
    headers = _no_links(healthy)
    assert headers.count("GPU ") == 8 and "Link" not in headers
    for status, said in (("", "printed nothing"), ("\n", "printed nothing"), (headers, "8 GPU(s) listed")):
        ok = gpuhealth.nvlink_check(0, status, 3, "", expected=False, profile="g6e.48xlarge")
        assert ok["status"] == "pass" and "g6e.48xlarge" in ok["detail"] and said in ok["detail"], ok
    listed = gpuhealth.nvlink_check(0, healthy, 0, errors, expected=False, profile="g5.48xlarge")
    assert listed["status"] == "unknown", listed
    assert "g5.48xlarge profile says its GPUs have no NVLink, but links are listed" in listed["detail"]
    assert listed["evidence"] and "GPU 0 link 0" in listed["detail"]
    # links only in the error counters are links too; text that is no GPU header is not read; a failing
    # tool is no answer, whatever the profile says
    only_e = gpuhealth.nvlink_check(0, headers, 0, errors, expected=False, profile="g5.48xlarge")
    assert only_e["status"] == "unknown" and "links are listed" in only_e["detail"], only_e
    odd = gpuhealth.nvlink_check(0, "NVML: Unknown Error\n", 0, "", expected=False, profile="g5.48xlarge")
    assert odd["status"] == "unknown" and "NVML: Unknown Error" in odd["detail"], odd
    failed = gpuhealth.nvlink_check(9, "", 9, "", expected=False, profile="g5.48xlarge")
    assert failed["status"] == "unknown" and "exited 9" in failed["detail"], failed


def test_nvlink_on_a_profile_with_nvlink_no_link_fails_links_expected():
    """A p5's GPUs are on NVSwitch: an `nvlink -s` that exits 0 listing no link (or a GPU without links) is
    the driver saying the links are gone, a fail; without a profile the same output stays unknown."""
    healthy, errors = _read("nvlink-s-healthy.txt"), _read("nvlink-e-crc-only.txt")
    for status in ("", _no_links(healthy)):
        bad = gpuhealth.nvlink_check(0, status, 0, "", expected=True, profile="p5.48xlarge")
        assert bad["status"] == "fail" and "links expected" in bad["detail"], bad
        assert bad["remedy"] == "reset-gpu", bad
        assert "p5.48xlarge" in bad["detail"] and bad["evidence"], bad
        assert gpuhealth.nvlink_check(0, status, 0, "")["status"] == "unknown"
    bare = re.sub(r"(GPU 7: [^\n]*\n)(\s*Link [^\n]*\n)+", r"\1", healthy)
    one = gpuhealth.nvlink_check(0, bare, 0, errors, expected=True, profile="p5.48xlarge")
    assert one["status"] == "fail" and "GPU 7 list no link: links expected" in one["detail"], one
    assert one["remedy"] == "reset-gpu", one
    ok = gpuhealth.nvlink_check(0, healthy, 0, errors, expected=True, profile="p5.48xlarge")
    assert ok["status"] == "pass", ok
    assert (
        gpuhealth.nvlink_check(None, "nvidia-smi not found on PATH", None, "", expected=True)["status"]
        == "unknown"
    )


# ------------------------------------------------------------------ DCGM health watches (dcgmi health -c -j)
def test_dcgm_health_failure_fails_naming_gpu_system_and_dcgm_message():
    checked = gpuhealth.dcgm_health_check(0, _read("dcgm-health-failure.json"))
    assert checked["status"] == "fail" and "GPU 3 Memory system" in checked["detail"], checked
    assert "GPU 5" not in checked["detail"]  # the warning is shown in the evidence, the failure named
    texts = [e["text"] for e in checked["evidence"]]
    assert texts[0] == "Overall Health: Failure", texts
    # the message dcgmi cut into pieces of about 54 characters reads whole again
    assert (
        "GPU 3 Memory system: Failure: Detected 2 volatile double-bit ECC error(s) in GPU 3., "
        "GPU 3 had memory errors and row remappings are pending" in texts
    ), texts
    assert "GPU 5 PCIe system: Warning: Detected more than 8 PCIe replays per minute for GPU 5 : 14" in texts


def test_dcgm_health_warning_is_unknown_and_healthy_passes():
    warned = gpuhealth.dcgm_health_check(0, _read("dcgm-health-warning.json"))
    assert warned["status"] == "unknown" and "GPU 1 NVLINK system" in warned["detail"], warned
    assert any(
        "CRC Flit NvLink errors on GPU 1's NVLink which exceeds" in e["text"] for e in warned["evidence"]
    )
    healthy = gpuhealth.dcgm_health_check(0, _read("dcgm-health-healthy.json"))
    assert healthy["status"] == "pass" and healthy["evidence"][0]["text"] == "Overall Health: Healthy", (
        healthy
    )


@pytest.mark.parametrize(
    "rc, out, said",
    [
        (253, "dcgm-health-not-enabled.txt", "no DCGM health watches are set"),  # DCGM_ST_GENERIC_ERROR, -3
        (253, "Error: unable to establish a connection to the specified host: localhost\n", "exited 253"),
        (None, "dcgmi not found on PATH", "dcgmi not found on PATH"),
        (None, "dcgmi timed out after 30 s", "timed out"),
        (0, "", "not JSON"),
        (0, "[1, 2]", "without 'Overall Health'"),
        (0, json.dumps({"body": {"Overall Health": {"value": 3}}}), "without 'Overall Health'"),
        (0, json.dumps({"body": {"Overall Health": {"value": "Internal error"}}}), "'Internal error'"),
        (
            0,
            json.dumps({"body": {"Overall Health": {"value": "Healthy"}, "GPU": {"children": []}}}),
            "children",
        ),
        (
            0,
            json.dumps(
                {
                    "body": {
                        "Overall Health": {"value": "Healthy"},
                        "GPU": {
                            "children": {
                                "0": {
                                    "value": "Failure",
                                    "children": {
                                        "Errors": {
                                            "children": {
                                                "Memory system": {
                                                    "value": "Failure",
                                                    "overflow": "not a list",
                                                }
                                            }
                                        }
                                    },
                                }
                            }
                        },
                    }
                }
            ),
            "is not a health and its messages",
        ),
        ("[" * 100000 + "]" * 100000, None, "not JSON"),
    ],
)
def test_dcgm_health_without_watches_or_of_another_shape_is_unknown(rc, out, said):
    """Nothing watched, no host engine, no dcgmi, or output not dcgmi's: no evidence of health, never a pass
    and never a traceback."""
    if out is None:  # the deep-nesting case: the text is in rc's place
        rc, out = 0, rc
    elif out.endswith(".txt"):
        out = _read(out)
    checked = gpuhealth.dcgm_health_check(rc, out)
    assert checked["status"] == "unknown" and said in checked["detail"], checked


def test_an_entity_worse_than_the_overall_word_is_not_hidden_by_it():
    """The overall word and each GPU's are read alike: the worst one judges (a Healthy overall beside a GPU
    that reports Failure fails)."""
    doc = json.loads(_read("dcgm-health-failure.json"))
    doc["body"]["Overall Health"]["value"] = "Healthy"
    checked = gpuhealth.dcgm_health_check(0, json.dumps(doc))
    assert checked["status"] == "fail" and "GPU 3 Memory system" in checked["detail"], checked


@pytest.mark.parametrize(
    "fixture, code, status",
    [
        ("dcgm-health-failure.json", 0, "fail"),
        ("dcgm-health-healthy.json", 0, "pass"),
        ("dcgm-health-not-enabled.txt", 253, "unknown"),
    ],
)
def test_node_check_reads_dcgm_health_beside_the_diagnostic(tmp_path, fixture, code, status):
    """A recorded dcgmi on PATH, node-check as it runs: `dcgmi health -c -j` is asked beside the diagnostic
    (its argv recorded), and its verdict is the report's gpu-dcgm-health check."""
    calls = tmp_path / "calls"
    script = (
        "echo \"$*\" >> '%s'\ncase \"$1\" in\n  diag) cat '%s' ;;\n  health) cat '%s'; exit %d ;;\n"
        "  *) exit 64 ;;\nesac"
    ) % (calls, FIX / "dcgm-diag-r1-pass.json", FIX / fixture, code)
    env = fake_tools(tmp_path / "bin", {"dcgmi": script})
    env["EFA_IMAGE_LOCK"] = str(tmp_path / "none.json")
    out = tmp_path / "node.json"
    validators_process("node-check", "--json", out, env=env, timeout=60)
    checks = _by_name(json.loads(out.read_text())["checks"])
    assert checks["gpu-dcgm-health"]["status"] == status, checks["gpu-dcgm-health"]
    assert checks["gpu-dcgm-diag"]["status"] == "pass", checks["gpu-dcgm-diag"]
    assert calls.read_text().splitlines() == ["diag -r 1 -j", "health -c -j"]
    skipped = tmp_path / "skipped.json"
    calls.unlink()
    validators_process("node-check", "--dcgm-level", "0", "--json", skipped, env=env, timeout=60)
    assert "gpu-dcgm-health" not in _by_name(json.loads(skipped.read_text())["checks"])
    assert not calls.exists()  # --dcgm-level 0: DCGM is not asked at all


def test_dcgm_health_names_six_failures_and_counts_the_rest():
    """A report with a failure on every GPU of a large node keeps its detail one line long; the evidence keeps
    its own cap (16)."""
    memory = {"Memory system": {"value": "Failure", "overflow": ["DBE"]}}
    gpus = {str(i): {"value": "Failure", "children": {"Errors": {"children": memory}}} for i in range(40)}
    doc = {"body": {"Overall Health": {"value": "Failure"}, "GPU": {"children": gpus}}}
    checked = gpuhealth.dcgm_health_check(0, json.dumps(doc))
    assert checked["status"] == "fail" and checked["detail"].endswith("and 34 more"), checked["detail"]
    assert len(checked["evidence"]) == 1 + 16  # the overall word, then 16 incidents
