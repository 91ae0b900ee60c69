"""Spoofing (issue 10.7): a program that prints a recorded NCCL log under `validators run` must not pass.
The log's claims (ranks, hosts, pids) are compared with what the launcher was asked to start; the
replay stand-in says what it is and its reports are marked REPLAY, never clearing a release gate."""

from __future__ import annotations

import shlex
import shutil
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
    assert compare(two, _claims(["a", "b.cluster"]), 16, 16, set(), [], HERE)[0] == "pass"
    status, short, _ = compare(two, _claims(["x", "y"]), 16, 16, set(), [], HERE)  # hosts it was not given
    assert status == "unknown" and "host(s) x, y that mpirun -H a,b was not given" in short[0]
    plain = Launch(None, None, (), None, "a plain command", started=False)
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
    status, short, good = compare(two, _claims(["a"]), 8, 8, set(), [], HERE)
    assert status == "unknown" and good == ["hosts given to the launcher"]
    assert short == ["the log's world is 8 ranks; mpirun -H a,b -np 16 starts 16",
                     "the log claims 1 host(s) (a); mpirun -H a,b -np 16 spans 2"]  # fmt: skip
    assert compare(two, _claims(["a", "b"]), 8, 8, set(), [], HERE)[0] == "unknown"
    assert compare(two, _claims(["a"]), 16, 16, set(), [], HERE)[0] == "unknown"


def _decoy_ssh(tmp_path):
    """A program named ssh that does nothing (sleep under another name): its name is all it has."""
    link = tmp_path / "ssh"
    link.symlink_to(shutil.which("sleep"))
    return "%s 0.3" % link


@pytest.mark.parametrize(
    "decoy",
    [
        pytest.param(_decoy_ssh, id="a-sleep-named-ssh"),
        pytest.param(lambda _t: "ssh -o BatchMode=yes -o ConnectTimeout=2 -p 1 127.0.0.1 true", id="ssh"),
        pytest.param(lambda _t: " ".join(MPIRUN + ["-np", "1", "true"]), id="real-mpirun"),
    ],
)
def test_a_decoy_launcher_in_the_tree_never_passes_a_recording(tmp_path, decoy):
    """issue 32 item 2: `run --nodes 2 -- sh -c '<decoy>; cat recorded-2node.log'` was verdict pass, exit 0:
    any remote starter's name in the tree let the recording's ranks on other hosts stand."""
    out = tmp_path / "r.json"
    script = "%s >/dev/null 2>&1; cat %s" % (decoy(tmp_path), shlex.quote(str(GOOD_EFA)))
    proc, _ = run_cli(
        ["run", "--quiet", "--instance-type", "p5.48xlarge", "--nodes", "2", "--json", str(out), "--",
         "sh", "-c", script],
        timeout=60,
    )  # fmt: skip
    report = load(out)
    check = next(c for c in report["checks"] if c["name"] == "launch-matches-log")
    # a decoy the census saw leaves the ranks unproven; one gone before it looked, a plain command's recording
    assert check["status"] in ("unknown", "fail"), check
    assert report["verdict"] == check["status"]
    assert proc.returncode == {"unknown": 3, "fail": 1}[check["status"]]
    if check["status"] == "unknown":
        assert "unproven" in check["detail"] and finding(report, "launch-unverified")
    else:
        assert "started no launcher" in finding(report, "launch-mismatch")["message"]
    launch = report["run"]["launch"]  # what the run started: the shell, not a launcher
    assert launch["argv"][:2] == ["sh", "-c"] and launch["kind"] == "plain" and launch["hosts"] == []
    assert isinstance(launch["pid"], int)


def test_one_real_pid_among_invented_ones_fails(tmp_path):
    """issue 32 item 2: one pid the run started was enough for every pid the log claims for this host."""
    out = tmp_path / "r.json"
    body = ('h=$(hostname); echo "$h:$$:$$ [0] NCCL INFO NCCL version 2.26.2+cuda12.2"; '
            'echo "$h:4194001:4194001 [1] NCCL INFO NCCL version 2.26.2+cuda12.2"; sleep 1.2')  # fmt: skip
    proc, _ = run_cli(["run", "--quiet", "--json", str(out), "--"] + MPIRUN + ["-np", "1", "sh", "-c", body],
                      timeout=60)  # fmt: skip
    report = load(out)
    check = next(c for c in report["checks"] if c["name"] == "launch-matches-log")
    assert check["status"] == "fail", check
    bad = finding(report, "launch-mismatch")
    assert bad and "4194001 that the run did not start" in bad["message"]
    assert report["verdict"] == "fail" and proc.returncode == 1


