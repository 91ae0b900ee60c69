"""A log that lies about its world never passes (issue 23, item 1).

Each lying log is made here as an attacker would make it: from the lines of a real log (the p5 fixture,
the public corpus read by path), one host's lines kept and the counts NCCL and nccl-tests print rewritten
to match, a host added that printed one line, a table row's busbw raised past what the NICs carry.
"""

import re

import pytest
from conftest import corpus_missing
from paths import TESTS as TEST_DIR

from efa_validators.analyze import Analysis, analyze, fold_range
from efa_validators.analyze.needles import NCCL, SIGNATURE, TESTS
from efa_validators.analyze.prep import prepare

P5 = (TEST_DIR / "fixtures" / "logs" / "p5-2node-efa-gdr-mpirun.log").read_text().splitlines()


def check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def finding(report, fid):
    return next(f for f in report["findings"] if f["id"] == fid)


def one_host(lines, keep, world, nnodes=None):
    """`keep`'s lines only, the world rewritten to `world` ranks (and `nnodes` nodes), nccl-tests' `# Rank`
    lines of the other hosts dropped: the lie of the issue."""
    out = []
    for x in lines:
        if " NCCL INFO " in x and keep not in x:
            continue
        if "#  Rank" in x or "#   Rank" in x:
            if keep not in x:
                continue
        x = re.sub(r"n[Rr]anks \d+", lambda m: m.group(0).split()[0] + " %d" % world, x)
        if nnodes is not None:
            x = re.sub(r"nNodes \d+", "nNodes %d" % nnodes, x)
        out.append(x)
    return out


def real(nccl_logs_dir, name):
    path = nccl_logs_dir / name
    if not path.is_file():
        corpus_missing(f"{name} not in the corpus")
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def test_the_fixture_as_written_still_passes_with_the_world_checked():
    r = analyze(P5, instance_type="p5.48xlarge", nodes=2)
    assert r["verdict"] == "pass"
    world = check(r, "world-consistent")
    assert world["status"] == "pass" and "2 host(s), as NCCL printed nNodes 2" in world["detail"]


def test_one_host_rewritten_to_match_fails_naming_the_contradictions():
    """The issue's repro: gpu-a's lines, nRanks 4 -> 2 and nNodes 2 -> 1, gpu-b's `# Rank` lines dropped,
    judged with --nodes 2 on p5: passed (efa and gdr true) before."""
    lie = one_host(P5, "gpu-a", world=2, nnodes=1)
    r = analyze(lie, instance_type="p5.48xlarge", nodes=2)
    assert r["verdict"] == "fail" and r["efa"] is not True and r["gdr"] is not True
    world = check(r, "world-consistent")
    assert world["status"] == "fail"
    line = next(i for i, x in enumerate(lie, 1) if "3[1] -> 0[0] [receive]" in x)
    assert (
        f"a channel line names rank 3, outside the world of 2 ranks (nRanks 2): <stream>:{line}"
        in (world["detail"])
    )
    assert "NCCL printed nNodes 1; --nodes says 2" in world["detail"]
    assert "nccl-tests lists ranks on 1 host(s) (gpu-a); --nodes says 2" in world["detail"]
    assert world["evidence"][0]["line"] == line and "3[1] -> 0[0]" in world["evidence"][0]["text"]
    assert "outside the world" in check(r, "efa")["detail"]
    assert finding(r, "world-mismatch")["severity"] == "error"


@pytest.mark.parametrize("host, world", [("gpu-a", 2), ("gpu-b", 2)])
def test_one_host_with_nnodes_kept_still_never_passes(host, world):
    """nNodes left as printed (only gpu-a's rank 0 prints it: 2, as --nodes says): the channels still name
    rank 3 past the rewritten world, and one host is not the two the run had."""
    r = analyze(one_host(P5, host, world), instance_type="p5.48xlarge", nodes=2)
    assert r["verdict"] == "fail" and r["efa"] is not True and r["gdr"] is not True
    detail = check(r, "world-consistent")["detail"]
    assert "a channel line names rank 3, outside the world of 2 ranks (nRanks 2)" in detail
    assert f"only 1 host(s) printed ranks ({host}); --nodes says 2: give every host's log" in detail


