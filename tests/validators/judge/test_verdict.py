"""Facts -> verdict on the project's own fixtures: one per format and per failure signature."""

import pytest
from paths import TESTS

from efa_validators.analyze import analyze, analyze_paths

FIX = TESTS / "fixtures" / "logs"


def run(name, **kw):
    return analyze_paths([str(FIX / name)], **kw)


def ids(report):
    return {f["id"] for f in report["findings"]}


def check(report, name):
    found = [c for c in report["checks"] if c["name"] == name]
    assert found, [c["name"] for c in report["checks"]]
    return found[0]


def test_hosts_differ_says_how_many_hosts_it_leaves_out():
    """At cluster scale a side holds hundreds of hosts: eight are named, and the count of the rest."""
    lines = ["node-%03d:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4" % i for i in range(20)]
    lines.append("odd-1:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2")
    findings = analyze(lines)["findings"]
    (diff,) = [f for f in findings if f["id"] == "hosts-differ" and f["fact"] == "nccl_version"]
    assert diff["message"] == (
        "nccl_version differs between hosts: 2.21.5 on node-000, node-001, node-002, node-003, node-004, "
        "node-005, node-006, node-007 and 12 more; 2.18.3 on odd-1"
    )
    assert len(diff["groups"][0]["hosts"]) == 20  # the data keeps every host


@pytest.mark.parametrize(
    "name, efa, gdr",
    [
        ("p5-2node-efa-gdr-mpirun.log", True, True),
        ("p5en-efa-direct-srun.log", True, True),
        ("cloudwatch-p4d-crlf.log", True, True),
        ("nccl2.5-ring-gdr.log", True, True),
        ("hosts-differ.log", True, True),
        ("plugin-missing-socket.log", False, False),
        ("efa-devices-missing.log", False, None),
        ("gdr-disabled-p4d.log", False, False),
        ("ib-network.log", False, True),
        ("tcp-provider.log", False, False),
        ("interleaved-cut.log", None, None),  # a spliced NET line lost its network name: not proven
        ("two-libfabrics.log", None, None),
        ("torch-watchdog.log", None, None),
        ("ll-corruption.log", None, None),
    ],
)
def test_efa_gdr_tristate(name, efa, gdr):
    r = run(name)
    assert (r["efa"], r["gdr"]) == (efa, gdr)
    if efa is not True or gdr is not True:
        assert r["verdict"] != "pass"


def test_healthy_p5_passes_against_its_profile():
    r = run("p5-2node-efa-gdr-mpirun.log", instance_type="p5.48xlarge", nodes=2)
    assert r["verdict"] == "pass", [c for c in r["checks"] if c["status"] != "pass"]
    assert r["nccl_version"] == "2.21.5" and r["cuda_version"] == "12.4"
    assert r["plugin"] == {"name": "aws-ofi-nccl", "version": "1.9.1-aws"}
    assert (r["libfabric_version"], r["provider"], r["nics"], r["network"]) == (
        "1.21",
        "efa",
        32,
        "Libfabric",
    )
    assert (r["nranks"], r["ranks_seen"], r["nodes_seen"], r["nnodes_reported"]) == (4, 4, 2, 2)
    assert r["nccl_tests"]["plateau_busbw"] == pytest.approx(444.99)
    assert check(r, "nics")["status"] == "pass"
    net = {
        (x["host"], x["rank"]): (x["net_channels"], x["gdr_channels"], x["proxied_channels"])
        for x in r["ranks"]
    }
    assert net[("gpu-a", 1)] == (2, 2, 1)  # the proxied 3(0) send counts, with its GDR flag
    assert net[("gpu-b", 2)][0] == 2 and net[("gpu-a", 0)][0] == 1


def test_nic_count_against_another_profile_fails():
    r = run("p5en-efa-direct-srun.log", instance_type="p5.48xlarge")
    assert check(r, "nics")["status"] == "fail"
    assert r["verdict"] == "fail"
    r = run("p5en-efa-direct-srun.log", instance_type="p5en.48xlarge")
    assert check(r, "nics")["status"] == "pass"
    assert r["platform"] == "p5en.48xlarge" and r["fabric"] == "efa-direct"


def test_unknown_instance_type_is_unknown_not_pass():
    r = run("p5-2node-efa-gdr-mpirun.log", instance_type="x9.mega")
    assert check(r, "instance-profile")["status"] == "unknown"
    assert r["verdict"] == "unknown"


def test_hosts_differ_names_both_sides():
    r = run("hosts-differ.log")
    diffs = {f["fact"]: f for f in r["findings"] if f["id"] == "hosts-differ"}
    assert set(diffs) >= {"nccl_version", "plugin_version", "nics", "network"}
    groups = {g["value"]: g["hosts"] for g in diffs["nccl_version"]["groups"]}
    assert groups == {"2.21.5": ["a-1", "a-2"], "2.18.3": ["b-9"]}
    assert "a-1, a-2" in diffs["plugin_version"]["message"] and "b-9" in diffs["plugin_version"]["message"]
    assert check(r, "hosts-consistent")["status"] == "fail"
    assert r["nccl_version"] is None and r["nics"] is None  # no single value to report
    assert r["verdict"] == "fail"


