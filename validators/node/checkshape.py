"""The shape of one node-check check, for the GPU health modules (gpuhealth, xid, nvlink).

nodecheck.check's shape. Not imported from there: nodecheck imports gpuhealth, and is itself copied alone into
images under check, so it cannot lean on a shared one; the GPU modules share this one instead of each other (a
module of its own, so xid and nvlink need not import gpuhealth, which imports them).
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Check = Dict[str, Any]
Tool = Callable[[Sequence[str]], Tuple[Optional[int], str]]

REMEDIES = ("configure", "reset-gpu", "reboot-node", "replace-hardware")  # nodecheck.REMEDIES, mildest first


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


def ev(source: str, text: str) -> Dict[str, Any]:
    return {"file": source, "line": None, "text": text[:500]}


def most_severe(remedies: Sequence[str]) -> Optional[str]:
    """The most severe of `remedies` by REMEDIES' order (mildest first); None for none."""
    return max(remedies, key=REMEDIES.index) if remedies else None
