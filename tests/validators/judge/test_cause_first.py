"""Every failed run's report leads with its cause (issue 33 item 3): the ordering rule is total (a cause
before a symptom before a performance/advisory finding), a misconfiguration the text shows is a finding with
its line, and where the text cannot tell, the verdict stays unknown. The fixtures in tests/fixtures/causes/
are the project's own, written in the formats NCCL and aws-ofi-nccl print
(efa_validators/judge/envcheck.py)."""

import os
from pathlib import Path

import pytest
from cli import validators_process
from conftest import corpus_missing
from paths import ROOT
from test_root_cause import CLASSES, CORPUS_FIRST, assert_leads_with, lead_table

from efa_validators.analyze import analyze, analyze_paths
from efa_validators.judge import causes, envcheck

CAUSES = ROOT / "tests" / "fixtures" / "causes"
LOGS = ROOT / "tests" / "fixtures" / "logs"
CORPUS = Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))


def _report(path: Path) -> dict:
    return analyze_paths([str(path)])


def _ids(report: dict) -> list:
    return [f["id"] for f in report["findings"]]


# fixture: the root cause the report leads with; then each (effect <- its cause) link the report must make
FIRST = lead_table(
    """
crash-gdr-off.log: crash
proto-ll128-wrong-results.log: env-protocol-forced; ll-corruption <- env-protocol-forced;
    nccl-tests-out-of-bounds <- ll-corruption
proto-ll-ordering-unsaid.log: env-protocol-forced
proto-unrecognized-crash.log: env-value-refused; crash <- env-value-refused
ofi-param-invalid.log: env-value-refused; ofi-init-failed <- env-value-refused;
    socket-fallback <- ofi-init-failed
socket-ifname-unmatched.log: env-socket-ifname-unmatched;
    bootstrap-interface <- env-socket-ifname-unmatched; crash <- bootstrap-interface
net-plugin-name-unloadable.log: env-net-plugin-unloadable; plugin-missing <- env-net-plugin-unloadable;
    socket-fallback <- plugin-missing
gdr-level-loc.log: env-gdr-forbidden; gdr-disabled <- env-gdr-forbidden
trace-net-socket.log: env-net-forced; socket-fallback <- env-net-forced
trace-provider-tcp.log: env-provider-forced; provider-not-efa <- env-provider-forced;
    gdr-disabled <- provider-not-efa
trace-device-rdma-off-p4d.log: env-device-rdma-off; gdr-disabled <- env-device-rdma-off;
    ofi-init-failed <- gdr-disabled
"""
)


@pytest.mark.parametrize("name", sorted(FIRST))
def test_each_class_leads_with_its_cause_and_the_effects_name_it(name):
    first, links = FIRST[name]
    report = _report(CAUSES / name)
    assert_leads_with(report, first, links)
    assert causes.root_cause(report["findings"])["id"] == first
    assert causes.misordered(report["findings"]) is None


def test_a_crash_is_not_led_by_a_gdr_finding():
    """The issue's case: GDR off on a run where a rank died. The crash is what the run is read from; GDR off
    is a true fact after it, linked to nothing."""
    report = _report(CAUSES / "crash-gdr-off.log")
    assert _ids(report) == ["crash", "gdr-disabled"]
    assert "caused_by" not in report["findings"][1]
    assert report["findings"][0]["message"].startswith("rank 1 on trn-b: exited on signal 11")


# fixture -> (finding id, the variable its first evidence line shows): each visible misconfiguration
MISCONFIGURED = [
    ("proto-ll128-wrong-results.log", "env-protocol-forced", "NCCL_PROTO set by environment to LL128"),
    ("proto-ll-ordering-unsaid.log", "env-protocol-forced", "NCCL_PROTO set by environment to LL,LL128"),
    ("proto-unrecognized-crash.log", "env-value-refused", 'Unrecognized element token "LL256"'),
    ("ofi-param-invalid.log", "env-value-refused", "OFI_NCCL_PROTOCOL set to invalid value FASTEST"),
    ("socket-ifname-unmatched.log", "env-socket-ifname-unmatched", "NCCL_SOCKET_IFNAME set by environment"),
    (
        "net-plugin-name-unloadable.log",
        "env-net-plugin-unloadable",
        "Plugin name set by env to libnccl-net-aws",
    ),
    ("gdr-level-loc.log", "env-gdr-forbidden", "NCCL_NET_GDR_LEVEL set by environment to LOC"),
    ("env-advice-only.log", "env-algorithm-forced", "NCCL_ALGO set by environment to Ring"),
    ("env-advice-only.log", "env-p2p-disabled", "NCCL_P2P_DISABLE set by environment to 1"),
    ("env-advice-only.log", "env-tuning-override", "NCCL_BUFFSIZE set by environment to 2097152"),
    ("env-advice-only.log", "env-value-ignored", "Invalid value 4x for NCCL_NCHANNELS_PER_NET_PEER"),
    ("trace-net-socket.log", "env-net-forced", "+ export NCCL_NET=Socket"),
    ("trace-provider-tcp.log", "env-provider-forced", "+ export 'FI_PROVIDER=tcp'"),
    ("trace-device-rdma-off-p4d.log", "env-device-rdma-off", "+ export FI_EFA_USE_DEVICE_RDMA=0"),
]


