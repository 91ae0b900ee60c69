"""What the runner knows about launchers: kind, rank tags, injected flags, named failures.

Where the launcher runs here (Open MPI), its real output is what the readers are checked against."""

from __future__ import annotations

import subprocess

import pytest
from preflight_util import MPIRUN

from efa_validators.run import launchers


@pytest.mark.parametrize(
    "argv, kind",
    [
        (["mpirun", "-np", "2", "a.out"], "mpirun"),
        (["/opt/amazon/openmpi/bin/mpirun", "x"], "mpirun"),
        (["env", "FOO=1", "-u", "BAR", "mpiexec", "x"], "mpirun"),
        (["srun", "-n2", "x"], "srun"),
        (["nice", "-n", "5", "srun", "x"], "srun"),
        (["torchrun", "--nproc-per-node", "2", "p.py"], "torchrun"),
        (["python3", "-m", "torch.distributed.run", "p.py"], "torchrun"),
        (["all_reduce_perf", "-b", "8"], "plain"),
    ],
)
def test_launcher_kind(argv, kind):
    assert launchers.launcher_kind(argv) == kind


@pytest.mark.parametrize(
    "kind, line, rank, text",
    [
        ("mpirun", "[1,12]<stdout>:host:1:1 [4] NCCL INFO x", 12, "host:1:1 [4] NCCL INFO x"),
        ("mpirun", "[1,3]<stderr>:warning", 3, "warning"),
        ("mpirun", "plain line", None, "plain line"),
        ("srun", "  3: host:1:1 [3] NCCL INFO y", 3, "host:1:1 [3] NCCL INFO y"),
        ("srun", "0:        8  2 float", 0, "       8  2 float"),
        ("srun", "srun: error: task 1 failed", None, "srun: error: task 1 failed"),
        ("torchrun", "[rank1]:hello", 1, "hello"),
        ("torchrun", "[default0]:NCCL INFO", 0, "NCCL INFO"),
        ("auto", "[1,2]<stdout>:x", 2, "x"),
        ("auto", "5: x", 5, "x"),
    ],
)
def test_tagger(kind, line, rank, text):
    assert launchers.tagger(kind)(line) == (rank, text)


def test_reassembler_rejoins_pieces_across_ranks():
    """The interleaving Open MPI 4.1 really produced here with two fast ranks (texts shortened)."""
    r = launchers.Reassembler()
    assert r.feed("[1,0]<stdout>:a complete line") == ["[1,0]<stdout>:a complete line"]
    assert r.feed("[1,0]<stdout>:h0 [6] NCCL [1,1]<stdout>:h1 [1] NCCL INFO whole") == [
        "[1,1]<stdout>:h1 [1] NCCL INFO whole"
    ]
    assert r.feed("[1,1]<stdout>:h1 [3] NCCL [1,0]<stdout>:INFO cudaDriverVersion 12060") == [
        "[1,0]<stdout>:h0 [6] NCCL INFO cudaDriverVersion 12060"
    ]
    assert r.feed("[1,1]<stdout>:INFO via NET/Libfab[1,1]<stdout>:ric/6(1)/GDRDMA") == [
        "[1,1]<stdout>:h1 [3] NCCL INFO via NET/Libfabric/6(1)/GDRDMA"
    ]
    assert r.repaired == 2
    assert r.feed("[1,2]<stdout>:cut at the end[1,3]<stdout>:x") == ["[1,3]<stdout>:x"]
    assert r.flush() == ["[1,2]<stdout>:cut at the end"]
    assert r.feed("mpirun: plain launcher line") == ["mpirun: plain launcher line"]
    assert r.feed("[1,0]<stderr>:err piece[1,0]<stdout>:out line") == ["[1,0]<stdout>:out line"]
    assert r.flush() == ["[1,0]<stderr>:err piece"]


def test_inject_open_mpi_adds_tag_output_and_env():
    argv, notes = launchers.inject(["mpirun", "-np", "2", "x"], "mpirun", True, ["NCCL_DEBUG"])
    assert argv == ["mpirun", "--tag-output", "-x", "NCCL_DEBUG", "-np", "2", "x"]
    assert notes


def test_inject_respects_what_the_user_gave():
    given = ["mpirun", "--tag-output", "-x", "NCCL_DEBUG=TRACE", "-np", "2", "x"]
    assert launchers.inject(given, "mpirun", True, ["NCCL_DEBUG"]) == (given, [])


def test_inject_leaves_non_open_mpi_alone():
    given = ["mpirun", "-np", "2", "x"]
    assert launchers.inject(given, "mpirun", False, ["NCCL_DEBUG"])[0] == given


def test_inject_srun_label_after_wrappers():
    argv, _ = launchers.inject(["env", "A=1", "srun", "-n2", "x"], "srun", False, ["NCCL_DEBUG"])
    assert argv == ["env", "A=1", "srun", "-l", "-n2", "x"]
    assert launchers.inject(["srun", "--label", "x"], "srun", False, [])[0] == ["srun", "--label", "x"]


def test_failed_rank_from_real_open_mpi_output():
    """Open MPI's own words when rank 2 exits 9, read back by failed_ranks().

    Open MPI 4.1 prints the "Process name: [[j,1],2] / Exit code: 9" block on most runs but not all
    (it sometimes prints only "Primary job terminated normally, but 1 process returned a non-zero exit
    code"): the runner then names the launcher and its exit code instead. Up to 5 tries for the block."""
    script = 'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then exit 9; fi; sleep 1'
    outputs = []
    for _ in range(5):
        proc = subprocess.run(
            MPIRUN + ["-np", "3", "sh", "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 9
        outputs.append(proc.stdout)
        if "Process name:" in proc.stdout:
            break
    found = launchers.failed_ranks(outputs[-1].splitlines())
    assert found, outputs
    assert (found[0].rank, found[0].code) == (2, 9)


def test_failed_ranks_srun_and_torchrun_formats():
    srun = [
        "srun: error: node-7: task 3: Exited with exit code 4",
        "srun: error: node-8: tasks 4-5: Killed",
    ]
    got = launchers.failed_ranks(srun)
    assert [(f.rank, f.host, f.code) for f in got] == [
        (3, "node-7", 4),
        (4, "node-8", None),
        (5, "node-8", None),
    ]
    torch = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-12-02_10:00:00",
        "  host      : trn-1",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : 3 (pid: 4242)",
    ]
    got = launchers.failed_ranks(torch)
    assert [(f.rank, f.host, f.code) for f in got] == [(1, "trn-1", 3)]
