"""The GPU checks read from `nvidia-smi -q -x`, one verdict per check over every GPU of the node, each fail
with the remedy (nodecheck.REMEDIES) its source documents.

Sources, by element (fixtures in tests/fixtures/gpuhealth/ are written by us from these; real captures in
../shared/gpu-captures and those listed in docs/node-health-captures.md are the ground truth):
- The XML of NVIDIA's nvsmi_device DTD (shipped with the driver: nvsmi_device_v12.dtd, v13 from R580); read:
  persistence_mode, gpu_reset_status, gpu_recovery_action, pci/pci_gpu_link_info, clocks_event_reasons (older
  drivers: clocks_throttle_reasons), ecc_mode, ecc_errors (with channel_repair_pending and tpc_repair_pending
  from R580, unrepairable_memory from 580.173 in the captures; on Pascal volatile|aggregate/double_bit/total,
  as in netdata/netdata@04b1cf54 src/go/plugin/go.d/collector/nvidia_smi/testdata/tesla-p100.xml),
  retired_pages, remapped_rows, fabric (with fabric/health from R570).
- gpu_recovery_action (R570+; NVML nvmlDeviceGetGpuRecoveryAction / NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) and
  what each value asks: docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html
  (None: no action; Reset: terminate the GPU's processes, `nvidia-smi -r`; Reboot: the OS may be inconsistent,
  reboot; Drain P2P: quiesce all peer-to-peer traffic, end the processes that use it and disable UVM
  persistence, then read the action again, which is then one of the others; Drain and Reset: drain P2P, then
  reset the GPU). nvidia-smi prints the word as the document's heading or as NVML's enum name: captures show
  "None" (../shared/gpu-captures, R570 to R595); utkuozdemir/nvidia_gpu_exporter@ae70328e
  internal/nvidiasmi/transform_test.go maps "GPU Reset"/"Reset", "Node Reboot"/"Reboot", "Drain P2P" and
  "Drain and Reset", so both spellings are read. On R570 gpu_reset_status/reset_required prints "Requested
  functionality has been deprecated" beside it (../shared/gpu-captures/04-telegraf-rtx3060-570.xml); R580
  drops gpu_reset_status (07-, 09-).
- ECC and memory repair: docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt (a pending row remap happens at the
  next GPU reset; a row-remapping failure is past the RMA policy threshold; an SRAM uncorrectable count over
  the threshold is an RMA); docs.nvidia.com/deploy/dynamic-page-retirement (a page pending retirement is
  retired when the driver reloads, i.e. at a GPU reset); NVML nvmlRepairStatus_v1_t (bChannelRepairPending,
  bTpcRepairPending) and nvmlUnrepairableMemoryStatus_v1_t (docs.nvidia.com/deploy/nvml-api).
- Fabric: NVML nvmlGpuFabricInfo_v3_t (state, status, healthMask, healthSummary) and the health mask values
  (docs.nvidia.com/deploy/nvml-api/group__nvmlFabricDefs.html: degraded bandwidth, route recovery in
  progress, route unhealthy, access timeout recovery, incorrect configuration - SysGUID, chassis serial
  number, no partition, insufficient NVLinks, incompatible GPU firmware, invalid location); gpud's fabric
  component judges any health issue unhealthy (leptonai/gpud@2acd894
  components/accelerator/nvidia/fabric-manager/fabric_state.go). How nvidia-smi spells them: the captures
  (Healthy, Full, False, N/A) and NVIDIA/k8s-test-infra@3b2b865d tests/e2e/go/assertions/nvidiasmi/testdata/
  qx-gb200-fabric-degraded.xml (nvidia-smi 580.65.06 over a mocked NVML: route_unhealthy True, summary
  Unhealthy, incorrect_configuration None).
- Clock event reasons: NVML's nvmlClocksThrottleReasons (docs.nvidia.com/deploy/nvml-api/
  group__nvmlClocksThrottleReasons.html): HW Slowdown is engaged for a temperature too high, an external power
  brake assertion (e.g. by the system power supply) or a power draw too high, and may also be reported during
  a PState or clock change; HW Thermal and SW Thermal slowdown are a temperature too high; HW Power Brake
  slowdown is the external power brake.

Fail closed, as the rest of node-check: unreadable output or an element a GPU does not report makes its check
unknown, never pass. Everything here is pure.
"""

