"""Cause before effect (issue 24): each failure class's finding comes first, its consequences name it, and the
facts read as the text shows them. The fixtures are the project's own, written in each source's format."""

import os
from pathlib import Path

import pytest
from cli import validators_process
from conftest import corpus_missing
from paths import ROOT

from efa_validators.analyze import analyze_paths
from efa_validators.judge import causes
from efa_validators.report.formats import to_markdown

FIX = ROOT / "tests" / "fixtures" / "logs"


def _report(name: str, **kw) -> dict:
    return analyze_paths([str(FIX / name)], **kw)


def _ids(report: dict) -> list:
    return [f["id"] for f in report["findings"]]


def lead_table(table: str) -> dict:
    """fixture -> (the root cause the report leads with, [(effect, its cause), ...] links it must make), from
    lines `fixture: first; effect <- cause; ...` (a line that starts with spaces goes on with the one above;
    `#` starts a comment)."""
    lines = []  # type: list
    for line in table.splitlines():
        if line[:1].isspace() and lines:
            lines[-1] += " " + line.strip()
        elif line.strip() and not line.startswith("#"):
            lines.append(line.strip())
    out = {}
    for line in lines:
        name, said = line.split(": ", 1)
        first, *links = [part.strip() for part in said.split(";")]
        out[name] = (first, [tuple(link.split(" <- ")) for link in links])
    return out


# fixture: the root cause first; then each (effect <- its cause) link the report must make
CLASSES = lead_table(
    """
completion-error-unreachable.log: completion-error; hang <- completion-error
completion-error-unresponsive.log: completion-error; watchdog-timeout <- completion-error
hang.log: completion-error; hang <- completion-error
bootstrap-address-family.log: bootstrap-interface; crash <- bootstrap-interface
rank-topology-mismatch.log: rank-topology-mismatch; crash <- rank-topology-mismatch
resource-slurm.log: resource-allocation-failed
resource-eks-efa.log: resource-allocation-failed
resource-cuda-oom.log: resource-allocation-failed; crash <- resource-allocation-failed
internal-error-topology.log: topology-attribute-missing; crash <- topology-attribute-missing
efa-devices-missing.log: efa-devices-missing; ofi-init-failed <- efa-devices-missing;
    socket-fallback <- ofi-init-failed
gdr-disabled-p4d.log: gdr-disabled; ofi-init-failed <- gdr-disabled
cuda-driver-too-old.log: cuda-driver-too-old; crash <- cuda-driver-too-old
socket-fallback-nccl2.4.log: plugin-missing; socket-fallback <- plugin-missing
ofi-test-optimal-provider.log: efa-devices-missing; ofi-init-failed <- efa-devices-missing
cxi-slingshot-hang.log: hang
# issue 41: the classes that ended 'unknown' with no finding
libfabric-efa-peer-reset.log: completion-error
torch-watchdog-wrapped.log: watchdog-hang
launcher-start-failed-cxi.log: launcher-start-failed
nccl-tests-return-chain.log: crash
gin-gdrcopy-missing.log: gdrcopy-unavailable; gin-init-failed <- gdrcopy-unavailable;
    gin-unavailable <- gin-init-failed; crash <- gin-unavailable
torch-traceback.log: python-exception
"""
)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_the_root_cause_comes_first_and_its_effects_name_it(name):
    first, links = CLASSES[name]
    assert_leads_with(_report(name), first, links)


def assert_leads_with(report: dict, first: str, links: list) -> None:
    """The failed report leads with `first`, and each (effect, cause) link's effect comes after its cause and
    names it."""
    ids = _ids(report)
    assert ids[0] == first, ids
    by_id = {f["id"]: f for f in report["findings"]}
    for effect, cause in links:
        assert ids.index(cause) < ids.index(effect), ids
        assert by_id[effect]["caused_by"] == cause
        assert "(see %s)" % cause in by_id[effect]["message"]
    assert report["verdict"] == "fail"  # fail closed: no new rule makes a pass


