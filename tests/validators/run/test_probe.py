"""The PyTorch probe under real torchrun (gloo on this CPU machine), through the runner.

Needs torch (test dependency: `pip install torch==2.13.0`, a CPU build); skipped cleanly without it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import cli
import pytest
from conftest import import_or_fail
from paths import IMPORT_PATH, ROOT
from preflight_util import assert_none_left, finding, load, run_cli

from efa_validators import probe_torch

torch = import_or_fail("torch", "pip install -e '.[test,torch]' (make test does)")
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
        "efa_validators.probe_torch",
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
    assert_none_left("efa_validators.probe_torch")


def test_torchrun_worker_that_dies_fails_the_run(tmp_path):
    out = tmp_path / "r.json"
    cmd = [TORCHRUN, "--nproc-per-node", "2", "-m", "efa_validators.probe_torch", "--max-bytes", "bad-size"]
    proc, _ = run_cli(["run", "--quiet", "--timeout", "120", "--json", str(out), "--"] + cmd, timeout=180)
    report = load(out)
    assert proc.returncode == 1 and report["verdict"] == "fail"
    assert finding(report, "rank-exit") or finding(report, "launcher-exit")
    assert_none_left("efa_validators.probe_torch")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sagemaker_default_probe_spans_two_instances(tmp_path):
    """The SageMaker pre-flight's default command, as each instance's `validators run` starts it.

    Two runs side by side, each with its own resourceconfig.json (two "hosts" on loopback), fill in
    {sm_...} and join one torchrun of 2 nodes; each exits by its command (it sees only its own rank),
    and the two logs read together, as the host side reads every CloudWatch stream, hold the table.
    """
    import subprocess

    from efa_validators.analyze import analyze_paths
    from imagebuild.preflight.sagemaker import PROBES

    port = str(_free_port())
    probe = PROBES["torch"].replace("{gpus}", "1").replace("16G", "64K").replace("29500", port).split()
    hosts = ["localhost", "127.0.0.1"]
    procs, logs, outs = [], [], []
    for host in hosts:
        cfg = tmp_path / (host + ".json")
        cfg.write_text(json.dumps({"current_host": host, "hosts": hosts, "network_interface_name": "lo"}))
        log, out = tmp_path / (host + ".log"), tmp_path / (host + ".report.json")
        argv = ["run", "--quiet", "--timeout", "150", "--exit-by", "command", "--resource-config", str(cfg)]
        argv += ["--log", str(log), "--json", str(out), "--"] + probe
        path = os.path.dirname(TORCHRUN) + os.pathsep + os.environ.get("PATH", "")  # torchrun, as in an image
        env = dict(os.environ, PYTHONPATH=IMPORT_PATH, GLOO_SOCKET_IFNAME="lo", PATH=path)
        procs.append(
            subprocess.Popen(
                cli.VALIDATORS + argv,
                env=env,
                cwd=str(ROOT),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
        logs.append(log)
        outs.append(out)
    results = [p.communicate(timeout=200) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    nodes = {load(o)["sagemaker_node"]["host"]: load(o)["sagemaker_node"] for o in outs}
    assert nodes["127.0.0.1"]["node_rank"] == 0 and nodes["localhost"]["node_rank"] == 1  # by name, "1" < "l"
    assert {n["master"] for n in nodes.values()} == {"127.0.0.1"}
    assert "--node_rank" in nodes["localhost"]["command"] and "1" in nodes["localhost"]["command"]
    both = analyze_paths([str(p) for p in logs])
    nt = both["nccl_tests"]
    assert nt is not None and nt["rows"] and all(r["out_of_place"]["wrong"] == 0 for r in nt["rows"])
    assert both["verdict"] == "unknown"  # gloo on CPUs: nothing about EFA, never a pass
    assert_none_left("efa_validators.probe_torch")