import re
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, List, Optional, Tuple

from efa_validators.node.verdict import REMEDIES, Check, check, ev

SMI_XML = "nvidia-smi -q -x"
Gpu = Dict[str, Any]
# (status, why, remedy): one GPU's verdict on one check; remedy is None unless status is "fail"
Verdict = Tuple[str, str, Optional[str]]

# clock event reasons that mean the hardware or the driver is slowing the GPU for a fault (power brake,
# thermal): idle, application clocks, sync boost and the software power cap are normal operation
_FAULT_CLOCK_REASONS = (
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
)
# gpu_recovery_action, lower-cased -> (what NVIDIA says it asks, remedy); "none" passes. Drain P2P: NVIDIA
# asks to end the GPU's peer-to-peer processes and read the action again, which then names what clears the
# fault; ending those processes is the quiescing a GPU reset needs too, and no rung milder than a reset
# brings the GPU back, so it is reset-gpu (a rerun after the drain reads the action the driver then gives).
_RECOVERY: Dict[str, Tuple[str, str]] = {
    "reset": ("the GPU needs a reset: end its processes, `nvidia-smi -r`", "reset-gpu"),
    "gpu reset": ("the GPU needs a reset: end its processes, `nvidia-smi -r`", "reset-gpu"),
    "reboot": ("the fault may have left the OS inconsistent: reboot the node", "reboot-node"),
    "node reboot": ("the fault may have left the OS inconsistent: reboot the node", "reboot-node"),
    "drain p2p": (
        "all peer-to-peer traffic must be quiesced: end the processes using P2P, disable UVM persistence, "
        "then read the recovery action again",
        "reset-gpu",
    ),
    "drain and reset": ("drain peer-to-peer traffic, then reset the GPU", "reset-gpu"),
}
_DEPRECATED = "Requested functionality has been deprecated"
_LOST = "GPU is lost"
_FABRIC_HEALTH = (
    "summary",
    "bandwidth",
    "route_recovery_in_progress",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
    "partition_assigned",
)
_REPAIR = ("channel_repair_pending", "tpc_repair_pending", "unrepairable_memory")


def _text(node: Optional[ET.Element], path: str) -> Optional[str]:
    found = node.find(path) if node is not None else None
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A") else value


def _int(value: Optional[str]) -> Optional[int]:
    match = re.match(r"\s*(\d+)", value or "")
    return int(match.group(1)) if match else None


