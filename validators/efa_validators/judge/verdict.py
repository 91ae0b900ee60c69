"""Facts -> checks, findings and one verdict that never passes on absence.

Why this shape: every consumer (CI gate, release promotion, pre-flight before a big job)
needs one answer it can trust, and the lines that justify it. `efa`/`gdr` are tri-state:
True only on positive evidence on every rank and NET channel seen, False on positive
counter-evidence, None otherwise; a check that is None is `unknown`, and the verdict is
`pass` only when every check passed.
"""

from typing import Callable, Dict, List, Optional

from efa_validators.judge import causes, signatures
from efa_validators.judge.kept import not_kept_finding
from efa_validators.judge.shortlist import few
from efa_validators.judge.world import demote, outside_world, world_check
from efa_validators.parse.facts import Facts
from efa_validators.parse.ranks import is_libfabric_net

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"

# facts compared between hosts: (report name, how to read it from a Proc)
HOST_FACTS = (
    ("nccl_version", lambda p: p.nccl_versions),
    ("cuda_version", lambda p: p.cuda_versions),
    ("plugin_version", lambda p: p.plugin_versions),
    ("libfabric_version", lambda p: p.libfabric),
    ("provider", lambda p: p.providers),
    ("nics", lambda p: {str(n) for n in p.nics}),
    ("network", lambda p: p.networks()),
)


def _check(name: str, status: str, detail: str, evidence: List[dict]) -> dict:
    return {"name": name, "status": status, "detail": detail, "evidence": evidence[:5]}


def _tri(value: Optional[bool]) -> str:
    return PASS if value is True else FAIL if value is False else UNKNOWN


def host_table(facts: Facts) -> Dict[str, Dict[str, set]]:
    """{host: {fact: set of values}} from every process seen on that host (read, never changed: it is
    computed once per report, `Facts.reading`)."""
    return facts.memo("host_table", lambda: _host_table(facts))


def _host_table(facts: Facts) -> Dict[str, Dict[str, set]]:
    out = {}  # type: Dict[str, Dict[str, set]]
    for p in facts.procs.values():
        h = out.setdefault(p.host, {name: set() for name, _ in HOST_FACTS})
        for name, get in HOST_FACTS:
            h[name].update(get(p))
    return out


def host_differences(facts: Facts) -> List[dict]:
    """One finding per fact whose value differs between hosts, naming the hosts on each side."""
    table = host_table(facts)
    findings = []
    for name, _ in HOST_FACTS:
        groups = {}  # type: Dict[Tuple[str, ...], List[str]]
        for host, vals in table.items():
            if vals[name]:
                groups.setdefault(tuple(sorted(vals[name])), []).append(host)
        if len(groups) < 2:
            continue
        sides = [
            {"value": "/".join(k), "hosts": sorted(v)}
            for k, v in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ]
        message = "{} differs between hosts: {}".format(
            name,
            "; ".join("{} on {}".format(s["value"], few(s["hosts"], 8)) for s in sides),
        )
        findings.append(
            {
                "id": "hosts-differ",
                "severity": "error",
                "title": f"hosts disagree on {name}",
                "fact": name,
                "groups": sides,
                "message": message,
                "evidence": _evidence_for_hosts(facts, name, sides),
                "remedy": "Run the same image (same digest) on every node; check the nodes' AMI, driver and "
                "EFA software are the same.",
                "source": "efa_validators/judge/verdict.py host comparison",
            }
        )
    return findings


def _evidence_for_hosts(facts: Facts, name: str, sides: List[dict]) -> List[dict]:
    kind = {
        "nccl_version": "nccl_version",
        "cuda_version": "nccl_version",
        "plugin_version": "plugin_init",
        "libfabric_version": "libfabric_version",
        "provider": "provider",
        "nics": "provider",
        "network": "network",
    }[name]
    out = []
    for side in sides:
        for ev in facts.evidence_of(kind):
            if any(h in (ev.get("text") or "") for h in side["hosts"]):
                out.append(ev)
                break
    return out


