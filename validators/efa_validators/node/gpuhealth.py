"""GPU health beside EFA: what a node-health hook (NHC, DCGM) would drain a node for, read from the driver.

Sources, by format (fixtures in tests/fixtures/gpuhealth/ are written by us from these formats):
- `nvidia-smi -q -x`: read in smi.py (its sources listed there); `smi_checks` and `parse_smi_xml` are
  re-exported here.
- `nvidia-smi nvlink -s` / `-e`: efa_validators/node/nvlink.py (Blackwell's counters included).
- Xid lines in the kernel log: efa_validators/node/xid.py, by NVIDIA's Xid catalog as data (xid_catalog.json).
- `dcgmi diag -r 1|2 -j`: `{"DCGM Diagnostic" (older: "DCGM GPU Diagnostic"): {"test_categories":
  [{"category", "tests": [{"name", "results": [{"status": "Pass|Fail|Warn|Skip"}]}]}]}}` (NVIDIA/DCGM).
- `dcgmi health -c -j` (the watches a team's DCGM keeps on all GPUs, dcgmi's default group): `{"header":
  ["Health Monitor Report"], "body": {"Overall Health": {"value": "Healthy|Warning|Failure"}, "GPU":
  {"children": {"0": {"value": ..., "children": {"Errors": {"children": {"Memory system": {"value": ...,
  "overflow": [the message, cut at about 54 characters]}}}}}}}}}`; without watches it prints "Error: Health
  watches not enabled." and exits non-zero (NVIDIA/DCGM dcgmi/Health.cpp Health::CheckWatches and
  GenerateOutputFromResponse, dcgmi/DcgmiOutput.{h,cpp} for the JSON boxes; read at 72fa3fe).

Fail closed, as the rest of node-check: a tool that is missing, unreadable output, or an element a GPU does
not report makes its check unknown, never pass. Everything here is pure but `gpu_health_checks` and
`kernel_log_xids`.
"""

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# the `nvidia-smi -q -x` reader lives in smi.py, NVLink in nvlink.py, Xid in xid.py, the check shape in
# verdict.py; all importable from here
from efa_validators.node.nvlink import nvlink_check, parse_nvlink  # noqa: F401 (re-exported)
from efa_validators.node.smi import SMI_CHECKS, SMI_XML, _counts, parse_smi_xml, smi_checks  # noqa: F401
from efa_validators.node.verdict import REMEDIES, Check, check, ev  # noqa: F401
from efa_validators.node.xid import XID_CATALOG, kernel_lines, parse_xids, xid_check  # noqa: F401 (re-exported)

Tool = Callable[[Sequence[str]], Tuple[Optional[int], str]]

# The kernel log may be larger than any other tool's output: the ring buffer is up to 32 MiB as built
# (torvalds/linux init/Kconfig, LOG_BUF_SHIFT "range 12 25"). Past this cap it is not read at all (the
# check is unknown), as is a log of the boot (journalctl -k -b) longer than it.
KERNEL_LOG_MAX = 32 << 20
KERNEL_LOG_TOOLS = ("dmesg", "journalctl")


