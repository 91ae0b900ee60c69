"""The local matrix's wheel variant and its arm64 twin, the twin built for real under qemu-user-static
emulation, pushed as one image index under one tag; `docker pull --platform linux/arm64` of that tag gets
the arm64 image (issue 25, item 5). The smallest local variant only: the emulated build is the cost
(BENCHMARKS.md has its time).

The twin is made from matrix.local.yaml (its first variant with `platform: linux/arm64`, the arm64 local
base and the same tag) in a copy beside the training code, so the demo's matrix is not changed.
"""

from __future__ import annotations

import copy
import json
import shutil
import uuid

import pytest
import yaml
from cli import build_py
from paths import ROOT

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.building.localbase import default_name
from imagebuild.release.index import INDEX_TYPE

pytest_plugins = ["services_fixtures"]  # fixtures: registry, arm64_base

VARIANT = "local-debian-nccl2.27"
ARM64_BASE = default_name("linux/arm64")


def twin_matrix(folder, tag: str):
    """matrix.local.yaml's wheel variant and its arm64 twin, both tagged `tag`, written into `folder` with
    the files the matrix names beside it (the training code and the checks file)."""
    doc = yaml.safe_load((ROOT / "matrix.local.yaml").read_text())
    (amd64,) = [v for v in doc["variants"] if v["name"] == "local-debian-nccl{nccl}"]
    amd64["tags"] = [tag]
    arm64 = copy.deepcopy(amd64)
    arm64.update(name="local-debian-nccl{nccl}-arm64", platform="linux/arm64", base={"image": ARM64_BASE})
    doc["variants"] = [amd64, arm64]
    shutil.copytree(ROOT / "examples" / "training", folder / "examples" / "training")
    shutil.copy(ROOT / "checks.local.yaml", folder / "checks.local.yaml")
    path = folder / "matrix.twins.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.docker
@pytest.mark.slow
def test_the_local_variant_and_its_emulated_arm64_twin_share_one_tag(
    registry, docker_client, local_base, arm64_base, tmp_path
):
    repo = f"idx-{uuid.uuid4().hex[:10]}/local-debian"
    matrix = twin_matrix(tmp_path, f"{repo}:nccl2.27")
    out = tmp_path / "out"
    argv = ["build", "--matrix", str(matrix), "--out", str(out), "--plain"]
    argv += ["--cache", str(ROOT / ".cache" / "artifacts")]
    made = []
    try:
        res = build_py(*argv)
        summary = out / "summary.json"
        entries = {e["variant"]: e for e in json.loads(summary.read_text())["variants"]}
        made = [e["image_id"] for e in entries.values() if e.get("image_id")]
        assert res.rc == 0, res.err
        amd, arm = entries[VARIANT], entries[f"{VARIANT}-arm64"]
        assert docker_client.images.get(arm["image_id"]).attrs["Architecture"] == "arm64"
        # the twin really runs arm64 code: its python reports aarch64 (under emulation here)
        machine = docker_client.containers.run(
            arm["image_id"], ["python3", "-c", "import platform; print(platform.machine())"], remove=True
        )
        assert machine.decode().strip() == "aarch64"

        res = build_py("push", "--summary", str(summary), "--registry", registry.host)
        assert res.rc == 0, res.err
        pushed = {e["variant"]: e for e in json.loads(summary.read_text())["variants"]}
        index = RegistryAPI(registry.host).manifest(repo, "nccl2.27")
        assert index is not None and index.media_type == INDEX_TYPE
        arch = {m["platform"]["architecture"]: m["digest"] for m in json.loads(index.body)["manifests"]}
        assert arch == {"amd64": pushed[VARIANT]["digest"], "arm64": pushed[f"{VARIANT}-arm64"]["digest"]}

        ref = f"{registry.host}/{repo}:nccl2.27"
        pulled = docker_client.images.pull(ref, platform="linux/arm64")
        assert pulled.id == arm["image_id"] and pulled.attrs["Architecture"] == "arm64"
        docker_client.images.remove(ref)
        pulled = docker_client.images.pull(ref, platform="linux/amd64")
        assert pulled.id == amd["image_id"]
        docker_client.images.remove(ref)
    finally:
        for image_id in made:  # this test's tags only: a cached build may share its image with others
            try:
                tags = docker_client.images.get(image_id).attrs.get("RepoTags") or []
            except Exception:  # noqa: BLE001 - already gone is fine
                tags = []
            for tag in tags:
                if repo in tag:
                    docker_client.images.remove(tag)
