"""Every gate applies to what the tag will name (issue 31, item 2): each entry of an image index and the index
itself. `--require-signed` verifies every entry (a twin not selected with --variant included) and `build.py
verify` of the released tag then passes; an entry whose platform is not its image config's or its lock's, or
an index this tool would not assemble from the checked digests, is refused. Against the real registry the
tests start, with the arm64 twins of test_index.py (FROM scratch: no emulation)."""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py
from release_setup import arm64_locked, push_summary, release, signing
from services import summary_entry, write_check_report
from test_attest import DPKG

from imagebuild.adapters.registry import RegistryAPI, RemoteManifest, sha256_of
from imagebuild.release.index import INDEX_TYPE, IndexEntry, index_body

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images


def _arm64(docker_client, name, **lock):
    return arm64_locked(docker_client, name, files={"/var/lib/dpkg/status": DPKG}, **lock)


@pytest.fixture(scope="module")
def arm64_signable(docker_client):
    """An arm64 twin `build.py attest` can describe (a dpkg status in it), its lock saying linux/arm64."""
    image = _arm64(docker_client, "gate-arm", platform="linux/arm64")
    yield image
    docker_client.images.remove(image.id, force=True)


def _pushed_twins(registry, tmp_path, amd, arm):
    """A summary of an amd64 variant and its arm64 twin, pushed as one index under REPO:v1; (repo, summary,
    the check report passing both, the variants' digests)."""
    repo = f"gate-{uuid.uuid4().hex[:10]}/app"
    entries = [
        summary_entry("twin", amd, tags=[f"{repo}:v1"]),
        summary_entry("twin-arm64", arm, tags=[f"{repo}:v1"]),
    ]
    summary = tmp_path / "summary.json"
    pushed = push_summary(registry.host, summary, entries)
    checks = write_check_report(
        tmp_path / "both.json", [("twin", amd.id, True), ("twin-arm64", arm.id, True)]
    )
    digests = {e["variant"]: e["digest"] for e in pushed}
    return repo, summary, checks, digests


def _release(registry, summary, checks, tmp_path, *extra):
    return release(
        registry.host, summary, checks, tmp_path / "rec", "--tag", "r1", "--variant", "twin", *extra
    )


def _put_index(api, repo, tag, body):
    digest = api.put_manifest(repo, tag, RemoteManifest(sha256_of(body), INDEX_TYPE, body, None))
    assert digest == sha256_of(body)
    return digest


def _point_summary_at(summary, host, repo, tag, digest):
    """The summary's twins say they were pushed into REPO:TAG@DIGEST (what a tampered summary would say)."""
    doc = json.loads(summary.read_text())
    for e in doc["variants"]:
        e["index"] = f"{host}/{repo}:{tag}@{digest}"
    summary.write_text(json.dumps(doc))


def _amd64_twice(api, repo, digest):
    """The body of an index naming the amd64 image `digest` as linux/amd64 and as linux/arm64."""
    m = api.manifest(repo, digest)
    return index_body([IndexEntry(digest, m.media_type, len(m.body), "linux", p) for p in ("amd64", "arm64")])


