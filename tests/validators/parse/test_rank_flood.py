"""Rank floods are bounded (issue 23, item 10): past facts.RANKS_MAX ranks (PROCS_MAX processes) the fold
counts what it does not keep, lists only what it kept, and the verdict cannot pass on ranks it kept nothing
of. The floods are made by bench/bench_flood.py from the real logs' communicator init lines; the time and
memory of the 300,000-rank flood are measured there (BENCHMARKS.md), never here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli import validators_process
from conftest import _nccl_logs_dir, corpus_missing
from paths import ROOT
from scanlogs import run_json

from efa_validators.analyze import Analysis, analyze_file
from efa_validators.parse import facts

sys.path.insert(0, str(ROOT / "bench"))
from bench_flood import flood  # noqa: E402
from bench_runner_scale import generate  # noqa: E402


def _corpus() -> list:
    logs = sorted(_nccl_logs_dir().glob("*.log"))
    if not logs:
        corpus_missing("no logs at %s" % _nccl_logs_dir())
    return logs


def _flood(tmp_path: Path, ranks: int) -> Path:
    log = tmp_path / ("flood%d.log" % ranks)
    flood(str(log), ranks, [str(p) for p in _corpus()])
    return log


def _report(path: Path) -> dict:
    a = Analysis()
    analyze_file(a, str(path), 1)
    return a.report()


def _not_kept(report: dict) -> dict:
    (finding,) = [f for f in report["findings"] if f["id"] == "ranks-not-kept"]
    return finding


def test_a_flood_past_the_cap_is_counted_listed_to_the_cap_and_never_passes(tmp_path):
    """A whole `validators parse` of a flood twice the cap and more (split across workers where the
    machine has two CPUs): the first RANKS_MAX ranks listed, the others counted in a finding, a check
    that is unknown, a report that does not grow with the flood (main listed every rank: ~66 MB here)."""
    ranks = 2 * facts.RANKS_MAX + 4096
    log = _flood(tmp_path, ranks)
    out = tmp_path / "report.json"
    res = validators_process("parse", log, "--json", out, timeout=600)
    # never a pass: unknown for the ranks not kept (3), or fail where the world checks see through the flood
    assert res.returncode in (1, 3), res.stdout + res.stderr
    assert "check ranks-kept: unknown" in res.stdout
    report = json.loads(out.read_text())
    assert report["verdict"] == ("fail" if res.returncode == 1 else "unknown")
    assert len(report["ranks"]) == facts.RANKS_MAX
    assert [r["rank"] for r in report["ranks"][:2]] == [0, 1]  # the first ones, in the log's order
    assert report["ranks"][-1]["rank"] == facts.RANKS_MAX - 1
    assert report["nranks"] == ranks and report["ranks_seen"] == ranks  # the world as the log claims it
    finding = _not_kept(report)
    assert finding["severity"] == "warning"
    assert finding["kept"] == {"ranks": facts.RANKS_MAX, "processes": facts.PROCS_MAX}
    assert finding["not_kept"] == {"ranks": ranks - facts.RANKS_MAX, "processes": ranks - facts.PROCS_MAX,
                                   "at_least": False}  # fmt: skip
    assert (
        "%d rank(s) and %d process(es)" % (ranks - facts.RANKS_MAX, ranks - facts.PROCS_MAX)
        in finding["message"]
    )
    (check,) = [c for c in report["checks"] if c["name"] == "ranks-kept"]
    assert check["status"] == "unknown"
    assert out.stat().st_size < 40 << 20  # ~0.85 KB of detail per listed rank


_SPLIT_FLOOD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from efa_validators.parse import facts
facts.RANKS_MAX = facts.PROCS_MAX = 50
from efa_validators.analyze import Analysis, analyze_file
reports = []
for workers, range_size in ((1, None), (2, 4096)):
    a = Analysis()
    analyze_file(a, sys.argv[2], workers, range_size)
    reports.append(a.report())
print(json.dumps(reports))
"""


def test_split_and_serial_folds_keep_and_count_the_same(tmp_path):
    """Worker processes fold ranges of 4 KiB, the parent keeps to the cap as it merges, and ranges sent
    after it is full spill in the worker what it does not keep (analyze.Kept): the same report as one
    fold. The flood is printed twice (every rank again, further down): a kept rank takes its second line,
    a rank not kept is counted once."""
    log = _flood(tmp_path, 400)
    text = log.read_bytes()
    log.write_bytes(text + text)
    serial, split = run_json(_SPLIT_FLOOD, str(log), timeout=300)
    assert split == serial
    assert len(serial["ranks"]) == 50
    assert _not_kept(serial)["not_kept"] == {"ranks": 350, "processes": 350, "at_least": False}
    assert serial["verdict"] != "pass"


def _passing_logs(tmp_path: Path) -> list:
    """Logs that pass at the default cap: two real 2-node p4d logs and a generated 3-node p5 init."""
    corpus = {p.name: p for p in _corpus()}
    gen = tmp_path / "p5-3nodes.log"
    generate(str(gen), 3)
    return [corpus[n] for n in sorted(corpus) if n.startswith(("01-eks-p4d", "02-eks-p4d"))] + [gen]


@pytest.mark.parametrize("cap", ["RANKS_MAX", "PROCS_MAX"])
def test_a_log_that_passes_does_not_pass_when_one_rank_is_past_the_cap(tmp_path, monkeypatch, cap):
    """Fail closed: the same log, with the cap one below its ranks (processes), is unknown, efa and gdr
    not shown, and the finding counts the one it did not keep."""
    logs = _passing_logs(tmp_path)
    assert len(logs) == 3
    for log in logs:
        full = _report(log)
        assert full["verdict"] == "pass" and not [f for f in full["findings"] if f["id"] == "ranks-not-kept"]
        monkeypatch.setattr(facts, cap, len(full["ranks"]) - 1)
        capped = _report(log)
        monkeypatch.undo()
        assert capped["verdict"] == "unknown", log
        assert capped["efa"] is None and capped["gdr"] is None
        assert len(capped["ranks"]) == len(full["ranks"]) - 1
        assert _not_kept(capped)["not_kept"]["ranks"] == 1
        assert _not_kept(capped)["not_kept"]["processes"] == (1 if cap == "PROCS_MAX" else 0)


def test_past_the_counting_bound_the_count_is_a_floor(tmp_path, monkeypatch):
    monkeypatch.setattr(facts, "RANKS_MAX", 4)
    monkeypatch.setattr(facts, "PROCS_MAX", 4)
    monkeypatch.setattr(facts, "COUNTED_MAX", 3)
    report = _report(_flood(tmp_path, 20))
    finding = _not_kept(report)
    assert finding["not_kept"] == {"ranks": 3, "processes": 3, "at_least": True}
    assert "more than 3 rank(s)" in finding["message"]
    assert report["verdict"] != "pass"


def test_world_ranks_past_their_bound_are_not_all_seen(tmp_path, monkeypatch):
    """The world's rank numbers are kept to WORLD_RANKS_MAX: past it `ranks-seen` cannot pass."""
    log = tmp_path / "p5-3nodes.log"
    generate(str(log), 3)
    monkeypatch.setattr(facts, "WORLD_RANKS_MAX", 10)
    report = _report(log)
    (seen,) = [c for c in report["checks"] if c["name"] == "ranks-seen"]
    assert seen["status"] == "unknown" and report["ranks_seen"] == 10
    assert report["verdict"] == "unknown"
