"""Bases by digest (#12.5): `repo@sha256:` and `repo:tag@sha256:` accepted and rendered into FROM, the pin in
the lock, what the base resolved to recorded by the builder and carried into the release notes."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from cli import build_py

from imagebuild.building import baseid
from imagebuild.matrix.load import load
from imagebuild.release import record as rel
from imagebuild.render.dockerfile import dockerfile

DIGEST = "sha256:" + "ab" * 32
MATRIX = """\
variants:
  - name: v1
    base: {{image: "{image}", kind: cuda, os: ubuntu22.04{extra}}}
    cuda: "12.8"
"""


def _load(tmp_path, image, extra=""):
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.format(image=image, extra=extra))
    return path, load(str(path))


RUNTIME = f"nvidia/cuda:12.8.1-runtime-ubuntu22.04@sha256:{'cd' * 32}"


@pytest.mark.parametrize(
    "image, extra, shipped",
    [
        (f"nvidia/cuda@{DIGEST}", "", f"nvidia/cuda@{DIGEST}"),
        # a -devel base by digest ships on a runtime image pinned by its own digest (derived it cannot be)
        (f"nvidia/cuda:12.8.1-devel-ubuntu22.04@{DIGEST}", f', runtime_image: "{RUNTIME}"', RUNTIME),
    ],
)
def test_digest_accepted_rendered_and_locked(tmp_path, image, extra, shipped):
    _, (v,) = _load(tmp_path, image, extra)
    assert v.base.digest == DIGEST
    assert f"FROM {shipped} AS system\n" in dockerfile(v)
    assert shipped == image or f"FROM {image} AS build-system\n" in dockerfile(v)
    assert v.to_lock()["base"]["digest"] == DIGEST and v.to_lock()["base"]["image"] == image


def test_digest_behind_a_registry_arg(tmp_path):
    image = f"pytorch-training:2.7.1-gpu@{DIGEST}"
    _, (v,) = _load(tmp_path, image, ", registry_arg: BASE_REGISTRY")
    assert f"FROM ${{BASE_REGISTRY}}/{image} AS system\n" in dockerfile(v)


def test_a_tag_has_no_digest_in_the_lock(tmp_path):
    _, (v,) = _load(tmp_path, "nvidia/cuda:12.8.1-devel-ubuntu22.04")
    assert v.base.digest is None and v.to_lock()["base"]["digest"] is None


@pytest.mark.parametrize(
    "image",
    ["nvidia/cuda@sha256:abc", "nvidia/cuda@md5:" + "a" * 32, f"nvidia/cuda@{DIGEST.upper()}"],
)
def test_bad_digest_exit_2_at_base_image(tmp_path, image):
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.format(image=image, extra=""))
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 2
    err = res.err
    assert f"{path}:3" in err and "key 'variants[0].base.image'" in err and "Traceback" not in err


def test_base_ref_fills_the_registry_arg():
    lock = {"base": {"image": "repo:tag", "registry_arg": "BASE_REGISTRY"}}
    assert baseid.base_ref(lock, {"BASE_REGISTRY": "host.example:5000"}) == "host.example:5000/repo:tag"
    assert baseid.base_ref(lock, {}) is None  # unknown host: nothing to resolve
    assert baseid.base_ref({"base": {"image": "a/b:1"}}, {}) == "a/b:1"


def test_engine_image_id_of_the_base(docker_client, local_base):
    """The id in the base label (the digest in the hash is resolve_base's: test_basemoved.py)."""
    assert baseid.engine_image_id(docker_client, local_base) == docker_client.images.get(local_base).id
    assert baseid.engine_image_id(docker_client, f"efa-image-build-test/absent@{DIGEST}") is None
    assert baseid.engine_image_id(docker_client, "efa-image-build-test/absent:nothing") is None
    assert baseid.engine_image_id(docker_client, None) is None


def test_release_record_and_notes_carry_the_base_digest(tmp_path):
    report = tmp_path / "checks.json"
    report.write_text("{}")
    gate = rel.Gate("v1", "sha256:" + "1" * 64, "sha256:" + "2" * 64, checks={"report_path": str(report)})
    lock = {"base": {"image": "nvidia/cuda:12.8.1-devel-ubuntu22.04", "digest": None}, "components": {}}
    when = datetime(2026, 12, 1, tzinfo=timezone.utc)
    record = rel.make_record(gate, lock, "file", [], None, when, "0", base_digest=DIGEST)
    assert record["base"] == {"image": lock["base"]["image"], "digest": DIGEST}
    notes = rel.release_notes(record, None)
    assert f"- base: `nvidia/cuda:12.8.1-devel-ubuntu22.04`, digest `{DIGEST}`" in notes
    # the base moved under the same tag: the next notes say so
    newer = "sha256:" + "cd" * 32
    record2 = rel.make_record(gate, lock, "file", [], record, when, "0", base_digest=newer)
    assert f"digest `{newer}` (was `{DIGEST}`)" in rel.release_notes(record2, record)
    # nothing resolved and nothing pinned: the notes say it was not recorded
    bare = rel.make_record(gate, lock, "file", [], None, when, "0")
    assert "digest not recorded" in rel.release_notes(bare, None)
    assert json.loads(json.dumps(record))["base"]["digest"] == DIGEST
