"""`validators parse` of a saved replay log says REPLAY, as `validators run` of the replay did (issue 15):
the stand-in's mark line is found by the file scan, split or not, and by the live path."""

from __future__ import annotations

import json
import subprocess
import sys

from cli import validators_process
from preflight_util import GOOD_EFA

from efa_validators.analyze import analyze, analyze_paths
from efa_validators.run.report import replay_finding


def _saved_replay(tmp_path, tag: str = "") -> str:
    """The stand-in's output as a launcher would have saved it (with an mpirun tag when `tag`)."""
    out = subprocess.run(
        [sys.executable, "-m", "efa_validators.replay", str(GOOD_EFA)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = tmp_path / "replayed.log"
    path.write_text("".join(tag + line + "\n" for line in out.splitlines()))
    return str(path)


def test_parse_of_a_saved_replay_is_marked_replay(tmp_path):
    path = _saved_replay(tmp_path)
    report = analyze_paths([path], workers=1)
    plain = analyze_paths([str(GOOD_EFA)], workers=1)
    assert report["replay"] is True and "replay" not in plain
    assert report["findings"][0] == replay_finding([])
    assert report["findings"][0]["message"].startswith("REPLAY")
    # the mark changes nothing else: the verdict and facts of the recording itself (the evidence differs:
    # another file, lines one further on, launcher tags taken off by the stand-in)
    for key in ("verdict", "efa", "gdr", "nranks", "ranks_seen", "provider", "network"):
        assert report[key] == plain[key], key
    assert [f["id"] for f in report["findings"][1:]] == [f["id"] for f in plain["findings"]]


def test_parse_cli_of_a_tagged_saved_replay(tmp_path):
    path = _saved_replay(tmp_path, "[1,0]<stdout>:")
    out = tmp_path / "r.json"
    validators_process("parse", path, "--json", out)
    report = json.loads(out.read_text())
    assert report["replay"] is True
    assert [f["id"] for f in report["findings"]][:1] == ["replay"]


def test_live_path_sees_the_mark_but_leaves_the_finding_to_the_runner(tmp_path):
    """`validators run` adds the finding itself (runreport): the live parse must not add a second one."""
    lines = open(_saved_replay(tmp_path), encoding="utf-8").read().splitlines()
    report = analyze(lines)
    assert "replay" not in report and not any(f["id"] == "replay" for f in report["findings"])
