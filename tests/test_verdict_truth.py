"""Verdict truth (issue #10): every rank proves it, counter-evidence counts, failures are failures.

The formats are written here from the format strings in the upstream sources named next to each one
(NVIDIA/nccl, aws/aws-ofi-nccl, NVIDIA/nccl-tests); docs/validators.md lists them.
"""

from pathlib import Path

import pytest

from validators.analyze import analyze

FIX = Path(__file__).resolve().parent / "fixtures" / "logs"
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
