"""Channels beside release tags (issue 25, item 1), against the real registry the tests start.

A channel (`dev`) is declared in the matrix (`channels:`, carried by the lock and the build summary) or given
to `build.py release --channel`; push never writes it, each promotion moves it, the release record carries its
history; a release tag never takes a second digest.
"""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from cli import build_py
from services import summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import RegistryAPI

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images

MATRIX = """\
variants:
  - name: v1
    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
    cuda: "12.8"
    tags: ["team/app:dev"]
    channels: CHANNELS
    components:
      nccl: {version: "2.27.7", method: wheel}
"""


def test_matrix_channels_ride_in_the_lock(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.replace("CHANNELS", "[dev, staging, dev]"))
    res = build_py("list", "--matrix", str(path), "--json")
    assert res.rc == 0, res.err
    (lock,) = json.loads(res.out)
    assert lock["channels"] == ["dev", "staging"] and lock["tags"] == ["team/app:dev"]


@pytest.mark.parametrize(
    "value,key,words",
    [
        ('["team/app:dev"]', "channels[0]", "not a valid channel: a tag name"),
        ('[dev, "dev staging"]', "channels[1]", "not a valid channel: a tag name"),
        ('[".dev"]', "channels[0]", "not a valid channel: a tag name"),
        ("dev", "channels", "expected a list"),
    ],
)
def test_a_bad_channel_is_exit_2_naming_file_line_key(tmp_path, value, key, words):
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.replace("CHANNELS", value))
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 2 and "Traceback" not in res.err
    assert f"error: {path}:6: key 'variants[0].{key}': " in res.err and words in res.err, res.err
    assert not (tmp_path / "out").exists()


def test_a_tag_names_a_channel_by_its_tag_alone_the_registry_port_is_no_tag():
    from imagebuild.release.channels import names_channel

    assert names_channel("localhost:5000/team/app:dev", ["dev"])
    assert not names_channel("localhost:5000/team/dev", ["dev"])  # a repository named dev, tag latest
    assert names_channel("team/app", ["latest"]) and not names_channel("team/app:v1", ["dev", "latest"])


def _summary(tmp_path, name, image, repo, content):
    """A build summary as `build.py build` writes it for a matrix with `tags: [REPO:dev]`, `channels: [dev]`:
    the content tag first, then the matrix's tags, and the lock's channels."""
    entry = summary_entry("chan", image, tags=[f"{repo}:{content}", f"{repo}:dev"])
    entry["channels"] = ["dev"]
    return write_summary(tmp_path / f"summary-{name}.json", [entry])


