"""NVLink state and error counters: `nvidia-smi nvlink -s` and `nvidia-smi nvlink -e`.

Formats read:
- `-s`: per GPU a header `GPU N: <name> (UUID: ...)`, then `Link N: <speed>` (`Link 0: 25 GB/s`) or `Link N:
  <inactive>`; a GPU whose links are all down prints `NVML: Unable to retrieve NVLink information as all links
  are inActive` under its header instead (Azure/azurehpc-health-checks@85922ba:
  test/data/bad_nvlink_status.txt, a real A100 output); a GPU without NVLink prints nothing
  (leptonai/gpud@40c0f93: components/accelerator/nvidia/fabric-manager/testdata/nvidia-smi.nvlink.status.a10).
- `-e`: the same headers, then one `Link N: <counter>: <count>` line per counter. Before Blackwell the
  counters are `Replay Errors`, `Recovery Errors` and `CRC Errors` (stas00/ml-engineering network/README.md).
  Blackwell (NVLink5) drivers print other ones: `Malformed packet Errors`, `Buffer overrun Errors`, `Rx
  Errors`, `Rx remote Errors`, `Rx General Errors`, `Local link integrity Errors`, `Tx discards`, `Link
  recovery successful events`, `Link recovery failed events`, `Total link recovery events`, `Effective
  Errors`, `Symbol Errors`, `FEC Errors - N` (N 0-15; bucket 0 counts corrected code words and is large on a
  healthy link) and the `Effective BER`/`Symbol BER`/`Raw BER ...` rates. The names are as third-party notes
  record them from a p6-b300 on driver 595.91.07 (found in the code corpus without a repository to cite); the
  counters behind them are DCGM's DCGM_FI_DEV_NVLINK_COUNT_* fields (NVIDIA/DCGM@72fa3fe:
  dcgmlib/dcgm_fields.h, e.g. DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, 1212). No NVIDIA-published
  sample of this output was found and none was checked on a device: the Blackwell fixtures in
  tests/fixtures/gpuhealth/ are written from these names, and a counter this module does not name is not
  judged (nor is any BER rate).

How they are judged, as DCGM's health watches do (NVIDIA/DCGM@72fa3fe: modules/health/DcgmHealthWatch.cpp
MonitorNVLinkErrorFields): before Blackwell a recovery (`Recovery Errors`) fails and replay/CRC counts are
shown (DCGM fails those past a rate this one read cannot give); on Blackwell a failed link recovery (`Link
recovery failed events`) fails and a successful one is shown (DCGM: a warning, the link came back by itself).
A link with neither recovery counter is unknown: no counter is no zero.

Remedy for a link down or a recovery that failed: reset-gpu. NVIDIA's Xid catalog resolves the Xids the driver
raises for these (136 ALI_TRAINING_FAIL "Link Training Failed"; the NVLink5 decode table's NETIR_LINK_DOWN
rows of Xid 149, all but two) with RESET_GPU: a GPU reset retrains its links (xid_catalog.json holds the
source).
"""

import re
from typing import Any, Dict, List, Optional

from efa_validators.node.verdict import Check, check, ev

SOURCE = "nvidia-smi nvlink -s/-e"
LINK_REMEDY = "reset-gpu"
_GPU_HEAD = re.compile(r"^GPU (\d+): ")
_LINK = re.compile(r"^\s*Link (\d+): (.*)$")
_ALL_INACTIVE = re.compile(r"all links are inactive", re.I)
RECOVERY = "Recovery Errors"  # before Blackwell: a link retrained
RECOVERY_FAILED = "Link recovery failed events"  # Blackwell
SHOWN = ("Replay Errors", "CRC Errors", "Link recovery successful events")

Links = Dict[int, Dict[int, Dict[str, Any]]]


def parse_nvlink(status: str, errors: str) -> Links:
    """{gpu: {link: {"state": "26.562 GB/s" | "<inactive>", "Replay Errors": 0, ...}}}, from `nvidia-smi
    nvlink -s` and `-e` (counters by the name nvidia-smi prints, whole numbers only)."""
    links: Links = {}
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


def all_inactive(status: str) -> List[int]:
    """The GPUs under whose header `nvidia-smi nvlink -s` says every link is inactive."""
    gpus, gpu = [], None
    for line in status.splitlines():
        head = _GPU_HEAD.match(line)
        if head:
            gpu = int(head.group(1))
        elif gpu is not None and _ALL_INACTIVE.search(line) and gpu not in gpus:
            gpus.append(gpu)
    return gpus