def decide(
    facts: Facts,
    nccl_tests: Optional[dict] = None,
    instance_type: Optional[str] = None,
    nodes: Optional[int] = None,
    get_profile: Optional[Callable] = None,
    judge: Optional[Callable] = None,
    fabric: Optional[str] = None,
    replay: bool = False,
) -> dict:
    """The verdict part of the report: efa, gdr, checks, findings, verdict (`replay`: the replay stand-in
    printed the log, see world.world_check)."""
    efa, efa_why = demote(*facts.efa_verdict(), facts)
    gdr, gdr_why = demote(facts.gdr_verdict(), facts.gdr_reason(), facts)
    profile = get_profile(instance_type) if (get_profile and instance_type) else None
    checks = []
    efa_ev = facts.evidence_of("provider")[:2] + facts.evidence_of("channel_gdr")[:1]
    if efa is False:
        efa_ev = (
            facts.evidence_of("network_socket")
            + facts.evidence_of("provider_other")
            + facts.evidence_of("plugin_init_failed")
            + facts.evidence_of("channel_other_net")
            + facts.evidence_of("plugin_dep_missing")
            + facts.evidence_of("plugin_load_failed")
            + facts.evidence_of("internal_net")
            + facts.evidence_of("ib_error")
        )
    elif efa is None:
        efa_ev = (
            (outside_world(facts) or ("", []))[1]
            + facts.silent_rank_evidence()
            + facts.evidence_of("channel_unclear")
            + facts.evidence_of("network")[:1]
        )
    checks.append(_check("efa", _tri(efa), efa_why, efa_ev))

    gdr_ev = facts.evidence_of("channel_gdr")[:2]
    if gdr is False:
        gdr_ev = facts.evidence_of("gdr_disabled") + facts.evidence_of("channel_nogdr")
    elif gdr is None:
        gdr_ev = (
            (outside_world(facts) or ("", []))[1]
            + facts.silent_rank_evidence()
            + facts.evidence_of("channel_unclear")
        )
        if not gdr_ev:
            gdr_ev = facts.evidence_of("network_socket") + facts.evidence_of("plugin_load_failed")
    gdr_status = _tri(gdr)
    if gdr is True and facts.gdr_read0_sends():
        # read as the text shows (GDR for receives), but sends through host memory never made a pass before
        # and a new reading must not make one now: fail closed
        gdr_status = UNKNOWN
        gdr_why += "; sends without GPUDirect RDMA are not counted as a pass"
    if profile is not None and not profile.gdr_required and gdr is False:
        gdr_status, gdr_why = PASS, f"{gdr_why} (GPUDirect RDMA not required on {profile.name})"
    checks.append(_check("gdr", gdr_status, gdr_why, gdr_ev))

    world, seen = facts.coverage()
    if world is None:
        checks.append(_check("ranks-seen", UNKNOWN, "no communicator init line: world size unknown", []))
    elif seen >= world:
        checks.append(_check("ranks-seen", PASS, "all %d rank(s) of the job printed their init" % world, []))
    else:
        checks.append(
            _check(
                "ranks-seen",
                UNKNOWN,
                "only %d of %d rank(s) printed NCCL init lines: the others were not seen (give every "
                "rank's log)" % (seen, world),
                facts.evidence_of("comm")[:1],
            )
        )

    consistent, world_findings = world_check(facts, nccl_tests, nodes, replay)
    if consistent is not None:
        checks.append(consistent)

    diffs = host_differences(facts)
    if len(host_table(facts)) >= 2:
        checks.append(
            _check(
                "hosts-consistent",
                FAIL if diffs else PASS,
                "; ".join(d["message"] for d in diffs)
                if diffs
                else "hosts agree on versions, provider, NICs",
                [e for d in diffs for e in d["evidence"]],
            )
        )

    findings = signatures.evaluate(facts, nccl_tests)
    not_kept = not_kept_finding(facts)  # ranks past the cap: never a pass
    if not_kept is not None:
        checks.append(_check("ranks-kept", UNKNOWN, facts.not_kept_reason() or "", []))
        findings.append(not_kept)
    if profile is not None and not profile.gdr_required:
        for f in findings:  # g5/g6e/p5.4xlarge run EFA without GDR by design: no failure there
            if f["id"] == "gdr-disabled":
                f["severity"] = "info"
                f["message"] += f" (by design on {profile.name}: GPUDirect RDMA is not required)"
    judge_provider(facts, findings, profile, fabric)
    findings.extend(diffs)
    findings.extend(world_findings)

    if instance_type:
        if profile is None:
            checks.append(
                _check("instance-profile", UNKNOWN, f"no profile for instance type {instance_type!r}", [])
            )
        else:
            checks.append(_nics_check(facts, profile))
    if judge is not None and (nccl_tests is not None or profile is not None):
        world_ranks = world if world and seen >= world else None
        jchecks, jfindings = judge(nccl_tests, profile, nodes, world_ranks)
        if profile is None:
            # no profile: bandwidth cannot be judged, only the correctness checks are meaningful
            jchecks = [c for c in jchecks if c.get("name") != "busbw-plateau"]
        checks.extend(jchecks)
        have = {f["id"] for f in findings}
        for f in jfindings:
            if f.get("id") == "nccl-tests-wrong-results" and "ll-corruption" in have:
                continue
            findings.append(f)

    findings = causes.order(findings)
    if any(f.get("severity") == "error" for f in findings):
        errors = [f for f in findings if f.get("severity") == "error"]
        checks.append(
            _check(
                "failure-signatures",
                FAIL,
                "; ".join("{}: {}".format(f["id"], f.get("message", "")) for f in errors[:5]),
                [e for f in errors[:3] for e in f.get("evidence", [])[:1]],
            )
        )

    statuses = [c["status"] for c in checks]
    if FAIL in statuses:
        verdict = FAIL
    elif all(s == PASS for s in statuses) and statuses:
        verdict = PASS
    else:
        verdict = UNKNOWN
    return {
        "verdict": verdict,
        "efa": efa,
        "gdr": gdr,
        "checks": checks,
        "findings": findings,
        "profile": profile.to_dict() if profile is not None and hasattr(profile, "to_dict") else None,
    }