@pytest.mark.docker
def test_dev_moves_on_each_promotion_and_a_release_tag_refuses_a_second_digest(
    registry, small_images, tmp_path
):
    repo = f"chan-{uuid.uuid4().hex[:10]}/app"
    api = RegistryAPI(registry.host)
    image_a, image_b = small_images["a"], small_images["b"]
    records = tmp_path / "rec"

    def push(summary):
        return build_py("push", "--summary", str(summary), "--registry", registry.host)

    def release(summary, image, *extra):
        checks = write_check_report(tmp_path / f"checks-{image.id[7:19]}.json", [("chan", image.id, True)])
        argv = ["release", "--summary", str(summary), "--checks", str(checks), "--records", str(records)]
        return build_py(*argv, "--registry", registry.host, *extra)

    # push writes the content tag, twice without complaint, and never the channel
    sum_a = _summary(tmp_path, "a", image_a, repo, "content-a")
    assert push(sum_a).rc == 0
    res = push(sum_a)
    assert res.rc == 0, res.err
    digest_a = json.loads(sum_a.read_text())["variants"][0]["digest"]
    assert api.manifest(repo, "content-a").digest == digest_a
    assert api.manifest(repo, "dev") is None and "a channel of chan" in res.err

    # first promotion: the release tag and the matrix's channel name A
    res = release(sum_a, image_a, "--tag", "r1")
    assert res.rc == 0, res.err
    assert api.manifest(repo, "r1").digest == digest_a and api.manifest(repo, "dev").digest == digest_a

    # B is pushed: dev does not move by a push
    sum_b = _summary(tmp_path, "b", image_b, repo, "content-b")
    assert push(sum_b).rc == 0
    digest_b = json.loads(sum_b.read_text())["variants"][0]["digest"]
    assert digest_b != digest_a and api.manifest(repo, "dev").digest == digest_a

    # the release tag refuses B; nothing moves, dev included
    res = release(sum_b, image_b, "--tag", "r1")
    assert res.rc == 1 and "never overwritten" in res.err, res.err
    assert api.manifest(repo, "r1").digest == digest_a and api.manifest(repo, "dev").digest == digest_a

    # a dry run says which channels would move, and moves none
    res = release(sum_b, image_b, "--channel", "staging", "--dry-run")
    assert res.rc == 0, res.err
    host_repo = f"{registry.host}/{repo}"
    assert res.out.splitlines() == [
        f"would move channel {host_repo}:dev from {digest_a} to {digest_b}",
        f"would move channel {host_repo}:staging from (nothing) to {digest_b}",
        f"would record chan {digest_b} in {records}",
    ]
    assert api.manifest(repo, "dev").digest == digest_a and api.manifest(repo, "staging") is None

    # second promotion (channels only, one more from the command line): dev moves to B, r1 stays on A
    res = release(sum_b, image_b, "--channel", "staging")
    assert res.rc == 0, res.err
    assert api.manifest(repo, "dev").digest == digest_b and api.manifest(repo, "staging").digest == digest_b
    assert api.manifest(repo, "r1").digest == digest_a
    record = json.loads((records / "chan" / "latest.json").read_text())
    dev = next(c for c in record["channels"] if c["tag"] == "dev")
    assert dev["repository"] == host_repo and dev["digest"] == digest_b
    assert [(h["from"], h["digest"]) for h in dev["history"]] == [(None, digest_a), (digest_a, digest_b)]
    notes = next(p for p in (records / "chan").glob("*.md") if digest_b[7:19] in p.name).read_text()
    assert f"channel `{host_repo}:dev`: moved from `{digest_a}` to `{digest_b}`" in notes

    # and back to A by promotion
    res = release(sum_a, image_a, "--channel", "staging")
    assert res.rc == 0, res.err
    assert api.manifest(repo, "dev").digest == digest_a and api.manifest(repo, "staging").digest == digest_a
    dev = next(
        c for c in json.loads((records / "chan" / "latest.json").read_text())["channels"] if c["tag"] == "dev"
    )
    assert [h["digest"] for h in dev["history"]] == [digest_a, digest_b, digest_a]

    # a channel moved outside a release (here by hand, to B) is refused, and so is a release tag as channel
    api.put_manifest(repo, "dev", api.manifest(repo, digest_b))
    res = release(sum_a, image_a)
    assert res.rc == 1 and "moved outside a release" in res.err, res.err
    assert api.manifest(repo, "dev").digest == digest_b
    res = release(sum_a, image_a, "--channel", "r1")
    assert res.rc == 1 and "no release record knows it as a channel" in res.err, res.err
    assert api.manifest(repo, "r1").digest == digest_a

    # one name in both roles is bad input
    res = release(sum_a, image_a, "--tag", "dev")
    assert res.rc == 2 and "both a release tag and a channel" in res.err, res.err


def test_a_release_with_no_tag_and_no_channel_is_exit_2(tmp_path):
    image = SimpleNamespace(id="sha256:" + "0" * 64)
    summary = write_summary(tmp_path / "s.json", [summary_entry("chan", image, tags=["team/app:c1"])])
    checks = write_check_report(tmp_path / "c.json", [("chan", image.id, True)])
    res = build_py("release", "--summary", str(summary), "--checks", str(checks), "--registry", "127.0.0.1:9")
    assert res.rc == 2 and "no release tag and no channel" in res.err, res.err