def parse_smi_xml(text: str) -> List[Gpu]:
    """One dict per <gpu> of `nvidia-smi -q -x`; a value the GPU reports as N/A (or not at all) is None.
    Raises ValueError on text that is not that XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError("not nvidia-smi XML: %s" % err) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("not nvidia-smi XML: root element <%s>" % root.tag)
    listed = root.findall("gpu")
    attached = _int(_text(root, "attached_gpus"))
    if attached is not None and attached != len(listed):  # a cut or odd output: judge none of it
        raise ValueError("nvidia-smi XML lists %d <gpu> of attached_gpus %d" % (len(listed), attached))
    return [_gpu(i, gpu) for i, gpu in enumerate(listed)]


def _gpu(i: int, gpu: ET.Element) -> Gpu:
    reasons = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    ecc = {}
    for scope in ("volatile", "aggregate"):
        counts = gpu.find("ecc_errors/" + scope)
        for field in list(counts) if counts is not None else []:
            if "uncorrectable" in field.tag:
                ecc["%s.%s" % (scope, field.tag)] = _int(_text(counts, field.tag))
            elif field.tag == "double_bit":  # Pascal and before: double_bit/total is the uncorrectable count
                ecc["%s.double_bit" % scope] = _int(_text(field, "total"))
    link = "pci/pci_gpu_link_info/"
    minor = _int(_text(gpu, "minor_number"))
    return {
        # NVML_ERROR_GPU_IS_LOST, as nvidia-smi prints it in every element it could not read
        "lost": any((node.text or "").strip() == _LOST for node in gpu.iter()),
        "index": i if minor is None else minor,
        "bus": gpu.get("id", "?"),
        "name": _text(gpu, "product_name") or "?",
        "pstate": _text(gpu, "performance_state"),
        "persistence": _text(gpu, "persistence_mode"),
        "reset_required": _text(gpu, "gpu_reset_status/reset_required"),
        "drain_and_reset": _text(gpu, "gpu_reset_status/drain_and_reset_recommended"),
        "recovery_action": _text(gpu, "gpu_recovery_action"),
        "gen": (_int(_text(gpu, link + "pcie_gen/current_link_gen")),
                _int(_text(gpu, link + "pcie_gen/max_link_gen"))),
        "width": (_int(_text(gpu, link + "link_widths/current_link_width")),
                  _int(_text(gpu, link + "link_widths/max_link_width"))),
        "clock_reasons": None if reasons is None else {
            r: _text(reasons, prefix + r) for r in _FAULT_CLOCK_REASONS
        },
        "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
        "ecc_uncorrectable": ecc,
        "sram_threshold_exceeded": _text(gpu, "ecc_errors/aggregate/sram_threshold_exceeded"),
        "repair": {f: _text(gpu, "ecc_errors/" + f) for f in _REPAIR},
        "remap_pending": _text(gpu, "remapped_rows/remapped_row_pending"),
        "remap_failure": _text(gpu, "remapped_rows/remapped_row_failure"),
        "retirement_pending": _text(gpu, "retired_pages/pending_retirement"),
        "fabric_state": _text(gpu, "fabric/state"),
        "fabric_reported": gpu.find("fabric/state") is not None,  # N/A is an answer, absence none
        "fabric_status": _text(gpu, "fabric/status"),
        "fabric_health": None if gpu.find("fabric/health") is None else {
            f: _text(gpu, "fabric/health/" + f) for f in _FABRIC_HEALTH
        },
    }  # fmt: skip


def _label(gpu: Gpu) -> str:
    return "GPU %s (%s)" % (gpu["index"], gpu["bus"])


def _worst(remedies: List[Optional[str]]) -> Optional[str]:
    """The most severe of the remedies (REMEDIES is mildest first)."""
    known = [r for r in remedies if r is not None]
    return max(known, key=REMEDIES.index) if known else None


def _judge(name: str, gpus: List[Gpu], judge: Callable[[Gpu, List[Gpu]], Verdict]) -> Check:
    """Fold one per-GPU judgement into one check: any fail fails, asking for the most severe remedy among
    its failing GPUs; else any unknown is unknown; else pass, naming each distinct reading."""
    if not gpus:
        return check(name, "unknown", "nvidia-smi -q -x lists no GPU")
    results = [(gpu, *(_lost(name) if gpu["lost"] else judge(gpu, gpus))) for gpu in gpus]
    evidence = [ev(SMI_XML, "%s: %s" % (_label(g), why)) for g, status, why, _ in results if status != "pass"]
    for status in ("fail", "unknown"):
        bad = [(g, why, remedy) for g, s, why, remedy in results if s == status]
        if bad:
            detail = "; ".join("%s: %s" % (_label(g), why) for g, why, _ in bad[:4])
            more = " (+%d more)" % (len(bad) - 4) if len(bad) > 4 else ""
            return check(name, status, detail + more, evidence, _worst([r for _, _, r in bad]))
    said = list(dict.fromkeys(why for _, _, why, _ in results))  # distinct, in GPU order
    detail = "%d GPU(s): %s" % (len(gpus), "; ".join(said[:3]))
    return check(name, "pass", detail + (" (+%d more)" % (len(said) - 3) if len(said) > 3 else ""),
                 [ev(SMI_XML, why) for why in said[:8]])  # fmt: skip


def _lost(name: str) -> Verdict:
    """A GPU nvidia-smi prints as lost (NVML_ERROR_GPU_IS_LOST: it fell off the bus or otherwise stopped
    answering, docs.nvidia.com/deploy/nvml-api nvmlReturn_t; Xid 79 in the kernel log) comes back with a node
    reboot, not a GPU reset it cannot take: the gpu-reset check says so, the others read nothing of it."""
    if name == "gpu-reset":
        return (
            "fail",
            "nvidia-smi prints 'GPU is lost': it fell off the bus or stopped answering",
            "reboot-node",
        )
    return "unknown", "nvidia-smi prints 'GPU is lost': nothing of it can be read", None


def _ecc(gpu: Gpu, _peers: List[Gpu]) -> Verdict:
    """ECC off is a setting (configure: `nvidia-smi -e 1`, then a reset); an uncorrectable error since the
    driver loaded is cleared by a GPU reset (the memory error guide's recovery, Xid 48/94/95); an aggregate
    SRAM count over NVIDIA's threshold is an RMA (replace-hardware)."""
    if gpu["ecc_mode"] is None:
        return "unknown", "ECC mode not reported", None
    if gpu["ecc_mode"] != "Enabled":
        why = "ECC is %s (a setting: a training GPU runs with ECC on, `nvidia-smi -e 1`, then reset)"
        return "fail", why % gpu["ecc_mode"], "configure"
    volatile = {k: v for k, v in gpu["ecc_uncorrectable"].items() if k.startswith("volatile.") and v}
    if gpu["sram_threshold_exceeded"] == "Yes":
        return "fail", "aggregate SRAM uncorrectable errors over NVIDIA's threshold (RMA)", "replace-hardware"
    if volatile:
        why = "uncorrectable ECC errors since the driver loaded: %s (reset the GPU)" % _counts(volatile)
        return "fail", why, "reset-gpu"
    if not any(v is not None for k, v in gpu["ecc_uncorrectable"].items() if k.startswith("volatile.")):
        return "unknown", "no volatile ECC counter reported as a number", None  # all N/A: no count is no zero
    lifetime = {k: v for k, v in gpu["ecc_uncorrectable"].items() if k.startswith("aggregate.") and v}
    return (
        "pass",
        "no uncorrectable ECC error since the driver loaded"
        + (" (lifetime: %s)" % _counts(lifetime) if lifetime else ""),
        None,
    )


def _counts(counts: Dict[str, Any]) -> str:
    return ", ".join("%s=%d" % (k, v) for k, v in sorted(counts.items()))


def _remap(gpu: Gpu, _peers: List[Gpu]) -> Verdict:
    """Memory repairs. Pending (row remap, channel or TPC repair, page retirement): applied at the next GPU
    reset (reset-gpu). A row-remapping failure (past the RMA threshold) or memory the GPU reports it cannot
    repair: replace-hardware. Either flag answered is read; neither is unknown."""
    findings = []
    if gpu["remap_failure"] == "Yes":
        findings.append(("row remapping failed: past NVIDIA's RMA threshold, the GPU needs service",
                         "replace-hardware"))  # fmt: skip
    if gpu["repair"]["unrepairable_memory"] == "Yes":
        findings.append(
            ("the GPU reports memory it cannot repair: the GPU needs service", "replace-hardware")
        )
    if gpu["remap_pending"] == "Yes":
        findings.append(("a row remap is pending: drain, then reset the GPU to apply it", "reset-gpu"))
    for field in ("channel_repair_pending", "tpc_repair_pending"):
        if gpu["repair"][field] == "Yes":
            findings.append(("%s=Yes: drain, then reset the GPU to apply the repair" % field, "reset-gpu"))
    if gpu["retirement_pending"] == "Yes" and gpu["remap_pending"] is None:  # before Ampere: page retirement
        findings.append(("a page retirement is pending: drain, then reset the GPU", "reset-gpu"))
    if findings:
        return "fail", "; ".join(why for why, _ in findings), _worst([r for _, r in findings])
    repairs = [f for f in ("channel_repair_pending", "tpc_repair_pending") if gpu["repair"][f] == "No"]
    extra = " (%s No)" % ", ".join(repairs) if repairs else ""
    if gpu["remap_pending"] == "No" and gpu["remap_failure"] == "No":
        return "pass", "no row remap pending or failed" + extra, None
    if gpu["retirement_pending"] == "No":
        return "pass", "no page retirement pending" + extra, None
    return "unknown", "neither row remapping nor page retirement reported", None


def _pcie(gpu: Gpu, peers: List[Gpu]) -> Verdict:
    """A link narrower than its peers on this node trained badly (reseat or service: replace-hardware). Every
    GPU equally below the slot's width is how the platform is wired (AWS g4dn/g5 wire x8 of x16 slots:
    ../shared/gpu-captures 02-, 13-), shown, not failed. A link below its generation under load (P0) fails;
    idle, the driver slows the link to save power."""
    (gen, max_gen), (width, max_width) = gpu["gen"], gpu["width"]
    if None in (gen, max_gen, width, max_width):
        return "unknown", "PCIe link generation or width not reported", None
    shown = "PCIe gen %d/%d x%d/x%d" % (gen, max_gen, width, max_width)
    # its peers: the node's GPUs in slots as wide as its own (a mixed node's other cards are no yardstick)
    widest = max(p["width"][0] for p in peers if p["width"][0] is not None and p["width"][1] == max_width)
    if width < widest:
        why = ": the link trained narrower than its peers on this node (x%d): reseat or service" % widest
        return "fail", shown + why, "replace-hardware"
    if gen < max_gen and gpu["pstate"] == "P0":
        return "fail", shown + ": the link runs below its generation under load", "replace-hardware"
    note = ""
    if width < max_width:
        every = "every GPU of this node" if len(peers) > 1 else "this node's one GPU"
        note = " (%s at x%d of x%d: the platform's wiring, not one link's fault)" % (every, width, max_width)
    if gen < max_gen:  # the driver lowers the link speed of an idle GPU to save power
        note += " (idle at %s: the driver slows an idle link)" % gpu["pstate"]
    return "pass", shown + note, None


def _clocks(gpu: Gpu, _peers: List[Gpu]) -> Verdict:
    """Thermal slowdown (hw/sw) and the power brake are the node's cooling or power supply (replace-hardware:
    the node needs service). HW Slowdown alone may be a PState or clock change (NVML): unknown,
    shown, never a replacement for a transient."""
    reasons = gpu["clock_reasons"]
    if reasons is None or all(v is None for v in reasons.values()):
        return "unknown", "clock event reasons not reported", None
    active = sorted(r for r, v in reasons.items() if v == "Active")
    if active and active != ["hw_slowdown"]:
        return "fail", "clocks slowed by %s (cooling or power supply)" % ", ".join(active), "replace-hardware"
    unread = sorted(r for r, v in reasons.items() if v not in ("Active", "Not Active"))  # N/A, absent, other
    if unread:
        why = "clock event reasons not reported as Active/Not Active: %s" % ", ".join(unread)
        return "unknown", why, None
    if active:
        why = "clocks slowed by hw_slowdown alone (NVIDIA: also shown during a PState or clock change): rerun"
        return "unknown", why, None
    return "pass", "no hardware or thermal slowdown active", None


def _persistence(gpu: Gpu, _peers: List[Gpu]) -> Verdict:
    """A setting, never a fault of the node: off, the driver state is torn down when the last client exits
    (slower job starts), which `nvidia-smi -pm 1` or nvidia-persistenced changes. It passes, naming it."""
    if gpu["persistence"] is None:
        return "unknown", "persistence mode not reported", None
    if gpu["persistence"] != "Enabled":
        why = "persistence mode %s (a setting: `nvidia-smi -pm 1` or nvidia-persistenced keeps the driver up)"
        return "pass", why % gpu["persistence"], None
    return "pass", "persistence mode enabled", None


def _reset(gpu: Gpu, _peers: List[Gpu]) -> Verdict:
    """The driver's own request for a reset or reboot: gpu_recovery_action (R570+, classes from NVIDIA's
    recovery action flags), else the older gpu_reset_status flags. A word not documented is unknown."""
    action, old = gpu["recovery_action"], (gpu["reset_required"], gpu["drain_and_reset"])
    shown = "reset_required=%s, drain_and_reset_recommended=%s" % old
    if "Yes" in old:  # an older driver (or both elements): the driver asks for a reset
        return "fail", "the driver asks for a GPU reset (%s)" % shown, "reset-gpu"
    if action is not None:
        if action.lower() == "none":
            return "pass", "recovery action None", None
        if action.lower() in _RECOVERY:
            said, remedy = _RECOVERY[action.lower()]
            return "fail", "recovery action %s: %s" % (action, said), remedy
        return "unknown", "recovery action %r is not one NVIDIA documents" % action, None
    if gpu["reset_required"] in (None, _DEPRECATED):
        return "unknown", "neither a recovery action nor a reset status reported (%s)" % shown, None
    if gpu["reset_required"] != "No" or gpu["drain_and_reset"] not in (None, "No"):  # another word: not read
        return "unknown", "reset status not read (%s)" % shown, None
    return "pass", "no reset required", None


def _fabric(gpu: Gpu, _peers: List[Gpu]) -> Verdict:
    """Registration with fabric manager (state/status), then the fabric's health (R570+). Not started or in
    progress: fabric manager is not up (configure: start nvidia-fabricmanager, rerun). Degraded bandwidth,
    an unhealthy route or a registration that failed: NVLink links or routes lost, whose documented ladder
    starts at a GPU reset (docs.nvidia.com/health-validation/reference/checks/nvlink, nvlink_active:
    drain, then reset_gpu, restart_os, service_required). Incorrect configuration: NVML names a setting
    (SysGUID, chassis serial, partition, GPU firmware, location: configure), but insufficient NVLinks, the
    link ladder (reset-gpu). A recovery in progress is unknown (rerun after it). N/A is not supported, no
    fault."""
    state, status = gpu["fabric_state"], gpu["fabric_status"]
    if not gpu["fabric_reported"]:  # a driver without the element: says nothing of fabric manager
        return "unknown", "fabric state not reported", None
    if state is None:  # N/A: the driver has no NVSwitch fabric to register with on this GPU
        return "pass", "no NVLink fabric on this GPU (fabric state N/A)", None
    if state in ("In Progress", "Not Started"):
        why = "fabric registration %s: fabric manager not up yet (NCCL over NVLink fails)" % state.lower()
        return "fail", why, "configure"
    if state != "Completed" or status != "Success":
        return "fail", "fabric state %s, status %s: check nvidia-fabricmanager" % (state, status), "reset-gpu"
    return _fabric_health(gpu["fabric_health"])


# fabric/health field -> (the words that pass, the words that fail with their remedy); N/A (None) passes: the
# GPU does not support that field. Any other word is not read (unknown). A recovery in progress fails nothing
# yet: unknown, rerun after it.
_HEALTH_WORDS: Dict[str, Tuple[Tuple[str, ...], Dict[str, str]]] = {
    "bandwidth": (("Full",), {"Degraded": "reset-gpu"}),
    "route_unhealthy": (("False",), {"True": "reset-gpu"}),
    "summary": (("Healthy",), {"Unhealthy": "reset-gpu", "Limited Capacity": "reset-gpu"}),
    "route_recovery_in_progress": (("False",), {}),
    "access_timeout_recovery": (("False",), {}),
}


def _fabric_health(health: Optional[Dict[str, Optional[str]]]) -> Verdict:
    done = "fabric registration completed"
    if health is None:  # a driver before R570: registration is all it reports
        return "pass", done + " (fabric manager up)", None
    faults, unread = [], []
    for field, (good, bad) in _HEALTH_WORDS.items():
        word = health[field]
        if word in bad:
            faults.append(("%s %s" % (field, word), bad[word]))
        elif word is not None and word not in good:
            unread.append("%s=%s" % (field, word))
    wrong = health["incorrect_configuration"]
    if wrong not in (None, "None", "False"):  # NVML: each value names what is wrong
        faults.append(
            ("incorrect_configuration %s" % wrong, "reset-gpu" if "nvlink" in wrong.lower() else "configure")
        )
    if faults:
        why = "%s, but the fabric health reads %s" % (done, ", ".join(f for f, _ in faults))
        return "fail", why, _worst([r for _, r in faults])
    if unread:
        return (
            "unknown",
            "%s, fabric health not read: %s (a recovery in progress: rerun after it)"
            % (done, ", ".join(unread)),
            None,
        )
    if health["summary"] is None:  # R580 prints the health block all N/A where the GPU does not report it
        return "pass", "%s (fabric health N/A: not reported for this GPU)" % done, None
    return "pass", "%s, fabric health %s, bandwidth %s" % (done, health["summary"], health["bandwidth"]), None


SMI_CHECKS = (
    ("gpu-ecc", _ecc),
    ("gpu-row-remap", _remap),
    ("gpu-pcie-link", _pcie),
    ("gpu-clocks", _clocks),
    ("gpu-persistence", _persistence),
    ("gpu-reset", _reset),
    ("gpu-fabric", _fabric),
)


def smi_checks(rc: Optional[int], out: str) -> List[Check]:
    """The checks read from `nvidia-smi -q -x` (rc None: the tool did not run; every check unknown)."""
    if rc is None or rc != 0:
        why = out if rc is None else "nvidia-smi -q -x exited %d" % rc
        return [check(name, "unknown", why, [ev(SMI_XML, out[:200])]) for name, _ in SMI_CHECKS]
    try:
        gpus = parse_smi_xml(out)
    except ValueError as err:
        return [check(name, "unknown", str(err)) for name, _ in SMI_CHECKS]
    return [_judge(name, gpus, judge) for name, judge in SMI_CHECKS]
