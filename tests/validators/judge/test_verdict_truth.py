"""Verdict truth (issue #10): every rank proves it, counter-evidence counts, failures are failures.

The formats are written here from the format strings in the upstream sources named next to each one
(NVIDIA/nccl, aws/aws-ofi-nccl, NVIDIA/nccl-tests); docs/validators.md lists them.
"""

import pytest
from conftest import corpus_missing
from paths import TESTS

from efa_validators.analyze import analyze
from efa_validators.scan.prefix import strip_prefix

FIX = TESTS / "fixtures" / "logs"
P5 = (FIX / "p5-2node-efa-gdr-mpirun.log").read_text().splitlines()


def check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def ids(report):
    return {f["id"] for f in report["findings"]}


def test_p5_fixture_passes_as_written():
    r = analyze(P5, instance_type="p5.48xlarge", nodes=2)
    assert (r["efa"], r["gdr"], r["verdict"]) == (True, True, "pass")


def test_a_rank_that_printed_only_its_init_is_not_proven():
    """gpu-b:51201 (rank 3): every line but `Init COMPLETE` deleted -> efa/gdr unknown, never pass."""
    lines = [x for x in P5 if "gpu-b:51201" not in x or "Init COMPLETE" in x]
    r = analyze(lines, instance_type="p5.48xlarge", nodes=2)
    assert r["efa"] is None and r["gdr"] is None
    assert "rank 3" in check(r, "efa")["detail"] and "gpu-b:51201" in check(r, "efa")["detail"]
    assert r["verdict"] != "pass"


def _replace_proc(proc, new_lines):
    """The p5 log with every line of `proc` replaced by `new_lines` (its Init COMPLETE kept)."""
    out = [x for x in P5 if proc not in x or "Init COMPLETE" in x]
    return out[:20] + new_lines + out[20:]


@pytest.mark.parametrize("provider", [False, True])
def test_a_host_on_sockets_makes_gdr_never_true(provider):
    """One process on Socket (with or without a provider line: NCCL_NET=Socket after the plugin loaded),
    its host's other process on EFA with GDR channels: gdr is never true."""
    head = "[1,3]<stdout>:gpu-b:51201:51241 [1] NCCL INFO "
    new = [head + "NET/OFI Selected Provider is efa (found 32 nics)"] if provider else []
    lines = _replace_proc("gpu-b:51201", new + [head + "Using network Socket"])
    r = analyze(lines)
    assert r["gdr"] is not True and r["efa"] is False and r["verdict"] == "fail"
    assert "socket-fallback" in ids(r)


def test_a_host_without_plugin_makes_gdr_never_true():
    """No plugin on one host (NCCL 2.23+ plugin_open.cc wording) and its internal Socket transport."""
    head = "[1,3]<stdout>:gpu-b:51201:51241 [1] NCCL INFO "
    lines = _replace_proc(
        "gpu-b:51201",
        [
            head + "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
            head + "NET/Socket : Using [0]enp71s0:10.1.0.12<0>",
        ],
    )
    r = analyze(lines)
    assert r["gdr"] is None and r["efa"] is False and r["verdict"] == "fail"
    assert "plugin-missing" in ids(r)


def test_a_host_with_no_gdr_channel_keeps_gdr_unknown():
    """Host gpu-b printed its provider lines but none of its NET channels: gdr is not shown there."""
    lines = [x for x in P5 if not ("gpu-b" in x and "via NET" in x)]
    r = analyze(lines)
    assert r["gdr"] is None and "gpu-b" in check(r, "gdr")["detail"]


H = "node-1:42:42 [0] NCCL INFO "
W = "node-1:42:42 [0] transport/net_ib.cc:1295 NCCL WARN "
COMM = "node-1:42:50 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"


