"""Every nccl-tests result given to `parse` is judged, and a `-J` JSON is checked against its table
(issue 41, hostile input round five, item 1).

`parse A B` once judged only the first result ("2 nccl-tests results; the first is reported and judged"):
B's wrong values and FAILED out-of-bounds footer were dropped and the verdict was pass, exit 0."""

from __future__ import annotations

import json
import os

from cli import validators
from fifo import returns_without_blocking
from paths import TESTS

LOGS, NT = TESTS / "fixtures" / "logs", TESTS / "fixtures" / "nccltests"
GOOD = LOGS / "p5-2node-efa-gdr-mpirun.log"
PAIR_LOG, PAIR_JSON = NT / "pair-allreduce-2node.log", NT / "pair-allreduce-2node.json"
P5 = ("--instance-type", "p5.48xlarge", "--nodes", "2")


def _parse(tmp_path, *inputs):
    out = tmp_path / "r.json"
    r = validators("parse", *inputs, *P5, "--json", out)
    return r, json.loads(out.read_text())


def _check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def test_the_good_log_alone_passes(tmp_path):
    """The baseline the other tests move from: the clean log passes on its own."""
    r, report = _parse(tmp_path, GOOD)
    assert (r.rc, report["verdict"]) == (0, "pass"), r.out


def test_a_second_logs_out_of_bounds_fails_the_verdict(tmp_path):
    r, report = _parse(tmp_path, GOOD, NT / "new-allreduce-oob-failed.log")
    assert (r.rc, report["verdict"]) == (1, "fail"), r.out
    oob = _check(report, "out-of-bounds")
    assert oob["status"] == "fail" and "7 out-of-bounds" in oob["detail"]
    assert any(e["file"].endswith("new-allreduce-oob-failed.log") for e in oob["evidence"])
    assert "wrong=7" in r.out.splitlines()  # the metric line counts every result's wrong values
    # and either order: the first file is not special
    r2, report2 = _parse(tmp_path, NT / "new-allreduce-oob-failed.log", GOOD)
    assert (r2.rc, report2["verdict"]) == (1, "fail")


def test_a_second_json_with_wrong_values_fails_the_verdict(tmp_path):
    doc = json.loads(PAIR_JSON.read_text())
    doc["results"][3]["in_place"]["nwrong"] = 12
    bad = tmp_path / "other-run.json"
    bad.write_text(json.dumps(doc))
    r, report = _parse(tmp_path, GOOD, bad)
    assert (r.rc, report["verdict"]) == (1, "fail"), r.out
    wrong = _check(report, "wrong-zero")
    assert wrong["status"] == "fail" and "12 wrong" in wrong["detail"]


def test_a_json_beside_its_table_agrees(tmp_path):
    r, report = _parse(tmp_path, GOOD, PAIR_LOG, PAIR_JSON)
    agrees = _check(report, "json-agrees")
    assert agrees["status"] == "pass", agrees
    assert "pair-allreduce-2node.json" in agrees["detail"]


def test_a_json_that_disagrees_with_its_table_fails(tmp_path):
    doc = json.loads(PAIR_JSON.read_text())
    doc["results"][2]["out_of_place"]["bus_bw"] += 1.0
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    r, report = _parse(tmp_path, GOOD, PAIR_LOG, changed)
    assert (r.rc, report["verdict"]) == (1, "fail"), r.out
    agrees = _check(report, "json-agrees")
    assert agrees["status"] == "fail" and "out_of_place busbw" in agrees["detail"]
    assert any(f["id"] == "nccl-tests-json-disagrees" for f in report["findings"])


def _log_naming(tmp_path, target: str):
    lines = PAIR_LOG.read_text().splitlines()
    assert lines[0].startswith("# Writing JSON output to ")
    log = tmp_path / "run.log"
    log.write_text("\n".join(["# Writing JSON output to " + target] + lines[1:]) + "\n")
    return log