H = "node-q:4410:4462 [0]"
# one line per text pattern of the new signatures, written in the format its source prints (see their
# `source`): each gets through the line filter and names its signature first
PATTERN_LINES = [
    (
        "completion-error",
        f"{H} ofi_process_cq:298 NCCL WARN NET/OFI Unable to read from fi_cq_readerr. RC: -11. "
        "Error: Resource temporarily unavailable",
    ),
    ("completion-error", "mlx5_core 0000:3b:00.0: CQ error on CQN 0x4a1, syndrome 0x1"),
    ("completion-error", f"{H} process_recv:1088 NCCL WARN NET/OFI Unexpected status (2) for message 17"),
    (
        "completion-error",
        f"{H} transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<42123> "
        "with status=12 opcode=0 len=0 vendor err 129 (Recv)",
    ),
    (
        "completion-error",
        "libfabric:9120:1765000000::efa:ep_data:efa_rdm_pke_handle_tx_error():512<warn> "
        "Unresponsive remote (was previously responsive)",
    ),
    (
        "completion-error",
        f"{H} log_cq_error:125 NCCL WARN NET/OFI Request 0x7f01 (recv) completed with error: "
        "err: 5, flags: 0, prov_errno: 12, strerror: Unexpected status returned by responder, len: 0",
    ),
    ("bootstrap-interface", f"{H} bootstrap.cc:126 NCCL WARN Bootstrap : no socket interface found"),
    (
        "bootstrap-interface",
        f"{H} bootstrap.cc:120 NCCL WARN NET/Socket : No usable listening interface found",
    ),
    (
        "bootstrap-interface",
        f"{H} misc/socket.cc:261 NCCL WARN Net : No interface found in the same subnet as "
        "remote address 10.9.0.3<51234>",
    ),
    (
        "bootstrap-interface",
        f"{H} misc/socket.cc:279 NCCL WARN Net : No valid <IPv4_or_hostname>:<port> pair found",
    ),
    (
        "bootstrap-interface",
        f"{H} misc/socket.cc:290 NCCL WARN Net : error encountered when getting address info : "
        "Name or service not known",
    ),
    (
        "bootstrap-interface",
        f"{H} os/linux.cc:302 NCCL WARN socketStartConnect: connect to 10.0.0.7<34567> failed : "
        "Network is unreachable",
    ),
    (
        "bootstrap-interface",
        f"{H} misc/socket.cc:585 NCCL WARN ncclSocketInit: connecting to address 10.0.0.7<0> "
        "with family 0 is neither AF_INET(2) nor AF_INET6(10)",
    ),
    (
        "rank-topology-mismatch",
        f"{H} rdma_init:2067 NCCL WARN NET/OFI Unexpected number of remote rails for dev 0. "
        "Expected 4 but got 2",
    ),
    (
        "rank-topology-mismatch",
        f"{H} bootstrap.cc:335 NCCL WARN Bootstrap Root : mismatch in info from procs, "
        "nranks 16 vs 8, nroots 1 vs 1, iroot 0 vs 0, offset 0 vs 0",
    ),
    ("topology-attribute-missing", f"{H} graph/xml.cc:219 NCCL WARN XML Mismatch : gpu / nic"),
    ("resource-allocation-failed", f"{H} include/alloc.h:493 NCCL WARN Failed to CUDA calloc 6291456 bytes"),
    ("resource-allocation-failed", f"{H} include/alloc.h:178 NCCL WARN Failed to malloc 1048576 bytes"),
    (
        "resource-allocation-failed",
        f"{H} transport/net_socket.cc:558 NCCL WARN NET/Socket : unable to allocate requests",
    ),
    (
        "resource-allocation-failed",
        f"{H} freelist_add:241 NCCL WARN NET/OFI Failed to allocate freelist block metadata",
    ),
    ("resource-allocation-failed", f"{H} cuda_alloc:287 NCCL WARN NET/OFI cuMemAlloc failed: out of memory"),
]


@pytest.mark.parametrize("sig, line", PATTERN_LINES)
def test_each_pattern_line_names_its_signature_first(sig, line):
    from efa_validators.analyze import analyze

    report = analyze([line])
    assert _ids(report)[0] == sig, _ids(report)
    assert report["verdict"] == "fail"