def test_channels_outside_the_world_are_counter_evidence_without_any_flag(nccl_logs_dir):
    """The real 2 x p4d log (efa and gdr true): worker-0's lines with nranks 16 -> 8, no --nodes, no
    instance type, no nNodes printed (NCCL 2.9.9): only the channel lines naming ranks 8-15 tell."""
    lines = real(nccl_logs_dir, "01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log")
    assert analyze(lines)["verdict"] == "pass"
    lie = one_host(lines, "worker-0", world=8)
    r = analyze(lie)
    assert r["verdict"] == "fail" and r["efa"] is None and r["gdr"] is None
    world = check(r, "world-consistent")
    assert world["status"] == "fail" and "outside the world of 8 ranks (nRanks 8)" in world["detail"]
    ev = world["evidence"][0]
    assert "nccl-tests-efa-16-worker-0" in ev["text"] and lie[ev["line"] - 1].endswith(ev["text"])
    assert re.search(r"rank (\d+), outside", world["detail"]).group(1) in ev["text"]


@pytest.mark.parametrize(
    "said",
    ["Bootstrap : Using enp71s0:10.1.0.13<0>", "cudaDriverVersion 12040"],  # the fixture's own init lines
)
def test_a_third_host_that_printed_one_line_is_not_proven(said):
    """The 2-node log plus `gpu-c` that printed one init line, as every NCCL process does, and no evidence."""
    third = "[1,4]<stdout>:gpu-c:60100:60100 [0] NCCL INFO " + said
    lines = P5[:20] + [third] + P5[20:]
    for nodes in (None, 2, 3):
        r = analyze(lines, instance_type="p5.48xlarge", nodes=nodes)
        assert r["efa"] is None and r["gdr"] is None and r["verdict"] != "pass", nodes
        efa = check(r, "efa")
        assert efa["detail"].startswith("host gpu-c printed no provider line and no NET channel (its first "
                                         "line: <stream>:21)")  # fmt: skip
        assert efa["evidence"][0]["line"] == 21 and "gpu-c:60100" in efa["evidence"][0]["text"]
        assert "host gpu-c printed no NET channel with /GDRDMA" in check(r, "gdr")["detail"]
    world = check(analyze(lines, nodes=2), "world-consistent")
    assert (
        world["status"] == "fail"
        and "the log names 3 hosts (gpu-a, gpu-b, gpu-c); --nodes says 2" in (world["detail"])
    )


def test_a_third_host_in_a_real_log_is_not_proven(nccl_logs_dir):
    """Same on the real p4d log, whose NCCL prints no nNodes: only the host's own evidence can tell."""
    lines = real(nccl_logs_dir, "01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log")
    first = next(x for x in lines if "worker-1:" in x and "Running on P4d platform" in x)
    third = first.replace("nccl-tests-efa-16-worker-1", "nccl-tests-efa-16-worker-2")
    r = analyze(lines + [third])
    assert r["efa"] is None and r["gdr"] is None and r["verdict"] != "pass"
    assert "host nccl-tests-efa-16-worker-2 printed no provider line" in check(r, "efa")["detail"]


def test_two_processes_claiming_one_rank_never_pass():
    """gpu-a's lines copied as a second host (pids changed), the world rewritten to gpu-a's two ranks and
    the channels to name them only: every count agrees, yet ranks 0 and 1 each have two owners."""
    a = [x for x in one_host(P5, "gpu-a", world=2) if " NCCL INFO " in x]
    a = [re.sub(r"\b2\[0\]", "0[0]", re.sub(r"\b3\[1\]", "1[1]", x)) for x in a]
    copy = [x.replace("gpu-a:401", "gpu-z:901") for x in a]
    r = analyze(a + copy)
    assert r["verdict"] != "pass"
    world = check(r, "world-consistent")
    assert world["status"] == "unknown"
    assert "rank 0 of the world is claimed by gpu-a:40100 [0] and by gpu-z:90100 [0]" in world["detail"]


