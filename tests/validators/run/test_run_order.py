"""`validators run` orders its findings as `parse` does (efa_validators.judge.causes), the runner's own
among them
(a hang it ended, a rank's exit, the output limit): its first line under the verdict names the root cause
`parse` names for the same output. Only the REPLAY mark comes before it (issue 24 follow-up)."""

from __future__ import annotations

import sys

import cli
import pytest
from paths import ROOT
from preflight_util import load, replay, run_cli

from efa_validators.analyze import analyze_paths
from efa_validators.judge.causes import lead_sentence, root_cause
from efa_validators.report.contract import REPLAY_NOTE
from efa_validators.run import report as runreport
from efa_validators.run.runner import OUTPUT_LIMIT, RunResult

LOGS = ROOT / "tests" / "fixtures" / "logs"


def _parse_lead(log) -> str:
    """The first stdout line of `validators parse LOG`: the root cause and its remedy."""
    res = cli.validators("parse", log)
    return res.out.splitlines()[0]


def _printer(log, then: str) -> list:
    """A child that prints a log as its program would, then `then` (sleep: the runner ends it; exit)."""
    code = "import sys, time; sys.stdout.write(open(%r).read()); sys.stdout.flush(); %s" % (str(log), then)
    return [sys.executable, "-c", code]


def _ids(report: dict) -> list:
    return [f["id"] for f in report["findings"]]


def test_a_replayed_run_that_hung_after_a_completion_error_leads_with_it(tmp_path):
    """The stand-in prints the whole recording and stalls: the runner ends it (`hang`), which follows from the
    completion error; REPLAY still comes first everywhere it did."""
    log = LOGS / "completion-error-unreachable.log"
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    lines = len(log.read_text().splitlines())
    cmd = replay(str(log), "--hang-after", str(lines))
    proc, _ = run_cli(
        ["run", "--quiet", "--idle-timeout", "2", "--timeout", "60", "--json", out, "--markdown", md, "--"]
        + cmd,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    report = load(out)
    assert report["replay"] is True and report["run"]["killed"] == "idle"
    ids = _ids(report)
    assert ids[0] == "replay"
    assert root_cause(report["findings"])["id"] == "completion-error"
    hangs = [f for f in report["findings"] if f["id"] == "hang" and "idle timeout" in f["message"]]
    assert len(hangs) == 1 and hangs[0]["caused_by"] == "completion-error"
    assert ids.index("completion-error") < report["findings"].index(hangs[0])
    assert hangs[0]["message"].startswith("the run stalled after a network completion error")
    stdout = proc.stdout.splitlines()
    assert stdout[0] == "verdict: fail (%s)" % REPLAY_NOTE
    assert stdout[1] == _parse_lead(log)
    text = md.read_text().splitlines()
    assert text[0] == "## NCCL/EFA validation: **FAIL** (%s)" % REPLAY_NOTE
    assert text[2] == "**%s**" % (lambda s: s[:1].upper() + s[1:])(_parse_lead(log))


def test_the_watchdog_timeout_the_output_shows_leads_the_hang_the_runner_saw(tmp_path):
    """The runner's hang comes after the output's last line: it can follow from what the output shows, never
    cause it (the table links a watchdog timeout to a stall, as `parse` reads one in the log)."""
    log = LOGS / "torch-watchdog.log"
    out = tmp_path / "r.json"
    proc, _ = run_cli(
        ["run", "--quiet", "--idle-timeout", "2", "--json", out, "--"] + _printer(log, "time.sleep(60)")
    )
    assert proc.returncode == 1, proc.stderr
    report = load(out)
    assert report["run"]["killed"] == "idle" and "replay" not in report
    assert _ids(report)[:2] == ["watchdog-timeout", "hang"]
    assert proc.stdout.splitlines()[1] == _parse_lead(log)


def test_a_command_that_exits_after_a_completion_error_leads_with_it(tmp_path):
    """The command's own non-zero exit is the end of the chain the output shows, said in its message."""
    log = LOGS / "completion-error-unresponsive.log"
    out = tmp_path / "r.json"
    proc, _ = run_cli(["run", "--quiet", "--json", out, "--"] + _printer(log, "sys.exit(1)"))
    assert proc.returncode == 1, proc.stderr
    report = load(out)
    assert _ids(report)[0] == "completion-error"
    exit_ = next(f for f in report["findings"] if f["id"] == "launcher-exit")
    assert exit_["caused_by"] == "watchdog-timeout"
    assert exit_["message"].startswith("the launcher exited non-zero after PyTorch's watchdog timed out")
    assert _ids(report).index("launcher-exit") > _ids(report).index("watchdog-timeout")
    assert proc.stdout.splitlines()[1] == _parse_lead(log)


def _ended(how: str) -> RunResult:
    """How a run of the fixture could have ended, as the runner records it (no process needed)."""
    result = RunResult(["srun", "-n2", "prog"], "srun")
    result.lines, result.duration_s, result.log = 20, 3.0, "run.log"
    if how == "exit":
        result.returncode = 1
        result.launcher_lines.append("srun: error: node-1: task 1: Exited with exit code 1")
    elif how == "exit-unnamed":
        result.returncode = 1
    elif how == OUTPUT_LIMIT:
        result.killed, result.kill_signal, result.returncode = OUTPUT_LIMIT, "term", -15
    else:
        result.killed, result.kill_signal, result.returncode, result.idle_timeout = how, "term", -15, 5
    return result


@pytest.mark.parametrize("how", ["idle", "timeout", "exit", "exit-unnamed", OUTPUT_LIMIT])
def test_every_fixture_leads_with_the_root_cause_parse_names_however_the_run_ended(how):
    """Each of the project's failure fixtures, ended each way the runner sees: the run report's root cause
    (its lead sentence) is `parse`'s; the runner's own finding comes after it."""
    checked = 0
    for log in sorted(LOGS.glob("*.log")):
        parsed = analyze_paths([str(log)], workers=1)
        cause = root_cause(parsed["findings"])
        if cause is None:
            continue
        lead = lead_sentence(parsed["findings"])
        report = runreport.combine(_ended(how), parsed, None, None, None)
        assert root_cause(report["findings"])["id"] == cause["id"], log.name
        assert lead_sentence(report["findings"]) == lead, log.name
        own = {"idle": "hang", "timeout": "hang", "exit": "rank-exit", "exit-unnamed": "launcher-exit"}
        ids = _ids(report)
        mine = len(ids) - 1 - ids[::-1].index(own.get(how, how))  # the runner's: after the log's `hang`
        assert ids.index(cause["id"]) < mine, log.name
        checked += 1
    assert checked >= 20  # the fixtures of failures, not a vacuous loop