FABRICS = signatures.BY_ID["provider-not-efa"]["fabrics"]


def judge_provider(facts: Facts, findings: List[dict], profile, fabric: Optional[str] = None) -> None:
    """provider-not-efa judged against the platform, never alone.

    A declared fabric (`--fabric`) decides: its own providers are right (a note), any other stays an error.
    Undeclared, an instance type given or the plugin's platform line means EFA (the error stands); with
    neither, a provider that is another fabric's own (cxi on Slingshot) is a note, not the run's cause.
    The efa check still fails (the run is not on EFA): no verdict changes here."""
    finding = next((f for f in findings if f["id"] == "provider-not-efa"), None)
    if finding is None:
        return
    names = {n.split(";")[0].strip().lower() for p in facts.procs.values() for n in p.providers}
    others = sorted(n for n in names if n not in FABRICS["efa"]["providers"])
    own = {n: k for k, v in FABRICS.items() for n in v["providers"]}
    if fabric is not None:
        right = set(FABRICS[fabric]["providers"])
        said = "the declared fabric is {} ({})".format(FABRICS[fabric]["name"], "/".join(sorted(right)))
        if others and set(others) <= right:
            finding["severity"] = "info"
            finding["message"] += f" ({said}: right for it; this run is not on EFA)"
        else:
            finding["message"] += f" ({said})"
        return
    platforms = {p.platform() for p in facts.procs.values()} | {facts.headless.platform()}
    if profile is not None or any(platforms - {None}):
        return
    if others and all(n in own for n in others):
        fabrics = ", ".join("{} is {}'s".format(n, FABRICS[own[n]]["name"]) for n in others)
        finding["severity"] = "info"
        finding["message"] += (
            f" ({fabrics}: right for that fabric; no instance type or fabric was given and the plugin named "
            "no EFA platform, so this run is not on EFA but the provider is not its fault)"
        )


def _nics_check(facts: Facts, profile) -> dict:
    seen = sorted({n for p in facts.procs.values() for n in p.nics})
    ev = facts.evidence_of("provider")[:2]
    if profile.efa_devices is None:
        return _check(
            "nics",
            UNKNOWN,
            "plugin found %s NIC(s); the EFA device count of %s is not in the profile's sources"
            % ("/".join(map(str, seen)) or "no", profile.name),
            ev,
        )
    if not seen:
        return _check(
            "nics",
            UNKNOWN,
            "no 'found N nics' line; %s has %d EFA devices" % (profile.name, profile.efa_devices),
            ev,
        )
    if seen == [profile.efa_devices]:
        return _check("nics", PASS, "%d EFA device(s), as %s has" % (seen[0], profile.name), ev)
    return _check(
        "nics",
        FAIL,
        "plugin found %s NIC(s); %s has %d EFA devices"
        % ("/".join(map(str, seen)), profile.name, profile.efa_devices),
        ev,
    )


def summary_values(facts: Facts) -> dict:
    """Top-level facts of the report: a value when every process agrees, else null."""
    procs = list(facts.procs.values())

    def agreed(get) -> Optional[object]:
        vals = set()
        for p in procs:
            vals.update(get(p))
        if not vals and not procs:
            vals = set(get(facts.headless))  # a snippet pasted without NCCL heads
        if len(vals) == 1:
            return next(iter(vals))
        return None

    nccl = agreed(lambda p: p.nccl_versions)
    cuda = agreed(lambda p: p.cuda_versions)
    if not any(p.nccl_versions for p in procs) and facts.headless_versions:
        vs = {v for v, _ in facts.headless_versions}
        cs = {c for _, c in facts.headless_versions if c}
        nccl = next(iter(vs)) if len(vs) == 1 else None
        cuda = next(iter(cs)) if len(cs) == 1 else None
    platforms = {p.platform() for p in procs if p.platform()} or (
        {facts.headless.platform()} if facts.headless.platform() and not procs else set()
    )
    plugin_name = agreed(lambda p: p.plugin_names)
    if plugin_name is None and any(p.ofi for p in procs) and not any(p.plugin_names for p in procs):
        plugin_name = "aws-ofi-nccl"  # NET/OFI lines are aws-ofi-nccl's, even when it printed no version
    networks = agreed(lambda p: p.networks())
    return {
        "network": networks,
        "nccl_version": nccl,
        "cuda_version": cuda,
        "cuda_driver_version": agreed(lambda p: p.drivers),
        "plugin": {"name": plugin_name, "version": agreed(lambda p: p.plugin_versions)},
        "libfabric_version": agreed(lambda p: p.libfabric),
        "platform": next(iter(platforms)) if len(platforms) == 1 else None,
        "provider": agreed(lambda p: p.providers),
        "fabric": agreed(lambda p: p.fabrics),
        "nics": agreed(lambda p: p.nics),
        "network_is_libfabric": is_libfabric_net(networks) if networks else None,
    }