@pytest.mark.parametrize("name, fid, line", MISCONFIGURED)
def test_a_visible_misconfiguration_is_a_finding_with_its_line(name, fid, line):
    finding = next((f for f in _report(CAUSES / name)["findings"] if f["id"] == fid), None)
    assert finding is not None, name
    assert line in finding["evidence"][0]["text"]
    assert finding["evidence"][0]["file"].endswith(name) and finding["evidence"][0]["line"] > 1
    assert finding["remedy"] and finding["source"]


def test_a_misconfiguration_alone_leaves_no_empty_report_and_no_made_up_failure():
    """Before issue 33 these lines were never read: 'unknown, no findings'. Advice is a warning: the verdict
    stays unknown (nothing failed in the text); LL forced where the plugin needs Simple is an error."""
    advice = _report(CAUSES / "env-advice-only.log")
    assert advice["verdict"] == "unknown" and advice["findings"]
    assert {f["severity"] for f in advice["findings"]} == {"warning"}
    assert (
        "NCCL 2.22.3" in next(f for f in advice["findings"] if f["id"] == "env-algorithm-forced")["message"]
    )
    unsaid = _report(CAUSES / "proto-ll-ordering-unsaid.log")
    assert unsaid["verdict"] == "fail" and unsaid["findings"][0]["severity"] == "error"


def test_unknown_stays_unknown_where_the_text_cannot_tell():
    """Settings right on EFA, or set by aws-ofi-nccl itself (NCCL_PROTO=simple, NCCL_BUFFSIZE=8388608: NCCL
    prints them alike): no finding; a tuner plugin's name is not the net plugin's."""
    report = _report(CAUSES / "env-cannot-tell.log")
    assert report["findings"] == [] and report["verdict"] == "unknown"


H = "gpu-4:12:40 [0] NCCL INFO "


@pytest.mark.parametrize(
    "lines, fired",
    [
        # NCCL_ALGO before 2.12: no guidance against it
        ([H + "NCCL version 2.10.3+cuda11.4", H + "NCCL_ALGO set by environment to Tree"], []),
        (
            [H + "NCCL version 2.12.12+cuda11.7", H + "NCCL_ALGO set by environment to Tree"],
            ["env-algorithm-forced"],
        ),
        # LL forced with a plugin that forces nothing (<= 1.5.0): an error; no plugin seen: not ours to judge
        (
            [H + "NET/OFI Initializing aws-ofi-nccl 1.4.0-aws", H + "NCCL_PROTO set by environment to LL"],
            ["env-protocol-forced"],
        ),
        ([H + "Using network IB", H + "NCCL_PROTO set by environment to LL128"], ["network-ib"]),
        ([H + "NCCL_PROTO set by environment to ^LL,LL128"], []),
        # the socket interface set and found: nothing to say
        ([H + "NCCL_SOCKET_IFNAME set by environment to ens", H + "Bootstrap : Using ens5:10.0.0.4<0>"], []),
        # a plugin named and loaded: nothing to say
        (
            [
                H + "NET/Plugin: Plugin name set by env to libnccl-net-ofi.so",
                H + "NET/OFI Initializing aws-ofi-nccl 1.14.0",
                H + "Using network Libfabric",
            ],
            [],
        ),
        ([H + "NCCL_NET_GDR_READ set by environment to 0."], ["env-gdr-forbidden"]),
        ([H + "NCCL_NET_GDR_LEVEL set by environment to PHB"], []),
        ([H + "NCCL_SHM_DISABLE set by environment to 1."], ["env-p2p-disabled"]),
        ([H + "NCCL_MIN_NCHANNELS set by environment to 32."], ["env-tuning-override"]),
        # a shell trace: only values that keep the run off EFA speak; the right ones, or other words, do not
        (["+ export NCCL_NET=IB"], ["env-net-forced"]),
        (
            [
                "+ export 'NCCL_NET=AWS Libfabric'",
                "+ export FI_PROVIDER=efa",
                "+ export FI_EFA_USE_DEVICE_RDMA=1",
            ],
            [],
        ),
        (["echo do not export FI_PROVIDER=tcp here", "+ NCCL_NET=Socket"], []),
        (["+ export FI_EFA_USE_DEVICE_RDMA=off"], ["env-device-rdma-off"]),
    ],
)
def test_env_rules_fire_only_where_the_text_shows_a_misconfiguration(lines, fired):
    report = analyze(lines)
    assert [i for i in _ids(report) if i.startswith("env-") or i == "network-ib"] == fired