def parse_dcgm_diag(text: str) -> List[Tuple[str, str, str]]:
    """(category, test, status) of every result of `dcgmi diag -j`. Raises ValueError when it is not that."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        raise ValueError("dcgmi diag output is not JSON") from None
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic") if isinstance(doc, dict) else None
    categories = body.get("test_categories") if isinstance(body, dict) else None
    if not isinstance(categories, list):
        raise ValueError("dcgmi diag JSON without test_categories")
    out = []
    for category in categories:
        for test in _objects(category, "tests"):
            for result in _objects(test, "results"):
                out.append((str(category.get("category")), str(test.get("name")), str(result.get("status"))))
    return out


def _objects(parent: Any, key: str) -> List[Dict[str, Any]]:
    """parent[key], a list of objects, as dcgmi writes it (absent: none); any other shape is not its output
    (ValueError), never walked into results."""
    items = parent.get(key, []) if isinstance(parent, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError("dcgmi diag JSON: %r is not a list of objects" % key)
    return items


# dcgmi's exit status is the dcgmReturn_t of the command, mod 256 (NVIDIA/DCGM dcgmi/main_dcgmi.cpp `return
# result`); `dcgmi diag` returns DCGM_ST_NVVS_ERROR (-30) when a test reported an error against a GPU and
# DCGM_ST_NVVS_ISOLATE_ERROR (-51) for one that calls for isolating it (dcgmi/Diag.cpp
# Diag::GetFailureResult; values in dcgmlib/dcgm_structs.h; read at NVIDIA/DCGM
# 72fa3feaa67d716a75323a8f47c34ff3ee73f824).
# Any other non-zero status (no data, a timeout, the host engine gone, a version mismatch) is no verdict.
DCGM_DIAG_FAILED = {256 - 30: "DCGM_ST_NVVS_ERROR", 256 - 51: "DCGM_ST_NVVS_ISOLATE_ERROR"}


def dcgm_check(rc: Optional[int], out: str, level: int) -> Check:
    """A failed test fails, and so does DCGM's own failure status whatever the results read; any other
    non-zero exit, a run where nothing passed, or a test that was skipped, is unknown (DCGM skips what it
    cannot test on a SKU: a skipped memory test proves nothing about the memory)."""
    source = "dcgmi diag -r %d -j" % level
    if rc is None:
        return check("gpu-dcgm-diag", "unknown", out, [ev(source, out[:200])])
    try:
        results = parse_dcgm_diag(out)
    except ValueError as err:
        return check("gpu-dcgm-diag", "unknown", "%s (exit %d)" % (err, rc), [ev(source, out[:200])])
    evidence = [ev(source, "%s/%s: %s" % r) for r in results if r[2] != "Pass"][:16]
    if rc:
        evidence.insert(
            0,
            ev(source, "exit %d%s" % (rc, " (%s)" % DCGM_DIAG_FAILED[rc] if rc in DCGM_DIAG_FAILED else "")),
        )
    failed = ["%s/%s" % (c, t) for c, t, s in results if s == "Fail"]
    if failed:
        return check(
            "gpu-dcgm-diag", "fail", "level %d failed: %s" % (level, ", ".join(failed[:6])), evidence
        )
    if rc in DCGM_DIAG_FAILED:
        why = "level %d: dcgmi exited %d (%s: the diagnostic reported an error), though no result reads Fail"
        return check("gpu-dcgm-diag", "fail", why % (level, rc, DCGM_DIAG_FAILED[rc]), evidence)
    if rc:
        why = "level %d: dcgmi exited %d: the diagnostic did not end cleanly, its results are no verdict"
        return check("gpu-dcgm-diag", "unknown", why % (level, rc), evidence)
    skipped = ["%s/%s" % (c, t) for c, t, s in results if s not in ("Pass", "Warn")]
    if skipped or not results:
        shown = ", ".join(skipped[:6]) or "no results"
        return check("gpu-dcgm-diag", "unknown", "level %d did not run: %s" % (level, shown), evidence)
    return check("gpu-dcgm-diag", "pass", "level %d: %d results pass" % (level, len(results)), evidence)


DCGM_HEALTH = ("dcgmi", "health", "-c", "-j")
_HEALTH_RANK = {"Healthy": 0, "Warning": 1, "Failure": 2}


def parse_dcgm_health(text: str) -> Tuple[str, List[Tuple[str, str, str, str]]]:
    """(overall health, [(entity, system, health, message)]) of `dcgmi health -c -j`. Raises ValueError when
    it is not that output."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("dcgmi health output is not JSON") from None
    body = doc.get("body") if isinstance(doc, dict) else None
    overall = body.get("Overall Health") if isinstance(body, dict) else None
    if not isinstance(overall, dict) or not isinstance(overall.get("value"), str):
        raise ValueError("dcgmi health JSON without 'Overall Health'")
    incidents = []
    for group, boxes in body.items():
        if group == "Overall Health":
            continue
        for entity, box in _children(boxes).items():
            label = "%s %s" % (group, entity)
            errors = _children(box).get("Errors", {})
            for system, err in _children(errors).items():
                value = err.get("value")
                lines = err.get("overflow", [])
                if not isinstance(value, str) or not (
                    isinstance(lines, list) and all(isinstance(x, str) for x in lines)
                ):
                    raise ValueError(
                        "dcgmi health JSON: %s %s is not a health and its messages" % (label, system)
                    )
                incidents.append((label, system, value, " ".join(x.strip() for x in lines)))
            if not isinstance(box.get("value"), str):
                raise ValueError("dcgmi health JSON: %s has no health" % label)
            if not _children(errors):
                incidents.append((label, "", box["value"], ""))
    return overall["value"], incidents


def _children(box: Any) -> Dict[str, Dict[str, Any]]:
    """A dcgmi output box's named children (absent: none); another shape is not dcgmi's (ValueError)."""
    kids = box.get("children", {}) if isinstance(box, dict) else None
    if not isinstance(kids, dict) or not all(isinstance(v, dict) for v in kids.values()):
        raise ValueError("dcgmi health JSON: 'children' is not an object of boxes")
    return kids


