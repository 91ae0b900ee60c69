"""Conformance: the real nccl-tests tables in ../shared/nccl-logs read right, checked against .meta.yaml.

The logs are read by path (never copied); their launcher prefixes are removed by
efa_validators.scan.prefix, as
the
`parse` CLI does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import corpus_missing
from paths import ROOT

from efa_validators.judge.bandwidth import judge
from efa_validators.judge.profiles import get_profile
from efa_validators.parse.nccltests import NcclTestsParser
from efa_validators.scan.prefix import strip_prefix

TABLE_LOGS = {
    "07-nccl-tests-table-2xp4de-allreduce-srun": "p4de.24xlarge",
    "08-nccl-tests-table-2xp5-allreduce-srun": "p5.48xlarge",
    "10-aws-batch-p5-allreduce-table-17GB": "p5.48xlarge",
}


def _read(path: Path):
    p = NcclTestsParser()
    body = []
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            _, text = strip_prefix(raw.decode("utf-8", errors="replace"))
            body.append(text)
            p.feed(text, i, path.name)
    return p.result(), body


@pytest.fixture(params=sorted(TABLE_LOGS))
def table_log(request, nccl_logs_dir):
    log = nccl_logs_dir / f"{request.param}.log"
    meta_path = nccl_logs_dir / f"{request.param}.meta.yaml"
    if not log.is_file():
        corpus_missing(f"{log} not in the corpus")
    meta = yaml.safe_load(meta_path.read_text())
    return request.param, log, meta


def test_table_matches_meta(table_log):
    name, log, meta = table_log
    result, body = _read(log)
    expected = meta["expected"]
    assert result is not None
    # every row line of the log is a row (counted here without the parser), none invented
    row_lines = [t.strip() for t in body if re.match(r"^\s*\d+\s+\d+\s+\w+", t)]
    assert [r["text"] for r in result["rows"]] == row_lines
    assert result["rows"][0]["size"] == 8
    busbws = [r[p]["busbw"] for r in result["rows"] for p in ("out_of_place", "in_place")]
    assert max(busbws) == pytest.approx(expected["max_busbw_GBps"])
    assert result["plateau_busbw"] == pytest.approx(expected["max_busbw_GBps"])
    assert result["avg_busbw"] == (
        None
        if expected["avg_bus_bandwidth_GBps"] is None
        else pytest.approx(expected["avg_bus_bandwidth_GBps"])
    )
    assert (result["wrong"] != 0) is expected["wrong_column_nonzero"]
    assert result["wrong"] == 0 and result["wrong_unseen_rows"] == 0
    if "out_of_bounds" in expected:
        count, word = str(expected["out_of_bounds"]).split()
        assert result["out_of_bounds"] == int(count) and result["out_of_bounds_ok"] is (word == "OK")
        assert result["truncated"] is False
    else:
        # the excerpt stops before the footer: that must show, and out-of-bounds stays unknown
        assert result["out_of_bounds"] is None and result["truncated"] is True
    # nothing in the text names the binary or the ranks: what is not printed stays null/empty
    assert result["ranks"] == [] and result["nthread"] is None and result["nccl_tests_version"] is None
    assert result["collective"] == "all_reduce" and result["collective_source"] == "busbw/algbw ratio"


def test_judgement_on_real_tables(table_log):
    name, log, meta = table_log
    result, _ = _read(log)
    checks, findings = judge(result, get_profile(TABLE_LOGS[name]), 2, None)
    by = {c["name"]: c for c in checks}
    # these runs were healthy 2-node runs: the plateau meets the published floor
    assert by["busbw-plateau"]["status"] == "pass", by["busbw-plateau"]["detail"]
    assert by["busbw-plateau"]["evidence"][0]["file"] == log.name
    assert by["wrong-zero"]["status"] == "pass"
    assert by["out-of-bounds"]["status"] == ("pass" if "out_of_bounds" in meta["expected"] else "unknown")
    # without a node count nothing can be judged about EFA
    checks, _ = judge(result, get_profile(TABLE_LOGS[name]), None, None)
    assert {c["name"]: c["status"] for c in checks}["busbw-plateau"] == "unknown"


def _corpus_logs():
    import os

    root = Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))
    return sorted(p.stem for p in root.glob("*.log")) if root.is_dir() else []


@pytest.mark.parametrize("stem", _corpus_logs() or ["(corpus absent)"])
def test_every_corpus_log_against_its_meta(stem, nccl_logs_dir):
    """Every log in the corpus: the nccl-tests facts its meta states, and None where it has no table."""
    log = nccl_logs_dir / f"{stem}.log"
    if not log.is_file():
        corpus_missing("corpus log absent")
    expected = yaml.safe_load((nccl_logs_dir / f"{stem}.meta.yaml").read_text())["expected"]
    result, body = _read(log)
    row_lines = [t.strip() for t in body if re.match(r"^\s*\d+\s+\d+\s+\w+\s", t) and "NCCL" not in t]
    if not any("busbw" in t for t in body):
        assert result is None or result["rows"] == []
        return
    assert result is not None and [r["text"] for r in result["rows"]] == row_lines
    if "avg_bus_bandwidth_GBps" in expected:
        want = expected["avg_bus_bandwidth_GBps"]
        assert result["avg_busbw"] == (None if want is None else pytest.approx(want))
    if expected.get("max_busbw_GBps") is not None:
        assert result["plateau_busbw"] == pytest.approx(expected["max_busbw_GBps"])
    if "out_of_bounds" in expected:
        count, word = str(expected["out_of_bounds"]).split()
        assert (result["out_of_bounds"], result["out_of_bounds_ok"]) == (int(count), word == "OK")
    if isinstance(expected.get("ranks"), int) and result["ranks"]:
        assert len(result["ranks"]) == expected["ranks"]
    assert result["wrong"] in (0, None) and result["nonfinite"] == 0
