"""One tag, two architectures (issue 25, item 5): twins sharing a tag are pushed as one OCI image index, and
the release gate checks every entry. Against the real registry the tests start; the arm64 image here is a
small real one whose config says arm64 (built FROM scratch, no emulation needed)."""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py
from release_setup import arm64_locked
from services import summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.errors import ChecksFailed
from imagebuild.release.index import INDEX_TYPE, IndexEntry, index_body, twin_groups

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images, ecr_stand_in


def test_twin_groups_names_only_tags_shared_by_two_variants():
    got = twin_groups([("x86", ("team/app", "v1")), ("arm", ("team/app", "v1")), ("x86", ("team/app", "x"))])
    assert got == {("team/app", "v1"): ["x86", "arm"]}


def test_an_index_holds_one_image_per_platform():
    amd = IndexEntry("sha256:" + "a" * 64, "application/vnd.oci.image.manifest.v1+json", 10, "linux", "amd64")
    arm = IndexEntry("sha256:" + "b" * 64, "application/vnd.oci.image.manifest.v1+json", 11, "linux", "arm64")
    doc = json.loads(index_body([arm, amd]))
    assert doc["mediaType"] == INDEX_TYPE
    assert [(m["digest"], m["platform"]["architecture"]) for m in doc["manifests"]] == [
        (amd.digest, "amd64"),
        (arm.digest, "arm64"),
    ]
    other = IndexEntry("sha256:" + "c" * 64, amd.media_type, 12, "linux", "amd64")
    with pytest.raises(ChecksFailed, match="two images for platform linux/amd64"):
        index_body([amd, other])


@pytest.fixture(scope="module")
def arm64_image(docker_client):
    """A small real image whose config says linux/arm64, with a lock label (FROM scratch: no emulation)."""
    image = arm64_locked(docker_client, "idx-arm")
    yield image
    docker_client.images.remove(image.id, force=True)


def _twins(tmp_path, small_images, arm64_image, repo):
    """A build summary with an amd64 variant and its arm64 twin, both tagged REPO:v1."""
    amd = summary_entry("twin", small_images["a"], tags=[f"{repo}:v1"])
    arm = summary_entry("twin-arm64", arm64_image, tags=[f"{repo}:v1"])
    return write_summary(tmp_path / "summary.json", [amd, arm])


@pytest.mark.docker
def test_twins_share_one_tag_as_an_index_and_pull_by_platform(
    registry, small_images, arm64_image, docker_client, tmp_path
):
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    res = build_py("push", "--summary", str(summary), "--registry", registry.host)
    assert res.rc == 0, res.err
    entries = {e["variant"]: e for e in json.loads(summary.read_text())["variants"]}
    api = RegistryAPI(registry.host)
    index = api.manifest(repo, "v1")
    assert index is not None and index.media_type == INDEX_TYPE
    doc = json.loads(index.body)
    got = {m["platform"]["architecture"]: m["digest"] for m in doc["manifests"]}
    assert got == {"amd64": entries["twin"]["digest"], "arm64": entries["twin-arm64"]["digest"]}
    for e in entries.values():
        assert e["index"] == f"{registry.host}/{repo}:v1@{index.digest}"
    # each image keeps its own tag, so the registry never collects it
    assert api.manifest(repo, "v1-arm64").digest == entries["twin-arm64"]["digest"]
    # a second push is idempotent: nothing moves
    again = build_py("push", "--summary", str(summary), "--registry", registry.host)
    assert again.rc == 0, again.err
    assert api.manifest(repo, "v1").digest == index.digest
    # the engine picks the arm64 entry of the tag
    ref = f"{registry.host}/{repo}:v1"
    try:
        pulled = docker_client.images.pull(ref, platform="linux/arm64")
        assert pulled.id == arm64_image.id and pulled.attrs["Architecture"] == "arm64"
    finally:
        docker_client.images.remove(ref, force=False)


@pytest.mark.docker
def test_force_never_moves_the_tag_twins_share(registry, small_images, arm64_image, tmp_path):
    """The shared tag is the matrix's (write-once): another amd64 twin under it is refused, --force too."""
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    api = RegistryAPI(registry.host)
    index = api.manifest(repo, "v1")
    amd = summary_entry("twin", small_images["b"], tags=[f"{repo}:v1"])  # not the image the index names
    arm = summary_entry("twin-arm64", arm64_image, tags=[f"{repo}:v1"])
    other = write_summary(tmp_path / "other.json", [amd, arm])
    res = build_py("push", "--summary", str(other), "--registry", registry.host, "--force")
    assert res.rc == 1, res.err
    assert "write-once, --force or not" in res.err
    assert api.manifest(repo, "v1").digest == index.digest
    assert api.manifest(repo, "v1-amd64").config_digest == small_images["a"].id


