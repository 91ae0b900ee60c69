"""GPU health beside EFA: what a node-health hook (NHC, DCGM) would drain a node for, read from the driver.

Sources, by format (fixtures in tests/fixtures/gpuhealth/ are written by us from these formats):
- `nvidia-smi -q -x`: read in smi.py (its sources listed there); `smi_checks` and `parse_smi_xml` are
  re-exported here.
- `nvidia-smi nvlink -s` / `-e`: per GPU, `Link N: <speed>` or `Link N: <inactive>`, and
  `Link N: Replay Errors: 0` lines (as printed in stas00/ml-engineering network/README.md, "how to check
  NVLink error counters").
- Xid lines in the kernel log, `NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, ...`; the meaning and NVIDIA's
  resolution bucket of each code from the Xid catalog
  (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) and dynamic page retirement
  (docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html).
- `dcgmi diag -r 1|2 -j`: `{"DCGM Diagnostic" (older: "DCGM GPU Diagnostic"): {"test_categories":
  [{"category", "tests": [{"name", "results": [{"status": "Pass|Fail|Warn|Skip"}]}]}]}}` (NVIDIA/DCGM).
- `dcgmi health -c -j` (the watches a team's DCGM keeps on all GPUs, dcgmi's default group): `{"header":
  ["Health Monitor Report"], "body": {"Overall Health": {"value": "Healthy|Warning|Failure"}, "GPU":
  {"children": {"0": {"value": ..., "children": {"Errors": {"children": {"Memory system": {"value": ...,
  "overflow": [the message, cut at about 54 characters]}}}}}}}}}`; without watches it prints "Error: Health
  watches not enabled." and exits non-zero (NVIDIA/DCGM dcgmi/Health.cpp Health::CheckWatches and
  GenerateOutputFromResponse, dcgmi/DcgmiOutput.{h,cpp} for the JSON boxes; read at 72fa3fe).

Fail closed, as the rest of node-check: a tool that is missing, unreadable output, or an element a GPU does
not report makes its check unknown, never pass. Everything here is pure but `gpu_health_checks`.
"""

import json
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# the `nvidia-smi -q -x` reader lives in smi.py, the check shape in verdict.py; both importable from here
from efa_validators.node.smi import SMI_CHECKS, SMI_XML, _counts, parse_smi_xml, smi_checks  # noqa: F401
from efa_validators.node.verdict import REMEDIES, Check, check, ev  # noqa: F401

Tool = Callable[[Sequence[str]], Tuple[Optional[int], str]]

# The kernel log may be larger than any other tool's output: the ring buffer is up to 32 MiB as built
# (torvalds/linux init/Kconfig, LOG_BUF_SHIFT "range 12 25"). Past this cap it is not read at all (the
# check is unknown), as is a log of the boot (journalctl -k -b) longer than it.
KERNEL_LOG_MAX = 32 << 20
KERNEL_LOG_TOOLS = ("dmesg", "journalctl")

# Xid code -> (NVIDIA's meaning, what the node needs). "app": the application's fault (NVIDIA: restart
# the app), the node stays; "reset": the GPU needs a reset before the next job; "drain": the node needs
# a reboot or service. From the Xid catalog's "Resolution Bucket (Immediate Action)" and the
# page-retirement guide.
XID_CATALOG: Dict[int, Tuple[str, str]] = {
    13: ("graphics engine exception", "app"),
    31: ("GPU memory page fault", "app"),
    43: ("GPU stopped processing", "app"),
    45: ("preemptive cleanup, due to previous errors", "app"),
    48: ("double bit ECC error", "reset"),
    61: ("internal micro-controller breakpoint/warning", "reset"),
    62: ("internal micro-controller halt", "reset"),
    63: ("ECC page retirement or row remapping recording event (reset the GPU to activate)", "reset"),
    64: ("ECC page retirement or row remapper recording failure", "drain"),
    74: ("NVLink error", "reset"),
    79: ("GPU has fallen off the bus", "drain"),
    92: ("high single-bit ECC error rate", "reset"),
    94: ("contained ECC error", "app"),
    95: ("uncontained ECC error", "reset"),
    119: ("GSP RPC timeout", "reset"),
    120: ("GSP error", "reset"),
    140: ("unrecovered ECC error", "reset"),
    154: ("GPU recovery action changed (the line names the action)", "drain"),
}
_XID = re.compile(r"^.*?NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+).*$", re.M)
# a kernel message: a line with text that is not one of journalctl's own notes ("-- No entries --")
_MESSAGE = re.compile(r"^(?!-- .* --\s*$)[ \t]*\S.*$", re.M)