def test_the_json_a_log_names_is_read_and_checked(tmp_path):
    """The table's first line says where -J wrote: read there (beside the log), checked against the table."""
    doc = json.loads(PAIR_JSON.read_text())
    (tmp_path / "nccl-tests.json").write_text(json.dumps(doc))
    log = _log_naming(tmp_path, "nccl-tests.json")
    r, report = _parse(tmp_path, GOOD, log)
    named = [i for i in report["inputs"] if i.get("named_by")]
    assert named and named[0]["file"].endswith("nccl-tests.json") and named[0]["named_by"].endswith(":1")
    assert _check(report, "json-agrees")["status"] == "pass"
    doc["results"][4]["in_place"]["nwrong"] = 3  # the JSON saw corruption the table does not show
    (tmp_path / "nccl-tests.json").write_text(json.dumps(doc))
    r, report = _parse(tmp_path, GOOD, log)
    assert (r.rc, report["verdict"]) == (1, "fail"), r.out
    assert _check(report, "json-agrees")["status"] == "fail"
    assert _check(report, "wrong-zero")["status"] == "fail"


def test_a_named_json_that_is_not_a_small_regular_file_is_never_read(tmp_path):
    """The log is not the user's word: a device or a huge file it names is listed as unread, not read."""
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)  # sparse: reading it would take a terabyte
    for target in (str(big), os.devnull, "/proc/self/status"):
        log = _log_naming(tmp_path, target)
        r, report = _parse(tmp_path, GOOD, log)
        named = [i for i in report["inputs"] if i.get("named_by")]
        assert len(named) == 1 and named[0]["unread"], named
        assert r.rc == 0 and report["verdict"] == "pass"


def test_a_json_nested_deeper_than_the_stack_is_refused_not_a_traceback(tmp_path):
    """Attack on issue 41's -J reader: a JSON of 100 000 nested arrays was a RecursionError traceback (exit 1)
    from json.loads, given as an input and named inside a log alike; given, it is bad input (exit 2 naming
    the file); named, it is listed as unread and the log is still judged."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"results": ' + "[" * 100000 + "]" * 100000 + "}")
    r = validators("parse", deep, *P5)
    assert r.rc == 2 and "deep.json" in r.err and "Traceback" not in r.err, r.err
    log = _log_naming(tmp_path, str(deep))
    r, report = _parse(tmp_path, GOOD, log)
    named = [i for i in report["inputs"] if i.get("named_by")]
    assert len(named) == 1 and "nested" in named[0]["unread"], named
    assert r.rc == 0 and report["verdict"] == "pass"


def test_a_named_json_swapped_for_a_fifo_after_its_checks_is_not_read(tmp_path, monkeypatch):
    """Attack on issue 41 item 1's -J reader: the named file was judged by its path (stat, isfile) and then
    opened by its path again, so a FIFO put in its place between the two (the log's folder is the log
    writer's) blocked the parse for ever in open(). The checks stood on a file that was no longer there: the
    open descriptor is what is judged now. The swap is simulated: the path checks are told it is a file."""
    from efa_validators import analyze

    fifo = tmp_path / "swapped.json"
    os.mkfifo(fifo)
    real_os = os

    class PathAsIfAFile:
        def __getattr__(self, name):
            return getattr(real_os.path, name)

        def isfile(self, p):
            return True if str(p) == str(fifo) else real_os.path.isfile(p)

    class OsAsIfAFile:
        path = PathAsIfAFile()

        def __getattr__(self, name):
            return getattr(real_os, name)

        def stat(self, p, *a, **kw):
            if str(p) == str(fifo):
                return real_os.stat(PAIR_JSON)  # the regular file the checks saw
            return real_os.stat(p, *a, **kw)

    monkeypatch.setattr(analyze, "os", OsAsIfAFile())
    log = _log_naming(tmp_path, str(fifo))
    r, report = returns_without_blocking(
        lambda: _parse(tmp_path, GOOD, log), fifo, "the parse blocked opening the FIFO a log named"
    )
    named = [i for i in report["inputs"] if i.get("named_by")]
    assert len(named) == 1 and "not a regular file" in named[0]["unread"], named
    assert r.rc == 0 and report["verdict"] == "pass"
