"""Tags that survive a pipeline (issue 30, item 3): a matrix tag is a content tag (`{content_hash}`) or a
channel; a write-once tag that would move with every commit is refused at load. Two commits' pushes with the
example pattern both succeed against the real registry, a re-push is a no-op, and `build --force` leaves the
write-once tags where they are.
"""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.building.contenthash import image_tags

pytest_plugins = ["services_fixtures"]  # fixtures: registry

MATRIX = """\
format: efa-image-build/matrix/v1
variants:
  - name: tagged
    base: {{image: {base}, kind: local, os: debian12}}
    packages: [python3=3.11.2-1+b1]
    training: {{source_dir: training, entry_point: train.py}}
    tags: [{tag}]
"""


def _matrix(tmp_path, tag: str, base: str = "localbase/debian:bookworm-minbase"):
    (tmp_path / "training").mkdir(exist_ok=True)
    (tmp_path / "training" / "train.py").write_text("print('commit 1')\n")
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(base=base, tag=json.dumps(tag)))
    return path


def test_a_write_once_tag_that_would_move_is_refused_at_load_with_the_fix(tmp_path):
    path = _matrix(tmp_path, "team/training:{name}")
    res = build_py("list", "--matrix", path)
    assert res.rc == 2 and "Traceback" not in res.err
    assert f"{path}:7: key 'tags[0]'" in res.err, res.err
    assert "write-once" in res.err and '"team/training:tagged-{content_hash}"' in res.err
    assert "channels: [tagged]" in res.err


def test_a_tag_platform_twins_share_loads_it_names_their_index(tmp_path):
    """Twins (one variant per platform) may share a write-once tag: push writes it once, as their image
    index (issue 25); a tag only one platform carries is still refused."""
    path = _matrix(tmp_path, "team/training:shared")
    text = path.read_text()
    twin = text[text.index("  - name: tagged") :].replace("name: tagged", "name: tagged-arm64", 1)
    path.write_text(text + twin.replace("    tags:", "    platform: linux/arm64\n    tags:", 1))
    res = build_py("list", "--matrix", path)
    assert res.rc == 0, res.err
    path.write_text(text + twin.replace("name: tagged-arm64", "name: tagged-other", 1))  # same platform
    res = build_py("list", "--matrix", path)
    assert res.rc == 2 and "write-once" in res.err, res.err


def test_content_hash_tags_and_channels_load(tmp_path):
    path = _matrix(tmp_path, "team/training:{name}-{content_hash}")
    res = build_py("list", "--matrix", path, "--json")
    assert res.rc == 0, res.err
    assert json.loads(res.out)[0]["tags"] == ["team/training:tagged-{content_hash}"]
    channel = _matrix(tmp_path, "team/training:dev")
    channel.write_text(channel.read_text() + "    channels: [dev]\n")
    assert build_py("list", "--matrix", channel).rc == 0
    in_repo = _matrix(tmp_path, "team/{content_hash}:x")
    res = build_py("list", "--matrix", in_repo)
    assert res.rc == 2 and "belongs in the tag part" in res.err


def test_the_build_fills_the_content_hash_and_a_rebuild_gets_its_own_tags():
    lock = {"name": "v", "components": {"nccl": {"version": "2.27.7"}}, "tags": ["t/app:v-{content_hash}"]}
    assert image_tags(lock, "ab" * 32) == ["t/app:nccl2.27.7-" + "ab" * 6, "t/app:v-" + "ab" * 6]
    again = image_tags(lock, "ab" * 32, rebuild="sha256:" + "cd" * 32)
    assert again == ["t/app:nccl2.27.7-rcdcdcdcd-" + "ab" * 6, "t/app:v-rcdcdcdcd-" + "ab" * 6]


def _build(path, out, *extra) -> dict:
    res = build_py("build", "--matrix", path, "--out", out, "--builder", "classic", "--plain", *extra)
    (entry,) = json.loads((out / "summary.json").read_text())["variants"]
    assert res.rc == 0, entry.get("error")
    return entry


def _push(out, registry) -> None:
    res = build_py("push", "--summary", out / "summary.json", "--registry", registry.host)
    assert res.rc == 0, res.err


@pytest.mark.docker
def test_two_commits_push_and_force_leaves_write_once_tags_alone(
    registry, docker_client, local_base, tmp_path
):
    repo = f"efa-image-build-test-{uuid.uuid4().hex[:10]}/training"
    path = _matrix(tmp_path, f"{repo}:{{name}}-{{content_hash}}", base=local_base)
    out = tmp_path / "build"
    made = set()
    api = RegistryAPI(registry.host)
    try:
        first = _build(path, out)
        made.add(first["image_id"])
        _push(out, registry)
        (tmp_path / "training" / "train.py").write_text("print('commit 2')\n")  # the next commit
        second = _build(path, out)
        made.add(second["image_id"])
        assert second["tags"][1] != first["tags"][1]
        _push(out, registry)
        _push(out, registry)  # a rerun of the same pipeline: a no-op
        tag = second["tags"][1].split(":", 1)[1]
        held = api.manifest(repo, tag)
        assert held is not None
        assert api.manifest(repo, first["tags"][1].split(":", 1)[1]) is not None  # the first stays

        forced = _build(path, out, "--force", "--no-cache")  # no layer cache: another image of this content
        made.add(forced["image_id"])
        assert forced["image_id"] != second["image_id"]
        assert all("-r" + forced["image_id"].split(":")[1][:8] + "-" in t for t in forced["tags"])
        assert docker_client.images.get(second["tags"][1]).id == second["image_id"]  # not re-pointed
        _push(out, registry)
        assert api.manifest(repo, tag).digest == held.digest
    finally:
        for image_id in made:
            try:
                docker_client.images.remove(image_id, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


def test_a_content_tag_too_long_once_filled_is_refused_at_load(tmp_path):
    path = _matrix(tmp_path, "team/training:" + "x" * 110 + "-{content_hash}")
    res = build_py("list", "--matrix", path)
    assert res.rc == 2 and "too long once {content_hash} is filled" in res.err and f"{path}:7" in res.err