def dcgm_health_check(rc: Optional[int], out: str) -> Check:
    """What DCGM's health watches saw since they were set (between jobs, where the team keeps them): a
    Failure fails; a Warning (a rate or a count past DCGM's threshold, not a fault DCGM fails the GPU for) is
    unknown, shown; Healthy everywhere passes. No watches set, no host engine, or output of another shape is
    unknown: nothing watched is no evidence of health."""
    source = " ".join(DCGM_HEALTH)
    if rc is None:
        return check("gpu-dcgm-health", "unknown", out, [ev(source, out[:200])])
    if rc:
        first = next((line.strip() for line in out.splitlines() if line.strip()), "no output")[:200]
        if "watches not enabled" in out:
            why = (
                "no DCGM health watches are set on the GPUs, so DCGM watched nothing to report (a team keeps "
                "them on the host engine: dcgmi health -s a)"
            )
        else:
            why = "dcgmi health exited %d: %s" % (rc, first)
        return check("gpu-dcgm-health", "unknown", why, [ev(source, "exit %d: %s" % (rc, first))])
    try:
        overall, incidents = parse_dcgm_health(out)
    except ValueError as err:
        return check("gpu-dcgm-health", "unknown", str(err), [ev(source, out[:200])])
    said = [i for i in incidents if i[2] != "Healthy"]
    evidence = [ev(source, "Overall Health: %s" % overall)]
    evidence += [
        ev(source, "%s%s: %s%s" % (e, " " + s if s else "", h, ": " + m if m else "")) for e, s, h, m in said
    ][:16]
    words = {overall} | {h for _, _, h, _ in incidents}
    if any(w not in _HEALTH_RANK for w in words):
        odd = sorted(w for w in words if w not in _HEALTH_RANK)
        return check(
            "gpu-dcgm-health", "unknown", "DCGM reports a health of %s" % ", ".join(map(repr, odd)), evidence
        )
    worst = max(words, key=_HEALTH_RANK.__getitem__)
    worst_of = [("%s %s" % (e, s)).strip() for e, s, h, _ in said if h == worst]
    named = ", ".join(worst_of[:6]) + (" and %d more" % (len(worst_of) - 6) if len(worst_of) > 6 else "")
    if worst == "Failure":
        return check("gpu-dcgm-health", "fail", "DCGM health watches report a failure: %s" % named, evidence)
    if worst == "Warning":
        why = "DCGM health watches warn (not a failure, not health): %s" % named
        return check("gpu-dcgm-health", "unknown", why, evidence)
    return check("gpu-dcgm-health", "pass", "DCGM health watches: Healthy", evidence)


def gpu_health_checks(
    run: Tool, dcgm_level: Optional[int] = None, nvlink: Optional[bool] = None, profile: str = ""
) -> List[Check]:
    """Every GPU health check on this node; `run` is nodecheck.run_tool (a missing tool: (None, why)).
    DCGM's level 2 runs for minutes: `run` gets the argv only, so the caller gives dcgmi its time limit.
    `nvlink`: the instance profile's word on NVLink (`profile` its name), None where there is none."""
    smi_rc, smi_out = run(["nvidia-smi", "-q", "-x"])
    checks = smi_checks(smi_rc, smi_out)
    status, errors = run(["nvidia-smi", "nvlink", "-s"]), run(["nvidia-smi", "nvlink", "-e"])
    checks.append(nvlink_check(*status, *errors, expected=nvlink, profile=profile))
    checks.append(kernel_log_xids(run, smi_rc, smi_out))
    if dcgm_level:
        checks.append(dcgm_check(*run(["dcgmi", "diag", "-r", str(dcgm_level), "-j"]), dcgm_level))
        checks.append(dcgm_health_check(*run(list(DCGM_HEALTH))))
    return checks


def kernel_log_xids(run: Tool, smi_rc: Optional[int], smi_out: str) -> Check:
    """gpu-xid from the kernel log, read whether or not nvidia-smi answered: the GPUs that fell off the bus
    (Xid 79) or whose GSP stopped answering (Xid 119) are the ones nvidia-smi cannot answer for. Without an
    answer from the driver a fault still fails, but no Xid (or only harmless ones) is no evidence of a healthy
    GPU: unknown."""
    rc, log = run(["dmesg"])
    source = "dmesg"
    if rc != 0 or not kernel_lines(log):
        # dmesg needs CAP_SYSLOG where kernel.dmesg_restrict=1; the journal may be readable
        first = log.strip()[:120] if rc is None else "dmesg exit %d" % rc if rc else "dmesg printed nothing"
        rc, log = run(["journalctl", "-k", "-b", "--no-pager", "-q"])
        source = "journalctl -k (after %s)" % first
    judged = xid_check(rc, log, source)
    if smi_rc == 0 or judged["status"] != "pass":
        return judged
    said = smi_out.strip().splitlines()[0][:120] if smi_out.strip() else "no output"
    why = "nvidia-smi -q -x %s (%s), and the kernel log names no fault: %s" % (
        "did not run" if smi_rc is None else "exited %d" % smi_rc,
        said,
        judged["detail"],
    )
    return check("gpu-xid", "unknown", why, judged["evidence"] + [ev(SMI_XML, said)])


def dcgm_level_for(asked: Optional[int], dcgmi_installed: bool) -> Optional[int]:
    """DCGM is optional: run level 1 where dcgmi is installed; asked for (1, 2), a missing dcgmi is unknown;
    0 skips it."""
    if asked is None:
        return 1 if dcgmi_installed else None
    return asked or None
