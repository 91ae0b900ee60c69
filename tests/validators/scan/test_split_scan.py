"""The fast scan paths hand on exactly the lines of one plain serial scan.

memmem (efa_validators/scan/memsearch.py) must agree with `bytes.find`; a line is its first MAX_LINE
bytes whatever the chunking; and the split scan (efa_validators/scan/parscan.py) over byte ranges in
worker processes must give the same lines, numbers, flags and totals as one serial scan,
including tables whose rows straddle a range boundary. The split runs in a fresh interpreter:
a pytest process may hold threads, and the split scan refuses to fork then.
"""

import io
import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import corpus_missing
from scanlogs import TABLE, random_log, run_json

from efa_validators.analyze import analyze_paths
from efa_validators.analyze.needles import _scan_needles, _table_region
from efa_validators.scan import linescan, memsearch, parscan
from efa_validators.scan.linescan import MAX_LINE, scan

ROOT = Path(__file__).resolve().parents[3]
CORPUS = Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))
FIX = ROOT / "tests" / "fixtures" / "logs"


def serial(data: bytes, chunk: int = linescan.CHUNK) -> tuple:
    stats = {}
    lines = list(
        scan(io.BytesIO(data), _scan_needles(), chunk_size=chunk, stats=stats, region=_table_region())
    )
    return lines, stats


# --------------------------------------------------------------------------- memmem
@pytest.mark.skipif(not memsearch.available(), reason="no memmem in this C library")
def test_memmem_finder_agrees_with_bytes_find_everywhere():
    rng = random.Random(7)
    for _ in range(200):
        body = bytes(rng.choice(b"NETWARNnetworkab \n#_") for _ in range(rng.randrange(0, 300)))
        find = memsearch.finder(body)
        for needle in (b"NET", b"WARN", b"network", b"#", b"_perf", b"ab", b"zz"):
            start = rng.randrange(0, len(body) + 2)
            end = rng.randrange(start, len(body) + 3)
            assert find(needle, start, end) == body.find(needle, start, end), (body, needle, start, end)


def test_without_memmem_the_scan_is_the_same(tmp_path):
    data = random_log(random.Random(3), 3000)
    log = tmp_path / "a.log"
    log.write_bytes(data)
    code = (
        "import json, sys; sys.path.insert(0, %r)\n"
        "from efa_validators.scan import memsearch; from efa_validators.analyze import analyze_paths\n"
        "r = analyze_paths([%r], workers=1); r['memmem'] = memsearch.available(); print(json.dumps(r))"
    ) % (str(ROOT / "validators"), str(log))
    off = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, VALIDATORS_MEMMEM="0"),
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(off.stdout)
    assert report.pop("memmem") is False
    assert report == json.loads(json.dumps(analyze_paths([str(log)], workers=1)))


# --------------------------------------------------------------------------- one line, one head
def test_a_needle_past_the_head_of_an_overlong_line_does_not_count():
    inside = b"x" * (MAX_LINE - 3) + b"NET" + b"tail"
    outside = b"x" * (MAX_LINE - 2) + b"NET"
    got = [t[:3] for t in scan(io.BytesIO(inside + b"\n" + outside + b"\n"), [b"NET"])]
    assert got == [(1, (b"x" * (MAX_LINE - 3) + b"NET").decode(), True)]


@pytest.mark.parametrize("seed", range(6))
def test_scan_output_does_not_depend_on_chunk_size(seed):
    data = random_log(random.Random(seed), 400)
    want = serial(data)
    for chunk in (1, 5, 4096, MAX_LINE + 1, 3 * MAX_LINE):
        assert serial(data, chunk) == want, chunk


