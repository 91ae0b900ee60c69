"""The log `validators run` keeps is bounded in size, and a line without a newline in length: a child that
floods its output is ended with a finding, and reading what it printed takes no longer than the cap allows
(issue 23, item 4). Small caps (--max-output, --max-line) keep each test to seconds."""

from __future__ import annotations

import sys

import pytest
from preflight_util import assert_none_left, finding, load, marker, run_cli

FLOODS = {
    "no newline": "b = b'x' * 65536",
    "short lines": "b = b'NCCL INFO flood line\\n' * 4096",
}


@pytest.mark.parametrize("kind", sorted(FLOODS))
def test_a_flood_is_ended_at_the_output_cap_and_the_log_stays_under_it(tmp_path, kind):
    mark = marker()
    child = "import sys\n%s\nwhile True:\n    sys.stdout.buffer.write(b)\n" % FLOODS[kind]
    log, out = tmp_path / "run.log", tmp_path / "r.json"
    proc, _ = run_cli(
        ["run", "--quiet", "--timeout", "60", "--max-output", "1M", "--max-line", "4K"]
        + ["--log", str(log), "--json", str(out), "--", sys.executable, "-c", child, mark],
        timeout=90,
    )
    assert proc.returncode == 1, proc.stderr
    report = load(out)
    run = report["run"]
    assert run["killed"] == "output-limit"
    assert run["output_bytes"] > 1 << 20 and run["dropped_bytes"] > 0
    assert log.stat().st_size <= (1 << 20) + 1  # what was read, plus the newline of a cut last line
    cap = finding(report, "output-limit")
    assert cap and cap["severity"] == "error" and "more than 1048576 bytes" in cap["message"]
    assert finding(report, "hang") is None
    assert report["verdict"] == "fail"
    if kind == "no newline":
        assert log.read_bytes() == b"x" * 4096 + b"\n"
        assert run["long_lines"] == 1 and finding(report, "long-lines")
    else:
        assert run["long_lines"] == 0 and run["lines"] >= (1 << 20) // 22 - 1
    assert_none_left(mark)


def test_a_long_line_keeps_its_head_and_the_lines_after_it(tmp_path):
    child = "import sys; sys.stdout.write('A' * 10000 + '\\nafter\\n' + 'B' * 5000)"
    log, out = tmp_path / "run.log", tmp_path / "r.json"
    proc, _ = run_cli(
        ["run", "--quiet", "--timeout", "60", "--max-line", "4K", "--log", str(log), "--json", str(out)]
        + ["--", sys.executable, "-c", child],
        timeout=90,
    )
    assert proc.returncode in (1, 3), proc.stderr
    run = load(out)["run"]
    assert log.read_text().splitlines() == ["A" * 4096, "after", "B" * 4096]
    assert run["killed"] is None and run["exit_code"] == 0
    assert run["long_lines"] == 2 and run["cut_lines"] == 2 and run["partial_line"] is True
    assert run["dropped_bytes"] == (10000 - 4096) + (5000 - 4096)
    long_lines = finding(load(out), "long-lines")
    assert long_lines and "2 line(s) longer than 4096 bytes" in long_lines["message"]


@pytest.mark.parametrize(
    "flag, value, why",
    [
        ("--max-output", "12Q", "not a size"),
        ("--max-line", "100", "must be at least 1K"),
        ("--max-line", "", "not a size"),
    ],
)
def test_a_bad_cap_is_a_usage_error(flag, value, why):
    proc, _ = run_cli(["run", flag, value, "--", "true"], timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "argument %s: %s" % (flag, why) in proc.stderr