@pytest.mark.parametrize("digit", ["\u00b2", "\u2460"])  # superscript two, circled one
def test_versions_with_digits_int_cannot_read_still_get_a_verdict(digit):
    """str.isdigit holds for '²' and '①' and int() refuses them: a garbled version made `parse` end
    'error: invalid literal for int()' (exit 2, as bad input) and `run` a parser-error. The plugin's version
    reads as 1 (what can be read): LL forced is then the error it is with a plugin before 1.6."""
    report = analyze(
        [
            H + "NCCL version 2.%s7.7+cuda12.9" % digit,
            H + "NET/OFI Initializing aws-ofi-nccl 1.%s.0" % digit,
            H + "NCCL_PROTO set by environment to LL",
            H + "NCCL_ALGO set by environment to Ring",
        ]
    )
    assert report["verdict"] == "fail"
    found = {f["id"]: f for f in report["findings"]}
    assert found["env-protocol-forced"]["severity"] == "error" and "env-algorithm-forced" in found


def test_the_protocol_in_error_is_the_one_with_the_plugins_line():
    report = analyze(
        [H + "NET/OFI Initializing aws-ofi-nccl 1.4.0-aws", H + "NCCL_PROTO set by environment to LL"]
    )
    f = report["findings"][0]
    assert f["severity"] == "error" and "aws-ofi-nccl 1.4.0-aws" in f["message"]


@pytest.mark.parametrize(
    "value, ll",
    [
        ("simple", False),
        ("Simple", False),
        ("LL", True),
        ("ll128", True),
        ("LL,Simple", True),
        ("^LL", True),
        ("^LL,LL128", False),
        ("^ll128,LL", False),
        ("allreduce:simple;broadcast:LL", True),
        ("allreduce:^LL,LL128", False),
        ("LL256", False),
    ],
)
def test_which_nccl_proto_values_enable_ll(value, ll):
    assert envcheck.allows_ll(value) is ll


# ------------------------------------------------------------------ the ordering rule, as data
def _f(fid, severity="error"):
    return {"id": fid, "severity": severity, "message": fid}


@pytest.mark.parametrize(
    "found, expected",
    [
        # a symptom after a cause, a performance finding after a symptom, whatever the catalog order
        (["gdr-disabled", "crash", "completion-error"], ["completion-error", "crash", "gdr-disabled"]),
        (["busbw-below-expected", "hang"], ["hang", "busbw-below-expected"]),
        (
            ["watchdog-timeout", "gdr-disabled", "network-ib"],
            ["network-ib", "watchdog-timeout", "gdr-disabled"],
        ),
        # GDR off that makes the plugin fail is a cause, not advice
        (["ofi-init-failed", "gdr-disabled", "crash"], ["gdr-disabled", "ofi-init-failed", "crash"]),
        # a warning an error follows from leads (as the error's cause); advice alone stays a warning
        ([("env-gdr-forbidden", "warning"), "gdr-disabled"], ["env-gdr-forbidden", "gdr-disabled"]),
        ([("env-algorithm-forced", "warning"), "crash"], ["crash", "env-algorithm-forced"]),
    ],
)
def test_order_is_total_cause_symptom_advisory(found, expected):
    findings = [_f(*x) if isinstance(x, tuple) else _f(x) for x in found]
    ordered = causes.order(findings)
    assert [f["id"] for f in ordered] == expected
    assert causes.misordered(ordered) is None
    assert causes.root_cause(ordered)["id"] == expected[0]


