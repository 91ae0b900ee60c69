"""Formats as NCCL, aws-ofi-nccl and nccl-tests print them today and yesterday (issue #10 item 4).

Each fixture line is written here from the format string in the upstream source named beside it
(docs/validators.md lists them all): NVIDIA/nccl src/plugin/net.cc, src/plugin/plugin_open.cc, src/net.cc
(2.18-2.22); aws/aws-ofi-nccl src/nccl_ofi_net.cpp; NVIDIA/nccl-tests src/util.cu.
"""

import pytest

from efa_validators.analyze import analyze

H = "node-1:42:42 [0] NCCL INFO "
COMM = "node-1:42:50 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE"
GOOD = [
    H + "NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
    H + "Using network Libfabric",
    COMM,
    "node-1:42:50 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA",
]


def ids(report):
    return {f["id"] for f in report["findings"]}


def check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def test_nccl_2_28_successfully_loaded_external_network_plugin():
    """src/plugin/net.cc: "Successfully loaded external network plugin %s" (the library path)."""
    line = H + "Successfully loaded external network plugin /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    r = analyze([line] + GOOD)
    assert (r["efa"], r["gdr"]) == (True, True) and "plugin-missing" not in ids(r)


@pytest.mark.parametrize(
    "line",
    [
        # src/plugin/net.cc (2.28+): "External network plugin %s is unsupported"
        "External network plugin /opt/amazon/ofi-nccl/lib/libnccl-net.so is unsupported",
        # src/plugin/plugin_open.cc (2.28+): "%s/Plugin: Could not find:%s%s%s" (NCCL_NET_PLUGIN=ofi)
        "NET/Plugin: Could not find: ofi libnccl-net-ofi.so",
        # src/plugin/plugin_open.cc (2.23-2.27) with its fallback text
        "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
    ],
)
def test_plugin_not_loaded_lines_then_socket_are_plugin_missing_and_not_efa(line):
    r = analyze([H + line, H + "NET/Socket : Using [0]eth0:10.0.0.1<0>", COMM])
    assert r["efa"] is False and "plugin-missing" in ids(r) and r["verdict"] == "fail"


@pytest.mark.parametrize(
    "line",
    [
        # src/plugin/net.cc: "Failed to initialize NET plugin %s" (then NCCL's internal transports)
        "Failed to initialize NET plugin Libfabric",
        # src/plugin/net.cc WARN("Failed to initialize any NET plugin")
        "Failed to initialize any NET plugin",
    ],
)
def test_nccl_2_28_failed_to_initialize_net_plugin_is_not_efa(line):
    r = analyze([H + line, COMM])
    assert r["efa"] is False and "ofi-init-failed" in ids(r)


@pytest.mark.parametrize(
    "line",
    [
        # 2.23-2.27: "%s/Plugin: %s" with dlerror() of the plugin whose dependency is missing
        "NET/Plugin: libfabric.so.1: cannot open shared object file: No such file or directory",
        # 2.28+: "%s/Plugin: %s: %s" (library name, dlerror())
        "NET/Plugin: libnccl-net-ofi.so: libfabric.so.1: cannot open shared object file: No such file or "
        "directory",
        # 2.18: "NET/Plugin : Plugin load (%s) returned %d : %s"
        "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libfabric.so.1: cannot open shared object "
        "file: No such file or directory",
    ],
)
def test_plugin_present_but_its_libfabric_missing_names_the_root_cause(line):
    r = analyze([H + line, H + "NET/Socket : Using [0]eth0:10.0.0.1<0>", COMM])
    dep = next(f for f in r["findings"] if f["id"] == "plugin-dependency-missing")
    assert "libfabric.so.1" in dep["message"] and "node-1" in dep["message"]
    assert r["efa"] is False and "libfabric.so.1" in check(r, "efa")["detail"]


def test_plugin_itself_missing_is_no_dependency_finding():
    line = "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object"
    r = analyze([H + line, H + "NET/Plugin : No plugin found, using internal implementation", COMM])
    assert "plugin-missing" in ids(r) and "plugin-dependency-missing" not in ids(r)


