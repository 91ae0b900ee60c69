"""Unit tests: prefixes, the NCCL/aws-ofi-nccl line formats by version, and the binary line scanner."""

import io

import pytest

from efa_validators.parse.nccllog import parse_line
from efa_validators.scan.linescan import scan
from efa_validators.scan.prefix import strip_prefix

HEAD = "gpu-a:4100:4140 [0] NCCL INFO "


def kinds(line):
    return [(e.kind, e.data) for e in parse_line(line)]


def one(line, kind):
    evs = [e for e in parse_line(line) if e.kind == kind]
    assert len(evs) == 1, parse_line(line)
    return evs[0]


# ----------------------------------------------------------------------------- prefixes
@pytest.mark.parametrize(
    "raw, source, text",
    [
        ("[1,3]<stdout>:h:1:2 [0] NCCL INFO x", "mpi:3", "h:1:2 [0] NCCL INFO x"),
        ("[1,12]<stderr>: h:1:2 [0] NCCL INFO x", "mpi:12", "h:1:2 [0] NCCL INFO x"),
        ("3: h:1:2 [0] NCCL INFO x", "srun:3", "h:1:2 [0] NCCL INFO x"),
        ("  12: h:1:2 [0] NCCL INFO x", "srun:12", "h:1:2 [0] NCCL INFO x"),
        ("| 2024-06-17T16:23:09.123Z | h:1:2 [0] NCCL INFO x |", None, "h:1:2 [0] NCCL INFO x"),
        ("| 1718638989123 | h:1:2 [0] NCCL INFO x", None, "h:1:2 [0] NCCL INFO x"),
        ("[2026-01-02 10:24:27] h:1:2 [0] NCCL INFO x", None, "h:1:2 [0] NCCL INFO x"),
        ("2024-06-17T16:23:09.123456789Z h:1:2 [0] NCCL INFO x", None, "h:1:2 [0] NCCL INFO x"),
        ("Jun 17 16:23:09 h:1:2 [0] NCCL INFO x", None, "h:1:2 [0] NCCL INFO x"),
        ("[default3]:h:1:2 [0] NCCL INFO x", "torchrun:3", "h:1:2 [0] NCCL INFO x"),
        ("    h:1:2 [0] NCCL INFO x\r\n", None, "h:1:2 [0] NCCL INFO x"),
        ("0: 2025-06-17 16:23:09 I [train.py:1] hi", "srun:0", "I [train.py:1] hi"),
        ("[1,0]<stdout>:[2026-01-02 10:24:27] h:1:2 [0] NCCL WARN y", "mpi:0", "h:1:2 [0] NCCL WARN y"),
    ],
)
def test_strip_prefix(raw, source, text):
    assert strip_prefix(raw) == (source, text)


def test_table_rows_keep_their_spacing():
    row = "           8             2     float     sum      -1    12.90    0.00    0.00      0"
    assert strip_prefix("0: " + row) == ("srun:0", row)
    assert strip_prefix("[1,0]<stdout>:" + row) == ("mpi:0", row)


# ----------------------------------------------------------------------------- versions
def test_nccl_version_with_head_and_headless():
    ev = one(HEAD + "NCCL version 2.26.2+cuda12.2", "nccl_version")
    assert (ev.host, ev.pid, ev.dev, ev.data) == ("gpu-a", "4100", "0", {"version": "2.26.2", "cuda": "12.2"})
    ev = one("[1,0]<stdout>:NCCL version 2.9.9+cuda11.2", "nccl_version")
    assert ev.host is None and ev.source == "mpi:0" and ev.data["version"] == "2.9.9"
    assert one(HEAD + "NCCL version 2.19.3a0+cuda12.3", "nccl_version").data["version"] == "2.19.3"


def test_cuda_driver_versions():
    assert one(HEAD + "cudaDriverVersion 12080", "cuda_driver").data["version"] == "12.8"
    d = one(HEAD + "NET/OFI Using CUDA driver version 13000 with runtime 12090", "cuda_driver").data
    assert d == {"version": "13.0", "runtime": "12.9"}


def test_plugin_init_and_failure_are_not_confused():
    assert one(HEAD + "NET/OFI Initializing aws-ofi-nccl 1.13.2-aws", "plugin_init").data == {
        "name": "aws-ofi-nccl",
        "version": "1.13.2-aws",
    }
    assert kinds(HEAD + "NET/OFI Initializing plugin failed")[0][0] == "plugin_init_failed"
    warn = (
        "h:1:2 [2] ncclResult_t nccl_net_ofi_init_v6(ncclDebugLogger_t):162 NCCL WARN "
        "NET/OFI Initializing plugin failed"
    )
    assert {k for k, _ in kinds(warn)} == {"plugin_init_failed", "warn"}
    assert kinds(HEAD + "NET/OFI aws-ofi-nccl initialization failed")[0][0] == "plugin_init_failed"