def nvlink_check(
    status_rc: Optional[int],
    status: str,
    errors_rc: Optional[int],
    errors: str,
    expected: Optional[bool] = None,
    profile: str = "",
) -> Check:
    """Down links and link recoveries that fail (see the module docstring) fail with reset-gpu; replay, CRC
    and successful recovery counts are shown.

    `expected` is the instance profile's word on NVLink (profile_data `nvlink`, `profile` its name): no
    listed link is then a fact to judge, where without it (None) a node without NVLink is not told apart
    from a tool that said nothing."""
    if status_rc is None or status_rc != 0:
        why = status if status_rc is None else "nvidia-smi nvlink -s exited %d" % status_rc
        return check("gpu-nvlink", "unknown", why, [ev(SOURCE, status[:200])])
    links = parse_nvlink(status, errors if errors_rc == 0 else "")
    if expected is False:
        return _nvlink_none_expected(status, links, profile)
    dead = all_inactive(status)
    if dead:
        # nvidia-smi says the GPU has NVLink and not one link is up; a GPU without NVLink lists nothing
        shown = "GPU %s: every link inactive (nvidia-smi: all links are inactive)" % ", ".join(map(str, dead))
        lines = [line.strip() for line in status.splitlines() if _ALL_INACTIVE.search(line)]
        return check("gpu-nvlink", "fail", shown, [ev(SOURCE, line) for line in lines[:16]], LINK_REMEDY)
    stated = {gpu for gpu, per in links.items() if any("state" in entry for entry in per.values())}
    if not stated:
        said = "nvidia-smi nvlink -s " + ("printed nothing" if not status.strip() else "lists no link")
        if expected:
            # fail, not unknown: nvidia-smi answered (exit 0) about GPUs whose NVLink is a documented fact of
            # the instance type, and listed none. That is the driver's own word that the links are gone (a GPU
            # off its NVSwitch, NVLink disabled), not the absence of an answer; intra-node traffic would fall
            # back to PCIe. A tool that prints nothing where links exist is itself a fault worth draining for.
            why = "%s: links expected (the %s profile's GPUs are NVLink-connected), none seen"
            evidence = [ev(SOURCE, status[:200] or "(no output)")]
            return check("gpu-nvlink", "fail", why % (said, profile), evidence, LINK_REMEDY)
        if not status.strip():  # a node without NVLink is not told apart from a tool that said nothing
            return check(
                "gpu-nvlink", "unknown", "nvidia-smi nvlink -s printed nothing", [ev(SOURCE, "(no output)")]
            )
        return check(
            "gpu-nvlink", "unknown", "no link lines in nvidia-smi nvlink -s", [ev(SOURCE, status[:200])]
        )
    return _judge_links(status, links, errors_rc, errors, expected, profile)


def _judge_links(
    status: str, links: Links, errors_rc: Optional[int], errors: str, expected: Optional[bool], profile: str
) -> Check:
    heads = sorted(int(m.group(1)) for m in map(_GPU_HEAD.match, status.splitlines()) if m)
    stated = {gpu for gpu, per in links.items() if any("state" in entry for entry in per.values())}
    bare = [gpu for gpu in heads if gpu not in stated]
    down: List[str] = []
    failed: List[str] = []
    odd: List[str] = []
    uncounted: List[str] = []
    counted: Dict[str, int] = {}
    for gpu, per in sorted(links.items()):
        for link, entry in sorted(per.items()):
            name, state = "GPU %d link %d" % (gpu, link), entry.get("state", "")
            if "inactive" in state.lower():
                down.append(name)
            elif gpu in bare:  # named once, as a GPU that lists no link
                pass
            elif "GB/s" not in state:  # neither a speed nor <inactive>: not a state this reads
                odd.append("%s: %s" % (name, state or "not in nvidia-smi nvlink -s"))
            elif RECOVERY not in entry and RECOVERY_FAILED not in entry:
                uncounted.append(name)
            if entry.get(RECOVERY):
                failed.append("%s: %d recoveries" % (name, entry[RECOVERY]))
            if entry.get(RECOVERY_FAILED):
                failed.append("%s: %d failed link recoveries" % (name, entry[RECOVERY_FAILED]))
            for counter in SHOWN:
                if counter in entry:
                    counted[counter] = counted.get(counter, 0) + entry[counter]
    total = sum(len(per) for per in links.values())
    evidence = [ev(SOURCE, text) for text in (down + failed + odd)[:16]]
    if down:
        shown = "%d of %d links down: %s" % (len(down), total, ", ".join(down[:4]))
        return check("gpu-nvlink", "fail", shown, evidence, LINK_REMEDY)
    if bare and expected:  # the profile's GPUs all have NVLink: one listing no link lost it
        shown = "GPU %s list no link: links expected (the %s profile's GPUs are NVLink-connected)"
        return check(
            "gpu-nvlink", "fail", shown % (", ".join(map(str, bare)), profile), evidence, LINK_REMEDY
        )
    if failed:
        return check(
            "gpu-nvlink", "fail", "links retrained: %s" % ", ".join(failed[:4]), evidence, LINK_REMEDY
        )
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
    shown = ", ".join("%s=%d" % (k, v) for k, v in sorted(counted.items()))
    return check("gpu-nvlink", "pass", "%d links up, no recovery failed (%s)" % (total, shown))


def _nvlink_none_expected(status: str, links: Links, profile: str) -> Check:
    """The profile says its GPUs have no NVLink: no output, GPU headers without links, or nvidia-smi's word
    that every link is inactive, is that fact; a listed link contradicts the profile (unknown, shown); any
    other text is not read (unknown)."""
    listed = ["GPU %d link %d" % (gpu, link) for gpu, per in sorted(links.items()) for link in sorted(per)]
    if listed:
        why = "the %s profile says its GPUs have no NVLink, but links are listed: %s" % (profile, listed[0])
        more = " (+%d more)" % (len(listed) - 1) if len(listed) > 1 else ""
        return check("gpu-nvlink", "unknown", why + more, [ev(SOURCE, status[:200])])
    lines = [line.strip() for line in status.splitlines() if line.strip()]
    unread = [line for line in lines if not _GPU_HEAD.match(line) and not _ALL_INACTIVE.search(line)]
    if unread:
        why = "nvidia-smi nvlink -s printed what this does not read: %s" % unread[0][:120]
        return check("gpu-nvlink", "unknown", why, [ev(SOURCE, status[:200])])
    heads = [line for line in lines if _GPU_HEAD.match(line)]
    said = (
        "%d GPU(s) listed, none with a link up" % len(heads)
        if lines
        else "nvidia-smi nvlink -s printed nothing"
    )
    why = "no NVLink, as the %s profile says (its GPUs have none): %s" % (profile, said)
    return check("gpu-nvlink", "pass", why, [ev(SOURCE, status[:200] or "(no output)")])
