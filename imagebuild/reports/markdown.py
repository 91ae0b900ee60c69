"""The REPLAY mark on Markdown summaries: a report made from a replayed recording says so first.

The Markdown itself is efa_validators.report.formats.to_markdown (one writer, in the image and on the host).
"""

from __future__ import annotations

from typing import Any, Dict

REPLAY_NOTE = (
    "REPLAY: a recorded log replayed by the stand-in (efa_validators.replay); no GPU or EFA device ran"
)


def replayed(report: Dict[str, Any]) -> bool:
    """The report came from a replayed recording (`run.replay`, set by `validators run`; or `replay`)."""
    run = report.get("run")
    return report.get("replay") is True or (isinstance(run, dict) and run.get("replay") is True)


def mark_replay(report: Dict[str, Any], text: str) -> str:
    """Markdown from any writer, with the REPLAY heading first when the report was replayed."""
    if not replayed(report) or text.startswith("## REPLAY"):
        return text
    return f"## {REPLAY_NOTE}\n\n{text}"
