"""A large parse shows how far it is on a terminal, and nowhere else; the report does not change."""

from __future__ import annotations

import io
import os
import pty
import random

from fakeclock import Clock
from scanlogs import random_log, run_json

from efa_validators.scan.progress import ProgressLine, on_terminal


def test_the_line_waits_then_is_rewritten_in_place_at_most_every_half_second_and_is_cleared():
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, after=1.0, every=0.5, clock=clock)
    clock.now += 0.9
    line("/logs/big.log", 10 << 20, 100 << 20)
    assert out.getvalue() == ""  # a quick parse shows nothing
    clock.now += 0.1
    line("/logs/big.log", 20 << 20, 100 << 20)
    assert out.getvalue() == "\rparse: big.log 20 of 100 MiB (20 %), 20 MiB/s"
    clock.now += 0.4
    line("/logs/big.log", 30 << 20, 100 << 20)  # too soon after the last
    clock.now += 0.1
    line("/logs/big.log", 40 << 20, 100 << 20)
    first = "parse: big.log 20 of 100 MiB (20 %), 20 MiB/s"
    second = "parse: big.log 40 of 100 MiB (40 %), 27 MiB/s"  # 40 MiB in 1.5 s
    assert out.getvalue() == "\r" + first + "\r" + second.ljust(len(first))
    line.close()
    assert out.getvalue().endswith("\r" + " " * len(first) + "\r")
    line.close()  # twice: nothing more
    assert out.getvalue().count("\r") == 4


def test_no_time_passed_gives_no_rate_rather_than_an_error():
    out = io.StringIO()
    ProgressLine(out, after=0, every=0, clock=Clock())("big.log", 1 << 20, 2 << 20)
    assert out.getvalue() == "\rparse: big.log 1 of 2 MiB (50 %), 0 MiB/s"


def test_only_a_terminal_gets_a_progress_line():
    assert on_terminal(io.StringIO()) is None
    parent, child = pty.openpty()
    try:
        with os.fdopen(child, "w", closefd=False) as tty:
            assert isinstance(on_terminal(tty), ProgressLine)
    finally:
        os.close(parent)
        os.close(child)


# the CLI's parse, its terminal replaced by a buffer that shows every update (after=0, every=0)
_CLI = r"""
import io, json, sys
sys.path.insert(0, sys.argv[1])
from efa_validators import cli
from efa_validators.scan import parscan, progress
seen = io.StringIO()
calls = []
class Recording(progress.ProgressLine):
    def __call__(self, path, done, size):
        calls.append((done, size))
        super().__call__(path, done, size)
progress.on_terminal = lambda stream: Recording(seen, after=0, every=0)
parscan.RANGE = 1 << 16
sys.stdout = io.StringIO()
code = cli.main(["parse", sys.argv[2], "--workers", "2", "--json", sys.argv[3]])
sys.stdout = sys.__stdout__
print(json.dumps({"code": code, "calls": calls, "shown": seen.getvalue()}))
"""

_PLAIN = r"""
import io, json, sys
sys.path.insert(0, sys.argv[1])
from efa_validators import cli
from efa_validators.scan import parscan
parscan.RANGE = 1 << 16
sys.stdout = io.StringIO()
code = cli.main(["parse", sys.argv[2], "--workers", "2", "--json", sys.argv[3]])
sys.stdout = sys.__stdout__
print(json.dumps({"code": code}))
"""


def test_a_split_parse_reports_each_merged_range_and_the_report_is_unchanged(tmp_path):
    log = tmp_path / "big.log"
    log.write_bytes(random_log(random.Random(5), 6000))
    size = log.stat().st_size
    with_progress, without = tmp_path / "with.json", tmp_path / "without.json"
    out = run_json(_CLI, str(log), str(with_progress))
    plain = run_json(_PLAIN, str(log), str(without))
    assert out["code"] == plain["code"]
    assert with_progress.read_bytes() == without.read_bytes()
    calls = out["calls"]
    assert len(calls) >= size // (1 << 16) - 1  # one per 64 KiB range: the split happened
    assert all(s == size for _, s in calls)
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and done[-1] == size  # forward only, and to the end
    assert out["shown"].startswith("\rparse: big.log ") and out["shown"].endswith("\r")  # cleared at the end