def test_the_run_records_the_launcher_it_started(tmp_path):
    """`run.launch`: the argv and pid of the command the run started, and the hosts it was given."""
    hf = tmp_path / "hosts"
    hf.write_text("%s slots=2\n" % HERE)
    out = tmp_path / "r.json"
    body = 'echo "$(hostname):$$:$$ [0] NCCL INFO NCCL version 2.26.2+cuda12.2"; sleep 1.2'
    cmd = MPIRUN + ["--hostfile", str(hf), "-np", "2", "sh", "-c", body]
    run_cli(["run", "--quiet", "--json", str(out), "--"] + cmd, timeout=60)
    report = load(out)
    launch = report["run"]["launch"]
    assert launch["kind"] == "mpirun" and launch["argv"][0] == "mpirun" and "--tag-output" in launch["argv"]
    assert launch["hosts"] == [HERE] and launch["world"] == 2 and launch["pid"] > 1
    check = next(c for c in report["checks"] if c["name"] == "launch-matches-log")
    assert check["status"] == "pass", check


@pytest.mark.parametrize(
    "env, hosts",
    [
        ({"SLURM_JOB_NODELIST": "gpu-[01-03,10],login1"}, ("gpu-01", "gpu-02", "gpu-03", "gpu-10", "login1")),
        ({"SLURM_NODELIST": "n[8-9]"}, ("n8", "n9")),
    ],
)
def test_srun_takes_its_hosts_from_the_allocation(env, hosts):
    got = declared(["srun", "-N", str(len(hosts)), "prog"], "srun", env, None)
    assert got.hosts == hosts
    assert declared(["srun", "-w", "a[1-2]", "prog"], "srun", env, None).hosts == ("a1", "a2")
    assert declared(["mpirun", "-np", "2", "prog"], "mpirun", env, None).hosts == hosts


def test_a_huge_slurm_host_list_is_bounded():
    assert len(launchcheck.expand_hostlist("n[0-99999999]")) == launchcheck.MAX_HOSTLIST


def test_remote_ranks_only_on_hosts_the_launcher_was_given():
    """srun in an allocation of a,b: a log from x,y is unproven; one from a,b (or EC2's ip- names of the
    addresses mpirun was given) is accounted for; srun with no host list proves nothing about other hosts."""
    srun = declared(["srun", "prog"], "srun", {"SLURM_JOB_NODELIST": "a,b", "SLURM_NNODES": "2",
                                               "SLURM_NTASKS": "16"}, None)  # fmt: skip
    assert compare(srun, _claims(["a", "b"]), 16, 16, set(), [], HERE)[0] == "pass"
    assert compare(srun, _claims(["x", "y"]), 16, 16, set(), [], HERE)[0] == "unknown"
    bare = declared(["srun", "-N", "2", "-n", "16", "prog"], "srun", {}, None)
    status, short, _ = compare(bare, _claims(["a", "b"]), 16, 16, set(), [], HERE)
    assert status == "unknown" and "given no host list" in short[0]
    ips = declared(["mpirun", "-H", "10.1.0.11:8,10.1.0.12:8", "prog"], "mpirun", {}, None)
    assert compare(ips, _claims(["ip-10-1-0-11", "ip-10-1-0-12"]), 16, 16, set(), [], HERE)[0] == "pass"


def test_a_hostfile_that_is_a_fifo_or_a_device_is_no_hang(tmp_path):
    """issue 32, item 3: the hostfile was opened as it came; a FIFO there blocked the run before it began."""
    import os
    import threading

    fifo = tmp_path / "hosts"
    os.mkfifo(fifo)
    got = []
    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        argv = ["mpirun", "--hostfile", path, "x"]
        reader = threading.Thread(target=lambda a=argv: got.append(declared(a, "mpirun", {}, None)))
        reader.daemon = True
        reader.start()
        reader.join(10)
        assert not reader.is_alive(), "reading hostfile %s hung" % path
    assert [g.hosts for g in got] == [(), (), ()]