def test_a_line_longer_than_a_chunk_is_its_head(tmp_path):
    giant = b"NET head " + b"z" * (2 * MAX_LINE) + b" WARN far"
    data = b"a NET\n" + giant + b"\nb NET\n"
    for chunk in (100, MAX_LINE // 2, 1 << 20):
        lines, stats = serial(data, chunk)
        assert [(n, cut) for n, _, cut, _ in lines] == [(1, False), (2, True), (3, False)], chunk
        assert lines[1][1] == giant[:MAX_LINE].decode()
        assert stats == {"lines": 3, "bytes": len(data)}


def test_a_range_scanned_alone_gives_the_same_lines_as_the_whole(tmp_path):
    """Without tables (no region state to carry), any line start can start a range."""
    data = random_log(random.Random(11), 2000, tables=False)
    log = tmp_path / "a.log"
    log.write_bytes(data)
    whole, _ = serial(data)
    starts = [i + 1 for i, b in enumerate(data) if b == 10][::97]
    assert len(starts) > 5
    for start in starts:
        before = data[:start].count(b"\n")
        got, nlines, nbytes, state = parscan.scan_range(str(log), start, None, _scan_needles(), _table_region)
        assert [(n + before, text, cut, f) for n, text, cut, f in got] == [t for t in whole if t[0] > before]
        assert nbytes == len(data) - start and state[0] == 0


# --------------------------------------------------------------------------- split scan
_SPLIT = r"""
import io, json, sys
sys.path.insert(0, sys.argv[1])
from efa_validators.scan import parscan
from efa_validators.analyze.needles import _scan_needles, _table_region
from efa_validators.scan.linescan import scan
out = []
for path, rs in json.loads(sys.argv[2]):
    with open(path, "rb") as fh:
        st1 = {}
        want = list(scan(fh, _scan_needles(), stats=st1, region=_table_region()))
    st2 = {}
    got = list(parscan.scan_file(path, _scan_needles(), _table_region, 3, st2, range_size=rs))
    with open(path, "rb") as fh:
        ranges = len(parscan.boundaries(fh, st1["bytes"], rs))
    diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    out.append({"path": path, "same": got == want, "stats": [st1, st2], "ranges": ranges,
                "lines": len(want), "first_diff": diff})
print(json.dumps(out))
"""


def _split_check(cases) -> list:
    return run_json(_SPLIT, json.dumps(cases))


def test_split_scan_equals_the_serial_scan_on_random_logs(tmp_path):
    cases = []
    for seed in range(8):
        log = tmp_path / ("r%d.log" % seed)
        log.write_bytes(random_log(random.Random(100 + seed), 3000))
        for rs in (4096, 65536 + 17, 300000):
            cases.append((str(log), rs))
    for r in _split_check(cases):
        assert r["same"], r
        assert r["stats"][0] == r["stats"][1], r
    assert max(r["ranges"] for r in _split_check(cases[:3])) > 10  # the split really happened


def test_split_scan_carries_an_open_table_across_every_boundary(tmp_path):
    """Tables back to back, no footers: a region is open at nearly every range boundary."""
    rows = [b"[1,0]<stdout>:" + TABLE[0]] + [b"[1,0]<stdout>:" + TABLE[1]] * 60 + [b"[1,1]<stderr>:x NET y"]
    data = b"\n".join(rows * 80) + b"\n"
    log = tmp_path / "tables.log"
    log.write_bytes(data)
    for r in _split_check([(str(log), rs) for rs in (1000, 4099, 20000)]):
        assert r["same"] and r["stats"][0] == r["stats"][1], r
        assert r["ranges"] > 5


def test_split_scan_with_a_line_longer_than_a_range(tmp_path):
    data = b"a NET\n" + b"NET " + b"q" * (3 * MAX_LINE) + b"\n" + b"b WARN\n" * 50 + b"c NET"
    log = tmp_path / "long.log"
    log.write_bytes(data)
    for r in _split_check([(str(log), rs) for rs in (512, MAX_LINE, 2 * MAX_LINE + 5)]):
        assert r["same"] and r["stats"][0] == r["stats"][1], r


def test_split_scan_on_the_real_logs(tmp_path):
    logs = [p for p in sorted(CORPUS.glob("*.log"))] + sorted(FIX.glob("*.log"))[:10]
    if not logs:
        corpus_missing("no logs at %s" % CORPUS)
    for r in _split_check([(str(p), 4096) for p in logs]):
        assert r["same"] and r["stats"][0] == r["stats"][1], r


_DYING = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from efa_validators.scan import parscan
from efa_validators.analyze.needles import _scan_needles, _table_region
from efa_validators.scan.linescan import scan
PARENT, calls = os.getpid(), [0]
def dying_region():
    calls[0] += 1
    if os.getpid() != PARENT and calls[0] == 2:
        os._exit(9)  # as the OOM killer would end it: no exception, no result
    return _table_region()
path = sys.argv[2]
with open(path, "rb") as fh:
    want = list(scan(fh, _scan_needles(), region=_table_region()))
st = {}
got = list(parscan.scan_file(path, _scan_needles(), dying_region, 2, st, range_size=50000))
print(json.dumps({"same": got == want, "lines": st["lines"], "n": len(want)}))
"""


def test_a_worker_that_dies_costs_speed_not_the_report(tmp_path):
    log = tmp_path / "a.log"
    data = random_log(random.Random(21), 6000)
    log.write_bytes(data)
    out = run_json(_DYING, str(log), timeout=120)
    assert out["same"] and out["n"] > 100
    assert out["lines"] == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def test_range_starts_are_line_starts(tmp_path):
    data = random_log(random.Random(5), 2000) + b"\n"
    log = tmp_path / "a.log"
    log.write_bytes(data)
    with open(log, "rb") as fh:
        starts = parscan.boundaries(fh, len(data), 5000)
    assert starts[0] == 0 and starts == sorted(set(starts)) and len(starts) > 10
    assert all(data[s - 1 : s] == b"\n" for s in starts[1:])


def test_no_split_for_small_files_one_worker_or_a_threaded_process():
    assert not parscan.can_split(1 << 20, 4)
    assert not parscan.can_split(1 << 30, 1)
    if threading.active_count() == 1:
        assert parscan.can_split(1 << 30, 4)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not parscan.can_split(1 << 30, 4)
    finally:
        stop.set()
        t.join()


_REPORTS = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from efa_validators.scan import parscan
from efa_validators.analyze import analyze_paths
path = sys.argv[2]
print(json.dumps({"one": analyze_paths([path], workers=1), "three": analyze_paths([path], workers=3),
                  "split": parscan.can_split(parscan.os.path.getsize(path), 3)}))
"""


def test_analyze_paths_reports_the_same_with_any_worker_count(tmp_path):
    """A log big enough for the split (2 x RANGE): the whole report, not only the lines."""
    unit = random_log(random.Random(9), 4000) + b"\n"
    data = unit * (2 * parscan.RANGE // len(unit) + 2)
    log = tmp_path / "big.log"
    log.write_bytes(data)
    out = run_json(_REPORTS, str(log))
    assert out["split"] is True
    assert out["three"] == out["one"]
    assert out["one"]["inputs"][0]["lines"] == data.count(b"\n")


def test_a_pipe_is_read_whole_as_a_stream(tmp_path):
    """`parse <(cmd)`: the path is a FIFO; nothing may be read from it twice (no sniffing, no split)."""
    data = random_log(random.Random(4), 500) + b"\n"
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    t = threading.Thread(target=write)
    t.start()
    try:
        report = analyze_paths([str(fifo)], workers=4)
    finally:
        t.join(timeout=30)
    log = tmp_path / "log.txt"
    log.write_bytes(data)
    assert report["inputs"][0]["lines"] == data.count(b"\n")
    same_name = json.dumps(report, sort_keys=True).replace(str(fifo), str(log))  # evidence names the file
    assert same_name == json.dumps(analyze_paths([str(log)], workers=1), sort_keys=True)


@pytest.mark.parametrize(
    "files, cpus",
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
        ({"cpu.max": "garbage"}, None),
        ({}, None),
    ],
)
def test_a_pods_cpu_limit_caps_the_workers(tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert parscan.cgroup_cpus(str(tmp_path)) == cpus
    workers = parscan.default_workers(str(tmp_path))
    assert 1 <= workers <= parscan.MAX_WORKERS
    if cpus is not None:
        assert workers <= max(1, int(cpus + 0.999))


def test_packed_lines_come_back_as_they_were():
    """What a worker sends (one string + one array per range) unpacks to the very lines it scanned."""
    lines = [
        (1, "", False, 1),
        (2, "a\r b", True, 7),
        (9, "é \ufffd", False, 4),
        (10, "", True, 15),
        (11, "", False, 2),
    ]
    assert list(parscan.Packed(lines)) == lines
    assert list(parscan.Packed([])) == []


def test_no_range_starts_after_the_first_half_of_a_wrapped_message(tmp_path):
    """A range never starts right after a line that may begin a wrapped message (scan/wrapped.py): the two
    halves are joined by one worker's `prepare`, so the split report equals the serial one."""
    from efa_validators.scan.wrapped import ends_no_range

    lines = []
    for i in range(3000):
        lines.append(b"step %d loss 2.0" % i if i % 3 else b"[E12] ProcessGroupNCCL's watch")
    data = b"\n".join(lines) + b"\n"
    log = tmp_path / "w.log"
    log.write_bytes(data)
    with open(log, "rb") as fh:
        plain = parscan.boundaries(fh, len(data), 5000)
        starts = parscan.boundaries(fh, len(data), 5000, ends_no_range)
    assert any(data[: s - 1].rsplit(b"\n", 1)[-1].startswith(b"[E12]") for s in plain[1:])  # can fail
    assert len(starts) > 10 and all(data[s - 1 : s] == b"\n" for s in starts[1:])
    assert not any(data[: s - 1].rsplit(b"\n", 1)[-1].startswith(b"[E12]") for s in starts[1:])