@pytest.mark.parametrize(
    "name, finding",
    [
        ("plugin-missing-socket.log", "plugin-missing"),
        ("plugin-missing-socket.log", "socket-fallback"),
        ("two-libfabrics.log", "two-libfabrics"),
        ("efa-devices-missing.log", "efa-devices-missing"),
        ("efa-devices-missing.log", "ofi-init-failed"),
        ("gdr-disabled-p4d.log", "gdr-disabled"),
        ("device-rdma-unsupported.log", "device-rdma-unsupported"),
        ("mr-registration-failed.log", "mr-registration-failed"),
        ("ll-corruption.log", "ll-corruption"),
        ("hang.log", "hang"),
        ("torch-watchdog.log", "watchdog-timeout"),
        ("cuda-driver-too-old.log", "cuda-driver-too-old"),
        ("tcp-provider.log", "provider-not-efa"),
        ("gdr-disabled-p4d.log", "nccl-warn"),
    ],
)
def test_failure_signatures_fire_with_evidence_and_remedy(name, finding):
    r = run(name)
    found = [f for f in r["findings"] if f["id"] == finding]
    assert found, ids(r)
    f = found[0]
    assert f["remedy"] and f["evidence"], f
    for e in f["evidence"]:
        assert e["file"].endswith(name) and isinstance(e["line"], int) and e["text"]
    assert r["verdict"] == "fail"


def test_healthy_logs_raise_no_error_signature():
    for name in ("p5-2node-efa-gdr-mpirun.log", "p5en-efa-direct-srun.log", "cloudwatch-p4d-crlf.log"):
        r = run(name)
        assert not [f for f in r["findings"] if f["severity"] == "error"], (name, ids(r))


def test_socket_only_channels_do_not_blame_gdr():
    assert "gdr-disabled" not in ids(run("plugin-missing-socket.log"))


def test_evidence_lines_point_at_the_log():
    r = run("plugin-missing-socket.log")
    lines = (FIX / "plugin-missing-socket.log").read_text().splitlines()
    for c in r["checks"]:
        for e in c["evidence"]:
            assert lines[e["line"] - 1].endswith(e["text"])


def test_partial_rank_coverage_is_unknown():
    text = [
        "h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
        "h:1:1 [0] NCCL INFO Using network AWS Libfabric",
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1 - Init COMPLETE",
        "h:1:1 [0] NCCL INFO Channel 00 : 7[1] -> 0[1] [receive] via NET/AWS Libfabric/0/GDRDMA",
    ]
    r = analyze(text)
    assert (r["efa"], r["gdr"]) == (True, True)
    assert check(r, "ranks-seen")["status"] == "unknown" and r["verdict"] == "unknown"


def test_rank_without_provider_line_keeps_efa_unknown():
    text = [
        "h:1:1 [0] NCCL INFO Using network Libfabric",
        "h:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA",
    ]
    assert analyze(text)["efa"] is None


def test_one_rank_without_gdr_makes_gdr_false():
    text = ["h%d:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa" % i for i in range(3)]
    text += [
        "h%d:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA" % i
        for i in (0, 1)
    ]
    text += ["h2:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0"]
    r = analyze(text)
    assert (r["efa"], r["gdr"]) == (True, False)
    assert [h["gdr"] for h in r["hosts"]] == [True, True, False]


def test_ranks_and_hosts_lists():
    r = run("cloudwatch-p4d-crlf.log")
    assert [(x["host"], x["rank"], x["nranks"], x["efa"], x["gdr"]) for x in r["ranks"]] == [
        ("node-1", 0, 2, True, True),
        ("node-2", 1, 2, True, True),
    ]
    assert [(h["host"], h["nics"], h["plugin_version"], h["platform"]) for h in r["hosts"]] == [
        ("node-1", 4, "1.7.1-aws", "p4d.24xlarge"),
        ("node-2", 4, "1.7.1-aws", None),
    ]


def _watchdog_log(world: int, timed_out) -> str:
    init = [
        "node-%d:%d:%d [0] NCCL INFO comm 0x7f%02x rank %d nranks %d cudaDev 0 busId 101c0 - Init COMPLETE"
        % (r, 100 + r, 130 + r, r, r, world)
        for r in range(world)
    ]
    wd = [
        "[rank%d]:[E ProcessGroupNCCL.cpp:616] [Rank %d] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=812, OpType=ALLREDUCE) ran for 600088 milliseconds before timing out." % (r, r)
        for r in timed_out
    ]
    return "\n".join(init + wd) + "\n"


def _watchdog_message(text: str) -> str:
    return next(f["message"] for f in analyze(text.splitlines())["findings"] if f["id"] == "watchdog-timeout")


def test_a_watchdog_timeout_names_the_ranks_that_timed_out_and_those_that_did_not():
    """A rank no timeout line names is where a user looks first: the finding names both sides."""
    said = _watchdog_message(_watchdog_log(8, [0, 1, 2, 4, 5, 6, 7]))
    assert said == "7 watchdog timeout line(s) from rank(s) 0-2, 4-7; no timeout line names rank(s) 3"
    said = _watchdog_message(_watchdog_log(4, [3, 0, 2, 1]))
    assert said.endswith("from rank(s) 0-3; every rank of 4 is named")
    # past the cap the kept ranks depend on how the log was split: only how many is said
    said = _watchdog_message(_watchdog_log(1, range(5000)))
    assert said == "5000 watchdog timeout line(s) from 4096 or more ranks"
