"""Every failure named (issue 41, the cause): a log that shows a failure never ends with empty findings,
and the finding names the line (file and line number) that shows it. Each class has a fixture of the
project's own in tests/fixtures/logs/, written from the format string of its source (docs/validators.md,
"Formats, and the sources they were checked against")."""

import re
from pathlib import Path

from paths import ROOT

from efa_validators.analyze import analyze, analyze_paths
from efa_validators.judge import causes

LOGS = ROOT / "tests" / "fixtures" / "logs"


def _report(name: str) -> dict:
    return analyze_paths([str(LOGS / name)])


def _finding(report: dict, fid: str) -> dict:
    found = next((f for f in report["findings"] if f["id"] == fid), None)
    assert found is not None, [f["id"] for f in report["findings"]]
    return found


def _failed_leading_with(name: str, fid: str) -> tuple:
    """The report of the log `name`, which fails and leads with the finding `fid`: (report, that finding)."""
    report = _report(name)
    assert report["verdict"] == "fail"
    first = report["findings"][0]
    assert first["id"] == fid
    return report, first


def _names_line(finding: dict, name: str, lineno: int, said: str) -> None:
    """The finding's evidence holds the line: this file, this line number, this text."""
    at = [(e.get("file"), e.get("line")) for e in finding["evidence"]]
    assert (str(LOGS / name), lineno) in at, at
    text = next(e["text"] for e in finding["evidence"] if e.get("line") == lineno)
    assert said in text


# ------------------------------------------------------------------ libfabric's own <warn> lines
def test_an_efa_completion_error_indented_in_a_pasted_log_is_the_cause_with_its_peer():
    """libfabric's `err: N, message: <status> My EFA addr: ... Peer host id: ...` with a status no other
    pattern knows ('Connection was reset by remote peer'): before issue 41, 'unknown' with no finding."""
    report, first = _failed_leading_with("libfabric-efa-peer-reset.log", "completion-error")
    assert "Connection was reset by remote peer" in first["message"]
    assert "peer i-0f9e8d7c6b5a49382" in first["message"] and "My EFA addr" not in first["message"]
    _names_line(first, "libfabric-efa-peer-reset.log", 4, "err: 5, message: ")
    assert causes.misordered(report["findings"]) is None
    warn = _finding(report, "libfabric-warn")
    _names_line(warn, "libfabric-efa-peer-reset.log", 5, "<warn> Writing eq error")


def test_a_libfabric_warn_line_alone_is_a_finding_that_names_it():
    report = _report("libfabric-warn-alone.log")
    warn = _finding(report, "libfabric-warn")
    assert warn["severity"] == "warning" and report["verdict"] == "unknown"  # a warning alone fails nothing
    _names_line(warn, "libfabric-warn-alone.log", 1, "efa_mr_reg_impl():111<warn> Unable to register MR")
    assert warn["remedy"] and "ofiwg/libfabric src/log.c" in warn["source"]


def test_libfabric_lines_that_are_not_warnings_name_nothing():
    lines = [
        "libfabric:9981:1765020001::efa:core:efa_device_init():210<info> efa device 0 ready",
        "libfabric:9981:1765020001::core:core:ofi_register_provider():476<info> registering provider: efa",
        "the <warn> tag in prose, and err: 5, message: in a sentence",
    ]
    assert analyze(lines)["findings"] == []


# ------------------------------------------------------------------ PyTorch's watchdog, hard-wrapped
C10D = (
    "[rank3]:[E1206 03:14:15.926535 20417 ProcessGroupNCCL.cpp:1583] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
)
STUCK = (
    "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
    "collectives."
)
BEAT = (
    "Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1"
)


def test_a_watchdog_message_wrapped_inside_a_word_is_joined_and_named_at_its_first_line():
    """The issue's break (`ProcessGroupNCCL'` / `s watchdog got stuck ...`) and a heartbeat line broken
    after 'monitor': one finding per message, each naming the line the message starts on."""
    name = "torch-watchdog-wrapped.log"
    _, first = _failed_leading_with(name, "watchdog-hang")
    assert "480 seconds on rank(s) 3" in first["message"]
    assert "2 matching line(s)" in first["message"]
    _names_line(first, name, 3, "ProcessGroupNCCL's watchdog got stuck for 480 seconds")
    _names_line(first, name, 5, "Heartbeat monitor timed out!")
    assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in first["remedy"] and "cf1380df" in first["source"]