_GPU_HEAD = re.compile(r"^GPU (\d+): ")
_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def parse_nvlink(status: str, errors: str) -> Dict[int, Dict[int, Dict[str, Any]]]:
    """{gpu: {link: {"state": "26.562 GB/s" | "<inactive>", "Replay Errors": 0, ...}}}, from `nvidia-smi
    nvlink -s` and `-e`."""
    links: Dict[int, Dict[int, Dict[str, Any]]] = {}
    for text, is_errors in ((status, False), (errors, True)):
        gpu = None
        for line in text.splitlines():
            head = _GPU_HEAD.match(line)
            if head:
                gpu = int(head.group(1))
                continue
            link = _LINK.match(line)
            if link is None or gpu is None:
                continue
            entry = links.setdefault(gpu, {}).setdefault(int(link.group(1)), {})
            if is_errors:
                name, _, count = link.group(2).rpartition(":")
                if count.strip().isdigit():
                    entry[name.strip()] = int(count)
            else:
                entry["state"] = link.group(2).strip()
    return links


def nvlink_check(
    status_rc: Optional[int],
    status: str,
    errors_rc: Optional[int],
    errors: str,
    expected: Optional[bool] = None,
    profile: str = "",
) -> Check:
    """Down links and link recoveries fail; replay and CRC counts are shown (links retry those by design).

    `expected` is the instance profile's word on NVLink (profile_data `nvlink`, `profile` its name): no
    listed link is then a fact to judge, where without it (None) a node without NVLink is not told apart
    from a tool that said nothing."""
    source = "nvidia-smi nvlink -s/-e"
    if status_rc is None or status_rc != 0:
        why = status if status_rc is None else "nvidia-smi nvlink -s exited %d" % status_rc
        return check("gpu-nvlink", "unknown", why, [ev(source, status[:200])])
    links = parse_nvlink(status, errors if errors_rc == 0 else "")
    if expected is False:
        return _nvlink_none_expected(status, links, profile)
    stated = {gpu for gpu, per in links.items() if any("state" in entry for entry in per.values())}
    if not stated:
        said = "nvidia-smi nvlink -s " + ("printed nothing" if not status.strip() else "lists no link")
        if expected:
            # fail, not unknown: nvidia-smi answered (exit 0) about GPUs whose NVLink is a documented fact of
            # the instance type, and listed none. That is the driver's own word that the links are gone (a GPU
            # off its NVSwitch, NVLink disabled), not the absence of an answer; intra-node traffic would fall
            # back to PCIe. A tool that prints nothing where links exist is itself a fault worth draining for.
            why = "%s: links expected (the %s profile's GPUs are NVLink-connected), none seen"
            return check(
                "gpu-nvlink", "fail", why % (said, profile), [ev(source, status[:200] or "(no output)")]
            )
        if not status.strip():  # a node without NVLink is not told apart from a tool that said nothing
            return check(
                "gpu-nvlink", "unknown", "nvidia-smi nvlink -s printed nothing", [ev(source, "(no output)")]
            )
        return check(
            "gpu-nvlink", "unknown", "no link lines in nvidia-smi nvlink -s", [ev(source, status[:200])]
        )
    heads = sorted(int(m.group(1)) for m in map(_GPU_HEAD.match, status.splitlines()) if m)
    bare = [gpu for gpu in heads if gpu not in stated]
    down, recovered, odd, uncounted, counted = [], [], [], [], {}
    for gpu, per in sorted(links.items()):
        for link, entry in sorted(per.items()):
            name, state = "GPU %d link %d" % (gpu, link), entry.get("state", "")
            if "inactive" in state.lower():
                down.append(name)
            elif gpu in bare:  # named once, as a GPU that lists no link
                pass
            elif "GB/s" not in state:  # neither a speed nor <inactive>: not a state this reads
                odd.append("%s: %s" % (name, state or "not in nvidia-smi nvlink -s"))
            elif "Recovery Errors" not in entry:
                uncounted.append(name)
            if entry.get("Recovery Errors"):
                recovered.append("%s: %d recoveries" % (name, entry["Recovery Errors"]))
            for counter in ("Replay Errors", "CRC Errors"):
                counted[counter] = counted.get(counter, 0) + entry.get(counter, 0)
    total = sum(len(per) for per in links.values())
    evidence = [ev(source, text) for text in (down + recovered + odd)[:16]]
    if down:
        shown = "%d of %d links down: %s" % (len(down), total, ", ".join(down[:4]))
        return check("gpu-nvlink", "fail", shown, evidence)
    if bare and expected:  # the profile's GPUs all have NVLink: one listing no link lost it (see above)
        shown = "GPU %s list no link: links expected (the %s profile's GPUs are NVLink-connected)"
        return check("gpu-nvlink", "fail", shown % (", ".join(map(str, bare)), profile), evidence)
    if recovered:
        return check("gpu-nvlink", "fail", "links retrained: %s" % ", ".join(recovered[:4]), evidence)
    if errors_rc != 0:
        why = errors.strip()[:200] if errors_rc is None else "nvidia-smi nvlink -e exited %d" % errors_rc
        return check("gpu-nvlink", "unknown", "%d links up; error counters unreadable (%s)" % (total, why))
    why = []  # a GPU without links beside GPUs with them, a link state not read, a link half reported
    if bare:
        why.append("GPU %s list no link" % ", ".join(map(str, bare)))
    if odd:
        why.append("link state not read: %s" % ", ".join(odd[:4]))
    if uncounted:
        why.append("no recovery counter for %d link(s): %s" % (len(uncounted), ", ".join(uncounted[:4])))
    if why:
        return check("gpu-nvlink", "unknown", "; ".join(why), evidence)
    return check("gpu-nvlink", "pass", "%d links up, no recovery (%s)" % (total, _counts(counted)))


