"""BuildKit builds, skip by the registry, bake files and shards, on the real engine and a real registry.

The builder choice is a pure function of what the docker CLIs can do (tested with probes as data); the
builds run for real: the small variant of test_builder.py with both builders (same tags and labels), the
local matrix variant with BuildKit through every static check, and a fresh "runner" (the images removed
from the engine) that finds in the registry what another one pushed and builds nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import cli
import pytest
from cli import build_py
from conftest import LOCAL_BASE
from paths import ROOT
from test_builder import REPO, _summary, _variant, make_mirror

from imagebuild.building import bake, buildkit, options, shard
from imagebuild.errors import UserError
from imagebuild.variant import BASE_ID_LABEL, HASH_LABEL

pytest_plugins = ["services_fixtures"]

NEW = buildkit.CliProbe("/usr/local/bin/docker", "28.2.2", False)
OLD = buildkit.CliProbe("/usr/bin/docker", "20.10.24+dfsg1", False)
BUILDX = buildkit.CliProbe("/opt/docker", "27.0.1", True)


# ---------------------------------------------------------------- pure parts


def test_auto_prefers_buildx_then_an_old_cli_then_classic():
    assert buildkit.choose_builder("auto", [NEW, OLD, BUILDX]).kind == "buildx"
    chosen = buildkit.choose_builder("auto", [NEW, OLD])
    assert (chosen.kind, chosen.cli) == ("buildkit", "/usr/bin/docker")  # this machine's case
    assert buildkit.choose_builder("auto", [NEW]) == buildkit.CLASSIC
    assert buildkit.choose_builder("classic", [BUILDX]) == buildkit.CLASSIC
    with pytest.raises(UserError, match="no docker CLI here can run a BuildKit build"):
        buildkit.choose_builder("buildkit", [NEW])


def test_build_argv_carries_labels_args_and_cache_settings():
    old = buildkit.choose_builder("auto", [OLD])
    argv, env = buildkit.build_argv(old, "Df", "/t/iid", {"a": "1"}, {"B": "2"}, cache_from=["r/c:1"])
    assert env == {"DOCKER_BUILDKIT": "1"} and argv[:2] == ["/usr/bin/docker", "build"]
    assert ["--label", "a=1"] == argv[argv.index("--label") : argv.index("--label") + 2]
    assert "BUILDKIT_INLINE_CACHE=1" in argv and "B=2" in argv and argv[-1] == "-"
    assert argv[argv.index("--cache-from") + 1] == "r/c:1"  # the engine's BuildKit: an image ref
    with pytest.raises(UserError, match="--cache-to needs buildx"):
        buildkit.build_argv(old, "Df", "/t/iid", {}, {}, cache_to=["r/c:1"])
    bx = buildkit.choose_builder("auto", [BUILDX])
    argv, env = buildkit.build_argv(bx, "Df", "/t/iid", {}, {}, cache_from=["r/c:1"], cache_to=["r/c:1"])
    assert argv[:4] == ["/opt/docker", "buildx", "build", "--load"] and env == {}
    assert "type=registry,ref=r/c:1" in argv and "type=registry,ref=r/c:1,mode=max" in argv
    assert "BUILDKIT_INLINE_CACHE=1" not in argv  # the cache goes to the registry instead


def test_shards_are_stable_and_cover_every_variant_once():
    names = [f"variant-{i}" for i in range(40)]
    parts = [shard.select(names, names, (i, 4)) for i in range(1, 5)]
    assert sorted(sum(parts, [])) == sorted(names) and all(parts)
    more = names + ["another-variant"]
    assert [n for n in shard.select(more, more, (2, 4)) if n != "another-variant"] == parts[1]
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(UserError, match="--shard"):
            shard.parse_shard(bad)


def test_list_shard_matches_the_stable_assignment():
    matrix = ["--matrix", str(ROOT / "matrix.yaml")]
    names = [line.split()[0] for line in _cli_out(["list", *matrix]).splitlines()[1:]]
    got = []
    for i in (1, 2, 3):
        rows = _cli_out(["list", *matrix, "--shard", f"{i}/3"]).splitlines()[1:]
        assert [r.split()[0] for r in rows] == [n for n in names if shard.shard_of(n, 3) == i]
        got += [r.split()[0] for r in rows]
    assert sorted(got) == sorted(names)
    assert build_py("list", *matrix, "--shard", "4/3").rc == 2


def _cli_out(argv) -> str:
    rc, out, _err = cli.build_py(*argv)
    assert rc == 0
    return out


def test_bake_validation_refuses_what_bake_would():
    good = bake.bake_file({"a_b": bake.bake_target("ctx", ["r:t"], {"l": "v"}, {}, ["linux/amd64"])})
    assert bake.validate(good) == []
    bad = json.loads(json.dumps(good))
    bad["target"]["a.b"] = bad["target"].pop("a_b")
    bad["target"]["a.b"]["tag"] = "r:t"
    bad["target"]["a.b"]["platforms"] = "linux/amd64"
    problems = " | ".join(bake.validate(bad))
    assert "name must match" in problems and "unknown attribute 'tag'" in problems
    assert "platforms is not a list" in problems and "names unknown target 'a_b'" in problems
    pinned = bake.base_context("h:5000/dlc:1", "h:5000/dlc@sha256:" + "a" * 64)
    assert pinned == {"h:5000/dlc:1": "docker-image://h:5000/dlc@sha256:" + "a" * 64}
    good["target"]["a_b"]["contexts"] = pinned
    assert bake.validate(good) == []
    good["target"]["a_b"]["contexts"] = {"h:5000/dlc:1": None}  # map[string]string: no null, unlike args
    assert bake.validate(good) == ["target 'a_b': contexts is not a strmap"]


@pytest.mark.docker
def test_bake_writes_every_variant_with_the_tags_build_gives(
    docker_client, local_base, mirror, tmp_path, cleanup
):
    out = tmp_path / "out"
    argv = ["bake", "--matrix", str(ROOT / "matrix.local.yaml"), "--out", str(out)]
    argv += ["--variant", "local-debian-nccl2.27", "--cache", str(ROOT / ".cache" / "artifacts")]
    argv += ["--cache-from", "reg.invalid/c:1", "--build-arg", "BASE_REGISTRY=x"]
    res = build_py(*argv)
    assert res.rc == 0, res.out + res.err
    doc = json.loads((out / "docker-bake.json").read_text())
    assert bake.validate(doc) == [] and doc["group"]["default"]["targets"] == ["local-debian-nccl2_27"]
    target = doc["target"]["local-debian-nccl2_27"]
    vdir = out / "local-debian-nccl2.27"
    base_id = docker_client.images.get(options.read_lock(vdir)["base"]["image"]).id  # a local base
    assert f"engine-id {base_id} in the content hash" in res.out and "contexts" not in target
    assert target["labels"][BASE_ID_LABEL] == base_id
    assert target["tags"][0].endswith("-" + target["labels"][HASH_LABEL][:12])
    assert (Path.cwd() / target["context"]).resolve() == (vdir / "context").resolve()
    assert (vdir / "context" / target["dockerfile"]).resolve() == (vdir / "Dockerfile").resolve()
    assert any((vdir / "context" / "artifacts").iterdir())  # staged: bake needs nothing else
    assert target["cache-from"] == ["type=registry,ref=reg.invalid/c:1"] and target["cache-to"] == [
        "type=inline"
    ]
    assert target["args"] == {"BASE_REGISTRY": "x"} and target["platforms"] == ["linux/amd64"]
    # the tags and labels `build` really gives (a small variant on the local base: built, not recomputed)
    small, cache = tmp_path / "small", tmp_path / "cache"
    svdir = _variant(small, "bk-bake")
    lock = options.read_lock(svdir)
    lock["base"] = {"image": LOCAL_BASE, "registry_arg": None}
    (svdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    assert _build(small, cache, mirror, "--builder", "classic").rc == 0
    built = _summary(small)["bk-bake"]
    assert built["status"] == "built" and built["base_hashed"] == docker_client.images.get(LOCAL_BASE).id
    argv = ["bake", "--no-render", "--out", str(small), "--cache", str(cache), "--mirror", str(mirror)]
    assert build_py(*argv).rc == 0
    baked = json.loads((small / "docker-bake.json").read_text())["target"]["bk-bake"]
    assert baked["tags"] == built["tags"] and baked["labels"][HASH_LABEL] == built["context_hash"]
    image_labels = docker_client.images.get(built["image_id"]).labels
    assert {k: image_labels.get(k) for k in baked["labels"]} == baked["labels"]


@pytest.mark.docker
def test_bake_leaves_the_variants_channels_out_of_its_tags(local_base, mirror, tmp_path):
    """`buildx bake --push` runs before any check: a channel in the file would be pushed ungated."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    vdir = _variant(out, "bk-chan")
    lock = options.read_lock(vdir)
    repo = f"{REPO}-bk-chan"
    lock["base"] = {"image": LOCAL_BASE, "registry_arg": None}
    lock["tags"] = [f"{repo}:latest", f"{repo}:dev", f"{repo}:v1", f"{repo}:staging"]
    lock["channels"] = ["dev", "staging"]
    (vdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    argv = ["bake", "--no-render", "--out", str(out), "--cache", str(cache), "--mirror", str(mirror)]
    res = build_py(*argv)
    assert res.rc == 0, res.out + res.err
    tags = json.loads((out / "docker-bake.json").read_text())["target"]["bk-chan"]["tags"]
    assert tags[1:] == [f"{repo}:latest", f"{repo}:v1"] and tags[0].startswith(repo + ":")
    assert f"{repo}:dev is a channel; left out" in res.out


# ---------------------------------------------------------------- real builds


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    return make_mirror(tmp_path_factory.mktemp("mirror"))


@pytest.fixture
def cleanup(docker_client):
    yield
    for image in docker_client.images.list():
        if any(t.startswith(f"{REPO}-bk") or "/efa-ci-test/" in t for t in image.tags):
            docker_client.images.remove(image.id, force=True)


def _build(out: Path, cache: Path, mirror: Path, *extra: str) -> cli.Result:
    argv = ["build", "--no-render", "--out", str(out), "--cache", str(cache), "--mirror", str(mirror)]
    return build_py(*argv, "--plain", *extra)


@pytest.mark.docker
def test_buildkit_and_classic_give_the_same_tags_and_labels(
    docker_client, local_base, mirror, tmp_path, cleanup
):
    out, cache = tmp_path / "out", tmp_path / "cache"
    # a cache mount, as the templates write them: the classic builder gets the Dockerfile without it
    mount = "--mount=type=cache,id=efa-image-build-test-bk,target=/var/cache/efa-test,sharing=locked"
    _variant(out, "bk", run=f"{mount} \\\n    grep -qs ' /var/cache/efa-test ' /proc/mounts || true")
    assert _build(out, cache, mirror, "--builder", "buildkit", "--force").rc == 0
    kit = _summary(out)["bk"]
    assert kit["status"] == "built" and kit["builder"] == "buildkit"
    assert (
        "#" in Path(kit["log"]).read_text()
        and "builder: the engine's BuildKit" in Path(kit["log"]).read_text()
    )
    kit_labels = docker_client.images.get(kit["image_id"]).labels
    # build --force never re-points a tag an image of this content holds: with it gone, the classic
    # build's tags are the content's own again
    docker_client.images.remove(kit["image_id"], force=True)
    assert _build(out, cache, mirror, "--builder", "classic", "--force").rc == 0
    classic = _summary(out)["bk"]
    assert classic["builder"] == "classic" and classic["tags"] == kit["tags"]
    assert docker_client.images.get(classic["image_id"]).labels == kit_labels
    assert kit_labels[HASH_LABEL] == kit["context_hash"]


@pytest.mark.docker
def test_fresh_runner_with_the_images_in_the_registry_builds_nothing(
    docker_client, local_base, mirror, registry, tmp_path, cleanup
):
    out, cache = tmp_path / "out", tmp_path / "cache"
    _variant(out, "bk-a")
    _variant(out, "bk-b", run="echo b")
    where = ["--registry", f"{registry.host}/efa-ci-test"]
    assert _build(out, cache, mirror, *where).rc == 0  # nothing there yet: both built
    assert {e["status"] for e in _summary(out).values()} == {"built"}
    assert build_py("push", "--summary", str(out / "summary.json"), *where).rc == 0
    pushed = {k: v["digest"] for k, v in _summary(out).items()}
    # a fresh runner: none of these images in the engine any more
    for entry in _summary(out).values():
        docker_client.images.remove(entry["image_id"], force=True)
    (out / "summary.json").unlink()
    res = _build(out, cache, mirror, *where)
    assert res.rc == 0
    text = res.out
    assert "2 skipped" in text and "building" not in text
    for name, entry in _summary(out).items():
        assert entry["status"] == "skipped" and entry["found_in"] == "registry"
        assert entry["digest"] == pushed[name] and entry["pushed"][0].endswith("@" + pushed[name])
        assert "#" not in Path(entry["log"]).read_text()  # no builder ran
    assert not [i for i in docker_client.images.list() if any("bk-a" in t for t in i.tags)]
    # `build.py test` pulls what it must check by the digest the summary names
    from imagebuild.adapters.docker_engine import ensure_local

    entry = _summary(out)["bk-a"]
    ensure_local(docker_client, entry["image_id"], entry["pushed"])
    assert docker_client.images.get(entry["image_id"]).id == entry["image_id"]
    # content the registry does not hold (a changed training file) is built
    (out / "bk-a" / "context" / "training" / "train.py").write_text("print('v2')\n")
    assert _build(out, cache, mirror, *where, "--variant", "bk-a").rc == 0
    assert _summary(out)["bk-a"]["status"] == "built"


@pytest.mark.docker
@pytest.mark.slow
def test_a_buildkit_build_of_the_local_variant_passes_every_static_check(docker_client, local_base, tmp_path):
    out = tmp_path / "out"
    variant = "local-debian-nccl2.27"
    argv = ["build", "--matrix", str(ROOT / "matrix.local.yaml"), "--variant", variant, "--out", str(out)]
    argv += ["--cache", str(ROOT / ".cache" / "artifacts"), "--plain", "--builder", "buildkit", "--force"]
    assert build_py(*argv).rc == 0
    entry = _summary(out)[variant]
    assert entry["builder"] == "buildkit" and entry["status"] == "built"
    assert build_py("test", "--out", str(out), "--variant", variant).rc == 0
    report = json.loads((out / "test-report.json").read_text())
    image = report["images"][0]
    assert image["passed"] and image["image_id"] == entry["image_id"]
    assert not [c for c in image["checks"] if c["status"] in ("fail", "unknown")]
