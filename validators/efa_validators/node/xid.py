"""Xid lines of the kernel log, judged by NVIDIA's Xid catalog (xid_catalog.json beside this file).

A line reads `NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, ...` (the driver's krcReportXid,
NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c). Each code's class comes from the
catalog's "Resolution Bucket (Immediate Action)" (the file records the source, its date and the reason for
every code whose bucket is a workflow): "pass" (IGNORE, informational; RESTART_APP, the application's, shown)
or one of REMEDIES. Two codes are read from their text: Xid 154 names the GPU's new recovery action ("GPU
recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", src/nvidia/src/kernel/gpu/gpu.c), judged
by that action; the NVLink5 Xids 144-150 print `<unit> Fatal|Nonfatal XC0 i0 Link NN (...)`, judged by that
word (the catalog's decode table resolves Fatal rows to a GPU reset, Nonfatal ones to IGNORE or to an Xid 154
of their own). A code the catalog does not list is unknown, never pass.

Stale faults: an Xid that a later driver load or recovery cleared does not count. Decided by position in the
log (a log is in the order the kernel printed it), from what the driver prints:
- `NVRM: loading NVIDIA UNIX ... Kernel Module <version>`: nvidia.ko's module init, printed once every GPU was
  probed (kernel-open/nvidia/nv.c `"NVRM: loading %s\\n", pNVRM_ID`; the ID is "NVIDIA UNIX [Open Kernel
  Module for] <arch> ... <version>", utils.mk GENERATE_NVIDSTRING; read at open-gpu-kernel-modules df1c9a3).
  Every Xid printed before the last such line was raised by a driver instance that is gone: it is stale on
  every GPU.
- Xid 154 naming the new action None, for a PCI address: the driver says that GPU needs no recovery any more
  (NVIDIA's A100 memory error management guide, "Error Recovery and Response Flags": None, the GPU "can be
  immediately used again"). Every earlier Xid on the same address is stale.

- `efa-image-build: gpu-reset PCI:<address> ok`, for a PCI address: the line the documented reset step writes
  into the kernel log once `nvidia-smi -r -i <address>` succeeded (docs/preflight.md, "After a GPU reset":
  `... && echo "efa-image-build: gpu-reset PCI:0000:cb:00 ok" > /dev/kmsg`). A GPU reset prints no line of
  its own at the driver's default level (its FLR notes are NV_DBG_INFO, kernel-open/nvidia/nv.c "Trigger
  FLR"; after a reset the recovery action starts from unknown, so no Xid 154 is printed either, gpu.c), so
  the reset must say so itself, as NVIDIA's own health monitor does (NVIDIA/NVSentinel pull request 1475: its
  reset script logs a tagged "GPU reset executed" line that clears that GPU's Xid events). Only root writes
  /dev/kmsg. Every earlier Xid on the same GPU (domain, bus and device compared as numbers: the Xid line's
  `0000:cb:00` and nvidia-smi's `00000000:CB:00.0` are one GPU) is stale.

Nothing else clears: the `NVRM: GPU at PCI:...: GPU-<uuid>` line before the first Xid of each adapter start
(kernel_rc.c _krcLogUuidOnce) also follows a plain teardown without a reset (the last client closing without
persistence mode), so it proves no reset. An Xid after the last clear counts, whatever came before it.
"""

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from efa_validators.node.verdict import REMEDIES, Check, check, ev

CATALOG_FILE = Path(__file__).with_name("xid_catalog.json")


def load_catalog(path: Path = CATALOG_FILE) -> Dict[str, Any]:
    with open(str(path), encoding="utf-8") as f:
        return json.load(f)


CATALOG = load_catalog()
# code -> the catalog's entry: mnemonic, meaning, immediate (NVIDIA's bucket), class, why, read
XID_CATALOG: Dict[int, Dict[str, Any]] = {int(code): entry for code, entry in CATALOG["xids"].items()}