def _nvlink_none_expected(status: str, links: Dict[int, Dict[int, Dict[str, Any]]], profile: str) -> Check:
    """The profile says its GPUs have no NVLink: no output, or GPU headers without links, is that fact; a
    listed link contradicts the profile (unknown, shown); any other text is not read (unknown)."""
    source = "nvidia-smi nvlink -s/-e"
    listed = ["GPU %d link %d" % (gpu, link) for gpu, per in sorted(links.items()) for link in sorted(per)]
    if listed:
        why = "the %s profile says its GPUs have no NVLink, but links are listed: %s" % (profile, listed[0])
        more = " (+%d more)" % (len(listed) - 1) if len(listed) > 1 else ""
        return check("gpu-nvlink", "unknown", why + more, [ev(source, status[:200])])
    lines = [line.strip() for line in status.splitlines() if line.strip()]
    unread = [line for line in lines if not _GPU_HEAD.match(line)]
    if unread:
        why = "nvidia-smi nvlink -s printed what this does not read: %s" % unread[0][:120]
        return check("gpu-nvlink", "unknown", why, [ev(source, status[:200])])
    said = (
        "%d GPU(s) listed, none with a link" % len(lines) if lines else "nvidia-smi nvlink -s printed nothing"
    )
    why = "no NVLink, as the %s profile says (its GPUs have none): %s" % (profile, said)
    return check("gpu-nvlink", "pass", why, [ev(source, status[:200] or "(no output)")])