@pytest.mark.docker
def test_force_never_moves_the_shared_tags_platform_tag_through_a_tag_extra(
    registry, small_images, arm64_image, tmp_path
):
    """`--tag v1-amd64 --force`: the extra is the TAG-ARCH name the shared tag's amd64 image was pushed
    under (write-once as the shared tag is); its index must not take that tag from the image."""
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    api = RegistryAPI(registry.host)
    before = api.manifest(repo, "v1-amd64")
    res = build_py(
        "push", "--summary", str(summary), "--registry", registry.host, "--tag", "v1-amd64", "--force"
    )
    assert res.rc == 1, res.err
    assert "write-once, --force or not" in res.err, res.err
    assert api.manifest(repo, "v1-amd64").digest == before.digest


@pytest.mark.docker
def test_release_gate_checks_every_entry_of_the_index(registry, small_images, arm64_image, tmp_path):
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    only_amd = write_check_report(tmp_path / "amd.json", [("twin", small_images["a"].id, True)])
    args = ["release", "--summary", str(summary), "--registry", registry.host, "--tag", "r1"]
    args += ["--variant", "twin", "--records", str(tmp_path / "rec")]
    res = build_py(*args, "--checks", str(only_amd))
    assert res.rc == 1, res.err
    assert "linux/arm64 entry (twin-arm64)" in res.err and arm64_image.id in res.err, res.err
    assert RegistryAPI(registry.host).manifest(repo, "r1") is None
    both = write_check_report(
        tmp_path / "both.json",
        [("twin", small_images["a"].id, True), ("twin-arm64", arm64_image.id, True)],
    )
    res = build_py(*args, "--checks", str(both))
    assert res.rc == 0, res.err


@pytest.mark.docker
def test_a_twin_pushed_alone_leaves_the_shared_tag_to_the_index(
    registry, small_images, arm64_image, tmp_path
):
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    res = build_py("push", "--summary", str(summary), "--registry", registry.host, "--variant", "twin")
    assert res.rc == 0, res.err
    assert "not written: twin-arm64 not pushed in this run" in res.err
    api = RegistryAPI(registry.host)
    assert api.manifest(repo, "v1") is None
    assert api.manifest(repo, "v1-amd64").config_digest == small_images["a"].id
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    assert api.manifest(repo, "v1").media_type == INDEX_TYPE


@pytest.mark.docker
def test_twins_to_ecr_share_one_index_pushed_or_fanned_in(ecr_stand_in, small_images, arm64_image, tmp_path):
    """Twins on ECR: the images go by ECR's path, the index through the v2 API of ECR's registry host with
    ECR's token (ECR's own API writes no index). ECR is the fixture `ecr_stand_in`; the one substitution is
    its registry's host name, in this process (moto's does not exist)."""
    stand_in, to_ecr, api = ecr_stand_in.registry, ecr_stand_in.to_ecr, ecr_stand_in.api

    repo = f"idx-ecr-{uuid.uuid4().hex[:10]}/app"  # one push of both twins
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    res = build_py("push", "--summary", str(summary), *to_ecr)
    assert res.rc == 0, res.err
    entries = {e["variant"]: e for e in json.loads(summary.read_text())["variants"]}
    index = api.manifest(repo, "v1")
    assert index is not None and index.media_type == INDEX_TYPE
    plats = {m["platform"]["architecture"]: m["digest"] for m in json.loads(index.body)["manifests"]}
    assert plats == {"amd64": entries["twin"]["digest"], "arm64": entries["twin-arm64"]["digest"]}
    assert stand_in.password not in res.out + res.err

    repo = f"idx-ecr-{uuid.uuid4().hex[:10]}/app"  # two runners, then fan-in
    jobs = {}
    for name, image in (("twin", small_images["a"]), ("twin-arm64", arm64_image)):
        job = tmp_path / name
        job.mkdir()
        write_summary(job / "summary.json", [summary_entry(name, image, tags=[f"{repo}:v1"])])
        write_check_report(job / "test-report.json", [(name, image.id, True)])
        res = build_py("push", "--summary", str(job / "summary.json"), *to_ecr, "--fan-out")
        assert res.rc == 0, res.err
        jobs[name] = job
    assert api.manifest(repo, "v1") is None  # neither runner took the shared tag
    out = tmp_path / "fan-in"
    froms = ["--from", str(jobs["twin"]), "--from", str(jobs["twin-arm64"])]
    res = build_py("fan-in", *froms, "--out", str(out), *to_ecr)
    assert res.rc == 0, res.err
    index = api.manifest(repo, "v1")
    assert index is not None and index.media_type == INDEX_TYPE
    merged = {e["variant"]: e for e in json.loads((out / "summary.json").read_text())["variants"]}
    assert {e["index"] for e in merged.values()} == {f"{stand_in.host}/{repo}:v1@{index.digest}"}


