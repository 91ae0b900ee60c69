"""A compact Markdown summary of a validator report, small enough for a CI step summary.

Used when the validators package offers no Markdown writer of its own (validators.report); the report
command prefers that one so the two never drift apart.
"""

from __future__ import annotations

from typing import Any, Dict, List

from imagebuild.reports.plot import human_size

_ICON = {"pass": "PASS", "fail": "FAIL", "unknown": "UNKNOWN"}
_FACTS = (
    ("efa", "EFA in use"),
    ("gdr", "GPUDirect RDMA"),
    ("network", "NCCL network"),
    ("nccl_version", "NCCL"),
    ("plugin", "aws-ofi-nccl"),
    ("libfabric_version", "libfabric"),
    ("provider", "provider"),
    ("nics", "NICs"),
    ("instance_type", "instance type"),
    ("nodes", "nodes"),
)


def _cell(value: Any, limit: int = 160) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        value = value.get("version") or value.get("name")
        return _cell(value, limit)
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _num(value: Any, unit: str = "") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return "unknown"
    return f"{value:g}{unit}"


def _objects(value: Any) -> List[Dict[str, Any]]:
    """The dicts of a list; anything else is nothing (a summary must not crash on an odd report)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


REPLAY_NOTE = "REPLAY: a recorded log replayed by the stand-in (validators.replay); no GPU or EFA device ran"


def replayed(report: Dict[str, Any]) -> bool:
    """The report came from a replayed recording (`run.replay`, set by `validators run`; or `replay`)."""
    run = report.get("run")
    return report.get("replay") is True or (isinstance(run, dict) and run.get("replay") is True)


def mark_replay(report: Dict[str, Any], text: str) -> str:
    """Markdown from any writer, with the REPLAY heading first when the report was replayed."""
    if not replayed(report) or text.startswith("## REPLAY"):
        return text
    return f"## {REPLAY_NOTE}\n\n{text}"


def render(report: Dict[str, Any]) -> str:
    """Markdown text for one report (a dict as `python -m validators parse --json` writes it)."""
    verdict = report.get("verdict")
    out: List[str] = [f"### NCCL / EFA pre-flight: {_ICON.get(verdict, 'UNKNOWN')}", ""]
    if replayed(report):
        out = [f"## {REPLAY_NOTE}", ""] + out
    out += ["| fact | value |", "|---|---|"]
    out += [f"| {label} | {_cell(report.get(key))} |" for key, label in _FACTS if key in report]
    checks = _objects(report.get("checks"))
    if checks:
        out += ["", "| check | status | detail |", "|---|---|---|"]
        for c in checks:
            status = _ICON.get(c.get("status"), "UNKNOWN")
            out.append(f"| {_cell(c.get('name'))} | {status} | {_cell(c.get('detail'), 600)} |")
    nt = report.get("nccl_tests")
    if isinstance(nt, dict):
        size = nt.get("plateau_size")
        out += [
            "",
            f"**nccl-tests** {_cell(nt.get('collective'))}: plateau busbw "
            f"{_num(nt.get('plateau_busbw'), ' GB/s')} at "
            f"{human_size(size) if isinstance(size, int) else 'unknown'}; "
            f"avg busbw {_num(nt.get('avg_busbw'), ' GB/s')} (all sizes); "
            f"#wrong {_num(nt.get('wrong'))}; out-of-bounds {_num(nt.get('out_of_bounds'))}"
            + ("; **table truncated**" if nt.get("truncated") else ""),
        ]
        rows = [r for r in _objects(nt.get("rows")) if isinstance(r.get("size"), int)]
        big = [r for r in rows if r["size"] >= 1 << 20][-8:]
        if big:
            out += ["", "| size | busbw out-of-place | busbw in-place | #wrong |", "|---:|---:|---:|---:|"]
            for r in big:
                oop, inp = (
                    c if isinstance(c, dict) else {} for c in (r.get("out_of_place"), r.get("in_place"))
                )
                wrong = [
                    w for w in (oop.get("wrong"), inp.get("wrong")) if isinstance(w, int) and w is not True
                ]
                out.append(
                    f"| {human_size(r['size'])} | {_num(oop.get('busbw'))} | {_num(inp.get('busbw'))} | "
                    f"{sum(wrong) if wrong else 'n/a'} |"
                )
    findings = _objects(report.get("findings"))
    if findings:
        out += ["", "**Findings**", ""]
        for f in findings:
            line = f"- **{_cell(f.get('severity'))}** `{_cell(f.get('id'))}`: {_cell(f.get('message'), 400)}"
            ev = _objects(f.get("evidence"))[:1]
            if ev:
                line += f" (`{_cell(ev[0].get('file'))}:{_cell(ev[0].get('line'))}`)"
            if f.get("remedy"):
                line += f". Remedy: {_cell(f.get('remedy'), 400)}"
            out.append(line)
    return "\n".join(out) + "\n"