# a driver load or an Xid, with the whole line (matched in place: a log of many MB is not split into lines)
_EVENT = re.compile(
    r"^[^\n]*?(?:NVRM: (?:(?P<load>loading NVIDIA UNIX [^\n]*Kernel Module)"
    r"|Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+)\): (?P<code>\d+))"
    r"|(?P<reset>efa-image-build: gpu-reset (?:PCI:)?(?P<reset_bus>[0-9A-Fa-f:.]+) ok(?![^\s])))[^\n]*$",
    re.M,
)
RESET_LINE = "efa-image-build: gpu-reset PCI:%s ok"  # what the reset step writes to /dev/kmsg
_XID = re.compile(r"^.*?NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+).*$", re.M)
# the old action is short (`0x1 (GPU Reset Required)`): bounded, as `.*?` searched from every repeat of the
# phrase to the line's end (quadratic: 1.1 s a 58 KB line)
_NEW_ACTION = re.compile(r"recovery action changed from .{0,120}? to 0x[0-9A-Fa-f]{1,16} \(([^)]{0,120})\)")
_NVLINK5_SEVERITY = re.compile(r"\): \d+, (?:pid=[^,]*, name=[^,]*, )?\S+ (Fatal|Nonfatal) ")
# a kernel message: a line with text that is not one of journalctl's own notes ("-- No entries --")
_MESSAGE = re.compile(r"^(?!-- .* --\s*$)[ \t]*\S.*$", re.M)


def parse_xids(text: str) -> List[Tuple[int, str, str]]:
    """(code, PCI address, line) of every Xid line of a kernel log."""
    return [(int(m.group(2)), m.group(1).lower(), m.group(0).strip()) for m in _XID.finditer(text)]


def kernel_lines(log: str) -> int:
    """How many kernel messages a log holds: non-blank lines that are not journalctl's own notes."""
    return sum(1 for _ in _MESSAGE.finditer(log))


def xid_class(code: int, line: str) -> Tuple[Optional[str], str]:
    """("pass" or one of REMEDIES, or None for unknown; why) of one Xid line, by the catalog."""
    entry = XID_CATALOG.get(code)
    if entry is None:
        return None, "not in NVIDIA's Xid catalog as this tool holds it"
    if entry.get("read") == "recovery-action":
        said = _NEW_ACTION.search(line)
        if said is None:
            return None, "the line names no new recovery action"
        action = said.group(1).strip()
        cls = CATALOG["recovery_actions"].get(action)
        if cls is None:  # a name this file does not list: its word still says which
            cls = "reboot-node" if "Reboot" in action else "reset-gpu" if "Reset" in action else None
        return cls, "recovery action now %s" % action
    if entry.get("read") == "nvlink5-severity":
        said = _NVLINK5_SEVERITY.search(line)
        if said is None:
            return None, "%s, neither Fatal nor Nonfatal in the line" % entry["meaning"]
        return CATALOG["nvlink5_severity"][said.group(1)], "%s, %s" % (entry["meaning"], said.group(1))
    return entry["class"], entry["meaning"]


def pci_key(address: str) -> Tuple[Any, ...]:
    """(domain, bus, device) as numbers, the function dropped: the Xid line prints `0000:cb:00`, nvidia-smi
    `00000000:CB:00.0`. An address of another shape is compared as its lowercased text."""
    parts = address.lower().split(".")[0].split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    try:
        return tuple(int(p, 16) for p in parts) if len(parts) == 3 else (address.lower(),)
    except ValueError:
        return (address.lower(),)


def current_xids(log: str) -> Tuple[List[Tuple[int, str, str]], List[Tuple[str, str]]]:
    """The Xids no later driver load or recovery cleared, as (code, PCI address, line), in log order; and
    (what went stale, the line that cleared it) per clear that made earlier Xids stale (see the module
    docstring)."""
    pending: List[Tuple[int, str, str]] = []
    cleared: List[Tuple[str, str]] = []
    for m in _EVENT.finditer(log):
        line = m.group(0).strip()
        if m.group("load"):
            if pending:
                cleared.append(("%d Xid(s) before a driver load" % len(pending), line))
            pending = []
            continue
        if m.group("reset"):
            key = pci_key(m.group("reset_bus"))
            stale = [x for x in pending if pci_key(x[1]) == key]
            if stale:
                cleared.append(("%d Xid(s) on %s before its reset" % (len(stale), stale[0][1]), line))
            pending = [x for x in pending if pci_key(x[1]) != key]
            continue
        code, bus = int(m.group("code")), m.group("bus").lower()
        if XID_CATALOG.get(code, {}).get("read") == "recovery-action" and xid_class(code, line)[0] == "pass":
            stale = [x for x in pending if x[1] == bus]
            if stale:
                cleared.append(
                    ("%d Xid(s) on %s before its recovery action went to None" % (len(stale), bus), line)
                )
            pending = [x for x in pending if x[1] != bus]
            continue
        pending.append((code, bus, line))
    return pending, cleared