def test_the_message_is_found_wherever_the_wrap_breaks_it():
    """Every break from the message's first character to its last: one finding, one line counted, and the
    line named is the first half's (joined where the break falls inside the words that name it)."""
    text = C10D + STUCK
    for at in range(len(C10D) + 1, len(text)):
        report = analyze(["step 7 loss 2.0", text[:at], text[at:], "step 8"])
        hang = _finding(report, "watchdog-hang")
        assert hang["message"].startswith("the watchdog got stuck for 480 seconds on rank(s) 3"), at
        assert "1 matching line(s)" in hang["message"], at
        assert hang["evidence"][0]["line"] == 2, at


def test_the_collective_timeout_is_found_wherever_the_wrap_breaks_it():
    head = "[rank3]:[E1206 03:14:15.926535 20417 ProcessGroupNCCL.cpp:616] [Rank 3] "
    text = head + (
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=2569, "
        "NumelOut=2569, Timeout(ms)=600000) ran for 600088 milliseconds before timing out."
    )
    for at in range(len(head) + 1, len(text)):
        timeout = _finding(analyze([text[:at], text[at:]]), "watchdog-timeout")
        assert timeout["evidence"][0]["line"] == 1 and "rank(s) 3" in timeout["message"], at


def test_heartbeat_wrapped_with_its_space_trimmed_is_joined():
    text = C10D + BEAT
    at = text.index(" timed out")
    report = analyze([text[:at], text[at + 1 :]])  # the wrapper dropped the space it broke at
    hang = _finding(report, "watchdog-hang")
    assert hang["evidence"][0]["line"] == 1 and "Heartbeat monitor timed out!" in hang["evidence"][0]["text"]


def test_lines_are_not_joined_across_a_message_of_their_own_or_a_gap():
    text = C10D + STUCK
    at = text.index("'s watchdog") + 1
    # the next line starts its own c10d message: nothing joins, and the first half alone names nothing
    own = analyze([text[:at], C10D + "Some other message", "s watchdog"])
    assert "watchdog-hang" not in [f["id"] for f in own["findings"]]
    # not the next physical line (a line without a needle between): not joined
    gap = analyze([text[:at], "unrelated line", text[at:]])
    hang = _finding(gap, "watchdog-hang")
    assert [e["line"] for e in hang["evidence"]] == [3]  # the second half alone still names its words


def test_the_joiner_holds_one_line_at_most():
    """Streaming, bounded: each line's item is out before the line after the next is read."""
    from efa_validators.analyze.needles import NCCL, SIGNATURE, WRAP
    from efa_validators.analyze.prep import prepare

    read = []

    def lines():
        for n in range(1, 200):
            read.append(n)
            yield n, C10D + "watchdog heartbeat %d" % n, False, NCCL | SIGNATURE | WRAP

    held = 0
    for item in prepare(lines()):
        assert read[-1] - item[0] <= 1
        held += read[-1] - item[0]
    assert held >= 190  # each line was held (one line), not read at once: the bound is what was tested


# ------------------------------------------------------------------ a launcher that could not start the ranks
def test_a_launch_that_failed_on_a_slingshot_nic_names_the_host_and_the_cxi_limit():
    name = "launcher-start-failed-cxi.log"
    report, first = _failed_leading_with(name, "launcher-start-failed")
    assert first["message"].startswith("start failed on x1002c3s4b0n1: CXI alloc failed on cxi0")
    _names_line(first, name, 4, "request exceeds ACs limits")
    assert "cxi_service" in first["remedy"]
    assert causes.misordered(report["findings"]) is None


def test_a_launch_that_failed_on_a_host_alone_and_then_a_crash():
    report = analyze(
        [
            "prted: start failed on gpu-node-07: ssh: connect to host gpu-node-07 port 22: No route to host",
            "srun: error: gpu-node-06: task 0: Exited with exit code 1",
        ]
    )
    ids = [f["id"] for f in report["findings"]]
    assert ids == ["launcher-start-failed", "crash"]
    assert report["findings"][1]["caused_by"] == "launcher-start-failed"
    assert "No route to host" in report["findings"][0]["message"]
    assert "Read the reason after the host" in report["findings"][0]["remedy"]