@pytest.mark.parametrize(
    "found, why",
    [
        (["gdr-disabled", "crash"], "the report leads with gdr-disabled (advisory), but crash is a symptom"),
        (
            ["crash", "completion-error"],
            "the report leads with crash (symptom), but completion-error is a cause",
        ),
        (["nccl-warn", "crash"], "nccl-warn (warning) comes before the root cause crash"),
    ],
)
def test_misordered_names_what_leads_wrongly(found, why):
    """The measurement can fail: a report in the old order is caught."""
    findings = [_f(i, "warning" if i == "nccl-warn" else "error") for i in found]
    assert causes.misordered(findings) == why


def test_misordered_catches_an_effect_before_its_cause():
    findings = [dict(_f("crash"), caused_by="completion-error"), _f("completion-error")]
    assert causes.misordered(findings) == "crash comes before its cause completion-error"


def test_the_report_leads_with_a_warning_level_cause():
    proc = validators_process("parse", CAUSES / "gdr-level-loc.log", timeout=60)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("root cause: the environment forbids GPUDirect RDMA on the network path")
    assert "NCCL_NET_GDR_LEVEL set by environment to LOC" in first and proc.returncode == 1


# ------------------------------------------------------------------ the measurement: cause first, in share
def _failing_inputs() -> list:
    """(path, the root cause expected or None) of every failing fixture and every failing corpus log."""
    out = [(CAUSES / n, first) for n, (first, _) in FIRST.items()]
    out += [(LOGS / n, first) for n, (first, _) in CLASSES.items()]
    named = {p for p, _ in out}
    for p in sorted(LOGS.glob("*.log")):
        if p not in named:
            out.append((p, None))
    if not CORPUS.is_dir():
        corpus_missing(f"real NCCL log corpus not found at {CORPUS}")
    logs = sorted(CORPUS.glob("*.log"))
    if not logs:
        corpus_missing(f"no log in {CORPUS}")
    out += [(p, CORPUS_FIRST.get(p.stem)) for p in logs]
    return out


def test_cause_first_share_over_every_failing_fixture_and_corpus_log(capsys):
    rows = []
    for path, expected in _failing_inputs():
        report = _report(path)
        if report["verdict"] != "fail":
            continue
        why = causes.misordered(report["findings"])
        lead = causes.root_cause(report["findings"])
        if why is None and expected is not None and (lead or {}).get("id") != expected:
            why = "leads with {}, expected {}".format((lead or {}).get("id"), expected)
        rows.append((path, why))
    bad = [(p.name, why) for p, why in rows if why]
    corpus = [r for r in rows if r[0].parent == CORPUS]
    share = 1.0 - len(bad) / len(rows)
    with capsys.disabled():
        print(
            f"\ncause first: {len(rows) - len(bad)}/{len(rows)} failing reports ({share:.0%}), "
            f"{len(corpus)} of them real logs"
        )
    assert len(rows) >= len(FIRST) + len(CLASSES) and corpus, rows
    assert not bad, bad


@pytest.mark.parametrize(
    "line, first, said",
    [
        (
            "srun: error: gpu-st-2: task 5: Exited with exit code 1",
            "crash",
            "task 5 on gpu-st-2: exited with code 1",
        ),
        ("2: srun: error: node-b: tasks 8-15: Exited with exit code 134", "crash", "tasks 8-15 on node-b"),
        (
            "[rank0]: torch.AcceleratorError: CUDA error: out of memory",
            "resource-allocation-failed",
            "1 matching",
        ),
    ],
)
def test_a_failure_the_text_shows_is_never_unknown_with_no_findings(line, first, said):
    """Lines that ended 'unknown, no findings' before: a task's non-zero exit (Slurm's launch plugin), and
    PyTorch's CUDA check out of memory."""
    report = analyze([line])
    assert report["verdict"] == "fail" and _ids(report)[0] == first
    assert said in report["findings"][0]["message"] and report["findings"][0]["evidence"]


def test_a_refusal_read_from_the_warn_lines_kept_leads_the_crash_it_causes():
    """NCCL's rarer parseList refusal has no needle of its own: the WARN line kept names it."""
    report = analyze(
        [
            H + "NCCL_ALGO set by environment to ring;tree",
            "gpu-4:12:40 [0] graph/tuning.cc:78 NCCL WARN All entries except the first must have a prefix: "
            '"ring;tree"',
            "gpu-4: Test NCCL failure common.cu:1005 'invalid usage (run with NCCL_DEBUG=WARN for details) '",
        ]
    )
    assert _ids(report)[:2] == ["env-value-refused", "crash"]
    assert "the value 'ring;tree'" in report["findings"][0]["message"]
    assert "must have a prefix" in report["findings"][0]["evidence"][0]["text"]
    assert report["findings"][1]["caused_by"] == "env-value-refused"
