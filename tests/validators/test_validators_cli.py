"""`python -m efa_validators parse|explain`: exit codes, outputs, bad input (run as a real subprocess)."""

import json
import os
import re
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli import validators, validators_process
from paths import ROOT

FIX = ROOT / "tests" / "fixtures" / "logs"
GOOD = str(FIX / "p5-2node-efa-gdr-mpirun.log")
REQUIRED = set(
    "schema verdict efa gdr network nccl_version cuda_version plugin libfabric_version platform provider "
    "nics ranks hosts nccl_tests checks findings instance_type nodes inputs".split()
)


def cli(*args, stdin=None, timeout=120):
    return validators_process(*args, input=stdin, timeout=timeout, text=False)


def test_pass_writes_json_junit_markdown(tmp_path):
    j, x, m = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"
    p = cli("parse", GOOD, "--instance-type", "p5.48xlarge", "--nodes", "2",
            "--json", str(j), "--junit", str(x), "--markdown", str(m))  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(j.read_text())
    assert REQUIRED <= set(report)
    assert report["schema"] == "efa-image-build/report/v1"
    assert (report["verdict"], report["efa"], report["gdr"]) == ("pass", True, True)
    for f in report["findings"]:
        assert {"id", "severity", "evidence", "remedy"} <= set(f)
    suite = ET.parse(str(x)).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [c["name"] for c in report["checks"]]
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    md = m.read_text()
    assert "**PASS**" in md and "| EFA | true |" in md
    out = p.stdout.decode()
    assert re.search(r"^busbw_plateau=([0-9.]+) GB/s$", out, re.M).group(1) == "444.99"
    assert re.search(r"^efa=true gdr=true$", out, re.M)


def test_fail_exit_1_and_junit_failure(tmp_path):
    x = tmp_path / "r.xml"
    p = cli("parse", str(FIX / "plugin-missing-socket.log"), "--junit", str(x))
    assert p.returncode == 1
    assert "efa=false gdr=false" in p.stdout.decode()
    suite = ET.parse(str(x)).getroot().find("testsuite")
    failed = [c.get("name") for c in suite.findall("testcase") if c.find("failure") is not None]
    assert "efa" in failed and "failure-signatures" in failed


def test_unknown_exit_3_and_junit_error_not_pass(tmp_path):
    x = tmp_path / "r.xml"
    p = cli("parse", str(FIX / "nccl2.5-ring-gdr.log"), "--junit", str(x))
    assert p.returncode == 3, p.stdout
    suite = ET.parse(str(x)).getroot().find("testsuite")
    errored = [c.get("name") for c in suite.findall("testcase") if c.find("error") is not None]
    assert "ranks-seen" in errored


def test_stdout_ends_counting_checks_and_markdown_says_unknown_not_null(tmp_path):
    """The passes are not listed one by one, so the last line counts them; a fact the log lacks reads
    "unknown" for people (JSON keeps null)."""
    m, j = tmp_path / "r.md", tmp_path / "r.json"
    p = cli("parse", str(FIX / "nccl2.5-ring-gdr.log"), "--markdown", str(m), "--json", str(j))
    report = json.loads(j.read_text())
    n = {s: sum(1 for c in report["checks"] if c["status"] == s) for s in ("pass", "fail", "unknown")}
    last = p.stdout.decode().rstrip("\n").splitlines()[-1]
    assert last.startswith(f"checks: {n['pass']} passed, {n['fail']} failed, {n['unknown']} unknown"), last
    assert n["unknown"] >= 1 and None in (report["efa"], report["provider"], report["nics"])
    md = m.read_text()
    assert "null" not in md and "unknown" in md


def test_an_unknown_instance_type_is_bad_input_with_close_matches(tmp_path):
    for verb in (["parse", GOOD], ["run", "--", "true"], ["node-check"]):
        p = (
            cli(*verb, "--instance-type", "p5.48xl")
            if verb[0] != "run"
            else cli("run", "--instance-type", "p5.48xl", "--log", str(tmp_path / "r.log"), "--", "true")
        )
        err = p.stderr.decode()
        assert p.returncode == 2 and "Traceback" not in err, (verb, err)
        assert "p5.48xl" in err and "did you mean p5.48xlarge" in err, (verb, err)
    assert not (tmp_path / "r.log").exists()


def test_json_to_stdout_keeps_metric_lines_on_stderr():
    p = cli("parse", GOOD, "--json", "-")
    report = json.loads(p.stdout.decode())
    assert report["efa"] is True
    assert "efa=true gdr=true" in p.stderr.decode()


def test_stdin_dash():
    p = cli("parse", "-", "--json", "-", stdin=Path(GOOD).read_bytes())
    report = json.loads(p.stdout.decode())
    assert report["inputs"][0]["file"] == "<stdin>" and report["gdr"] is True