def test_libfabric_and_platform():
    assert one(HEAD + "NET/OFI Using Libfabric version 1.22", "libfabric_version").data["version"] == "1.22"
    assert one(HEAD + "NET/OFI Plugin selected platform: AWS", "platform").data == {
        "name": "AWS",
        "via": "selected",
    }
    p = one(
        HEAD + "NET/OFI Running on P4d platform, Setting NCCL_TOPO_FILE environment variable to /x",
        "platform",
    )
    assert p.data == {"name": "P4d", "via": "running_on"}
    p = one(
        HEAD + "NET/OFI NCCL_OFI_TUNER is not available for platform : g6e.48xlarge, Fall back", "platform"
    )
    assert p.data == {"name": "g6e.48xlarge", "via": "tuner"}


# ----------------------------------------------------------------------------- provider
@pytest.mark.parametrize(
    "msg, provider, fabric, nics",
    [
        ("NET/OFI Selected Provider is efa", "efa", None, None),
        ("NET/OFI Selected Provider is efa;ofi_rxr", "efa;ofi_rxr", None, None),
        ("NET/OFI Selected Provider is efa (found 4 nics)", "efa", None, 4),
        ("NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)", "efa", "efa-direct", 16),
        ("NET/OFI Selected provider is efa, fabric is efa (found 4 nics)", "efa", "efa", 4),
        ("NET/OFI Selected Provider is tcp;ofi_rxm (found 1 nics)", "tcp;ofi_rxm", None, 1),
    ],
)
def test_provider_variants(msg, provider, fabric, nics):
    assert one(HEAD + msg, "provider").data == {"provider": provider, "fabric": fabric, "nics": nics}


# ----------------------------------------------------------------------------- network and plugin load
@pytest.mark.parametrize("name", ["AWS Libfabric", "Libfabric", "Socket", "IB", "IBext_v8"])
def test_using_network(name):
    assert one(HEAD + "Using network " + name, "network").data["name"] == name


def test_plugin_loading_lines():
    assert kinds(HEAD + "NET/Plugin: Loaded net plugin Libfabric (v10)")[0] == (
        "plugin_loaded",
        {"name": "Libfabric", "api": "10"},
    )
    assert kinds(HEAD + "Successfully loaded external plugin libnccl-net.so")[0][0] == "plugin_loaded"
    for msg in (
        "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file",
        "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not "
        "supported.",
    ):
        assert kinds(HEAD + msg)[0][0] == "plugin_load_failed", msg
    # benign: collnet symbols, a newer API version missing before an older one loads
    assert kinds(HEAD + "NET/Plugin: Failed to find ncclCollNetPlugin_v4 symbol.") == []
    assert kinds(HEAD + "NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.") == []
    assert kinds(HEAD + "Assigned NET plugin Socket to comm")[0] == ("network", {"name": "Socket"})


def test_bootstrap_socket_is_not_the_network():
    assert kinds(HEAD + "NET/Socket : Using [0]eth0:172.31.16.64<0>")[0][0] == "socket_if"
    # the bootstrap line only names its process's host (issue 23, item 1): never a network or socket_if
    assert [k for k, _ in kinds(HEAD + "Bootstrap : Using eth0:10.0.92.140<0>")] == ["bootstrap"]


# ----------------------------------------------------------------------------- GDR disabled
@pytest.mark.parametrize(
    "msg",
    [
        "NET/OFI GDR disabled on GDR-supported instance type p4d.24xlarge",
        "NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR",
        "NET/OFI Need to force simple protocol: GDR not supported",
        "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)",
    ],
)
def test_gdr_disabled_lines(msg):
    assert "gdr_disabled" in [k for k, _ in kinds(HEAD + msg)]


def test_gdr_flush_setting_is_not_gdr_disabled():
    assert "gdr_disabled" not in [
        k for k, _ in kinds(HEAD + "NET/OFI Setting OFI_NCCL_GDR_FLUSH_DISABLE environment variable to 1")
    ]