# ------------------------------------------------------------ nccl-tests' failure after NCCL's return chain
# Decided: the root cause is the WARN NCCL printed where the failure began (the last WARN before the chain's
# first `file.cc:N -> RC`), else that first return: each caller prints its line as the error passes up, so
# the first is the deepest, and nccl-tests' `Test NCCL failure` line is only where the chain surfaced.
G = "gpu-a:4410:4462 [0]"


def test_the_warn_where_the_chain_began_names_the_failure_whatever_the_error():
    name = "nccl-tests-return-chain.log"
    report, crash = _failed_leading_with(name, "crash")
    assert "the WARN before it: Cuda failure 'an illegal memory access was encountered'" in crash["message"]
    assert crash["evidence"][0]["line"] == 8  # the WARN first, then the failure line
    _names_line(crash, name, 13, "Test NCCL failure common.cu:1031 'unhandled cuda error")
    assert causes.misordered(report["findings"]) is None


def test_without_a_warn_the_first_return_of_the_chain_is_named():
    report = analyze(
        [
            G + " NCCL INFO NCCL version 2.29.7+cuda13.0",
            G + " NCCL INFO transport/p2p.cc:640 (p2pSendSetup) -> 1",
            G + " NCCL INFO init.cc:456 (initTransportsRank) -> 1",
            "gpu-a: Test CUDA failure common.cu:892 'out of memory'",
        ]
    )
    crash = report["findings"][0]
    assert (
        crash["id"] == "crash" and "it began at transport/p2p.cc:640 (p2pSendSetup) -> 1" in crash["message"]
    )
    assert crash["evidence"][0]["line"] == 2 and crash["evidence"][1]["line"] == 4


def test_a_network_failure_after_a_chain_names_where_it_began():
    report = analyze(
        [
            G + " NCCL INFO transport/net.cc:1234 -> 2",
            G + " NCCL INFO init.cc:456 -> 2",
            "gpu-a: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO) / '",
        ]
    )
    hang = report["findings"][0]
    assert hang["id"] == "hang" and "it began at transport/net.cc:1234 -> 2" in hang["message"]
    assert hang["evidence"][0]["line"] == 1


# ------------------------------------------------------------------ GIN that failed to initialise, GDRCopy
def test_a_gin_failure_leads_with_gdrcopy_through_the_chain_of_its_effects():
    """aws-ofi-nccl's `Failed to initialize GDRCopy` (a warning: NCCL tries its other GIN plugins) is the
    root cause once the program's GIN request fails: GDRCopy -> no GIN plugin -> no GIN -> the crash."""
    name = "gin-gdrcopy-missing.log"
    report = _report(name)
    assert report["verdict"] == "fail"
    ids = [f["id"] for f in report["findings"]]
    assert ids[:4] == ["gdrcopy-unavailable", "gin-init-failed", "gin-unavailable", "crash"], ids
    by_id = {f["id"]: f for f in report["findings"]}
    assert by_id["gin-init-failed"]["caused_by"] == "gdrcopy-unavailable"
    assert by_id["gin-unavailable"]["caused_by"] == "gin-init-failed"
    assert by_id["crash"]["caused_by"] == "gin-unavailable"
    assert causes.root_cause(report["findings"])["id"] == "gdrcopy-unavailable"
    assert causes.misordered(report["findings"]) is None
    _names_line(
        by_id["gdrcopy-unavailable"], name, 7, "Failed to initialize GDRCopy: Could not load libgdrapi.so"
    )
    _names_line(by_id["gin-init-failed"], name, 8, "GIN/Plugin: Failed to initialize any GIN plugin")
    _names_line(by_id["gin-unavailable"], name, 9, "User requested GIN but not all ranks")
    assert "gdrdrv" in by_id["gdrcopy-unavailable"]["remedy"]
    assert by_id["gdrcopy-unavailable"]["message"].startswith("GDRCopy: Could not load libgdrapi.so")
    lead = causes.lead_sentence(report["findings"])
    assert lead.startswith("root cause: aws-ofi-nccl's GIN could not use GDRCopy (gdrcopy-unavailable)")


