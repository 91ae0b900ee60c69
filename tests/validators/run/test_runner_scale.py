"""The runner at scale: the job never waits for the parser, findings stay readable and the report small at
8192 ranks, report building is linear in processes. No wall-clock asserts: the producer's freedom is
shown by ordering (it finishes while the parser is held on its first batch)."""

from __future__ import annotations

import json
import os
import sys
import threading

from preflight_util import GOOD_EFA, assert_none_left, marker

from efa_validators.judge import shortlist
from efa_validators.report import assemble as report_mod
from efa_validators.run import report as runreport
from efa_validators.run.runner import RankState, RunResult, run_command

PRODUCED = 8 << 20  # 8 MiB: over a hundred pipe buffers, many times the parser queue


def test_producer_finishes_while_the_parser_is_held(tmp_path):
    """The parser is stopped on its first batch until the producer has written everything and exited
    (bounded: 60 s). Were the job's output throttled by the reader or the parser (a pipe, a blocking
    queue), the producer could not finish while the parser is held, and `finished_first` would be False."""
    done = tmp_path / "producer-done"
    tag = marker()
    script = (
        "import sys,os\n"
        "line = b'x' * 99 + b'\\n'\n"
        "for _ in range(%d): sys.stdout.buffer.write(line)\n"
        "sys.stdout.flush(); open(%r, 'w').close()  # %s\n" % (PRODUCED // 100, str(done), tag)
    )
    seen = {"lines": 0, "finished_first": None}
    release = threading.Event()

    def slow_parser(batch):
        if seen["finished_first"] is None:
            for _ in range(600):  # held until the producer is done: at most 60 s
                if done.exists():
                    break
                release.wait(0.1)
            seen["finished_first"] = done.exists()
        seen["lines"] += len(batch)

    with open(tmp_path / "run.log", "w", encoding="utf-8") as log:
        result = run_command(
            [sys.executable, "-c", script],
            timeout=120,
            log=log,
            on_lines=slow_parser,
            spool_dir=str(tmp_path),
        )
    assert seen["finished_first"] is True
    assert result.killed is None and result.returncode == 0
    assert seen["lines"] == result.lines == PRODUCED // 100
    assert os.path.getsize(tmp_path / "run.log") == PRODUCED // 100 * 100
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".validators-spool")]  # spool unlinked
    assert_none_left(tag)


def test_idle_watchdog_judges_output_not_the_parser(tmp_path):
    """Output keeps arriving for longer than the idle timeout while the parser is held: no hang."""
    tag = marker()
    script = (
        "import time,sys\nfor i in range(12):\n print('tick', i, %r, flush=True); time.sleep(0.25)\n" % tag
    )
    held = threading.Event()

    def held_parser(batch):
        held.wait(0.5)  # each batch costs the parser longer than the output's gaps

    result = run_command([sys.executable, "-c", script], idle_timeout=1.0, timeout=60, on_lines=held_parser)
    assert result.killed is None and result.returncode == 0
    assert result.lines == 12
    assert_none_left(tag)


def _result_with_ranks(nranks: int, per_host: int = 8) -> RunResult:
    result = RunResult(["mpirun", "-np", str(nranks)], "mpirun")
    result.killed, result.idle_timeout, result.kill_signal = "idle", 30.0, "term"
    for rank in range(nranks):
        state = result.ranks[rank] = RankState()
        state.host = "p5-st-gpu-%d" % (rank // per_host + 1)
        for i in range(8):
            result.lines += 1
            state.lines += 1
            state.last.append(
                (result.lines, "[1,%d]<stdout>:%s:1:1 [0] NCCL INFO line %d" % (rank, state.host, i))
            )
        state.last_time = 2.0
    result.ranks[nranks - 1].last_time = 40.0  # the one rank that kept printing
    return result


def test_hang_at_8192_ranks_is_one_readable_line_and_small_json():
    result = _result_with_ranks(8192)
    findings = runreport.run_findings(result)
    hang = next(f for f in findings if f["id"] == "hang")
    assert "8191 of 8192 ranks went quiet first: ranks 0-8190 on 1024 hosts (p5-st-gpu-1, " in hang["message"]
    assert len(hang["message"]) < 400, hang["message"]
    assert hang["ranks_count"] == 8191 and len(hang["ranks"]) == runreport.LIST_CAP
    assert hang["rank_ranges"] == "0-8190"
    assert len(hang["evidence"]) == 3 * runreport.EVIDENCE_RANKS
    assert len(json.dumps(hang)) < 20_000
    facts = runreport.run_facts(result)
    tailed = [r for r in facts["rank_output"] if "last_lines" in r]
    assert len(tailed) == facts["ranks_tailed"] == runreport.REPORT_TAILS
    assert len(facts["rank_output"]) == 8192 and facts["rank_output"][5]["host"] == "p5-st-gpu-1"
    assert len(json.dumps(facts)) < 1_000_000  # was 8 MB: every rank's 8 last lines


def test_quiet_ranks_are_given_as_ranges_and_hosts():
    result = _result_with_ranks(32, per_host=8)
    for rank in (3, 4, 5, 17):
        result.ranks[rank].last_time = 1.0
    for rank in range(32):
        if rank not in (3, 4, 5, 17):
            result.ranks[rank].last_time = 40.0
    hang = next(f for f in runreport.run_findings(result) if f["id"] == "hang")
    assert (
        "4 of 32 ranks went quiet first: ranks 3-5, 17 on 2 hosts (p5-st-gpu-1, p5-st-gpu-3)"
        in hang["message"]
    )
    assert hang["ranks"] == [3, 4, 5, 17]
    assert shortlist.ranges(list(range(0, 40, 2)), cap=3) == "0, 2, 4 and 17 more"


class _CountingProcs(dict):
    """facts.procs that counts full passes over it."""

    passes = 0

    def values(self):
        type(self).passes += 1
        return super().values()


def _passes_for(nhosts: int) -> int:
    from efa_validators.parse.facts import Facts
    from efa_validators.parse.ranks import Proc

    facts = Facts()
    procs = _CountingProcs()
    for h in range(nhosts):
        for pid in range(8):
            procs[("host-%d" % h, str(pid))] = Proc("host-%d" % h, str(pid))
    facts.procs = procs
    _CountingProcs.passes = 0
    hosts = report_mod._hosts(facts)
    assert len(hosts) == nhosts and all(h["processes"] == 8 for h in hosts)
    return _CountingProcs.passes


def test_host_table_is_linear_in_processes():
    """The per-host rows are built from one grouping pass, not a pass over every process per host."""
    assert _passes_for(10) == _passes_for(200)


def test_replay_mark_is_what_the_runner_looks_for():
    from efa_validators.replay import MARK
    from efa_validators.run.runner import REPLAY_MARK

    assert MARK.startswith(REPLAY_MARK)
    assert GOOD_EFA.exists()