# ----------------------------------------------------------------------------- channels
@pytest.mark.parametrize(
    "msg, expect",
    [
        (
            "Channel 00 : 3[101c0] -> 11[101c0] [send] via NET/AWS Libfabric/0/GDRDMA",
            dict(
                transport="NET",
                net="AWS Libfabric",
                netdev=0,
                gdr=True,
                proxy=None,
                dir="send",
                src=3,
                dst=11,
            ),
        ),
        (
            "Channel 01/0 : 1[1] -> 2[0] [send] via NET/Libfabric/3(0)/GDRDMA",
            dict(transport="NET", net="Libfabric", netdev=3, gdr=True, proxy=0),
        ),
        (
            "Channel 01/0 : 1[1] -> 2[0] [receive] via NET/Libfabric/2/GDRDMA(PCI)/Shared",
            dict(net="Libfabric", gdr=True, pci=True, shared=True, dir="receive"),
        ),
        ("Channel 00/0 : 3[0] -> 0[0] [receive] via NET/Libfabric/0", dict(net="Libfabric", gdr=False)),
        (
            "Ring 00 : 7 -> 8 [receive] via NET/AWS Libfabric/0",
            dict(net="AWS Libfabric", gdr=False, src=7, dst=8),
        ),
        ("Ring 00 : 0 -> 1 [send] via NET/AWS Libfabric/0/GDRDMA", dict(gdr=True)),
        (
            "Channel 00/1 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA/Shared",
            dict(net="IB", gdr=True, shared=True),
        ),
        ("Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0", dict(net="Socket", gdr=False)),
        # cut before the GDR flag could print, or another rank's text spliced in: not a 'no GDR'
        ("Channel 00 : 1[101c0] -> 0[101c0] [receive] via NET/AWS Libfab", dict(gdr=None, net=None)),
        ("Channel 00 : 1[101c0] -> 0[101c0] [receive] via NET/AWS Libfabric/0 junk!", dict(gdr=None)),
    ],
)
def test_net_channels(msg, expect):
    data = one(HEAD + msg, "channel").data
    for k, v in expect.items():
        assert data[k] == v, (k, data)


@pytest.mark.parametrize(
    "msg, transport",
    [
        ("Channel 00 : 0[101c0] -> 1[101d0] via P2P/IPC/read", "P2P"),
        ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "P2P"),
        ("Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct", "SHM"),
        ("Ring 00 : 8[0] -> 9[1] via P2P/IPC", "P2P"),
    ],
)
def test_intra_node_channels_are_not_net(msg, transport):
    assert one(HEAD + msg, "channel").data["transport"] == transport


def test_graph_dump_ring_lines_are_not_channels():
    assert kinds(HEAD + "Ring 08 : 0 -> 1 -> 2") == []
    assert kinds(HEAD + "Channel 00/08 :    0   7   6   5   4   3   2   1") == []


def test_spliced_lines_yield_both_heads():
    line = (
        "z-1:1:5 [0] NCCL INFO Channel 01 : 1[a] -> 0[a] [receive] via NET/AWS Libfab"
        "z-2:2:6 [0] NCCL INFO Channel 00 : 0[a] -> 1[a] [receive] via NET/AWS Libfabric/0/GDRDMA"
    )
    evs = [e for e in parse_line(line) if e.kind == "channel"]
    assert [(e.data["gdr"], e.cut) for e in evs] == [(None, True), (True, False)]
    # where the splice glued text to the hostname, the host cannot be told apart: the first part is cut
    assert evs[0].host == "z-1" and evs[1].host.endswith("z-2")


def test_device_field_as_bus_id():
    ev = one(
        "h:1:2 [0000:53:00.0] NCCL INFO Channel 00/0 : 0[53000] -> 1[64000] [send] via NET/IB/1/GDRDMA",
        "channel",
    )
    assert ev.dev == "0000:53:00.0" and ev.data["gdr"] is True


# ----------------------------------------------------------------------------- comm, warn, torch
def test_comm_lines():
    d = one(HEAD + "comm 0x7f7964000f60 rank 6 nranks 16 cudaDev 6 busId a01c0 - Init COMPLETE", "comm").data
    assert (d["rank"], d["nranks"], d["cudadev"], d["busid"], d["phase"]) == (6, 16, "6", "a01c0", "COMPLETE")
    d = one(HEAD + "comm 0x55 rank 0 nRanks 4 nNodes 4 localRanks 1 localRank 0 MNNVL 0", "comm").data
    assert (d["rank"], d["nranks"], d["nnodes"]) == (0, 4, 4)
    d = one(
        HEAD + "ncclCommInitRankConfig comm 0x5 rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 201d0 "
        "commId 0x52 - Init START",
        "comm",
    ).data
    assert (d["rank"], d["phase"], d["busid"]) == (3, "START", "201d0")


def test_warn_line_with_function_and_timestamp():
    line = (
        "[2026-01-02 10:24:27] ip-1:35115:35469 [2] int f(g**):208 NCCL WARN "
        "NET/OFI Failed to initialize sendrecv protocol"
    )
    ev = one(line, "warn")
    assert (ev.host, ev.pid, ev.dev, ev.level) == ("ip-1", "35115", "2", "WARN")