@pytest.mark.docker
def test_a_real_build_carries_the_locks_channels_to_push_which_leaves_them_alone(
    registry, docker_client, local_base, tmp_path
):
    """build.py build of a rendered variant whose lock has `channels: [dev]` and `tags: [REPO:dev]`: the
    summary says so, and push writes the content tag but not `:dev`."""
    repo = f"chan-{uuid.uuid4().hex[:10]}/built"
    vdir = tmp_path / "out" / "chanvar"
    (vdir / "context").mkdir(parents=True)
    (vdir / "Dockerfile").write_text(f"FROM {local_base}\nRUN echo {repo} > /built-for\n")
    lock = {"schema": "efa-image-build/lock/v1", "name": "chanvar", "components": {}, "labels": {},
            "tags": [f"{repo}:dev"], "channels": ["dev"]}  # fmt: skip
    (vdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    out = tmp_path / "out"
    argv = ["build", "--builder", "classic", "--no-render", "--out", str(out), "--plain"]
    res = build_py(*argv, "--cache", str(tmp_path / "cache"))
    try:
        assert res.rc == 0, res.err
        entry = json.loads((out / "summary.json").read_text())["variants"][0]
        assert entry["channels"] == ["dev"] and entry["tags"][1] == f"{repo}:dev"
        content = entry["tags"][0].split(":", 1)[1]
        res = build_py("push", "--summary", str(out / "summary.json"), "--registry", registry.host)
        assert res.rc == 0, res.err
        api = RegistryAPI(registry.host)
        assert api.manifest(repo, content).config_digest == entry["image_id"]
        assert api.manifest(repo, "dev") is None
    finally:
        for image in docker_client.images.list(name=repo):
            docker_client.images.remove(image.id, force=True)


SHARED = """\
variants:
  - name: "v{n}"
    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
    cuda: "12.8"
    axes: {n: {"1": {}, "2": {}}}
    tags: ["team/app:{name}-{content_hash}", "team/app:dev-{name}"]
    channels: ["dev-{name}", "nightly-{n}"]
    components:
      nccl: {version: "2.27.7", method: wheel}
"""


def test_a_channel_carries_the_variant_name_so_variants_can_share_a_repository(tmp_path):
    """Issue 42 item 3: `{name}` and the axis keys in `channels:` are filled per variant; a tag naming the
    filled channel is that channel (not a write-once tag)."""
    path = tmp_path / "m.yaml"
    path.write_text(SHARED)
    res = build_py("list", "--matrix", str(path), "--json")
    assert res.rc == 0, res.err
    locks = {lock["name"]: lock for lock in json.loads(res.out)}
    assert locks["v1"]["channels"] == ["dev-v1", "nightly-1"]
    assert locks["v2"]["channels"] == ["dev-v2", "nightly-2"]
    assert "team/app:dev-v2" in locks["v2"]["tags"]
    path.write_text(SHARED.replace("nightly-{n}", "nightly-{cuda}"))
    res = build_py("list", "--matrix", str(path))
    assert res.rc == 2 and "m.yaml:7: key 'channels[1]'" in res.err and "'{cuda}' is not an axis" in res.err


@pytest.mark.docker
def test_two_variants_in_one_repository_release_together_with_channels_of_their_own(
    registry, small_images, tmp_path
):
    """Issue 42 item 3: two variants whose tags share one repository take a channel each in one release
    (`dev-{name}` from the matrix, `--channel stage-{variant}` given) and release tags `{variant}-r1`. One
    `dev` for both is one tag written two ways: refused, with the hint that names the pattern."""
    repo = f"chan-{uuid.uuid4().hex[:10]}/app"
    api = RegistryAPI(registry.host)
    entries = []
    for name, key in (("va", "a"), ("vb", "b")):
        entry = summary_entry(name, small_images[key], tags=[f"{repo}:{name}-content"])
        entry["channels"] = [f"dev-{name}"]  # what `channels: [dev-{name}]` gives each variant's lock
        entries.append(entry)
    summary = write_summary(tmp_path / "summary.json", entries)
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    digests = {e["variant"]: e["digest"] for e in json.loads(summary.read_text())["variants"]}
    checks = write_check_report(
        tmp_path / "checks.json", [("va", small_images["a"].id, True), ("vb", small_images["b"].id, True)]
    )
    argv = ["release", "--summary", str(summary), "--checks", str(checks), "--records", str(tmp_path / "rec"),
            "--registry", registry.host]  # fmt: skip

    res = build_py(*argv, "--channel", "dev")
    assert res.rc == 1 and "writes one tag two ways" in res.err and "dev-{variant}" in res.err, res.err
    assert api.manifest(repo, "dev") is None

    res = build_py(*argv, "--tag", "{variant}-r1", "--channel", "stage-{variant}")
    assert res.rc == 0, res.err
    for name in ("va", "vb"):
        for tag in (f"{name}-r1", f"dev-{name}", f"stage-{name}"):
            assert api.manifest(repo, tag).digest == digests[name], tag


@pytest.mark.docker
def test_a_channel_no_record_knows_is_adopted_after_its_digest_is_checked(registry, small_images, tmp_path):
    """Issue 42 item 2: a release on a runner whose records folder is empty (the records are on another
    machine) finds the channel in the registry and no record of it. The refusal says how to adopt it, not to
    delete it; --adopt-channel with another digest is refused; with the digest it names, the channel moves and
    the new record knows it, so the next release on this runner needs no adoption."""
    repo = f"chan-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    api = RegistryAPI(registry.host)
    image_a, image_b = small_images["a"], small_images["b"]

    def release(summary, image, records, *extra):
        checks = write_check_report(tmp_path / f"checks-{image.id[7:19]}.json", [("chan", image.id, True)])
        argv = ["release", "--summary", str(summary), "--checks", str(checks), "--records", str(records)]
        return build_py(*argv, "--registry", registry.host, *extra)

    sum_a, sum_b = (
        _summary(tmp_path, n, img, repo, f"content-{n}") for n, img in (("a", image_a), ("b", image_b))
    )
    for summary in (sum_a, sum_b):
        assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    digest_a = json.loads(sum_a.read_text())["variants"][0]["digest"]
    digest_b = json.loads(sum_b.read_text())["variants"][0]["digest"]
    assert release(sum_a, image_a, tmp_path / "first-runner").rc == 0
    assert api.manifest(repo, "dev").digest == digest_a

    fresh = tmp_path / "fresh-runner"  # nothing local: the first runner's records are not here
    res = release(sum_b, image_b, fresh)
    assert res.rc == 1 and f"--adopt-channel dev@{digest_a}" in res.err, res.err
    assert "delete that tag" not in res.err
    res = release(sum_b, image_b, fresh, "--adopt-channel", f"dev@{digest_b}")
    assert res.rc == 1 and f"names {digest_a}, not {digest_b} as --adopt-channel says" in res.err, res.err
    assert api.manifest(repo, "dev").digest == digest_a
    res = release(sum_b, image_b, fresh, "--adopt-channel", f"dev@{digest_a}")
    assert res.rc == 0, res.err
    assert api.manifest(repo, "dev").digest == digest_b
    (dev,) = json.loads((fresh / "chan" / "latest.json").read_text())["channels"]
    assert dev["repository"] == host_repo and dev["history"][-1] == {**dev["history"][-1], "from": digest_a}
    assert release(sum_a, image_a, fresh).rc == 0  # recorded now: it moves back with no adoption
    assert api.manifest(repo, "dev").digest == digest_a
    res = build_py(
        "release", "--summary", str(sum_a), "--adopt-channel", "dev@sha256:zz", "--records", str(fresh)
    )
    assert res.rc == 2 and "not CHANNEL@sha256:<64 hex>" in res.err, res.err