def test_gin_that_did_not_initialise_fails_nothing_when_nothing_asked_for_it():
    """NCCL >= 2.28 tries GIN at every communicator's init: on an image without GDRCopy a healthy run
    prints these lines, and they are warnings that name their lines, not a failure."""
    report = analyze(
        [
            G
            + " nccl_ofi_gin_init:71 NCCL WARN NET/OFI Failed to initialize GDRCopy: "
            + "Could not load x.so",
            G + " NCCL INFO GIN/Plugin: Failed to initialize any GIN plugin",
        ]
    )
    assert report["verdict"] != "fail"
    assert {f["id"]: f["severity"] for f in report["findings"]} == {
        "gdrcopy-unavailable": "warning",
        "gin-init-failed": "warning",
        "nccl-warn": "warning",
    }
    assert [e["line"] for e in _finding(report, "gin-init-failed")["evidence"]] == [2]


def test_gin_disabled_by_the_environment_says_so():
    report = analyze([G + " gin/gin_host.cc:86 NCCL WARN GIN is disabled."])
    f = report["findings"][0]
    assert f["id"] == "gin-unavailable" and "NCCL_GIN_ENABLE=0" in f["remedy"]


# ------------------------------------------------------------------ Python tracebacks
def test_a_traceback_names_the_exception_that_ends_it():
    report = analyze(
        [
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "train.py", line 3, in <module>',
            "[rank1]:     loss.backward()",
            "[rank1]: RuntimeError: element 0 of tensors does not require grad",
        ]
    )
    f = _finding(report, "python-exception")
    assert f["message"].startswith("RuntimeError: element 0 of tensors does not require grad")
    assert [e["line"] for e in f["evidence"]] == [4, 1] and report["verdict"] == "fail"


# ------------------------------------------------------------------ the rule, over every fixture and real log
# the line kinds that show a failure, read here from their formats alone (not with the parser's patterns)
LINE_KINDS = {
    "NCCL WARN": re.compile(r" NCCL WARN "),
    "libfabric <warn>": re.compile(r"libfabric:\d+:\d+:[^:\s]*:[^:\s]+:[^:\s]+:\S+\(\):\d+<warn> "),
    "test failure": re.compile(r": Test (?:NCCL |CUDA )?failure "),
    "launcher failure": re.compile(
        r"start failed on |CXI alloc failed on |srun: error: \S+: tasks? [\d,-]+: |exited on signal \d+"
    ),
    "watchdog": re.compile(
        r"[Ww]atchdog caught collective operation timeout|watchdog got stuck for|Heartbeat monitor timed out"
    ),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
}
FIXTURES = [ROOT / "tests" / "fixtures" / d for d in ("logs", "causes", "decorations", "nccltests")]


def _kinds(path: Path) -> dict:
    """kind -> the number of its first line (streaming: one line at a time)."""
    first = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            for kind, rx in LINE_KINDS.items():
                if kind not in first and rx.search(line):
                    first[kind] = n
    return first


def test_a_log_that_shows_a_failure_never_ends_with_empty_findings_and_names_the_line(nccl_logs_dir):
    """Every fixture and every real log (../shared/nccl-logs: skipped with the reason without it, failing
    in CI): a log with one of LINE_KINDS has findings, and a finding's evidence names that kind's first
    line."""
    inputs = [p for d in FIXTURES for p in sorted(d.glob("*.log"))]
    inputs += sorted(nccl_logs_dir.glob("*.log"))
    seen, bad = 0, []
    for path in inputs:
        kinds = _kinds(path)
        if not kinds:
            continue
        seen += 1
        report = analyze_paths([str(path)])
        if not report["findings"]:
            bad.append((path.name, "no finding", sorted(kinds)))
            continue
        named = {(e.get("file"), e.get("line")) for f in report["findings"] for e in f.get("evidence") or ()}
        for kind, n in kinds.items():
            # the line itself, or the line before it where a wrapped message was joined at its first half
            if not ({(str(path), n), (str(path), n - 1)} & named):
                bad.append((path.name, kind, n))
    assert seen >= 25, seen
    assert not bad, bad