def test_a_plateau_above_the_wire_is_not_a_real_measurement():
    """The fixture's 2 GiB row raised from 444.99 to 650 GB/s busbw: 108% of what 2 x p5 (3200 Gbps each)
    can carry at 4 ranks (600 GB/s busbw)."""
    lines = [x.replace("296.66  444.99", "433.33  650.00") for x in P5]  # algbw x 1.5 at 4 ranks
    assert lines != P5
    r = analyze(lines, instance_type="p5.48xlarge", nodes=2)
    assert r["verdict"] == "fail"
    plateau = check(r, "busbw-plateau")
    assert plateau["status"] == "fail" and "not a real measurement" in plateau["detail"]
    above = finding(r, "busbw-above-wire")
    assert "650 GB/s is 108% of the wire speed 600 GB/s busbw of 2 x p5.48xlarge" in above["message"]
    assert "650.00" in above["evidence"][0]["text"]


def test_a_real_table_raised_past_the_wire_fails(nccl_logs_dir):
    """The real 2 x p5 table (16 GiB at 487.26 GB/s, 65% of the wire) with that cell raised to 812.27."""
    lines = real(nccl_logs_dir, "08-nccl-tests-table-2xp5-allreduce-srun.log")
    honest = analyze(lines, instance_type="p5.48xlarge", nodes=2)
    assert check(honest, "busbw-plateau")["status"] == "pass"
    raised = [x.replace("259.87  487.26", "433.21  812.27") for x in lines]  # algbw x 1.875 at 16 ranks
    assert raised != lines
    r = analyze(raised, instance_type="p5.48xlarge", nodes=2)
    assert check(r, "busbw-plateau")["status"] == "fail" and r["verdict"] == "fail"
    assert "108% of the wire speed 750 GB/s" in finding(r, "busbw-above-wire")["message"]


def test_the_highest_rank_named_folds_the_same_split_anywhere():
    """Cut into two ranges, each folded alone and merged (as scan workers do: analyze.fold_range), the log
    keeps the highest rank named, its line, and each host's first line, as one serial fold."""
    flags = NCCL | SIGNATURE | TESTS

    def serial(lines):
        a = Analysis()
        a.begin("x.log")
        for item in prepare((i, x, False, flags) for i, x in enumerate(lines, 1)):
            a.apply(0, item)
        return a.facts

    def split(lines, cut):
        a = Analysis()
        a.begin("x.log")
        for base, piece in ((0, lines[:cut]), (cut, lines[cut:])):
            for part in fold_range("x.log", ((i, x, False, flags) for i, x in enumerate(piece, 1))):
                a.merge(base, part)
        return a.facts

    lie = one_host(P5, "gpu-a", world=2) + ["[1,4]<stdout>:gpu-c:1:1 [0] NCCL INFO cudaDriverVersion 12040"]
    whole = serial(lie)
    line = next(i for i, x in enumerate(lie, 1) if "3[1] -> 0[0]" in x)
    assert whole.peer_top[:3] == (3, "x.log", line) and set(whole.host_first) == {"gpu-a", "gpu-c"}
    assert whole.host_first["gpu-c"][1] == len(lie)
    for cut in range(1, len(lie)):
        merged = split(lie, cut)
        assert (merged.peer_top, merged.host_first) == (whole.peer_top, whole.host_first), cut


