"""The shape of one GPU check (nodecheck.check's), shared by gpuhealth and smi: a leaf module, so the readers
import it without importing each other. Not imported from nodecheck: nodecheck imports the GPU readers, and is
itself copied alone into images under check, so it keeps its own copy (and REMEDIES beside it)."""

from typing import Any, Dict, List, Optional

Check = Dict[str, Any]
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
