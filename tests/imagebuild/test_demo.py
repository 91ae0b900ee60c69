"""`build.py demo` end to end on the real engine: every output of the replayed pre-flight says REPLAY, the
evidence it points at exists afterwards, and the summary names each variant it did not build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import build_py
from paths import ROOT


def _evidence_files(report: dict) -> set:
    files = set()
    for item in (report.get("checks") or []) + (report.get("findings") or []):
        for ev in item.get("evidence") or []:
            if isinstance(ev, dict) and ev.get("file"):
                files.add(ev["file"])
    return files


@pytest.mark.docker
@pytest.mark.slow
def test_demo_outputs_all_say_replay_and_their_evidence_exists(
    docker_client, local_base, tmp_path, monkeypatch
):
    from PIL import Image

    monkeypatch.chdir(ROOT)  # the demo reads matrix.local.yaml, the artifact cache and the recording here
    out = tmp_path / "build"
    res = build_py("demo", "--out", str(out))
    rc = res.rc
    text = res.out
    assert rc == 0, text[-3000:]
    demo = out / "demo"
    report = json.loads((demo / "preflight.json").read_text())
    assert report["run"]["replay"] is True and report["verdict"] == "pass"
    assert (demo / "preflight.md").read_text().startswith("## REPLAY")
    assert "REPLAY" in Image.open(demo / "busbw.png").text["Title"]
    files = _evidence_files(report)
    assert files, "the pass verdict carries no evidence"
    assert all(Path(f).is_file() for f in files), files
    assert (demo / "run.log").is_file() and str(demo / "run.log") in files
    # the variant whose sources are git archives is named, with why and how to build it
    assert "NOT BUILT  local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6: needs" in text
    assert "to build it:" in text and "--variant local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6" in text
