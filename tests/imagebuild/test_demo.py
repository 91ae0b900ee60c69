"""`build.py demo` end to end on the real engine: every output of the replayed pre-flight says REPLAY, the
evidence it points at exists afterwards; with the source mirror (CI) the real stack (GDRCopy, aws-ofi-nccl,
nccl-tests from source) is built and its checks pass, and where its sources cannot be had the summary names
the variant not built, why, and how to build it. Every image it builds passes the image scans teams already
run (AWS's DLC sanity scripts, tests/peerchecks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import peerchecks
import pytest
from cli import build_py, build_py_process
from conftest import in_ci, mirror_dir
from paths import ROOT

from imagebuild.building.artifacts import ArtifactCache, artifacts_from_lock
from imagebuild.demo import DemoRequest, find_sources

SOURCE_VARIANT = "local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6"


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
    mirror = mirror_dir() if (mirror_dir() / "github.com").is_dir() else None
    assert mirror or not in_ci(), f"CI builds the real stack from the source mirror: none at {mirror_dir()}"
    res = build_py("demo", "--out", str(out), "--no-upstream", *(["--mirror", str(mirror)] if mirror else []))
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
    checks = json.loads((out / "test-report.json").read_text())
    by_variant = {i["variant"]: i for i in checks["images"]}
    ok, why = peerchecks.available()
    for entry in checks["images"] if ok else []:  # AWS's own image scans, as a team already runs them
        for script, (code, said) in peerchecks.run_peer_checks(entry["image"]).items():
            assert code == 0, f"{entry['variant']}: {script} exit {code}: {said[-2000:]}"
    if not ok:
        print(f"peer checks not run: {why}")
    cached = not ArtifactCache(ROOT / ".cache" / "artifacts").missing(_git_sources(out / SOURCE_VARIANT))
    if mirror or cached:  # the real stack: built, and every plugin, nccl-tests and GDRCopy check passes
        assert f"demo: {SOURCE_VARIANT}: sources of aws_ofi_nccl, gdrcopy, nccl_tests from " in text
        image = by_variant[SOURCE_VARIANT]
        status = {c["name"]: c["status"] for c in image["checks"]}
        wanted = [n for n in status if n.startswith(("plugin-", "nccl-tests-", "gdrcopy-", "runtime-"))]
        # the unversioned libcudart link is checked where the EFA installer's plugin runs on a runtime stage;
        # this variant builds its plugin from source
        assert status.get("plugin-cudart-dlopen", "skip") == "skip"
        wanted = [n for n in wanted if n != "plugin-cudart-dlopen"]
        assert {
            "plugin-present",
            "plugin-ldd",
            "nccl-tests-binaries",
            "gdrcopy-library",
            "gdrcopy-tests",
            "runtime-no-build-tools",  # built with nvcc and g++, shipped with neither (nor CUDA headers)
        } <= set(wanted), status
        assert {n: status[n] for n in wanted} == dict.fromkeys(wanted, "pass")
        assert image["passed"] is True
    else:  # a fresh clone: the variant whose sources are git archives is named, with why and how to build it
        assert f"NOT BUILT  {SOURCE_VARIANT}: needs" in text and SOURCE_VARIANT not in by_variant
        assert "to build it:" in text and f"--variant {SOURCE_VARIANT}" in text


def _git_sources(vdir: Path) -> list:
    lock = json.loads((vdir / "variant.lock.json").read_text())
    return [a for a in artifacts_from_lock(lock) if a.kind == "git"]


def _git_lock(url: str, commit: str) -> dict:
    entry = {"kind": "git", "url": url, "commit": commit}
    return {"schema": "efa-image-build/lock/v1", "name": "t", "components": {"thing": {"artifacts": [entry]}}}


def test_sources_come_from_the_cache_then_the_mirror_and_never_upstream_when_told_so(tmp_path):
    import subprocess

    repo = tmp_path / "mirror" / "git.invalid" / "org" / "tool.git"
    repo.mkdir(parents=True)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(["git", *args], cwd=repo, env={**env, "PATH": "/usr/bin:/bin"}, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    (art,) = artifacts_from_lock(_git_lock("https://git.invalid/org/tool.git", commit))
    cache = tmp_path / "cache"
    where, why = find_sources([art], DemoRequest(cache=cache, upstream=False))
    assert where is None and "no mirror given and --no-upstream" in why and art.filename in why
    where, why = find_sources(
        [art], DemoRequest(cache=cache, mirror=str(tmp_path / "mirror"), upstream=False)
    )
    assert where.startswith("the mirror ") and why == ""
    assert find_sources([art], DemoRequest(cache=cache, upstream=False))[0] == f"the artifact cache {cache}"
    (gone,) = artifacts_from_lock(_git_lock("https://git.invalid/org/tool.git", "2" * 40))
    where, why = find_sources(
        [gone], DemoRequest(cache=cache, mirror=str(tmp_path / "mirror"), upstream=False)
    )
    assert where is None and "the mirror " in why and "2" * 40 in why


def test_demo_outside_a_checkout_is_exit_2_before_anything(tmp_path):
    """From an installed wheel in a team's folder: no matrix.local.yaml, no recording. The demo says so at
    once, before it makes a base (debootstrap, as root) or writes anything."""
    proc = build_py_process("demo", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc
    assert "matrix.local.yaml: the demo is this project's own job" in proc.stderr, proc.stderr
    assert "hint: in your own repository: efa-image-build init" in proc.stderr
    assert list(tmp_path.iterdir()) == []