@pytest.mark.parametrize(
    "line",
    [
        "NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
        "NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
        "[0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
    ],
)
def test_a_single_line_without_head_still_tells_the_provider(line):
    """aws-ofi-nccl src/nccl_ofi_net.cpp: "Selected provider is %s, fabric is %s (found %d nics)"."""
    r = analyze([line])
    assert (r["provider"], r["fabric"], r["nics"]) == ("efa", "efa-direct", 16)
    assert r["efa"] is None and r["verdict"] != "pass"  # a provider line alone proves no rank's transport


def test_a_single_socket_line_without_head_is_counter_evidence():
    r = analyze(["NCCL INFO Using network Socket"])
    assert r["efa"] is False and r["gdr"] is not True


HEADER = [
    "# nccl-tests version 2.17.6 nccl-headers=22902 nccl-library=22902",
    "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0 unalign: 0",
    "#",
    "# Using devices",
    "#  Rank  0 Group  0 Pid  40100 on      gpu-a device  0 [0000:53:00] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  0 Pid  51200 on      gpu-b device  0 [0000:53:00] NVIDIA H100 80GB HBM3",
]
TABLE = [  # columns as util.cu prints them, spacing narrowed (the reader goes by tokens)
    "#   size   count   type redop root   time  algbw  busbw #wrong   time  algbw  busbw #wrong",
    "#    (B) (elements)                  (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)",
    "  1073741824  268435456  float  sum  -1  3671.0 292.49 292.49  0  3669.2 292.63 292.63  0",
    "  2147483648  536870912  float  sum  -1  7240.1 296.61 296.61  0  7238.8 296.66 296.66  0",
]
FOOTER = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 294.597 "]


def test_nccl_library_version_from_the_header():
    """util.cu: "# nccl-tests version %s nccl-headers=%d nccl-library=%d": 22902 is NCCL 2.29.2."""
    r = analyze(HEADER + TABLE + FOOTER)
    assert r["nccl_tests"]["nccl_version"] == "2.29.2" and r["nccl_version"] == "2.29.2"
    assert r["nccl_tests"]["nccl_tests_version"] == "2.17.6"


def test_table_and_footer_pasted_without_their_hash():
    bare = [x.lstrip("#") for x in TABLE + FOOTER]
    r = analyze(HEADER + bare)
    nt = r["nccl_tests"]
    assert len(nt["rows"]) == 2 and nt["plateau_busbw"] == 296.66
    assert (nt["out_of_bounds"], nt["avg_busbw"]) == (0, 294.597)
    assert "hang" not in ids(r)


@pytest.mark.parametrize("bare", [False, True])
def test_a_footer_without_its_header_is_never_a_hang(bare):
    footer = [x.lstrip("#") for x in FOOTER] if bare else FOOTER
    r = analyze(HEADER + footer)
    assert "hang" not in ids(r) and "nccl-tests-no-results" not in ids(r)
    assert r["nccl_tests"]["out_of_bounds"] == 0


@pytest.mark.parametrize(
    "lines",
    [
        ["Out of bounds values : 3 FAILED"],
        ["# Out of bounds values : 3 FAILED"],
        ["[1,0]<stdout>:# Out of bounds values : 3 FAILED"],
        HEADER + TABLE + ["# Out of bounds values : 3 FAILED", "# Avg bus bandwidth    : 294.597 "],
    ],
    ids=["bare", "hash", "mpirun", "after-table"],
)
def test_out_of_bounds_failed_anywhere_fails(lines):
    r = analyze(lines)
    assert check(r, "out-of-bounds")["status"] == "fail" and r["verdict"] == "fail"


def test_a_headless_fragment_among_headed_processes_does_not_override_them():
    """A line that lost its head inside a log of headed processes is most likely one of theirs: the
    processes' own lines decide; lines without heads count only for a snippet that has no head at all."""
    r = analyze(GOOD + ["NCCL INFO Using network Socket"])
    assert (r["efa"], r["gdr"], r["network"]) == (True, True, "Libfabric")