@pytest.mark.docker
def test_an_index_entry_no_summary_names_refuses_the_release(registry, small_images, arm64_image, tmp_path):
    """Released with the amd64 twin's summary alone, the arm64 entry behind the tag is unknown: refused."""
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    doc = json.loads(summary.read_text())
    doc["variants"] = [e for e in doc["variants"] if e["variant"] == "twin"]
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps(doc))
    checks = write_check_report(
        tmp_path / "both.json",
        [("twin", small_images["a"].id, True), ("twin-arm64", arm64_image.id, True)],
    )
    res = build_py(
        "release", "--summary", str(alone), "--registry", registry.host, "--tag", "r1",
        "--checks", str(checks), "--records", str(tmp_path / "rec"),
    )  # fmt: skip
    assert res.rc == 1
    assert "its linux/arm64 entry" in res.err and "is no variant of the given summaries" in res.err, res.err
    assert RegistryAPI(registry.host).manifest(repo, "r1") is None


@pytest.mark.docker
def test_a_release_of_twins_tags_the_index_once(registry, small_images, arm64_image, tmp_path):
    """The release tag and channel of twins name the index (both architectures), not one twin's image;
    releasing the other twin with the same tag finds them there already and moves nothing."""
    repo = f"idx-{uuid.uuid4().hex[:10]}/app"
    summary = _twins(tmp_path, small_images, arm64_image, repo)
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    entries = {e["variant"]: e for e in json.loads(summary.read_text())["variants"]}
    api = RegistryAPI(registry.host)
    index = api.manifest(repo, "v1")
    assert index is not None and index.media_type == INDEX_TYPE
    both = write_check_report(
        tmp_path / "both.json",
        [("twin", small_images["a"].id, True), ("twin-arm64", arm64_image.id, True)],
    )
    rec = tmp_path / "rec"
    base = ["release", "--summary", str(summary), "--registry", registry.host]
    base += ["--checks", str(both), "--records", str(rec)]
    args = [*base, "--tag", "r1", "--channel", "dev"]
    dry = build_py(*args, "--variant", "twin", "--dry-run")
    assert dry.rc == 0, dry.err
    assert f"would tag {registry.host}/{repo}@{index.digest} as r1" in dry.out, dry.out
    res = build_py(*args, "--variant", "twin")
    assert res.rc == 0, res.err
    for tag in ("r1", "dev"):
        got = api.manifest(repo, tag)
        assert got.digest == index.digest and got.body == index.body, tag
    record = json.loads((rec / "twin" / "latest.json").read_text())
    assert record["digest"] == entries["twin"]["digest"]
    assert record["index"] == {
        "ref": f"{registry.host}/{repo}@{index.digest}",
        "digest": index.digest,
        "manifests": [
            {"digest": entries["twin"]["digest"], "platform": "linux/amd64"},
            {"digest": entries["twin-arm64"]["digest"], "platform": "linux/arm64"},
        ],
    }
    assert record["repositories"][0]["moved"] == ["r1"]
    # the other twin, same tag and channel: already on the index, nothing written twice
    res = build_py(*args, "--variant", "twin-arm64")
    assert res.rc == 0, res.err
    assert "tagged" not in res.err and "moved channel" not in res.err, res.err
    arm = json.loads((rec / "twin-arm64" / "latest.json").read_text())
    assert arm["repositories"][0]["already"] == ["r1"] and arm["repositories"][0]["moved"] == []
    assert arm["index"]["digest"] == index.digest
    assert [(c["tag"], c["digest"]) for c in arm["channels"]] == [("dev", index.digest)]
    assert api.manifest(repo, "r1").digest == index.digest
    # a release tag on one twin's own image (written before twins released the index) is never moved
    amd = api.manifest(repo, entries["twin"]["digest"])
    api.put_manifest(repo, "r0", amd)
    res = build_py(*base, "--tag", "r0", "--variant", "twin")
    assert res.rc == 1 and f"{repo}:r0 already names {amd.digest}" in res.err, res.err
    assert api.manifest(repo, "r0").digest == amd.digest
    # both twins in one release: the tag is written once, the second twin finds it already on the index
    res = build_py(*base, "--tag", "r3", "--variant", "twin", "--variant", "twin-arm64")
    assert res.rc == 0, res.err
    assert res.err.count(f"tagged {registry.host}/{repo}:r3 -> {index.digest}") == 1, res.err
    latest = [json.loads((rec / v / "latest.json").read_text()) for v in ("twin", "twin-arm64")]
    repos = [r["repositories"][0] for r in latest]
    assert sorted((r["moved"], r["already"]) for r in repos) == [([], ["r3"]), (["r3"], [])]
    assert api.manifest(repo, "r3").digest == index.digest
    notes = sorted((rec / "twin").glob("*.md"))[-1].read_text()
    assert f"- image index `{index.digest}` (the tags name it): linux/amd64" in notes, notes
