"""Spoofing (issue 10.7): a program that prints a recorded NCCL log under `validators run` must not pass.
The log's claims (ranks, hosts, pids) are compared with what the launcher was asked to start; the
replay stand-in says what it is and its reports are marked REPLAY, never clearing a release gate."""

from __future__ import annotations

import socket

import pytest
from preflight_util import GOOD_EFA, MPIRUN, finding, load, replay, run_cli

from efa_validators.run import launchcheck
from efa_validators.run.launchcheck import Launch, compare, declared

HERE = launchcheck.local_host()
STRIP_TAG = ["sed", "-e", r"s/^\[1,[0-9]*\]<stdout>://", str(GOOD_EFA)]  # a recording, as a rank prints it


@pytest.mark.parametrize(
    "argv, kind, env, world, nhosts, local",
    [
        (["mpirun", "-np", "16", "-H", "a:8,b:8", "prog"], "mpirun", {}, 16, 2, None),
        (["mpirun", "-H", "a:8,b:8", "prog"], "mpirun", {}, 16, 2, None),
        (["mpirun", "--np=4", "--mca", "btl", "tcp,self", "prog", "-n", "99"], "mpirun", {}, 4, 1, True),
        (
            ["mpirun", "-np", "8", "prog"],
            "mpirun",
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NNODES": "2"},
            8,
            2,
            False,
        ),
        (
            ["mpirun", "-np", "16", "prog"],
            "mpirun",
            {"OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile"},
            16,
            None,
            False,
        ),
        (["srun", "-N", "2", "-n", "16", "prog"], "srun", {}, 16, 2, None),
        (["srun", "--nodes=2", "--ntasks-per-node=8", "prog"], "srun", {}, 16, 2, None),
        (["srun", "prog"], "srun", {"SLURM_NNODES": "4", "SLURM_NTASKS": "32"}, 32, 4, None),
        (["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "train.py"], "torchrun", {}, 16, 2, True),
        (
            ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", "t.py"],
            "torchrun",
            {},
            4,
            1,
            True,
        ),
        (
            ["env", "A=1", "torchrun", "--nnodes=1:4", "--nproc-per-node=8", "t.py"],
            "torchrun",
            {},
            32,
            4,
            True,
        ),
        (["sh", "-c", "mpirun -np 99 x"], "plain", {}, None, None, None),
    ],
)
def test_declared_world_and_hosts(argv, kind, env, world, nhosts, local):
    got = declared(argv, kind, env, None)
    assert (got.world, got.nhosts, got.local) == (world, nhosts, local), got


def test_hostfile_hosts_and_slots(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# cluster\nnode-a slots=8\nnode-b:8\n\nnode-c slots=8 max_slots=8\n")
    got = declared(["mpirun", "--hostfile", str(hf), "prog"], "mpirun", {}, None)
    assert (got.world, got.nhosts, got.hosts) == (24, 3, ("node-a", "node-b", "node-c"))


def test_nodes_flag_bounds_a_plain_command():
    assert declared(["sh", "-c", "x"], "plain", {}, 2).nhosts == 2


def _claims(hosts, pids=(1, 2)):
    return {h: set(pids) for h in hosts}


def test_compare_rules():
    local = Launch(4, 1, (), True, "mpirun -np 4")
    status, bad, _ = compare(local, _claims(["ip-10-1-0-11", "ip-10-1-0-12"]), 16, 16, {5}, ["mpirun"], HERE)
    assert status == "fail" and any("16 ranks" in b for b in bad) and any("this host" in b for b in bad)
    status, bad, good = compare(local, _claims([HERE], pids=(7, 8)), 4, 4, {7, 8, 9}, ["mpirun"], HERE)
    assert (status, bad) == ("pass", []) and "world size 4" in good
    status, bad, _ = compare(local, _claims([HERE], pids=(70, 80)), 4, 4, {7, 8}, ["mpirun"], HERE)
    assert status == "fail" and "the run started none of them" in bad[0]
    two = Launch(16, 2, ("a", "b"), None, "mpirun -H a,b")
    assert compare(two, _claims(["x", "y", "z"]), 16, 16, set(), [], HERE)[0] == "fail"
    assert compare(two, _claims(["x", "y"]), 16, 16, set(), [], HERE)[0] == "pass"
    plain = Launch(None, None, (), None, "a plain command")
    assert compare(plain, _claims(["far-1"]), 16, 16, set(), ["cat"], HERE)[0] == "fail"
    assert compare(plain, _claims(["far-1"]), 16, 16, set(), ["sh", "ssh"], HERE)[0] == "unknown"
    assert compare(plain, {}, None, 0, set(), ["true"], HERE)[0] == "unknown"


def test_cat_of_a_recorded_log_does_not_pass(tmp_path):
    out = tmp_path / "r.json"
    proc, _ = run_cli(
        ["run", "--quiet", "--instance-type", "p5.48xlarge", "--json", str(out), "--", "cat", str(GOOD_EFA)]
    )
    report = load(out)
    assert report["verdict"] == "fail" and proc.returncode == 1
    bad = finding(report, "launch-mismatch")
    assert bad and "started no launcher" in bad["message"]
    check = next(c for c in report["checks"] if c["name"] == "launch-matches-log")
    assert check["status"] == "fail"
    assert "replay" not in report


def test_recorded_log_printed_by_mpirun_ranks_does_not_pass(tmp_path):
    """Two local ranks print a 2-node recording: more ranks and other hosts than mpirun started."""
    out = tmp_path / "r.json"
    cmd = MPIRUN + ["-np", "2"] + STRIP_TAG
    proc, _ = run_cli(
        ["run", "--quiet", "--instance-type", "p5.48xlarge", "--json", str(out), "--"] + cmd, timeout=60
    )
    report = load(out)
    assert report["verdict"] == "fail" and proc.returncode == 1
    bad = finding(report, "launch-mismatch")
    assert bad and "ranks run on this host (%s)" % HERE in bad["message"]
    assert "the log claims 16 ranks; mpirun" in bad["message"]


def test_lines_from_the_runs_own_processes_agree(tmp_path):
    """Local ranks that print NCCL heads with this host's name and their own pids: the check passes."""
    out = tmp_path / "r.json"
    body = 'echo "$(hostname):$$:$$ [0] NCCL INFO NCCL version 2.26.2+cuda12.2"; sleep 1.2'
    cmd = MPIRUN + ["-np", "2", "sh", "-c", body]
    run_cli(["run", "--quiet", "--json", str(out), "--"] + cmd, timeout=60)
    report = load(out)
    check = next(c for c in report["checks"] if c["name"] == "launch-matches-log")
    assert check["status"] == "pass", check
    assert finding(report, "launch-mismatch") is None
    assert socket.gethostname().split(".")[0].lower() == HERE


def test_replay_is_marked_and_never_records_the_image(tmp_path):
    from imagebuild.release.record import preflight_names

    digest = "sha256:" + "ab" * 32
    out = tmp_path / "r.json"
    cmd = MPIRUN + ["-np", "4"] + replay(str(GOOD_EFA), "--rank-filter")
    proc, _ = run_cli(
        ["run", "--quiet", "--instance-type", "p5.48xlarge", "--nodes", "2", "--image", "reg/x:1@" + digest,
         "--json", str(out), "--"] + cmd,
        timeout=60,
    )  # fmt: skip
    report = load(out)
    assert report["replay"] is True and report["run"]["replay"] is True
    assert finding(report, "replay")["message"].startswith("REPLAY")
    assert finding(report, "replay-image-not-recorded")
    assert "image" not in report and not preflight_names(report, digest, None)
    assert "REPLAY" in proc.stdout.splitlines()[0]
    check = next(c for c in report["checks"] if c["name"] == "launch-matches-log")
    assert check["status"] == "unknown" and check["detail"].startswith("REPLAY")


def test_fewer_ranks_or_hosts_than_launched_never_pass():
    """One host's lines with nRanks rewritten to match (issue 23, item 1): the launch started 16 ranks on 2
    hosts, the log shows a world of 8 on 1 host; that is missing output or another job's log, never a pass."""
    two = Launch(16, 2, ("a", "b"), None, "mpirun -H a,b -np 16")
    status, short, good = compare(two, _claims(["x"]), 8, 8, set(), [], HERE)
    assert status == "unknown" and good == []
    assert short == ["the log's world is 8 ranks; mpirun -H a,b -np 16 starts 16",
                     "the log claims 1 host(s) (x); mpirun -H a,b -np 16 spans 2"]  # fmt: skip
    assert compare(two, _claims(["x", "y"]), 8, 8, set(), [], HERE)[0] == "unknown"
    assert compare(two, _claims(["x"]), 16, 16, set(), [], HERE)[0] == "unknown"