def parse_xids(text: str) -> List[Tuple[int, str, str]]:
    """(code, PCI address, line) of every Xid line of a kernel log (matched in place: a log of many MB is
    not split into a list of lines)."""
    return [(int(m.group(2)), m.group(1), m.group(0).strip()) for m in _XID.finditer(text)]


def kernel_lines(log: str) -> int:
    """How many kernel messages a log holds: non-blank lines that are not journalctl's own notes."""
    return sum(1 for _ in _MESSAGE.finditer(log))


def xid_check(rc: Optional[int], log: str, source: str) -> Check:
    """Xid lines judged by the catalog. A kernel log with no message is unknown, never "no Xid": a booted
    kernel always has messages, so an empty one was cleared (dmesg -C) or is hidden from this user (a
    journal this user may not read can leave `journalctl -k -q` with nothing to print, and exit 0)."""
    if rc is None or rc != 0:
        said = log.strip()[:200] or "no output"
        why = "%s: %s" % (source, said) if rc is None else "%s exited %d: %s" % (source, rc, said)
        return check("gpu-xid", "unknown", "kernel log not readable (%s)" % why, [ev(source, log[:200])])
    xids = parse_xids(log)
    needs = [(c, bus, line) for c, bus, line in xids if XID_CATALOG.get(c, ("", ""))[1] in ("reset", "drain")]
    unknown = [(c, bus, line) for c, bus, line in xids if c not in XID_CATALOG]
    evidence = [ev(source, line) for _c, _b, line in (needs + unknown)[:16]]
    if needs:
        shown = sorted(
            {"Xid %d (%s, %s) on %s" % (c, XID_CATALOG[c][0], XID_CATALOG[c][1], bus) for c, bus, _ in needs}
        )
        return check("gpu-xid", "fail", "; ".join(shown[:4]), evidence)
    if unknown:
        return check("gpu-xid", "unknown", "Xid %s: not in the catalog this tool reads"
                     % ", ".join(sorted({str(c) for c, _b, _l in unknown})), evidence)  # fmt: skip
    if xids:
        apps = sorted({"Xid %d (%s)" % (c, XID_CATALOG[c][0]) for c, _b, _l in xids})
        return check("gpu-xid", "pass", "application faults only, the node is fine: %s" % ", ".join(apps[:4]),
                     [ev(source, line) for _c, _b, line in xids[:8]])  # fmt: skip
    lines = kernel_lines(log)
    if not lines:
        return check(
            "gpu-xid",
            "unknown",
            "the kernel log is empty (cleared, or not visible to this user): no Xid proves nothing",
            [ev(source, log.strip()[:200] or "(no output)")],
        )
    return check("gpu-xid", "pass", "no Xid in the kernel log", [ev(source, "%d lines read" % lines)])


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
    if smi_rc != 0:  # no driver answered: a kernel log without Xid lines says nothing about a GPU
        checks.append(check("gpu-xid", "unknown", "no NVIDIA driver answered (nvidia-smi): Xid not judged"))
    else:
        rc, log = run(["dmesg"])
        source = "dmesg"
        if rc != 0 or not kernel_lines(log):
            # dmesg needs CAP_SYSLOG where kernel.dmesg_restrict=1; the journal may be readable
            first = (
                log.strip()[:120] if rc is None else "dmesg exit %d" % rc if rc else "dmesg printed nothing"
            )
            rc, log = run(["journalctl", "-k", "-b", "--no-pager", "-q"])
            source = "journalctl -k (after %s)" % first
        checks.append(xid_check(rc, log, source))
    if dcgm_level:
        checks.append(dcgm_check(*run(["dcgmi", "diag", "-r", str(dcgm_level), "-j"]), dcgm_level))
        checks.append(dcgm_health_check(*run(list(DCGM_HEALTH))))
    return checks


def dcgm_level_for(asked: Optional[int], dcgmi_installed: bool) -> Optional[int]:
    """DCGM is optional: run level 1 where dcgmi is installed; asked for (1, 2), a missing dcgmi is unknown;
    0 skips it."""
    if asked is None:
        return 1 if dcgmi_installed else None
    return asked or None