@pytest.mark.docker
def test_require_signed_covers_every_entry_of_the_index_and_verify_of_the_tag_passes(
    registry, small_images, arm64_signable, tmp_path
):
    amd = small_images["a"]
    repo, summary, checks, digests = _pushed_twins(registry, tmp_path, amd, arm64_signable)
    api = RegistryAPI(registry.host)
    key, pub, matrix = signing(tmp_path)
    attest = ["attest", "--summary", str(summary), "--registry", registry.host, "--sign-key", key]
    res = build_py(*attest, "--matrix", matrix, "--variant", "twin")  # the amd64 twin alone
    assert res.rc == 0, res.err

    # the tag would name the index: its arm64 entry has no SBOM or provenance, so nothing is promoted
    res = _release(registry, summary, checks, tmp_path, "--require-signed", pub)
    assert res.rc == 1, res.err
    assert "not signed as --require-signed asks" in res.err
    assert f"its linux/arm64 entry {digests['twin-arm64']}: no provenance attached" in res.err, res.err
    assert f"no SBOM attached to {digests['twin-arm64']}" in res.err
    assert api.manifest(repo, "r1") is None

    assert build_py(*attest, "--matrix", matrix).rc == 0  # both twins
    res = _release(registry, summary, checks, tmp_path, "--require-signed", pub)
    assert res.rc == 0, res.err
    index = api.manifest(repo, "r1")
    assert index.media_type == INDEX_TYPE
    res = build_py("verify", f"{registry.host}/{repo}:r1", "--key", pub)
    assert res.rc == 0, res.err
    assert res.out.strip() == f"verified\t{registry.host}/{repo}:r1\t{index.digest}"

    # an index of the same signed images, its arm64 entry the amd64 image: verify names it
    _put_index(api, repo, "forged", _amd64_twice(api, repo, digests["twin"]))
    res = build_py("verify", f"{registry.host}/{repo}:forged", "--key", pub)
    assert res.rc == 1, res.err
    assert f"its linux/arm64 entry {digests['twin']} is a linux/amd64 image (its config says so)" in res.err


@pytest.mark.docker
def test_an_index_whose_arm64_entry_is_the_amd64_image_is_refused(
    registry, small_images, arm64_signable, tmp_path
):
    amd = small_images["a"]
    repo, summary, checks, digests = _pushed_twins(registry, tmp_path, amd, arm64_signable)
    api = RegistryAPI(registry.host)
    body = _amd64_twice(api, repo, digests["twin"])
    _point_summary_at(summary, registry.host, repo, "forged", _put_index(api, repo, "forged", body))
    res = _release(registry, summary, checks, tmp_path)
    assert res.rc == 1, res.err
    assert "its linux/arm64 entry (twin) is a linux/amd64 image (its config says so)" in res.err, res.err
    assert api.manifest(repo, "r1") is None


@pytest.mark.docker
def test_an_index_the_tool_did_not_assemble_is_refused(registry, small_images, arm64_signable, tmp_path):
    """The right digests with the right platforms, but not the bytes push writes (an annotation added):
    made elsewhere, so not released, whatever its entries' gates say."""
    repo, summary, checks, _digests = _pushed_twins(registry, tmp_path, small_images["a"], arm64_signable)
    api = RegistryAPI(registry.host)
    doc = json.loads(api.manifest(repo, "v1").body)
    doc["annotations"] = {"org.example.note": "not from build.py push"}
    digest = _put_index(api, repo, "other", json.dumps(doc).encode())
    _point_summary_at(summary, registry.host, repo, "other", digest)
    res = _release(registry, summary, checks, tmp_path)
    assert res.rc == 1, res.err
    assert "is not the index this tool assembles from its checked entries" in res.err, res.err
    assert api.manifest(repo, "r1") is None


@pytest.mark.docker
def test_an_entry_whose_lock_names_another_platform_is_refused(
    registry, small_images, docker_client, tmp_path
):
    arm = _arm64(docker_client, "gate-arm-mislabelled", platform="linux/amd64")
    try:
        repo, summary, checks, _digests = _pushed_twins(registry, tmp_path, small_images["a"], arm)
        res = _release(registry, summary, checks, tmp_path)
        assert res.rc == 1, res.err
        assert (
            "its linux/arm64 entry (twin-arm64) is a linux/arm64 image, but its lock says linux/amd64"
            in res.err
        )
        assert RegistryAPI(registry.host).manifest(repo, "r1") is None
    finally:
        docker_client.images.remove(arm.id, force=True)


def test_a_lock_without_the_cpu_variant_names_the_configs_platform():
    from imagebuild.release.index import same_platform

    assert same_platform("linux/arm64", "linux/arm64/v8") and same_platform("linux/amd64", "linux/amd64")
    assert not same_platform("linux/amd64", "linux/arm64") and not same_platform("linux/arm", "linux/arm64")
    assert not same_platform("linux/arm64/v8", "linux/arm64/v9")
