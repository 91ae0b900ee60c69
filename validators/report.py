"""The validator report (JSON, the contract) and its renderings: JUnit XML and Markdown.

Why here, stdlib only: the report is made inside the image on the cluster; CI, release
promotion and the host-side plots read the JSON (docs/validators.md documents each field;
docs/architecture.md "validator report" lists the stable top-level keys).
"""

import xml.etree.ElementTree as ET
from typing import List, Optional

from validators.bandwidth import judge
from validators.facts import Facts
from validators.profiles import get_profile
from validators.verdict import decide, host_table, summary_values

SCHEMA = "efa-image-build/report/v1"  # parse's and run's reports alike


def build_report(
    facts: Facts,
    tests: List[dict],
    inputs: List[dict],
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
) -> dict:
    """Assemble the report dict from folded facts and nccl-tests objects."""
    facts.finalize()
    with facts.reading():
        return _build(facts, tests, inputs, instance_type, nodes)


def _build(
    facts: Facts, tests: List[dict], inputs: List[dict], instance_type: Optional[str], nodes: Optional[int]
) -> dict:
    with_rows = [t for t in tests if t.get("rows")]
    nccl_tests = (with_rows or tests or [None])[0]
    decided = decide(facts, nccl_tests, instance_type, nodes, get_profile, judge)
    if len(tests) > 1:
        decided["findings"].append(
            {
                "id": "several-nccl-tests-runs",
                "severity": "info",
                "title": "more than one nccl-tests result",
                "message": "%d nccl-tests results; the first is reported and judged" % len(tests),
                "evidence": [],
                "remedy": "Give one run per invocation to have each judged.",
                "source": "validators/report.py",
            }
        )
    summary = summary_values(facts)
    printed = any(p.nccl_versions for p in facts.procs.values()) or facts.headless_versions
    if not printed and nccl_tests is not None and nccl_tests.get("nccl_version"):
        # no NCCL version line: nccl-tests' header names the library it ran with (nccl-library=22902)
        summary["nccl_version"] = nccl_tests["nccl_version"]
    world, seen = facts.coverage()
    ranks = [r.to_json(p) for p, r in facts.all_ranks()]
    hosts = _hosts(facts)
    nnodes = sorted(facts.nnodes)
    report = {
        "schema": SCHEMA,
        "verdict": decided["verdict"],
        "efa": decided["efa"],
        "gdr": decided["gdr"],
        "network": summary["network"],
        "nccl_version": summary["nccl_version"],
        "cuda_version": summary["cuda_version"],
        "cuda_driver_version": summary["cuda_driver_version"],
        "plugin": summary["plugin"],
        "libfabric_version": summary["libfabric_version"],
        "platform": summary["platform"],
        "provider": summary["provider"],
        "fabric": summary["fabric"],
        "nics": summary["nics"],
        "nranks": world,
        "ranks_seen": seen if world is not None else len(ranks),
        "nodes_seen": len(hosts),
        "nnodes_reported": nnodes[-1] if nnodes else None,
        "ranks": ranks,
        "hosts": hosts,
        "nccl_tests": nccl_tests,
        "checks": decided["checks"],
        "findings": decided["findings"],
        "instance_type": instance_type,
        "profile": decided["profile"],
        "nodes": nodes,
        "inputs": inputs,
        "counts": {
            k: facts.counts.get(k, 0)
            for k in ("warn", "error", "watchdog", "channel_gdr", "channel_nogdr", "channel_unclear")
        },
    }
    return report


def _hosts(facts: Facts) -> List[dict]:
    table = host_table(facts)
    by_host = {}  # type: dict  # host -> its processes, grouped once: linear in processes
    for p in facts.procs.values():
        by_host.setdefault(p.host, []).append(p)
    out = []
    for host in sorted(table):
        procs = by_host.get(host, [])
        ranks = [r for p in procs for r in p.ranks.values()]
        vals = table[host]
        entry = {"host": host, "processes": len(procs), "ranks": len(ranks)}
        for name in (
            "nccl_version",
            "cuda_version",
            "plugin_version",
            "libfabric_version",
            "provider",
            "network",
        ):
            entry[name] = _one(vals[name])
        nics = sorted({n for p in procs for n in p.nics})
        entry["nics"] = nics[0] if len(nics) == 1 else (nics or None)
        platforms = sorted({p.platform() for p in procs if p.platform()})
        entry["platform"] = _one(platforms)
        entry["net_channels"] = sum(r.net for r in ranks)
        entry["gdr_channels"] = sum(r.net_gdr for r in ranks)
        entry["non_gdr_channels"] = sum(r.net_nogdr for r in ranks)
        effs = [p.efa_for(r) for p in procs for r in p.ranks.values() if r.net] or [None]
        bad = [why for why in (p.counter_efa() for p in procs) if why]
        entry["efa"] = False if bad or False in effs else (True if all(e is True for e in effs) else None)
        gdrs = [r.gdr() for r in ranks if r.net] or [None]
        if any(p.gdr_disabled for p in procs) or False in gdrs:
            entry["gdr"] = False
        else:
            entry["gdr"] = True if all(g is True for g in gdrs) else None
        out.append(entry)
    return out


def _one(values):
    values = sorted(values)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


# --------------------------------------------------------------------------- JUnit
def to_junit(report: dict) -> str:
    """One testcase per check; fail -> <failure>, unknown -> <error> (unknown never passes)."""
    checks = report.get("checks", [])
    suite = ET.Element(
        "testsuite",
        {
            "name": "validators.parse",
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
        case = ET.SubElement(suite, "testcase", {"classname": "validators.parse", "name": c["name"]})
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
    lines = ["## NCCL/EFA validation: **{}**".format(_ICON.get(report["verdict"], report["verdict"])), ""]
    plugin = report.get("plugin") or {}
    facts = [
        ("EFA", _s(report.get("efa"))),
        ("GPUDirect RDMA", _s(report.get("gdr"))),
        ("network", _s(report.get("network"))),
        ("provider", _s(report.get("provider"))),
        ("NICs", _s(report.get("nics"))),
        ("NCCL", _s(report.get("nccl_version"))),
        ("aws-ofi-nccl", _s(plugin.get("version"))),
        ("libfabric", _s(report.get("libfabric_version"))),
        ("ranks seen / world", "{} / {}".format(report.get("ranks_seen"), _s(report.get("nranks")))),
        ("hosts", str(len(report.get("hosts") or []))),
    ]
    nt = report.get("nccl_tests")
    if nt:
        facts.append(("collective", _s(nt.get("collective"))))
        facts.append(
            (
                "busbw plateau",
                "{} GB/s @ {} B".format(_s(nt.get("plateau_busbw")), _s(nt.get("plateau_size"))),
            )
        )
        facts.append(("avg busbw", "{} GB/s".format(_s(nt.get("avg_busbw")))))
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
            for e in (f.get("evidence") or [])[:2]:
                lines.append("  - `{}:{}` `{}`".format(e.get("file"), e.get("line"), _code(e.get("text"))))
            if f.get("remedy"):
                lines.append("  - remedy: {}".format(_md(f["remedy"])))
    return "\n".join(lines) + "\n"


def _md(v) -> str:
    return str(v if v is not None else "").replace("|", "\\|").replace("\n", " ")[:300]


def _code(v) -> str:
    return str(v or "").replace("`", "'")[:200]


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
        if nt.get("wrong") is not None:
            out.append("wrong={}".format(nt["wrong"]))
    return out


def _num(v) -> str:
    return (f"{v:.2f}") if isinstance(v, float) else str(v)