def test_torch_watchdog():
    line = (
        "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=812, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600088 milliseconds"
    )
    ev = one(line, "watchdog")
    assert ev.data["rank"] == 3 and ev.data["work"].startswith("WorkNCCL(SeqNum=812")


def test_junk_yields_nothing():
    for junk in ("", "   ", "NCCL", "NCCL INFO", ":::: [] NCCL INFO", "\x00\xff" * 10, "[1,", "| |"):
        assert parse_line(junk) == [] or all(e.kind in ("warn", "error") for e in parse_line(junk))


# ----------------------------------------------------------------------------- line scanner
def _scan_all(data: bytes, needles=(b"NET", b"#"), chunk=7):
    return [t[:3] for t in scan(io.BytesIO(data), needles, chunk_size=chunk)]


def test_scan_reports_which_needle_groups_a_line_holds():
    data = b"a NET\nb #\nc NET #\nd\n"
    got = [(n, f) for n, _, _, f in scan(io.BytesIO(data), [(b"NET", 1), (b"#", 4)])]
    assert got == [(1, 1), (2, 4), (3, 5)]


def test_scan_line_numbers_match_enumerate_across_chunk_sizes():
    lines = [b"a NET 1", b"b", b"c # x", b"", b"d NET", b"e"] * 5
    data = b"\n".join(lines) + b"\n"
    want = [(i, ln.decode(), False) for i, ln in enumerate(lines, 1) if b"NET" in ln or b"#" in ln]
    for chunk in (1, 3, 7, 64, 1 << 20):
        assert _scan_all(data, chunk=chunk) == want, chunk


def test_scan_crlf_bad_bytes_and_cut_last_line():
    data = b"x NET a\r\ny NET \xff\xfe b\nz NET cut"
    got = _scan_all(data)
    assert got[0] == (1, "x NET a", False)
    assert got[1][0] == 2 and "\ufffd" in got[1][1] and got[1][2] is False
    assert got[2] == (3, "z NET cut", True)


def test_scan_overlong_line_is_cut_and_skipped():
    from efa_validators.scan import linescan

    data = b"NET " + b"x" * (linescan.MAX_LINE * 3) + b"\nNET next\n"
    got = list(scan(io.BytesIO(data), (b"NET",), chunk_size=4096))
    assert [(n, c) for n, _, c, _ in got] == [(1, True), (2, False)]
    assert got[1][1] == "NET next"
    stats = {}
    list(scan(io.BytesIO(data), (b"NET",), chunk_size=4096, stats=stats))
    assert stats == {"lines": 2, "bytes": len(data)}


def test_scan_region_passes_table_rows_across_chunks():
    from efa_validators.scan.linescan import Region

    lines = [
        b"x",
        b"# size count type busbw",
        b"  8  2 float",
        b" 16  4 float",
        b"# Avg bus bandwidth : 1",
        b"after",
    ]
    lines += [b"# size count busbw", b"  32  8 half"]  # a second table, never closed
    data = b"\n".join(lines) + b"\n"
    for chunk in (3, 11, 1 << 16):
        region = Region(lambda ln: b"size" in ln and b"count" in ln, lambda ln: b"Avg bus" in ln, 4, 100)
        got = [
            (n, t, f) for n, t, _, f in scan(io.BytesIO(data), [(b"#", 1)], chunk_size=chunk, region=region)
        ]
        assert got == [
            (2, "# size count type busbw", 1),
            (3, "  8  2 float", 4),
            (4, " 16  4 float", 4),
            (5, "# Avg bus bandwidth : 1", 5),
            (7, "# size count busbw", 1),
            (8, "  32  8 half", 4),
        ], chunk


def test_scan_region_is_bounded():
    from efa_validators.scan.linescan import Region

    data = b"# size count\n" + b"row\n" * 50
    region = Region(lambda ln: b"size" in ln, lambda ln: False, 4, 10)
    got = list(scan(io.BytesIO(data), [(b"#", 1)], region=region))
    assert len(got) == 11


def test_every_error_phrase_passes_the_substring_prefilter():
    """nccllog._is_error_text runs _ERROR_LINE only on text holding 'rror' or 'failure': a phrase added
    without either would never be seen."""
    import re

    from efa_validators.parse import nccllog

    phrases = re.split(r"\|(?![^(]*\))", nccllog._ERROR_LINE.pattern)  # top-level alternatives
    assert len(phrases) >= 8
    for phrase in phrases:
        assert "rror" in phrase or "failure" in phrase, phrase
        example = re.sub(r"\(\?:(\w+)\|[^)]*\)", r"\1", phrase)  # one spelling of a (?:a|b) group
        assert nccllog._is_error_text("x " + example + " y"), example
