"""analyze.prepare reads a line printed again from its memo (issue 33, item 4): the items, and so the report,
are the ones a fresh reading of every line gives, on every fixture log and the real corpus read three times
over with other flags and cut lines between; and a repeated line is not read again."""

from __future__ import annotations

import glob
import io
import os

import pytest
from conftest import corpus_missing
from paths import ROOT, TESTS

from efa_validators import analyze
from efa_validators.analyze import Analysis, needles, prep
from efa_validators.analyze.needles import NCCL, SIGNATURE
from efa_validators.analyze.needles import TESTS as TESTS_FLAG
from efa_validators.analyze.prep import prep_line, prepare
from efa_validators.judge import signatures
from efa_validators.parse.ranks import NetRun
from efa_validators.scan.linescan import scan

LOGS = sorted(glob.glob(os.path.join(TESTS, "fixtures", "logs", "*.log")))
CORPUS_DIR = os.environ.get("NCCL_LOGS_DIR", os.path.join(ROOT, "..", "shared", "nccl-logs"))
CORPUS = sorted(glob.glob(os.path.join(CORPUS_DIR, "*.log")))


def _lines(paths: list) -> list:
    """The scanned lines of `paths`, three times over (numbered on): the second copy as scanned, the third
    with other flags on every other line and every seventh line cut."""
    once = []
    for path in paths:
        with open(path, "rb") as fh:
            once += list(scan(fh, needles._scan_needles(), stats={}, region=needles._table_region()))
    out, n = [], len(once)
    for copy in range(3):
        for i, (lineno, raw, cut, flags) in enumerate(once):
            if copy == 2:
                flags = flags ^ (SIGNATURE | TESTS_FLAG) if i % 2 else flags
                cut = cut or i % 7 == 0
            out.append((lineno + copy * (n + 1), raw, cut, flags))
    return out


def _slots(run: NetRun) -> tuple:
    return tuple(getattr(run, name) for name in NetRun.__slots__)


def _report(items: list) -> dict:
    a = Analysis()
    a.begin("log")
    for item in items:
        a.apply(0, item)
    a.end(0, None)
    return a.report()


def _fresh(monkeypatch: pytest.MonkeyPatch, lines: list) -> list:
    """prepare's items with the memo off (no line is short enough to be kept)."""
    with monkeypatch.context() as m:
        m.setattr(prep, "_MEMO_LINE", -1)
        return list(prepare(iter(lines)))


@pytest.mark.parametrize("paths", [LOGS, CORPUS], ids=["fixtures", "corpus"])
def test_memo_items_and_report_equal_a_fresh_reading(monkeypatch: pytest.MonkeyPatch, paths: list) -> None:
    if paths is CORPUS and not paths:
        corpus_missing(f"real NCCL log corpus not found at {CORPUS_DIR}")
    assert paths, "no fixture logs in tests/fixtures/logs"
    lines = _lines(paths)
    fresh = _fresh(monkeypatch, lines)
    kept = list(prepare(iter(lines)))
    assert len(kept) == len(fresh) > 100
    for a, b in zip(kept, fresh):
        if len(a) == 2:  # a NET run: not read through the memo
            assert a[0] == b[0] and _slots(a[1]) == _slots(b[1])
        else:
            assert a == b
    assert _report(kept) == _report(fresh)


def test_a_repeated_line_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct (line, flags) that fits the memo is read by prep_line once; a cut line every time."""
    text = "[1,0]<stdout>:gpu-a:10:11 [0] NCCL INFO NCCL version 2.26.2+cuda12.2"
    other = "[1,1]<stdout>:gpu-b:10:11 [1] NCCL INFO Using network Libfabric"
    lines = [(1, text, False, NCCL), (2, other, False, NCCL), (3, text, False, NCCL), (4, text, False, NCCL)]
    lines += [(5, text, False, NCCL | SIGNATURE), (6, text, True, NCCL), (7, text, True, NCCL)]
    read = []

    def counted(lineno: int, raw: str, cut: bool, flags: int):
        read.append(lineno)
        return prep_line(lineno, raw, cut, flags)

    monkeypatch.setattr(prep, "prep_line", counted)
    items = list(prepare(iter(lines)))
    assert read == [1, 2, 5, 6, 7]  # 3 and 4 from the memo; other flags and cut lines read
    assert [i[0] for i in items] == [1, 2, 3, 4, 5, 6, 7]
    assert items[2][1:] == items[0][1:] and items[3][1:] == items[0][1:]


def test_memo_stays_bounded() -> None:
    """No more than _MEMO_LINES lines kept, none longer than _MEMO_LINE (a unique-line log keeps little)."""
    head = "[1,0]<stdout>:gpu-a:10:11 [0] NCCL INFO "
    lines = [(i, head + "NCCL version 2.%d.1+cuda12.2" % i, False, NCCL) for i in range(3 * prep._MEMO_LINES)]
    lines.append((0, head + "x" * (prep._MEMO_LINE + 1), False, NCCL))
    gen = prepare(iter(lines))  # the memo read from the paused generator
    for _ in range(len(lines)):  # paused at the last line's item: each line kept or not by now
        next(gen)
    kept = gen.gi_frame.f_locals["memo"]
    assert 0 < len(kept) <= prep._MEMO_LINES
    assert all(len(raw) <= prep._MEMO_LINE for raw in kept)


def test_stream_report_unchanged_by_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through analyze_stream (the serial path), a log read twice reports as it does with the memo off."""
    data = b"".join(open(p, "rb").read().rstrip(b"\n") + b"\n" for p in LOGS) * 2

    def report() -> dict:
        a = Analysis()
        analyze.analyze_stream(a, io.BytesIO(data), "log")
        return a.report()

    kept = report()
    monkeypatch.setattr(prep, "_MEMO_LINE", -1)
    assert kept == report()


def test_interleaved_heads_are_read_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks and threads interleave their lines: each head is tested for signature needles once (kept in
    prep._HEADS), and every line's item is the one read with nothing kept."""
    heads = [
        "[1,%d]<stdout>:gpu-%d:%d:%d [%d] NCCL INFO " % (r, r // 2, 10 + r, 20 + r, r % 2) for r in range(6)
    ]
    heads.append("[1,6]<stdout>:rdma-read-host:7:7 [0] NCCL INFO ")  # a signature needle in the host
    lines = [
        (i + 1, heads[i % len(heads)] + "cudaDriverVersion %d" % (12000 + i), False, NCCL) for i in range(70)
    ]
    tested = []

    def counted(text: str) -> bool:
        if text.endswith("NCCL INFO "):
            tested.append(text)
        return signatures.holds_line_needle(text)

    monkeypatch.setattr(prep, "holds_line_needle", counted)
    monkeypatch.setattr(prep, "_HEADS", {})
    monkeypatch.setattr(prep, "_LAST", [None])
    items = list(prepare(iter(lines)))
    assert sorted(tested) == sorted(h[h.index(">:") + 2 :] for h in heads)
    free = {head: kept[4] for head, kept in prep._HEADS.items()}
    assert free == {h: not h.startswith("[1,6]") for h in heads}  # the needle host's head is not free
    fresh = []
    for line in lines:
        prep._HEADS.clear()
        prep._LAST[0] = None
        fresh.append(prep_line(*line))
    assert items == fresh