@pytest.mark.parametrize(
    "lines",
    [
        # NCCL 2.19-2.22 src/net.cc:
        # "NET/Plugin : dlerror=%s No plugin found (%s), using internal implementation"
        [
            H + "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or "
            "directory No plugin found (libnccl-net.so), using internal implementation",
            H + "NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
        ],
        # NCCL 2.23-2.27 src/plugin/plugin_open.cc: "%s/Plugin: Could not find:%s. %s" + fallback text
        [
            H + "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
            H + "NET/Socket : Using [0]eth0:10.0.0.1<0>",
        ],
        # NCCL 2.18 src/net.cc: "NET/Plugin : Plugin load (%s) returned %d : %s"
        [
            H + "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared "
            "object file: No such file or directory",
            H + "NET/Plugin : No plugin found, using internal implementation",
            H + "NET/Socket : Using [0]eth0:10.0.0.1<0>",
        ],
        # aws-ofi-nccl < 1.6 src/nccl_ofi_net.c: NCCL_OFI_WARN("Couldn't find any optimal provider")
        [
            "node-1:42:42 [0] nccl_net_ofi_init:425 NCCL WARN NET/OFI Couldn't find any optimal provider",
        ],
        # NCCL 2.18 src/transport/net_ib.cc: "NET/IB : Got completion from peer %s with error %d, ..."
        [
            W + "NET/IB : Got completion from peer 10.0.0.2<40212> with error 12, opcode 0, len 0, "
            "vendor err 129 (Recv)",
        ],
    ],
    ids=["no-plugin-ib", "could-not-find-socket", "load-returned-2", "no-optimal-provider", "ib-error"],
)
def test_counter_evidence_makes_efa_false(lines):
    r = analyze(lines + [COMM])
    assert r["efa"] is False, check(r, "efa")
    assert r["gdr"] is not True and r["verdict"] == "fail"


def test_a_bootstrap_socket_line_with_the_plugin_loaded_is_no_counter_evidence():
    """NCCL 2.4 prints `NET/Socket : Using` for its bootstrap even on EFA: only plugin-less it counts."""
    lines = [
        H + "NET/OFI Selected Provider is efa",
        H + "NET/Socket : Using [0]eth0:10.0.0.1<0>",
        COMM,
        "node-1:42:50 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/AWS Libfabric/0/GDRDMA",
    ]
    assert analyze(lines)["efa"] is True


TABLE = [x for x in P5 if x.startswith("[1,0]<stdout>:#") or x.startswith("[1,0]<stdout>:  ")]
HEADER = [x for x in P5 if x.startswith("[1,0]<stdout>:#")][:7]  # parameters and ranks, no table


def finding(report, fid):
    found = [f for f in report["findings"] if f["id"] == fid]
    assert found, ids(report)
    return found[0]


@pytest.mark.parametrize(
    "line, rank, host",
    [
        # nccl-tests src/common.h NCCLCHECK (NCCL >= 2.13): "%s: Test NCCL failure %s:%d '%s / %s'"
        (
            "[1,3]<stdout>:gpu-b: Test NCCL failure common.cu:1034 'internal error - please report this "
            "issue to the NCCL developers / '",
            3,
            "gpu-b",
        ),
        # srun -l prefix, NCCL < 2.13 form "'%s'"
        ("3: gpu-b: Test NCCL failure common.cu:892 'invalid usage'", 3, "gpu-b"),
        # CUDACHECK: "%s: Test CUDA failure %s:%d '%s'", no launcher prefix
        ("gpu-b: Test CUDA failure common.cu:733 'named symbol not found'", None, "gpu-b"),
        # CloudWatch export in front
        (
            "| 2026-01-02T10:24:27.000Z | gpu-b: Test CUDA failure common.cu:733 'an illegal memory access "
            "was encountered' |",
            None,
            "gpu-b",
        ),
        # Open MPI's report of a rank that died
        (
            "mpirun noticed that process rank 3 with PID 51201 on node gpu-b exited on signal 11 "
            "(Segmentation fault).",
            3,
            "gpu-b",
        ),
        # Slurm's
        ("srun: error: gpu-b: task 3: Segmentation fault (core dumped)", 3, "gpu-b"),
    ],
)
def test_a_good_table_with_a_failed_rank_fails_naming_it(line, rank, host):
    r = analyze(P5 + [line], instance_type="p5.48xlarge", nodes=2)
    assert r["verdict"] == "fail"
    f = finding(r, "crash")
    assert host in f["message"] and (rank is None or f"rank {rank}" in f["message"])
    assert f["evidence"] and f["evidence"][0]["text"].endswith(line.rstrip(" |")[-20:])
    assert check(r, "failure-signatures")["status"] == "fail"


def test_a_crash_before_the_table_is_a_crash_not_a_hang():
    r = analyze(HEADER + ["[1,1]<stdout>:gpu-a: Test CUDA failure common.cu:733 'named symbol not found'"])
    assert "crash" in ids(r) and "hang" not in ids(r)
    assert "rank 1 on gpu-a" in finding(r, "crash")["message"]


