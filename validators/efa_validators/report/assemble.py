"""The validator report (JSON, the contract) assembled from the folded facts and the judge's verdict.

Why here, stdlib only: the report is made inside the image on the cluster; CI, release
promotion and the host-side plots read the JSON (docs/validators.md documents each field;
docs/architecture.md "validator report" lists the stable top-level keys).
"""

from typing import List, Optional

from efa_validators.judge.bandwidth import judge
from efa_validators.judge.profiles import get_profile
from efa_validators.judge.verdict import decide, host_table, summary_values
from efa_validators.parse.facts import Facts
from efa_validators.report.contract import SCHEMA


def build_report(
    facts: Facts,
    tests: List[dict],
    inputs: List[dict],
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
    fabric: Optional[str] = None,
    replay: bool = False,
) -> dict:
    """Assemble the report dict from folded facts and nccl-tests objects (`fabric`: a declared fabric, see
    verdict.judge_provider; `replay`: the log holds the replay stand-in's mark)."""
    facts.finalize()
    with facts.reading():
        return _build(facts, tests, inputs, instance_type, nodes, fabric, replay)


def _build(
    facts: Facts,
    tests: List[dict],
    inputs: List[dict],
    instance_type: Optional[str],
    nodes: Optional[int],
    fabric: Optional[str] = None,
    replay: bool = False,
) -> dict:
    nccl_tests = judged_tests(tests)
    decided = decide(
        facts, nccl_tests, instance_type, nodes, get_profile, judge, fabric=fabric, replay=replay
    )
    if len(tests) > 1:
        decided["findings"].append(
            {
                "id": "several-nccl-tests-runs",
                "severity": "info",
                "title": "more than one nccl-tests result",
                "message": "%d nccl-tests results: bandwidth is judged on the first with rows; the data "
                "checks (#wrong, out of bounds) of every one are judged" % len(tests),
                "evidence": [],
                "remedy": "Give one run per invocation to have each one's bandwidth judged.",
                "source": "efa_validators/report/assemble.py",
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


def judged_tests(tests: List[dict]) -> Optional[dict]:
    """One nccl-tests object for the judge: the first result with rows, every other result (each input's,
    and the further tables of each) listed under its `additional_tables`.

    Why: the judge merges the data checks of every additional table (bandwidth.judge), so corruption in
    any input fails the verdict; `parse A B` once judged only A's result and passed over B's wrong values.
    The objects read are not changed (a copy of the first is returned)."""
    if not tests:
        return None
    with_rows = [t for t in tests if t.get("rows")]
    main = (with_rows or tests)[0]
    extra = list(main.get("additional_tables") or [])
    for other in tests:
        if other is not main:
            extra.append(dict(other, additional_tables=[]))
            extra.extend(other.get("additional_tables") or [])
    return dict(main, additional_tables=extra)


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
        gdrs = [r.gdr(p.gdr_read0) for p in procs for r in p.ranks.values() if r.net] or [None]
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