def test_several_logs_merge_into_one_verdict(tmp_path):
    """One log per node (what per-pod logs give): facts merge, nccl-tests comes from rank 0's file."""
    text = Path(GOOD).read_text().splitlines(True)
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("".join(line for line in text if "gpu-b:" not in line))
    b.write_text("".join(line for line in text if "gpu-b:" in line))
    j = tmp_path / "r.json"
    p = cli("parse", str(a), str(b), "--json", str(j))
    r = json.loads(j.read_text())
    assert (r["efa"], r["gdr"], r["nranks"], r["ranks_seen"]) == (True, True, 4, 4)
    assert [i["file"] for i in r["inputs"]] == [str(a), str(b)]
    assert p.returncode == 0, p.stdout


def test_bytes_crlf_and_cut_lines_survive(tmp_path):
    data = (
        Path(FIX / "cloudwatch-p4d-crlf.log").read_bytes()
        + b"\xff\xfe garbage \x00\r\nnode-1:100:130 [0] NCCL INF"
    )
    f = tmp_path / "odd.log"
    f.write_bytes(data)
    j = tmp_path / "r.json"
    p = cli("parse", str(f), "--json", str(j))
    assert p.returncode in (0, 1, 3) and b"Traceback" not in p.stderr
    assert json.loads(j.read_text())["efa"] is True


def test_missing_file_exit_2_names_it_and_writes_nothing(tmp_path):
    j = tmp_path / "r.json"
    p = cli("parse", GOOD, str(tmp_path / "nope.log"), "--json", str(j))
    assert p.returncode == 2
    assert "nope.log" in p.stderr.decode() and b"Traceback" not in p.stderr
    assert not j.exists()


def test_usage_errors_exit_2(tmp_path):
    for args in (
        ("parse",),
        ("parse", GOOD, "--nodes", "0"),
        ("parse", GOOD, "--nodes", "two"),
        ("parse", str(tmp_path)),
        ("parse", GOOD, "--json", str(tmp_path / "no" / "such" / "dir.json")),
        ("parse", "-", "-"),
        ("explain",),
    ):
        p = cli(*args, stdin=b"")
        assert p.returncode == 2, (args, p.stderr)
        assert b"Traceback" not in p.stderr, args


def test_nccl_tests_json_input(tmp_path):
    doc = {
        "version": 1,
        "args": ["/opt/nccl-tests/build/all_reduce_perf"],
        "config": {"nthreads": 1, "ngpus": 1, "devices": []},
        "results": [],
    }
    f = tmp_path / "run.json"
    f.write_text(json.dumps(doc))
    j = tmp_path / "r.json"
    p = cli("parse", GOOD, str(f), "--json", str(j))
    assert p.returncode in (0, 1, 3), p.stderr
    r = json.loads(j.read_text())
    assert r["inputs"][1] == {"file": str(f), "kind": "nccl-tests-json", "lines": None, "bytes": None}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = cli("parse", str(bad))
    assert p.returncode == 2 and "bad.json" in p.stderr.decode()


def test_explain_names_signature_evidence_and_remedy():
    p = cli("explain", str(FIX / "two-libfabrics.log"))
    out = p.stdout.decode()
    assert p.returncode == 1
    assert "[error] two-libfabrics" in out and "remedy:" in out
    assert "two-libfabrics.log:2: " in out  # evidence: file and line
    p = cli("explain", GOOD)
    assert p.returncode == 0 and "efa=true gdr=true" in p.stdout.decode()


def test_in_process_call_matches_the_real_process():
    """tests/cli.py's in-process `validators` says what `python -m efa_validators` says: same code and
    output."""
    argv = ("parse", GOOD, "--instance-type", "p5.48xlarge", "--nodes", "2")
    rc, out, _err = validators(*argv)
    proc = validators_process(*argv)
    assert (rc, out) == (proc.returncode, proc.stdout) and rc == 0 and "pass" in out.lower()
    assert (
        validators("parse", "--no-such-flag").rc
        == validators_process("parse", "--no-such-flag").returncode
        == 2
    )


def test_each_verb_is_registered_by_the_module_cli_names_for_it():
    """`python -m efa_validators VERB` imports only VERB's module (efa_validators.cli.VERB_MODULES): a verb
    listed under the wrong module, or not listed, would not parse."""
    import argparse
    import importlib

    from efa_validators import cli

    for name, verbs in cli.VERB_MODULES.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        assert tuple(sorted(sub.choices)) == tuple(sorted(verbs)), name
    for verb in (v for verbs in cli.VERB_MODULES.values() for v in verbs):
        assert cli.make_parser(verb).parse_args([verb] + _minimal_args(verb)).verb == verb