def test_a_network_error_before_the_table_is_a_hang_naming_the_rank():
    line = "[1,2]<stdout>:gpu-b: Test NCCL failure common.cu:1279 'unhandled system error / '"
    r = analyze(HEADER + [line])
    assert "hang" in ids(r) and "crash" not in ids(r)
    assert "rank 2 on gpu-b" in finding(r, "hang")["message"] and r["verdict"] == "fail"


@pytest.mark.parametrize(
    "kind, says, never",
    [(1, "memlock", "FI_EFA_SET_CUDA_SYNC_MEMOPS=0"), (2, "FI_EFA_SET_CUDA_SYNC_MEMOPS=0", "memlock")],
)
def test_memory_registration_remedy_follows_the_memory_type(kind, says, never):
    """aws-ofi-nccl src/nccl_ofi_sendrecv.cpp: "Unable to register memory (type = %d) for device %d. ..."."""
    line = (
        "node-1:42:60 [0] register_mr_buffers:582 NCCL WARN NET/OFI Unable to register memory (type = %d) "
        "for device 0. RC: -12, Error: Cannot allocate memory" % kind
    )
    f = finding(analyze([line]), "mr-registration-failed")
    assert says in f["remedy"] and never not in f["remedy"]


def test_gdr_disabled_remedy_points_at_the_efa_driver_not_nvidia_peermem():
    r = analyze((FIX / "gdr-disabled-p4d.log").read_text().splitlines())
    remedy = finding(r, "gdr-disabled")["remedy"]
    assert "efa_nv_peermem" in remedy and "/device/p2p" in remedy
    assert "peer-memory module" not in remedy and "load nvidia_peermem" not in remedy.lower()


CORPUS_TRUE = ("01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce", "02-eks-p4d-2node-efa-gdr-nccl2.8.3-allreduce")


@pytest.mark.parametrize("name", CORPUS_TRUE)
def test_real_log_with_one_rank_silenced_is_never_true(nccl_logs_dir, name):
    """Real p4d logs (efa and gdr true as given): silence one process at a time (its lines deleted, its
    `Init COMPLETE` kept) -> efa/gdr are never true and the verdict never passes."""
    path = nccl_logs_dir / f"{name}.log"
    if not path.is_file():
        corpus_missing(f"{name} not in the corpus")
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    assert analyze(lines)["gdr"] is True
    texts = [strip_prefix(x)[1] for x in lines]
    procs = sorted({t.split(" ", 1)[0].rsplit(":", 1)[0] + ":" for t in texts if " NCCL INFO " in t})
    procs = [p for p in procs if p.count(":") == 2][:4]
    assert len(procs) == 4
    for proc in procs:
        kept = [x for x, t in zip(lines, texts) if not t.startswith(proc) or "Init COMPLETE" in t]
        r = analyze(kept)
        assert len(kept) < len(lines)
        assert r["efa"] is not True and r["gdr"] is not True and r["verdict"] != "pass", proc


@pytest.mark.parametrize(
    "line, kind, says",
    [
        # NCCL's CUDACHECK inside the library: WARN "Cuda failure '%s'"
        ("gpu-b:51201:51241 [1] enqueue.cc:1100 NCCL WARN Cuda failure 'named symbol not found'", "crash",
         "on gpu-b: Cuda failure 'named symbol not found'"),
        # PyTorch c10d: "NCCL error in: <file>:<line>, <error>, NCCL version ..."
        ("[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
         "ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL developers, "
         "NCCL version 2.19.3", "crash", "rank 3: NCCL error: internal error"),
        ("[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
         "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
         "NCCL version 2.19.3", "hang", "rank 2: NCCL error: unhandled system error"),
    ],
)  # fmt: skip
def test_library_and_framework_errors_fail_naming_who(line, kind, says):
    r = analyze(P5 + [line])
    assert r["verdict"] == "fail" and says in finding(r, kind)["message"]


def test_the_efa_and_gdr_checks_carry_the_lines_that_prove_them():
    """Unknown for a silent rank shows what that rank did print; false on counter-evidence shows it."""
    lines = [x for x in P5 if "gpu-b:51201" not in x or "Init COMPLETE" in x]
    r = analyze(lines)
    for name in ("efa", "gdr"):
        ev = check(r, name)["evidence"]
        assert ev and "gpu-b:51201" in ev[0]["text"] and "Init COMPLETE" in ev[0]["text"], name
    r = analyze([H + "NET/Plugin: Could not find: libnccl-net.so", H + "NET/Socket : Using [0]eth0", COMM])
    texts = [e["text"] for e in check(r, "efa")["evidence"]]
    assert any("Could not find" in t for t in texts) and any("NET/Socket" in t for t in texts)
