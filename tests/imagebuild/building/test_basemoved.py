"""A base moved under the same tag is not "already built": its identity is in the content hash.

On the real engine and a real registry (tests/services.py), with tiny variants (`FROM base` + a COPY) and
tiny bases (the local base plus one label, so a "new" base is a new image without running a container):
a local base re-created under its tag, a registry base pushed again under its tag, and a base registry that
cannot be reached (fail closed; --trust-local-base opts in to the local copy, and the summary says so).
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest
from cli import build_py
from services import REGISTRY_BIN, RUN, Registry, free_port

from imagebuild.adapters import docker_engine
from imagebuild.building import baseid, contenthash, options
from imagebuild.variant import BASE_DIGEST_LABEL, BASE_ID_LABEL, HASH_LABEL

pytest_plugins = ["services_fixtures"]

NS = f"basemoved-{RUN}"  # every image these tests make names this (the engine is shared)
REPO = f"efa-image-build-test-{RUN}/basemoved"


def _make_base(client, ref: str) -> str:
    """A base image `ref`: the local base plus a label unique to this call (a new image id every time)."""
    from conftest import LOCAL_BASE

    text = f"FROM {LOCAL_BASE}\nLABEL org.efa-image-build.test.base={uuid.uuid4().hex}\n"
    image, _ = client.images.build(fileobj=io.BytesIO(text.encode()), rm=True)
    repo, tag = ref.rsplit(":", 1)
    image.tag(repo, tag)
    return image.id


def _push(client, ref: str) -> str:
    """Push `ref` (a loopback registry: plain HTTP) and return the manifest digest the registry holds."""
    repo, tag = ref.rsplit(":", 1)
    for chunk in client.images.push(repo, tag, stream=True, decode=True):
        assert "error" not in chunk, chunk
    return docker_engine.current_digest(client, ref)


def _variant(out: Path, name: str, image: str, registry_arg: str = "") -> Path:
    """A rendered-variant folder whose lock names base `image` (behind build arg `registry_arg`)."""
    vdir = out / name
    (vdir / "context" / "training").mkdir(parents=True, exist_ok=True)
    (vdir / "context" / "training" / "train.py").write_text("print('basemoved')\n")
    frm = f"${{{registry_arg}}}/{image}" if registry_arg else image
    head = f"ARG {registry_arg}\n" if registry_arg else ""
    (vdir / "Dockerfile").write_text(f"{head}FROM {frm}\nCOPY training /opt/ml/code\n")
    lock = {
        "schema": "efa-image-build/lock/v1",
        "name": name,
        "base": {"image": image, "registry_arg": registry_arg or None},
        "components": {},
        "tags": [f"{REPO}-{name}:latest"],
    }
    (vdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    return vdir


def _build(out: Path, *extra: str):
    argv = ["build", "--no-render", "--out", str(out), "--cache", str(out / ".cache"), "--builder", "classic"]
    return build_py(*argv, "--plain", *extra)


def _bake(out: Path, *extra: str):
    return build_py("bake", "--no-render", "--out", str(out), "--cache", str(out / ".cache"), *extra)


def _targets(out: Path) -> dict:
    return json.loads((out / "docker-bake.json").read_text())["target"]


def _entry(out: Path, name: str) -> dict:
    return {e["variant"]: e for e in json.loads((out / "summary.json").read_text())["variants"]}[name]


@pytest.fixture
def cleanup(docker_client):
    """Remove every image these tests made or tagged (by id: a moved base's old image has no tag left)."""
    made: list = []
    yield made
    for image in docker_client.images.list():
        if any(NS in t or t.startswith(REPO) for t in image.tags):
            made.append(image.id)
    for image_id in reversed(made):
        try:
            docker_client.images.remove(image_id, force=True)
        except Exception:  # noqa: BLE001 - already gone (removed with a child) is fine
            pass


# ---------------------------------------------------------------- pure parts


def test_the_base_identity_is_in_the_hash(tmp_path):
    vdir = _variant(tmp_path, "v", "some/base:1")
    plain = contenthash.context_hash(vdir)
    one, two = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    assert contenthash.context_hash(vdir, base=one) == contenthash.context_hash(vdir, base=one) != plain
    assert contenthash.context_hash(vdir, base=one) != contenthash.context_hash(vdir, base=two)


def test_a_missing_registry_build_arg_is_unconfirmed_not_ignored():
    lock = {"base": {"image": "pytorch-training:2.7.1-gpu", "registry_arg": "BASE_REGISTRY"}}
    base = options.BuildOptions(cache=None).base_of(None, lock)  # type: ignore[arg-type]
    assert base.identity is None and "--build-arg BASE_REGISTRY=HOST" in base.problem
    assert options.BuildOptions(cache=None).base_of(None, {}).problem is None  # type: ignore[arg-type]


def test_bake_without_an_engine_confirms_only_a_pinned_base(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    out, pin = tmp_path / "out", "sha256:" + "ab" * 32
    _variant(out, "pinned", f"{NS}/somewhere/base@{pin}")
    res = _bake(out)
    assert res.rc == 0, res.out + res.err
    assert f"pinned {pin} in the content hash" in res.out and "only bases pinned by digest" in res.out
    target = _targets(out)["pinned"]
    assert "contexts" not in target  # the FROM is already the digest
    assert target["labels"][BASE_DIGEST_LABEL] == pin
    # a base by tag: nothing can say what the tag names now, so no file at all (not one without it), and
    # the file the run above wrote is removed: it would look like this run's
    _variant(out, "tagged", f"{NS}/somewhere/base:1")
    for extra in ((), ("--trust-local-base",)):
        existed = (out / "docker-bake.json").exists()
        res = _bake(out, *extra)
        said = "tagged: base basemoved-"
        assert (
            res.rc == 1
            and said in res.out + res.err
            and "no docker engine could be reached" in res.out + res.err
        )
        assert not (out / "docker-bake.json").exists() and "Traceback" not in res.out + res.err
        assert (f"removed {out / 'docker-bake.json'}: this run failed" in res.out) == existed
    assert not existed  # the second round found the file gone, so both outcomes were seen
    other = out / "notes.json"  # --file naming a file of another kind: a failed bake leaves it alone
    other.write_text('{"mine": 1}')
    assert _bake(out, "--file", str(other)).rc == 1 and other.read_text() == '{"mine": 1}'


# ---------------------------------------------------------------- on the engine and a registry


@pytest.mark.docker
def test_a_local_base_is_its_engine_id_and_needs_no_network(docker_client, local_base, cleanup):
    ref = f"{NS}/local:1"
    cleanup.append(_make_base(docker_client, ref))

    def no_network(_client, _ref):
        raise AssertionError("a local base must not be looked up in a registry")

    base = baseid.resolve_base(docker_client, ref, ask=no_network)
    assert (base.identity, base.source) == (docker_client.images.get(ref).id, baseid.ENGINE_ID)
    pinned = baseid.resolve_base(docker_client, f"{NS}/absent@sha256:" + "ab" * 32, ask=no_network)
    assert (pinned.identity, pinned.source) == ("sha256:" + "ab" * 32, baseid.PINNED)


@pytest.mark.docker
def test_a_local_base_recreated_under_its_tag_rebuilds_the_variant(
    docker_client, local_base, tmp_path, cleanup
):
    out, ref = tmp_path / "out", f"{NS}/local:1"
    first_base = _make_base(docker_client, ref)
    cleanup.append(first_base)
    _variant(out, "loc", ref)
    assert _build(out).rc == 0
    first = _entry(out, "loc")
    assert first["status"] == "built" and (first["base_source"], first["base_hashed"]) == (
        "engine-id",
        first_base,
    )
    assert docker_client.images.get(first["image_id"]).labels[BASE_ID_LABEL] == first_base
    # unchanged base: skipped with zero work
    res = _build(out)
    again = _entry(out, "loc")
    assert res.rc == 0 and again["status"] == "skipped" and again["found_in"] == "engine"
    assert again["tags"] == first["tags"] and "Step " not in Path(again["log"]).read_text()
    assert f"base {ref}: engine-id {first_base} in the content hash" in Path(again["log"]).read_text()
    # `build.py base` again: the same tag, another image
    second_base = _make_base(docker_client, ref)
    cleanup.append(second_base)
    assert _build(out).rc == 0
    moved = _entry(out, "loc")
    assert moved["status"] == "built" and moved["base_hashed"] == second_base != first_base
    assert moved["tags"][0] != first["tags"][0] and moved["context_hash"] != first["context_hash"]
    assert docker_client.images.get(moved["image_id"]).labels[BASE_ID_LABEL] == second_base


@pytest.mark.docker
def test_a_base_digest_label_the_base_carries_is_never_reported_as_the_images_base(
    docker_client, local_base, tmp_path, cleanup
):
    """An image inherits its base's labels: a base that carries the tool's base labels (built by this tool,
    or forged) must not pass them off as this image's base, built or skipped (issue 23, item 6)."""
    from conftest import LOCAL_BASE

    out, ref, forged = tmp_path / "out", f"{NS}/forged:1", "sha256:" + "f" * 64
    text = f"FROM {LOCAL_BASE}\nLABEL {BASE_DIGEST_LABEL}={forged} {BASE_ID_LABEL}={forged}\n"
    image, _ = docker_client.images.build(fileobj=io.BytesIO(text.encode()), rm=True)
    image.tag(*ref.rsplit(":", 1))
    cleanup.append(image.id)
    _variant(out, "inherits", ref)
    for status in ("built", "skipped"):
        assert _build(out).rc == 0
        entry = _entry(out, "inherits")
        assert entry["status"] == status
        assert entry["base_digest"] is None and entry["base_image_id"] == image.id != forged
        labels = docker_client.images.get(entry["image_id"]).labels
        assert (labels[BASE_DIGEST_LABEL], labels[BASE_ID_LABEL]) == ("", image.id)


@pytest.mark.docker
def test_a_registry_base_pushed_again_misses_the_registry_skip(
    docker_client, local_base, registry, tmp_path, cleanup
):
    out, image = tmp_path / "out", f"{NS}/dlc:1"
    ref = f"{registry.host}/{image}"
    where = ["--build-arg", f"BASE_REGISTRY={registry.host}", "--registry", f"{registry.host}/{NS}-ci"]
    old_base = _make_base(docker_client, ref)
    cleanup.append(old_base)
    old_digest = _push(docker_client, ref)
    _variant(out, "reg", image, "BASE_REGISTRY")
    assert _build(out, *where).rc == 0
    first = _entry(out, "reg")
    assert first["status"] == "built" and first["base_source"] == "registry-digest"
    assert first["base_hashed"] == first["base_digest"] == old_digest
    assert build_py("push", "--summary", str(out / "summary.json"), *where[2:]).rc == 0
    # a fresh runner with the same base: the same tag, found in the registry, nothing built
    docker_client.images.remove(first["image_id"], force=True)
    assert _build(out, *where).rc == 0
    fresh = _entry(out, "reg")
    assert (fresh["status"], fresh["found_in"], fresh["tags"]) == ("skipped", "registry", first["tags"])
    # the base is re-published under the same tag; this runner's engine still holds the old copy
    cleanup.append(_make_base(docker_client, ref))
    new_digest = _push(docker_client, ref)
    docker_client.images.get(old_base).tag(ref.rsplit(":", 1)[0], "1")
    assert new_digest != old_digest
    res = _build(out, *where)
    assert res.rc == 0, res.out + res.err
    moved = _entry(out, "reg")
    assert moved["status"] == "built" and moved["found_in"] is None and moved["tags"][0] != first["tags"][0]
    assert moved["base_hashed"] == moved["base_digest"] == new_digest
    labels = docker_client.images.get(moved["image_id"]).labels
    assert labels[BASE_DIGEST_LABEL] == new_digest
    assert labels[BASE_ID_LABEL] == docker_client.images.get(ref).id != old_base  # built on the new one
    assert f"pull {ref.rsplit(':', 1)[0]}@{new_digest}" in Path(moved["log"]).read_text()


@pytest.mark.docker
def test_bake_gives_the_tags_build_gives_and_pins_a_registry_base(
    docker_client, local_base, registry, tmp_path, cleanup
):
    out, image, local = tmp_path / "out", f"{NS}/bake:1", f"{NS}/bakelocal:1"
    ref = f"{registry.host}/{image}"
    arg = ["--build-arg", f"BASE_REGISTRY={registry.host}"]
    cleanup.append(_make_base(docker_client, ref))
    old_digest = _push(docker_client, ref)
    cleanup.append(_make_base(docker_client, local))
    _variant(out, "reg", image, "BASE_REGISTRY")
    _variant(out, "loc", local)
    assert _build(out, *arg).rc == 0
    built = {n: _entry(out, n) for n in ("reg", "loc")}
    assert {e["status"] for e in built.values()} == {"built"}
    res = _bake(out, *arg)
    assert res.rc == 0, res.out + res.err
    baked = _targets(out)
    for name, entry in built.items():
        assert baked[name]["tags"] == entry["tags"]
        assert baked[name]["labels"][HASH_LABEL] == entry["context_hash"]
    pin = f"{registry.host}/{NS}/bake@{old_digest}"
    assert baked["reg"]["contexts"] == {ref: f"docker-image://{pin}"}
    assert baked["reg"]["labels"][BASE_DIGEST_LABEL] == old_digest
    assert "contexts" not in baked["loc"]  # an engine id: no registry holds it (docs/build.md)
    assert baked["loc"]["labels"][BASE_ID_LABEL] == built["loc"]["base_hashed"]
    # the registry base moves under its tag: bake's tag and pin move with it, and build agrees
    cleanup.append(_make_base(docker_client, ref))
    new_digest = _push(docker_client, ref)
    assert new_digest != old_digest and _bake(out, *arg).rc == 0
    moved = _targets(out)
    assert moved["reg"]["tags"][0] != baked["reg"]["tags"][0] and moved["loc"]["tags"] == baked["loc"]["tags"]
    assert moved["reg"]["contexts"] == {ref: f"docker-image://{registry.host}/{NS}/bake@{new_digest}"}
    assert _build(out, *arg, "--variant", "reg").rc == 0
    rebuilt = _entry(out, "reg")
    assert rebuilt["status"] == "built" and rebuilt["tags"] == moved["reg"]["tags"]
    # where buildx exists, bake itself reads the file; where not, the command says the schema check was all
    from imagebuild.building.buildkit import detect

    res = _bake(out, *arg)
    if detect("auto").kind == "buildx":
        assert "docker buildx bake --print accepted" in res.out
    else:
        assert "checked against bake's schema (no buildx here:" in res.out


@pytest.mark.docker
def test_an_unreachable_base_registry_fails_closed_unless_told_to_trust_the_local_copy(
    docker_client, local_base, tmp_path, cleanup
):
    if not Path(REGISTRY_BIN).exists():
        pytest.fail(f"{REGISTRY_BIN} missing: apt install docker-registry")
    out, image = tmp_path / "out", f"{NS}/gone:1"
    reg = Registry().start()
    try:
        ref = f"{reg.host}/{image}"
        cleanup.append(_make_base(docker_client, ref))
        digest = _push(docker_client, ref)
        arg = ["--build-arg", f"BASE_REGISTRY={reg.host}"]
        _variant(out, "gone", image, "BASE_REGISTRY")
        assert _build(out, *arg).rc == 0
        first = _entry(out, "gone")
    finally:
        reg.stop()
    assert first["status"] == "built" and first["base_hashed"] == digest
    res = _build(out, *arg)
    entry = _entry(out, "gone")
    assert res.rc == 1 and entry["status"] == "failed" and entry["image_id"] is None
    assert entry["base_ref"] == ref and entry["base_hashed"] is None and entry["context_hash"] is None
    said = f"FAILED gone: base {ref}: its current identity could not be confirmed: the registry could not"
    assert said in res.out and "connection refused" in entry["error"]
    assert f"the engine's copy ({digest}) may be stale" in entry["error"]
    assert "Traceback" not in res.out + res.err
    # the opt-in: the local copy's digest, recorded as such; the same tag as when the registry answered
    res = _build(out, *arg, "--trust-local-base")
    trusted = _entry(out, "gone")
    assert res.rc == 0 and trusted["status"] == "skipped" and trusted["tags"] == first["tags"]
    assert (trusted["base_source"], trusted["base_hashed"]) == ("trusted-local-digest", digest)
    assert "--trust-local-base: the local copy" in Path(trusted["log"]).read_text()
    # bake: the same refusal and the same opt-in, the local copy's digest pinned in the target
    res = _bake(out, *arg, "--variant", "gone")
    assert res.rc == 1 and "could not be confirmed" in res.out + res.err and "Traceback" not in res.err
    assert not (out / "docker-bake.json").exists()
    assert _bake(out, *arg, "--variant", "gone", "--trust-local-base").rc == 0
    target = _targets(out)["gone"]
    assert target["tags"] == first["tags"]
    assert target["contexts"] == {ref: f"docker-image://{ref.rsplit(':', 1)[0]}@{digest}"}
    # a base in neither the engine nor a reachable registry: --trust-local-base has nothing to trust
    dead = f"127.0.0.1:{free_port()}"
    _variant(out, "nowhere", image, "BASE_REGISTRY")
    res = _build(out, "--build-arg", f"BASE_REGISTRY={dead}", "--variant", "nowhere", "--trust-local-base")
    nowhere = _entry(out, "nowhere")
    assert res.rc == 1 and nowhere["status"] == "failed" and f"base {dead}/{image}:" in nowhere["error"]
    assert "the engine has no copy of it" in nowhere["error"]


@pytest.mark.docker
def test_a_registry_that_refuses_says_so_without_a_secret(docker_client, auth_registry):
    with pytest.raises(docker_engine.BaseUnconfirmed) as err:
        docker_engine.current_digest(docker_client, f"{auth_registry.host}/{NS}/private:1")
    assert "refused access" in str(err.value) and auth_registry.password not in str(err.value)
