"""The validator report's renderings: JUnit XML (one testcase per check) and Markdown, and the metric lines.

Stdlib only, made inside the image as the JSON is; they read the report dict, never the facts.
"""

import xml.etree.ElementTree as ET
from typing import List

from efa_validators.judge.causes import lead_sentence
from efa_validators.report.contract import REPLAY_NOTE
from efa_validators.report.printable import printable


# --------------------------------------------------------------------------- JUnit
def to_junit(report: dict) -> str:
    """One testcase per check; fail -> <failure>, unknown -> <error> (unknown never passes)."""
    checks = report.get("checks", [])
    suite = ET.Element(
        "testsuite",
        {
            "name": "efa_validators.parse",
            "tests": str(len(checks)),
            "failures": str(sum(1 for c in checks if c["status"] == "fail")),
            "errors": str(sum(1 for c in checks if c["status"] not in ("pass", "fail"))),
            "skipped": "0",
        },
    )
    props = ET.SubElement(suite, "properties")
    for key in ("verdict", "efa", "gdr", "network", "nccl_version", "provider", "nics", "instance_type"):
        ET.SubElement(props, "property", {"name": key, "value": _s(report.get(key))})
    for c in checks:
        case = ET.SubElement(suite, "testcase", {"classname": "efa_validators.parse", "name": c["name"]})
        body = c.get("detail") or ""
        ev = "\n".join(
            "{}:{}: {}".format(e.get("file"), e.get("line"), e.get("text")) for e in c.get("evidence") or []
        )
        if c["status"] == "fail":
            el = ET.SubElement(case, "failure", {"message": body[:500], "type": "fail"})
            el.text = ev or body
        elif c["status"] != "pass":
            el = ET.SubElement(case, "error", {"message": ("unknown: " + body)[:500], "type": "unknown"})
            el.text = ev or body
        elif ev:
            out = ET.SubElement(case, "system-out")
            out.text = body + "\n" + ev
    root = ET.Element("testsuites")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _s(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


# --------------------------------------------------------------------------- Markdown
_ICON = {"pass": "PASS", "fail": "FAIL", "unknown": "UNKNOWN"}


def to_markdown(report: dict) -> str:
    """A short summary for a CI step summary: verdict, key facts, checks, findings."""
    head = "## NCCL/EFA validation: **{}**".format(_ICON.get(report["verdict"], report["verdict"]))
    if report.get("replay"):  # before the root cause: what follows is a recording's, not this cluster's
        head += f" ({REPLAY_NOTE})"
    lines = [head, ""]
    lead = lead_sentence(report.get("findings") or [])
    if lead:
        lines += [f"**{_md_all(lead[:1].upper() + lead[1:])}**", ""]
    plugin = report.get("plugin") or {}
    facts = [
        ("EFA", _human(report.get("efa"))),
        ("GPUDirect RDMA", _human(report.get("gdr"))),
        ("network", _human(report.get("network"))),
        ("provider", _human(report.get("provider"))),
        ("NICs", _human(report.get("nics"))),
        ("NCCL", _human(report.get("nccl_version"))),
        ("aws-ofi-nccl", _human(plugin.get("version"))),
        ("libfabric", _human(report.get("libfabric_version"))),
        ("ranks seen / world", "{} / {}".format(report.get("ranks_seen"), _human(report.get("nranks")))),
        ("hosts", str(len(report.get("hosts") or []))),
    ]
    nt = report.get("nccl_tests")
    if nt:
        facts.append(("collective", _human(nt.get("collective"))))
        facts.append(
            (
                "busbw plateau",
                "{} GB/s @ {} B".format(_human(nt.get("plateau_busbw")), _human(nt.get("plateau_size"))),
            )
        )
        facts.append(("avg busbw", "{} GB/s".format(_human(nt.get("avg_busbw")))))
    lines += ["| fact | value |", "|---|---|"]
    lines += [f"| {k} | {_md(v)} |" for k, v in facts]
    lines += ["", "| check | status | detail |", "|---|---|---|"]
    for c in report.get("checks", []):
        lines.append(
            "| {} | {} | {} |".format(c["name"], _ICON.get(c["status"], c["status"]), _md(c.get("detail")))
        )
    findings = report.get("findings") or []
    if findings:
        lines += ["", "### Findings", ""]
        for f in findings:
            lines.append(
                "- **{}** ({}): {}".format(f["id"], f["severity"], _md(f.get("message") or f.get("title")))
            )
            if f.get("caused_by"):
                lines.append("  - caused by: **{}**".format(f["caused_by"]))
            for e in (f.get("evidence") or [])[:2]:
                lines.append("  - `{}:{}` `{}`".format(e.get("file"), e.get("line"), _code(e.get("text"))))
            if f.get("remedy"):
                lines.append("  - remedy: {}".format(_md(f["remedy"])))
    return "\n".join(lines) + "\n"


def _human(v) -> str:
    """A fact for people: "unknown" where the log did not show it (JSON keeps null, metric lines too)."""
    return "unknown" if v is None else _s(v)


def _md(v) -> str:
    return _md_all(v)[:300]


def _md_all(v) -> str:
    """Text outside code spans: a value a log printed (an env-* finding's NAME=value) must not become HTML or
    a link in a CI summary (`<img src=...>`, `[approve](https://...)`): `<` as `&lt;`, brackets escaped."""
    text = str(v if v is not None else "").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")
    return printable(text.replace("[", "\\[").replace("]", "\\]"))


def _code(v) -> str:
    return printable(str(v or "").replace("`", "'"))[:200]


# --------------------------------------------------------------------------- metric lines
def metric_lines(report: dict) -> List[str]:
    """Lines a SageMaker metric regex can capture, e.g. `busbw_plateau=437.79 GB/s`."""
    out = [
        "verdict={}".format(report["verdict"]),
        "efa={} gdr={}".format(_s(report.get("efa")), _s(report.get("gdr"))),
    ]
    if report.get("nics") is not None:
        out.append("nics={}".format(report["nics"]))
    nt = report.get("nccl_tests")
    if nt:
        if nt.get("plateau_busbw") is not None:
            out.append("busbw_plateau={} GB/s".format(_num(nt["plateau_busbw"])))
        if nt.get("avg_busbw") is not None:
            out.append("busbw_avg={} GB/s".format(_num(nt["avg_busbw"])))
        counts = [
            t["wrong"] for t in [nt] + list(nt.get("additional_tables") or []) if t.get("wrong") is not None
        ]
        if counts:  # every result judged (the inputs' and each log's further tables), as wrong-zero judges
            out.append(f"wrong={sum(counts)}")
    return out


def _num(v) -> str:
    return (f"{v:.2f}") if isinstance(v, float) else str(v)