def _minimal_args(verb: str) -> list:
    """Arguments that make `verb` parse (the positional ones it needs)."""
    return {
        "parse": ["x.log"],
        "explain": ["x.log"],
        "run": ["--", "true"],
        "drain": ["r.json", "--for", "slurm"],
    }.get(verb, [])


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "socket"])
def test_a_special_file_is_refused_naming_it_not_read(tmp_path, kind):
    """A FIFO with no writer would block open() forever, /dev/zero never ends: exit 2, file named, nothing
    written, as build.py refuses them (issue 23, item 4). A regression ends at the subprocess timeout."""
    if kind == "fifo":
        path = str(tmp_path / "log.fifo")
        os.mkfifo(path)
    elif kind == "socket":
        path = str(tmp_path / "log.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
    else:
        path = kind
    j = tmp_path / "r.json"
    for verb in ("parse", "explain"):
        args = (verb, GOOD, path, "--json", str(j)) if verb == "parse" else (verb, path)
        p = cli(*args, timeout=30)
        assert p.returncode == 2, p.stderr
        word = {"fifo": "a FIFO", "/dev/zero": "a character device", "socket": "a socket"}[kind]
        assert ("error: %s: %s" % (path, word)).encode() in p.stderr and b"Traceback" not in p.stderr
    assert not j.exists()


def test_a_pipe_a_shell_hands_over_is_still_read(tmp_path):
    """`parse <(cmd)`: /dev/fd/N is a pipe already open, its writer there: read, not refused."""
    j = tmp_path / "r.json"
    script = '"$0" -m efa_validators parse <(cat "$1") --json "$2"'
    p = subprocess.run(
        ["bash", "-c", script, sys.executable, GOOD, str(j)], cwd=str(ROOT), capture_output=True, timeout=60
    )
    assert p.returncode in (0, 1, 3), p.stderr
    assert json.loads(j.read_text())["efa"] is True


def test_control_bytes_of_a_log_never_reach_the_terminal_or_the_summary(tmp_path):
    """issue 32 item 6: a log line quoted as evidence carried its ESC sequences (clear screen, window title)
    and a direction override to the terminal and into the Markdown summary; they are shown escaped."""
    lines = (FIX / "two-libfabrics.log").read_text().splitlines()
    lines[1] = "\x1b[2J\x1b]0;owned\x07" + lines[1] + "\u202e\x9b"
    log = tmp_path / "esc.log"
    log.write_text("\n".join(lines) + "\n")
    md = tmp_path / "r.md"
    explained = cli("explain", str(log)).stdout.decode()
    parsed = cli("parse", str(log), "--markdown", str(md)).stdout.decode()
    assert "\\x1b[2J\\x1b]0;owned\\x07/opt/nccl-tests" in explained and "\\u202e" in explained
    for text in (explained, parsed, md.read_text()):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text), repr(text)


def test_env_values_a_log_printed_are_neither_html_links_nor_controls_in_the_reports(tmp_path):
    """The env-* findings (issue 33 item 3) put a value the log printed into their message, outside the
    Markdown code spans: it must not become HTML or a link in the CI summary, nor reach a terminal as ESC.
    A NUL, invalid UTF-8 and an overlong export line ride along; the verdict stays what the checks say."""
    head = b"gpu-9:31:70 [0] NCCL INFO "
    lines = [
        b"gpu-9:31:31 [0] NCCL INFO NCCL version 2.27.7+cuda12.9",
        head + b"NCCL_ALGO set by environment to Ring<img/src=http://127.0.0.1:9/t.png>\xff\xfe",
        head + b"NCCL_P2P_DISABLE set by environment to 1[approve](http://127.0.0.1:9/)\x1b]0;owned\x07.",
        b"+ export FI_PROVIDER=tcp\x1b[2J\x00\xe2\x80\xae",
        b"+ export NCCL_NET=Socket" + b"A" * 300000,
    ]
    log = tmp_path / "env-hostile.log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    p = cli("parse", str(log), "--markdown", str(md), "--json", str(js))
    assert p.returncode == 3, p.stderr  # unknown: no NET channel; the warnings change no verdict
    report = json.loads(js.read_text())
    assert report["verdict"] == "unknown"
    assert {"env-algorithm-forced", "env-p2p-disabled", "env-provider-forced"} <= {
        f["id"] for f in report["findings"]
    }
    summary = md.read_text()
    prose = re.sub("`[^`]*`", "", summary)  # in a code span a log's text is shown as it is, never rendered
    assert "&lt;img" in prose and "<img" not in prose, prose
    assert "\\[approve\\](" in prose and not re.search(r"(?<!\\)\[approve", prose), prose
    for text in (p.stdout.decode(), summary):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text), repr(text)
    assert len(summary) < 20000 and len(js.read_text()) < 50000
