"""Folding ranges apart and merging the folds gives the report of one fold (issue 15).

A split parse has each worker fold its range of lines into a partial (analyze.fold_range, a partial
facts.Facts) and the parent merge the partials in range order (Facts.merge), shifting their line numbers
by the range's base. Here the scanned lines of many logs are cut at many places (random ones, inside a
NET channel run, between an nccl-tests table header and its rows, after every line), each piece folded
alone and the pieces merged: the report must be the very report of one serial fold. A field the merge
left out changes some report here. The same through the real split (worker processes, tiny ranges) runs
in a fresh interpreter, as the split refuses to fork from a threaded process.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from conftest import _nccl_logs_dir, corpus_missing
from paths import ROOT
from scanlogs import random_log, run_json

from efa_validators.analyze import Analysis, fold_range
from efa_validators.analyze.needles import NCCL, SIGNATURE, TESTS, _scan_needles, _table_region, _table_start
from efa_validators.analyze.prep import prepare
from efa_validators.parse.facts import Facts
from efa_validators.scan.linescan import scan
from efa_validators.scan.wrapped import ends_no_range

FIXTURES = sorted((ROOT / "tests" / "fixtures").rglob("*.log"))


def _generated(tmp_path: Path, nodes: int) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_runner_scale import generate

    log = tmp_path / ("ranks%d.log" % nodes)
    generate(str(log), nodes)
    return log


def _inputs(tmp_path: Path) -> list:
    corpus = sorted(_nccl_logs_dir().glob("*.log"))
    if not corpus:
        corpus_missing("no logs at %s" % _nccl_logs_dir())
    randoms = []
    for seed in range(4):
        log = tmp_path / ("random%d.log" % seed)
        log.write_bytes(random_log(random.Random(300 + seed), 1500))
        randoms.append(log)
    return FIXTURES + corpus + randoms + [_generated(tmp_path, n) for n in (1, 3)]


def _scanned(path: Path) -> tuple:
    stats = {}
    with open(path, "rb") as fh:
        lines = list(scan(fh, _scan_needles(), stats=stats, region=_table_region()))
    return lines, stats


def _view(f: Facts) -> tuple:
    """Every piece of state a Facts holds, orders included (a field no report reads counts too)."""
    procs = list(f.procs.values())
    return (
        list(f.procs),
        [p.state({}) for p in procs],
        [(list(p.env.items()), list(p.platforms.items())) for p in procs],
        [[list(r.intra_paths) for r in p.ranks.values()] for p in procs],
        f.headless.state({}),
        f.headless_versions,
        list(f.counts.items()),
        list(f.evidence.items()),
        list(f.signature_counts.items()),
        list(f.signature_evidence.items()),
        (f.world_nranks, f.world_ranks, f.nnodes, f.watchdog_ranks),
        f.crashes,
    )


def _report(a: Analysis, stats: dict) -> tuple:
    """(the facts before the report's finalize, the report)."""
    view = _view(a.facts)
    a.end(stats.get("lines", 0), stats.get("bytes"))
    report = a.report()
    report["replay"] = a.replay
    return view, json.dumps(report, sort_keys=False)


def _one_fold(path: Path, lines: list, stats: dict) -> tuple:
    a = Analysis()
    a.begin(str(path))
    for item in prepare(lines):
        a.apply(0, item)
    return _report(a, stats)


def _merged(path: Path, lines: list, stats: dict, cuts: list) -> tuple:
    """Each piece between cuts folded alone (its lines numbered from the line before it), then merged."""
    a = Analysis()
    a.begin(str(path))
    # as parscan.boundaries cuts: never right after a line that may begin a wrapped message (scan/wrapped.py)
    bounds = sorted(
        set(c for c in cuts if 0 < c < len(lines) and not ends_no_range(lines[c - 1][1].encode()))
    )
    for start, end in zip([0] + bounds, bounds + [len(lines)]):
        base = lines[start - 1][0] if start else 0
        piece = [(n - base, raw, cut, flags) for n, raw, cut, flags in lines[start:end]]
        (part,) = fold_range(str(path), piece)
        a.merge(base, part)
    return _report(a, stats)


def _cut_sets(lines: list, rng: random.Random) -> list:
    """Cut points: random, inside and around NET channel runs, after table headers, after every line."""
    net = [i for i, line in enumerate(lines) if "via NET/" in line[1]]
    at_net = set(net)
    runs = [i for i in net if i + 1 in at_net]  # a NET line followed by one: a cut after it splits a run
    heads = [i + 1 for i, line in enumerate(lines) if _table_start(line[1].encode("utf-8", "replace"))]
    n = len(lines)
    sets = [[rng.randrange(n + 1) for _ in range(k)] for k in (1, 3, 9)]
    if runs:
        sets.append([i + 1 for i in rng.sample(runs, min(6, len(runs)))])
        sets.append([i for i in net[:40]] + [i + 1 for i in net[:40]])
    if heads:
        sets.append(heads + [h + 1 for h in heads])
    if n <= 3000:
        sets.append(list(range(1, n)))
    return sets


def test_folds_of_pieces_merged_equal_one_fold(tmp_path):
    rng = random.Random(15)
    checked = 0
    for path in _inputs(tmp_path):
        lines, stats = _scanned(path)
        if not lines:
            continue
        want = _one_fold(path, lines, stats)
        for cuts in _cut_sets(lines, rng):
            got = _merged(path, lines, stats, cuts)
            assert got[1] == want[1], (str(path), sorted(set(cuts))[:20])
            assert got[0] == want[0], (str(path), sorted(set(cuts))[:20])
        checked += 1
    assert checked >= len(FIXTURES) // 2 + 10


def _synthetic(rng: random.Random, n: int) -> list:
    """Lines as scanned (all flags) that stress what the merge must keep in line order: over 8 intra-node
    paths and over 64 env names per process, comm lines of growing and shrinking communicators with and
    without a bus id, spliced lines, NET runs, signature and error lines."""
    out = []
    for lineno in range(1, n + 1):
        host, pid, dev = rng.choice(("gpu-a", "gpu-b")), rng.choice((1, 2)), rng.choice((0, 1))
        head = "%s:%d:%d [%d] NCCL INFO " % (host, pid, pid + 9, dev)
        r = rng.random()
        if r < 0.15:
            msg = "Channel %02d/0 : 0[0] -> 1[1] via P2P/path%d" % (rng.randrange(4), rng.randrange(12))
        elif r < 0.35:  # one process: over 64 names
            head = "gpu-a:1:10 [0] NCCL INFO "
            msg = "NCCL_VAR%d set by environment to %d" % (rng.randrange(100), rng.randrange(3))
        elif r < 0.45:
            msg = "comm 0x55 rank %d nRanks %d nNodes %d localRanks 8 localRank 3 MNNVL 0" % (
                rng.randrange(16),
                rng.choice((4, 8, 16)),
                rng.choice((1, 2)),
            )
        elif r < 0.55:
            msg = "ncclCommInitRank comm 0x55 rank %d nranks %d cudaDev 0 %s- Init %s" % (
                rng.randrange(16),
                rng.choice((4, 8, 16)),
                rng.choice(("", "busId %x000 " % rng.randrange(256))),
                rng.choice(("START", "COMPLETE")),
            )
        elif r < 0.7:
            msg = "Channel %02d/0 : 0[0] -> 8[0] [send] via NET/%s/%d%s" % (
                rng.randrange(4),
                rng.choice(("Libfabric", "IB", "Socket")),
                rng.randrange(2),
                rng.choice(("/GDRDMA", "")),
            )
        elif r < 0.78:
            msg = (
                "Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfab%s:%d:6 [%d] NCCL INFO Using network %s"
                % (
                    rng.choice(("gpu-a", "gpu-b", "zz")),
                    pid,
                    dev,
                    rng.choice(("Libfabric", "Socket")),
                )
            )
        elif r < 0.86:
            msg = "NET/OFI Selected provider is %s, fabric is efa-direct (found 4 nics)" % rng.choice(
                ("efa", "tcp")
            )
        elif r < 0.93:
            msg = "NET/OFI Running on %s platform, NCCL_PROTO set to simple" % rng.choice(("p5", "p4d"))
        else:
            head = head.replace("INFO", "WARN")
            msg = "NET/OFI Unable to write to fabric: fi_getinfo error %d" % rng.randrange(3)
        out.append((lineno, head + msg, rng.random() < 0.05, NCCL | SIGNATURE | TESTS))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_merge_keeps_line_order_where_the_fold_caps_or_overwrites(seed):
    rng = random.Random(seed)
    lines = _synthetic(rng, 600)
    stats = {"lines": 600, "bytes": None}
    want = _one_fold(Path("synthetic.log"), lines, stats)
    facts = json.loads(want[1])
    assert facts["nranks"] == 16 and facts["ranks"]
    for cuts in _cut_sets(lines, rng):
        got = _merged(Path("synthetic.log"), lines, stats, cuts)
        assert got == want, sorted(set(cuts))[:20]


def test_line_numbers_are_shifted_once_by_the_base(tmp_path):
    """Evidence of a later piece names its line in the whole file, not in the piece."""
    log = _generated(tmp_path, 1)
    lines, stats = _scanned(log)
    report = json.loads(_merged(log, lines, stats, [len(lines) // 2, 3 * len(lines) // 4])[1])
    text = log.read_text().splitlines()
    seen = 0
    for rank in report["ranks"]:
        for ev in rank["evidence"]:
            assert text[ev["line"] - 1].endswith(ev["text"]), ev
            seen += 1
    assert seen >= 8


_SPLIT_REPORTS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from efa_validators.scan import parscan
from efa_validators.analyze import Analysis, analyze_file
out = []
for paths, rs, workers in json.loads(sys.argv[2]):
    reports = []
    for w in (1, workers):
        a = Analysis()
        for path in paths:  # several files: one Facts, each file's lines numbered from its start
            analyze_file(a, path, w, rs)
        r = a.report()
        r["replay"] = a.replay
        reports.append(json.dumps(r))
    with open(paths[0], "rb") as fh:
        ranges = len(parscan.boundaries(fh, parscan.os.path.getsize(paths[0]), rs))
    out.append({"paths": paths, "same": reports[0] == reports[1], "ranges": ranges})
print(json.dumps(out))
"""


def test_split_parse_with_tiny_ranges_reports_as_one_fold(tmp_path):
    """The real split: worker processes fold ranges of a few KiB, the parent merges them (and folds the
    ranges an open nccl-tests table crosses itself)."""
    inputs = [str(p) for p in _inputs(tmp_path)]
    cases = [([p], 2048, 3) for p in inputs]
    cases += [([inputs[-1]], 64 << 10, 2), ([inputs[-2]], 5000, 2), (inputs[-4:], 4096, 2)]
    out = run_json(_SPLIT_REPORTS, json.dumps(cases), timeout=600)
    assert [r for r in out if not r["same"]] == []
    assert sum(r["ranges"] > 5 for r in out) >= 10  # the split really happened


_DYING = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from efa_validators import analyze
from efa_validators.analyze import Analysis, analyze_file
PARENT, calls = os.getpid(), [0]
real = analyze._table_region
def dying_region():
    calls[0] += 1
    if os.getpid() != PARENT and calls[0] == 2:
        os._exit(9)  # as the OOM killer would end it: no exception, no result
    return real()
reports = []
for w in (1, 2):
    analyze._table_region = dying_region if w == 2 else real
    a = Analysis()
    analyze_file(a, sys.argv[2], w, 20000)
    reports.append(json.dumps(a.report()))
print(json.dumps({"same": reports[0] == reports[1]}))
"""


@pytest.mark.parametrize("seed", (21, 22))
def test_a_worker_that_dies_leaves_its_ranges_to_the_parent(tmp_path, seed):
    log = tmp_path / "a.log"
    log.write_bytes(random_log(random.Random(seed), 6000))
    assert run_json(_DYING, str(log), timeout=120)["same"] is True


_FAILING = r"""
import gc, json, multiprocessing, sys
sys.path.insert(0, sys.argv[1])
from efa_validators import analyze
from efa_validators.scan import parscan
parscan.RANGE = 20000  # ranges of a few KiB: analyze_paths splits the small log
calls, paused = [0], []
def merge(self, base, part):
    calls[0] += 1
    paused.append(not gc.isenabled())
    if calls[0] == 2:
        raise ValueError("bad range")
analyze.Analysis.merge = merge
try:
    analyze.analyze_paths([sys.argv[2]], workers=2)
    err = None
except ValueError as e:
    err, kept = str(e), e  # its traceback holds the parse's frames: nothing may wait for them to go
print(json.dumps({"err": err, "paused": paused, "gc": gc.isenabled(),
                  "children": len(multiprocessing.active_children())}))
"""


def test_an_error_while_merging_ends_the_workers_and_gives_the_collector_back(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(random_log(random.Random(23), 6000))
    out = run_json(_FAILING, str(log), timeout=120)
    # the collector was off while the workers' folds were merged (collector_paused), and is back after
    assert out == {"err": "bad range", "paused": [True, True], "gc": True, "children": 0}


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_for_a_parse_and_left_as_it_was(monkeypatch, enabled):
    """analyze_paths parses and builds the report with the cyclic collector off (issue 15: ~10 % of the CPU
    on r8192), and leaves it on or off as it found it, on an error too."""
    import gc

    from efa_validators import analyze

    seen = []
    real = analyze.build_report

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(analyze, "build_report", spy)
    log = ROOT / "tests" / "fixtures" / "logs" / "gdr-disabled-p4d.log"
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        report = analyze.analyze_paths([str(log)], workers=1)
        assert gc.isenabled() is enabled
        with pytest.raises(OSError):
            analyze.analyze_paths([str(log) + ".missing"], workers=1)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False] and report["verdict"]