def test_the_highest_rank_named_is_the_same_on_the_general_path():
    """A NET channel run folds through analyze.prepare's fast path; the same lines one event at a time
    (Analysis.line, as the runner's stream may feed them) name the same highest rank on the same line."""
    lie = one_host(P5, "gpu-a", world=2)
    fast, general = Analysis(), Analysis()
    for a in (fast, general):
        a.begin("x.log")
    for item in prepare((i, x, False, NCCL | SIGNATURE | TESTS) for i, x in enumerate(lie, 1)):
        fast.apply(0, item)
    for i, x in enumerate(lie, 1):
        general.line(i, x)
    assert fast.facts.peer_top == general.facts.peer_top
    assert fast.facts.peer_top[0] == 3 and "3[1] -> 0[0]" in fast.facts.peer_top[3]


def test_a_replay_is_held_to_its_own_world_not_to_the_runs_node_count():
    """The replay stand-in replays a 2-node recording whatever the sweep's group size (`--nodes 8`): its
    world is held to itself, as `launch-matches-log` does not compare a replay; without the mark, the same
    lines against `--nodes 8` fail."""
    from efa_validators.replay import MARK

    good = (TEST_DIR / "fixtures" / "replay" / "good-efa-p5-2node.log").read_text().splitlines()
    plain = check(analyze(good, nodes=8), "world-consistent")
    assert plain["status"] == "fail" and "NCCL printed nNodes 2; --nodes says 8" in plain["detail"]
    replayed = check(analyze([MARK] + good, nodes=8), "world-consistent")
    assert replayed["status"] == "pass" and replayed["detail"].startswith("REPLAY, --nodes not compared")
    lie = one_host(P5, "gpu-a", world=2)
    assert check(analyze([MARK] + lie, nodes=2), "world-consistent")["status"] == "fail"


def test_fewer_ranks_than_nodes_is_a_contradiction():
    """The fixture's world rewritten to 1 rank (nNodes 2 kept) and gpu-a's rank 0 alone: one rank cannot
    span the two nodes NCCL and --nodes count."""
    lie = [x for x in one_host(P5, "gpu-a:40100", world=1) if "40101" not in x]
    detail = check(analyze(lie, nodes=2), "world-consistent")["detail"]
    assert "NCCL printed nRanks 1, fewer ranks than nodes (NCCL printed nNodes 2)" in detail
    assert "NCCL printed nRanks 1, fewer ranks than nodes (--nodes says 2)" in detail
    assert analyze(lie, nodes=2)["verdict"] == "fail"


def test_a_comm_line_past_its_own_nranks_is_outside_the_world():
    """gpu-b's lines, nranks 4 -> 2, channel lines dropped: its comm lines say rank 2 and 3 of 2."""
    lie = [x for x in one_host(P5, "gpu-b", world=2) if " via " not in x]
    r = analyze(lie)
    world = check(r, "world-consistent")
    assert world["status"] == "fail" and r["verdict"] == "fail"
    first = next(i for i, x in enumerate(lie, 1) if "gpu-b:51200" in x and "rank 2 nranks 2" in x)
    assert (
        f"gpu-b:51200 [0] says it is rank 2 of nRanks 2 (its first line: <stream>:{first})"
        in (world["detail"])
    )


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("Pid  51201 on  gpu-b", "Pid  51299 on  gpu-b", "nccl-tests puts rank 3 on gpu-b pid 51299"),
        ("Pid  51201 on  gpu-b", "Pid  51201 on  gpu-c", "nccl-tests puts rank 3 on gpu-c pid 51201"),
    ],
)
def test_a_rank_line_of_another_run_is_a_contradiction(old, new, says):
    """nccl-tests and NCCL print the same process's host and pid: the fixture's `# Rank 3` line moved to
    another pid or host (a table pasted from another run) fails, naming both places."""
    lines = [x.replace(old, new) for x in P5]
    assert lines != P5
    r = analyze(lines, instance_type="p5.48xlarge", nodes=2)
    world = check(r, "world-consistent")
    assert world["status"] == "fail" and r["verdict"] == "fail"
    assert says + "; its NCCL lines come from gpu-b:51201 [1]" in world["detail"]
    assert any("Rank 3" in e["text"] for e in world["evidence"])