def most_severe(remedies: List[str]) -> Optional[str]:
    """The most severe of `remedies` by REMEDIES' order (mildest first); None for none."""
    return max(remedies, key=REMEDIES.index) if remedies else None


def _named(code: int, why: str, cls: Optional[str], bus: str) -> str:
    entry = XID_CATALOG.get(code)
    if cls is None:
        return "Xid %d on %s (unknown: %s)" % (code, bus, why)
    if cls == "pass":
        said = "the application's" if entry and entry.get("immediate") == "RESTART_APP" else "informational"
        return "Xid %d (%s, %s)" % (code, why, said)
    return "Xid %d (%s: %s) on %s" % (code, why, cls, bus)


def xid_check(rc: Optional[int], log: str, source: str) -> Check:
    """Xid lines still in force (see the module docstring), judged by the catalog: any fault fails with the
    most severe remedy among them, else an Xid the catalog does not list is unknown, else pass (informational
    and application Xids shown). A kernel log with no message is unknown, never "no Xid": a booted kernel
    always has messages, so an empty one was cleared (dmesg -C) or is hidden from this user (a journal this
    user may not read can leave `journalctl -k -q` with nothing to print, and exit 0)."""
    if rc is None or rc != 0:
        said = log.strip()[:200] or "no output"
        why = "%s: %s" % (source, said) if rc is None else "%s exited %d: %s" % (source, rc, said)
        return check("gpu-xid", "unknown", "kernel log not readable (%s)" % why, [ev(source, log[:200])])
    xids, cleared = current_xids(log)
    judged = [(code, bus, line) + xid_class(code, line) for code, bus, line in xids]
    faults = [j for j in judged if j[3] in REMEDIES]
    unknown = [j for j in judged if j[3] is None]
    stale = ("; stale: " + "; ".join(what for what, _line in cleared[-2:])) if cleared else ""
    stale += " (+%d earlier clears)" % (len(cleared) - 2) if len(cleared) > 2 else ""
    notes = [ev(source, "stale, %s: %s" % (what, line)) for what, line in cleared[-4:]]
    for status, chosen in (("fail", faults), ("unknown", unknown)):
        if chosen:
            # the most severe first: the remedy the check asks for is named before what it covers
            ranked = {
                (-REMEDIES.index(cls) if cls else 0, _named(c, why, cls, bus))
                for c, bus, _l, cls, why in chosen
            }
            shown = [text for _rank, text in sorted(ranked)]
            more = " (+%d more)" % (len(shown) - 4) if len(shown) > 4 else ""
            evidence = [ev(source, line) for _c, _b, line, _cls, _w in chosen[:16]] + notes
            remedy = most_severe([j[3] for j in faults]) if status == "fail" else None
            return check("gpu-xid", status, "; ".join(shown[:4]) + more + stale, evidence, remedy)
    if judged:
        shown = sorted({_named(c, why, cls, bus) for c, bus, _l, cls, why in judged})
        apps = all(XID_CATALOG[c].get("immediate") == "RESTART_APP" for c, _b, _l, _x, _y in judged)
        said = "application faults only, the node is fine" if apps else "no Xid the node must act on"
        why = "%s: %s%s" % (said, ", ".join(shown[:4]), stale)
        return check(
            "gpu-xid", "pass", why, [ev(source, line) for _c, _b, line, _x, _y in judged[:8]] + notes
        )
    lines = kernel_lines(log)
    if not lines:
        return check(
            "gpu-xid",
            "unknown",
            "the kernel log is empty (cleared, or not visible to this user): no Xid proves nothing",
            [ev(source, log.strip()[:200] or "(no output)")],
        )
    return check("gpu-xid", "pass", "no Xid in force in the kernel log" + stale,
                 [ev(source, "%d lines read" % lines)] + notes)  # fmt: skip
