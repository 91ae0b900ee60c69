"""Every failure named (issue 41, the cause): a log that shows a failure never ends with empty findings,
and the finding names the line (file and line number) that shows it. Each class has a fixture of the
project's own in tests/fixtures/logs/, written from the format string of its source (docs/validators.md,
"Formats, and the sources they were checked against")."""

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
    report = _report("libfabric-efa-peer-reset.log")
    assert report["verdict"] == "fail"
    first = report["findings"][0]
    assert first["id"] == "completion-error"
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
