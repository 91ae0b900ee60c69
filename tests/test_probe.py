"""The PyTorch probe under real torchrun (gloo on this CPU machine), through the runner.

Needs torch (test dependency: `pip install torch==2.13.0`, a CPU build); skipped cleanly without it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from preflight_util import assert_none_left, finding, load, run_cli

from validators import probe_torch

torch = pytest.importorskip("torch")
TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))


def test_row_shape_and_busbw_factor():
    r = probe_torch.row(1 << 20, 0.001, 4, 0)
    assert r["algbw"] == pytest.approx(1.048576, rel=1e-3)
    assert r["busbw"] == pytest.approx(1.048576 * 1.5, rel=1e-3)
    assert set(r) >= {"size", "count", "type", "redop", "time_us", "algbw", "busbw", "wrong"}
    assert probe_torch.sizes(8, 64) == [8, 16, 32, 64]


def test_torchrun_gloo_probe_through_the_runner(tmp_path):
    out, rows_json, log = tmp_path / "r.json", tmp_path / "rows.json", tmp_path / "run.log"
    cmd = [
        TORCHRUN,
        "--nproc-per-node",
        "2",
        "-m",
        "validators.probe_torch",
        "--max-bytes",
        "256K",
        "--json",
        str(rows_json),
    ]
    proc, wall = run_cli(
        ["run", "--quiet", "--timeout", "120", "--log", str(log), "--json", str(out), "--"] + cmd, timeout=180
    )
    report = load(out)
    assert report["run"]["exit_code"] == 0, log.read_text()[-2000:]
    assert report["run"]["command"][1:3] == ["--tee", "3"]
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1}
    doc = json.loads(rows_json.read_text())
    assert doc["backend"] == "gloo" and doc["world"] == 2
    assert [r["size"] for r in doc["rows"]] == probe_torch.sizes(8, 256 * 1024)
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in doc["rows"])
    nt = report["nccl_tests"]
    assert nt is not None and len(nt["rows"]) == len(doc["rows"])
    # gloo proves nothing about EFA: never a pass
    assert report["verdict"] == "unknown" and proc.returncode == 3
    assert report["efa"] is None
    assert_none_left("validators.probe_torch")


def test_torchrun_worker_that_dies_fails_the_run(tmp_path):
    out = tmp_path / "r.json"
    cmd = [TORCHRUN, "--nproc-per-node", "2", "-m", "validators.probe_torch", "--max-bytes", "bad-size"]
    proc, _ = run_cli(["run", "--quiet", "--timeout", "120", "--json", str(out), "--"] + cmd, timeout=180)
    report = load(out)
    assert proc.returncode == 1 and report["verdict"] == "fail"
    assert finding(report, "rank-exit") or finding(report, "launcher-exit")
    assert_none_left("validators.probe_torch")