def test_benign_lines_name_no_new_signature():
    from efa_validators.analyze import analyze

    lines = [
        f"{H} NCCL INFO Bootstrap : Using eth0:10.0.0.7<0>",
        f"{H} NCCL INFO NET/Socket : Using [0]eth0:10.0.0.7<0>",
        f"{H} NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
        f"{H} NCCL INFO 32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, "
        "32 p2p channels per peer",
        f"{H} NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    ]
    new = {"completion-error", "bootstrap-interface", "rank-topology-mismatch", "topology-attribute-missing"}
    assert not new & set(_ids(analyze(lines))) and "resource-allocation-failed" not in _ids(analyze(lines))


def test_a_consequence_says_why_in_its_message():
    report = _report("efa-devices-missing.log")
    fallback = next(f for f in report["findings"] if f["id"] == "socket-fallback")
    said = "NCCL fell back to TCP sockets because the plugin failed to initialise"
    assert fallback["message"].startswith(said)
    assert causes.chain(report["findings"], "socket-fallback") == [
        "efa-devices-missing",
        "ofi-init-failed",
        "socket-fallback",
    ]


def test_completion_error_names_the_provider_text_and_the_peer():
    f = _report("completion-error-unreachable.log")["findings"][0]
    assert "Unreachable remote (never received a response)" in f["message"]
    assert "peer i-07d2e6c1b0f9a3e44" in f["message"] and "gpu-st-p5-1" in f["message"]
    assert "security group" in f["remedy"]
    g = _report("completion-error-unresponsive.log")["findings"][0]
    assert "Unresponsive receiver (reachable by EFA device but handshake failed)" in g["message"]
    assert "peer i-0f1e2d3c4b5a69788" in g["message"] and "peer" in g["remedy"]


def test_an_internal_error_names_the_warn_before_it():
    crash = _report("internal-error-warn.log")["findings"][0]
    assert crash["id"] == "crash"
    assert "the WARN before it: Could not find NET with id 2" in crash["message"]
    assert "Could not find NET" in crash["evidence"][0]["text"]


def test_ranks_of_one_host_that_found_different_nic_counts():
    f = _report("rank-topology-mismatch.log")["findings"][0]
    assert "4 nics in 1 process(es) and 2 nics in 1 process(es)" in f["message"]


def test_resource_remedy_follows_the_resource():
    assert "Slurm" in _report("resource-slurm.log")["findings"][0]["remedy"]
    assert "EFA devices" in _report("resource-eks-efa.log")["findings"][0]["remedy"]
    assert "GPU memory" in _report("resource-cuda-oom.log")["findings"][0]["remedy"]


def test_a_native_provider_without_an_efa_platform_is_a_note_not_the_cause():
    report = _report("cxi-slingshot-hang.log")
    provider = next(f for f in report["findings"] if f["id"] == "provider-not-efa")
    assert provider["severity"] == "info" and "HPE Slingshot" in provider["message"]
    assert report["efa"] is False and report["verdict"] == "fail"
    # judged against an EFA instance type, the same provider is an error again
    on_efa = _report("cxi-slingshot-hang.log", instance_type="p5.48xlarge")
    assert next(f for f in on_efa["findings"] if f["id"] == "provider-not-efa")["severity"] == "error"
    # a provider that is no fabric's own (tcp) stays an error with no platform at all
    tcp = _report("tcp-provider.log")
    assert next(f for f in tcp["findings"] if f["id"] == "provider-not-efa")["severity"] == "error"


def test_a_declared_fabric_judges_the_provider():
    slingshot = _report_cli("cxi-slingshot-hang.log", "--fabric", "slingshot")
    provider = next(f for f in slingshot["findings"] if f["id"] == "provider-not-efa")
    assert provider["severity"] == "info" and "declared fabric is HPE Slingshot" in provider["message"]
    assert slingshot["findings"][0]["id"] == "hang" and slingshot["verdict"] == "fail"
    efa = _report_cli("cxi-slingshot-hang.log", "--fabric", "efa")
    assert efa["findings"][0]["id"] == "provider-not-efa" and efa["findings"][0]["severity"] == "error"


def test_an_unknown_fabric_is_bad_input():
    proc = validators_process("parse", FIX / "cxi-slingshot-hang.log", "--fabric", "token-ring", timeout=60)
    assert proc.returncode == 2 and "--fabric 'token-ring'" in proc.stderr and "Traceback" not in proc.stderr


def _report_cli(name: str, *flags: str) -> dict:
    import json

    proc = validators_process("parse", FIX / name, "--json", "-", *flags, timeout=60)
    assert proc.returncode in (0, 1, 3), proc.stderr
    return json.loads(proc.stdout)


# ------------------------------------------------------------------ facts as the text shows them
def test_gdr_read0_receives_over_gdrdma_is_gdr_in_use():
    report = _report("gdr-read0-ib.log")
    assert report["gdr"] is True and report["efa"] is False and report["verdict"] == "fail"
    check = next(c for c in report["checks"] if c["name"] == "gdr")
    assert "read 0" in check["detail"]
    assert check["status"] == "unknown"  # fail closed: sends without GDR were never a pass


def test_gdr_read0_never_makes_a_new_pass():
    """The same log on EFA: every other check passes, the gdr check stays unknown, so the verdict does."""
    text = (FIX / "gdr-read0-ib.log").read_text()
    text = text.replace("NET/IB/0", "NET/AWS Libfabric/0")
    text = text.replace(
        "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.11<0>", "NET/OFI Selected Provider is efa"
    )
    text = text.replace(
        "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.12<0>", "NET/OFI Selected Provider is efa"
    )
    from efa_validators.analyze import analyze

    report = analyze(text.splitlines())
    assert report["efa"] is True and report["gdr"] is True
    assert report["verdict"] == "unknown"


def test_gdr_read0_does_not_excuse_a_rank_without_any_gdr_receive():
    lines = (FIX / "gdr-read0-ib.log").read_text().replace("/GDRDMA", "").splitlines()
    from efa_validators.analyze import analyze

    assert analyze(lines)["gdr"] is False


def test_nccl_2_4_socket_fallback_without_a_using_network_line_is_efa_false():
    report = _report("socket-fallback-nccl2.4.log")
    assert report["efa"] is False and report["nccl_version"] == "2.4.8"


def test_the_plugins_test_program_finding_no_provider_is_efa_false():
    assert _report("ofi-test-optimal-provider.log")["efa"] is False


@pytest.mark.parametrize(
    "name, version",
    [
        ("nccl-tests-header-nohash.log", "2.26.2"),
        ("nccl-version-device-prefix.log", "2.29.7"),
        ("bootstrap-address-family.log", "2.21.5"),
    ],
)
def test_nccl_version_as_the_text_shows_it(name, version):
    assert _report(name)["nccl_version"] == version


# ------------------------------------------------------------------ what the user reads first
def test_markdown_and_stdout_lead_with_the_root_cause_and_its_remedy(tmp_path):
    report = _report("efa-devices-missing.log")
    md = to_markdown(report).splitlines()
    assert md[2].startswith("**Root cause: no EFA device visible to libfabric (efa-devices-missing)")
    assert "remedy: pass /dev/infiniband" in md[2]
    proc = validators_process("parse", FIX / "efa-devices-missing.log", timeout=60)
    first = proc.stdout.splitlines()[0]
    assert first.startswith("root cause: no EFA device visible") and "; remedy: " in first


def test_the_run_summary_leads_with_the_root_cause_under_its_verdict():
    from efa_validators.cmd_preflight import summary_text

    lines = summary_text(_report("bootstrap-address-family.log")).splitlines()
    assert lines[0] == "verdict: fail"
    assert lines[1].startswith("root cause: NCCL's bootstrap could not use a network interface or address")
    assert "; remedy: give NCCL's bootstrap an interface" in lines[1]


def test_explain_prints_the_chain():
    proc = validators_process("explain", FIX / "gdr-disabled-p4d.log", timeout=60)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0].startswith("root cause: GPUDirect RDMA is not in use")
    assert "chain: gdr-disabled -> ofi-init-failed -> socket-fallback" in proc.stdout


def test_order_is_data_and_stable():
    found = [
        {"id": "nccl-warn", "severity": "warning", "message": "w"},
        {"id": "socket-fallback", "severity": "error", "message": "s"},
        {"id": "several-nccl-tests-runs", "severity": "info", "message": "n"},
        {"id": "ofi-init-failed", "severity": "error", "message": "o"},
        {"id": "efa-devices-missing", "severity": "error", "message": "e"},
    ]
    ordered = [f["id"] for f in causes.order(found)]
    assert ordered == [
        "efa-devices-missing",
        "ofi-init-failed",
        "socket-fallback",
        "nccl-warn",
        "several-nccl-tests-runs",
    ]


# ------------------------------------------------------------------ the real-log corpus: no order regresses
_DIR = Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))
# the root cause each real log's report led with before issue 24 (None: no error finding): it must stay first
CORPUS_FIRST = {
    "03-p3dn-2node-efa-nogdr-nccl2.4.6-allreduce": "gdr-disabled",
    "13-eks-p3dn-2rank-efa-nccl2.6.4-allreduce": "gdr-disabled",
    "14-eks-p3dn-2node-16rank-efa-nccl2.6.4-allreduce": "gdr-disabled",
    "16-eks-p3dn-horovod-tf-16rank-efa-nccl2.6.4-training": "gdr-disabled",
    "55-ec2-p4d-1node-ofi1.17.1-init-failed-sendrecv-socket-fallback-deepspeed": "ofi-init-failed",
    "57-eks-g6e-48xlarge-4pod-1gpu-ofi1.16.2-efa-4nics-gdr-disabled-training": "gdr-disabled",
    "58-eks-g6e-48xlarge-1pod-4proc-ofi1.16.2-training": "gdr-disabled",
}


@pytest.mark.parametrize("name", sorted(CORPUS_FIRST))
def test_real_logs_keep_their_root_cause_first(name):
    path = _DIR / (name + ".log")
    if not path.exists():
        corpus_missing(f"{name} not in the corpus")
    report = analyze_paths([str(path)])
    assert causes.root_cause(report["findings"])["id"] == CORPUS_FIRST[name]
    socket = next((f for f in report["findings"] if f["id"] == "socket-fallback"), None)
    if socket is not None:
        assert socket["caused_by"] == "ofi-init-failed"
