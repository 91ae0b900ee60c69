"""Release records kept in the registry beside the images (issue 42 item 2), against the real registry the
tests start (tests/services.py `Registry`: distribution 2.8, no referrers API).

The store (imagebuild/release/registryrecords.py) writes each record as an artifact under a tag of its own
(`_efa.record.*`) and reads them back by listing the tags (paginated) and by digest; `release` uses it by
default, so a release on a runner with nothing local sees every earlier record and moves the channel. What a
registry serves under those tags is read bounded and typed: anything else is exit 2 naming what was read.
"""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from cli import build_py
from services import summary_entry, write_check_report, write_summary

from imagebuild.adapters import oci_artifacts as oci
from imagebuild.adapters.registry import RegistryAPI, RemoteManifest, check_tag, sha256_of
from imagebuild.errors import UserError
from imagebuild.release import registryrecords as rr

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images

DIGEST = "sha256:" + "ab" * 32


def _registries():
    return SimpleNamespace(api=lambda host: RegistryAPI(host))


def _record(host_repo: str, variant: str, when: str, record_id: str, digest: str = DIGEST) -> dict:
    return {
        "schema": "efa-image-build/release-record/v1",
        "variant": variant,
        "released_at": when,
        "digest": digest,
        "image_id": "sha256:" + "cd" * 32,
        "record_id": record_id,
        "repositories": [{"repository": host_repo, "tags": [f"{variant}-{record_id}"]}],
        "channels": [],
    }


def _tags(registry, repo: str) -> list:
    from imagebuild.adapters.registry_tags import list_tags

    return list_tags(RegistryAPI(registry.host), repo)


def test_records_written_by_one_store_are_what_a_fresh_store_reads(registry):
    repo = f"rec-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    first = rr.RegistryRecordStore(_registries(), [host_repo])
    assert first.all_records() == [] and first.latest("v1") is None and first.pending("v1") is None
    older = _record(host_repo, "v1", "2026-01-01T00:00:00+00:00", "0" * 12)
    newer = _record(host_repo, "v1", "2026-02-01T00:00:00+00:00", "1" * 12)
    other = _record(host_repo, "v2", "2026-03-01T00:00:00+00:00", "2" * 12)
    for rec in (newer, older, other):
        (where,) = first.write(rec, f"# notes of {rec['record_id']}\n")
        assert where == f"{host_repo}:{rr.record_tag(rec)}"
    tags = _tags(registry, repo)
    assert sorted(tags) == sorted(rr.record_tag(r) for r in (older, newer, other))
    assert all(t.startswith("_efa.record.2026") for t in tags)

    fresh = rr.RegistryRecordStore(_registries(), [host_repo])  # another runner: nothing local
    assert sorted(r["record_id"] for r in fresh.all_records()) == ["0" * 12, "1" * 12, "2" * 12]
    assert fresh.latest("v1") == newer and fresh.latest("v2") == other and fresh.latest("v3") is None
    # the artifact: an OCI manifest of the record type, the record and its notes as layers, by digest
    api = RegistryAPI(registry.host)
    manifest = api.manifest(repo, rr.record_tag(newer))
    doc = json.loads(manifest.body)
    assert doc["artifactType"] == rr.RECORD_TYPE and doc["config"]["mediaType"] == oci.EMPTY_CONFIG
    record_layer, notes_layer = doc["layers"]
    assert json.loads(api.blob(repo, record_layer["digest"])) == newer
    assert api.blob(repo, notes_layer["digest"]) == b"# notes of " + b"1" * 12 + b"\n"


@pytest.mark.parametrize("ids", [("0" * 12, "f" * 12), ("f" * 12, "0" * 12)])
def test_of_two_records_in_one_second_the_latest_is_the_one_that_follows_the_other(ids):
    """`released_at` has seconds: a release right after another (the same second) is still the latest, by
    its `previous`, whatever the random record ids say."""
    first = _record("h/r", "v1", "2026-01-01T00:00:00+00:00", ids[0], digest="sha256:" + "1" * 64)
    second = _record("h/r", "v1", "2026-01-01T00:00:00+00:00", ids[1], digest="sha256:" + "2" * 64)
    second["previous"] = {"digest": first["digest"], "released_at": first["released_at"]}
    assert rr.newest_record([first, second], "v1") == second
    assert rr.newest_record([second, first], "v1") == second
    older = _record("h/r", "v1", "2025-12-31T23:59:59+00:00", "9" * 12)
    assert rr.newest_record([older, first], "v1") == first and rr.newest_record([older], "v2") is None


def test_tags_are_listed_page_by_page(registry, monkeypatch):
    """The registry answers `n` tags a page with a `Link: rel="next"`: every record is read, not one page."""
    from imagebuild.adapters import registry_tags

    repo = f"rec-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    store = rr.RegistryRecordStore(_registries(), [host_repo])
    for i in range(5):
        store.write(_record(host_repo, "v1", f"2026-01-0{i + 1}T00:00:00+00:00", f"{i:012d}"), "")
    monkeypatch.setattr(registry_tags, "PAGE", 2)
    fresh = rr.RegistryRecordStore(_registries(), [host_repo])
    assert len(fresh.all_records()) == 5 and fresh.latest("v1")["record_id"] == f"{4:012d}"


def test_an_intent_is_pending_until_a_record_as_new_closes_it(registry):
    repo = f"rec-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    store = rr.RegistryRecordStore(_registries(), [host_repo])
    intent = {
        "schema": "efa-image-build/release-intent/v1", "variant": "v1", "digest": DIGEST,
        "started_at": "2026-01-05T00:00:00+00:00",
        "writes": [{"repository": host_repo, "tag": "dev", "digest": DIGEST, "role": "channel",
                    "from": None}],
    }  # fmt: skip
    store.write_pending("v1", intent)
    assert [t for t in _tags(registry, repo) if t.startswith("_efa.intent.20260105T000000Z.")]
    assert rr.RegistryRecordStore(_registries(), [host_repo]).pending("v1") == intent  # a rerun sees it
    assert rr.RegistryRecordStore(_registries(), [host_repo]).pending("v2") is None
    store.write(_record(host_repo, "v1", "2026-01-05T00:00:00+00:00", "9" * 12), "")
    store.clear_pending("v1")
    assert rr.RegistryRecordStore(_registries(), [host_repo]).pending("v1") is None


def _push_artifact(registry, repo: str, tag: str, manifest: dict, blobs: list) -> None:
    api = RegistryAPI(registry.host)
    for blob in blobs:
        oci.upload_blob(api, repo, blob)
    body = json.dumps(manifest).encode()
    api.put_manifest(repo, tag, RemoteManifest(sha256_of(body), oci.OCI_MANIFEST, body, None))


def _manifest(kind: str, payload: bytes, size=None) -> dict:
    return {
        "schemaVersion": 2,
        "mediaType": oci.OCI_MANIFEST,
        "artifactType": kind,
        "config": {"mediaType": oci.EMPTY_CONFIG, "digest": sha256_of(oci.EMPTY_BODY), "size": 2},
        "layers": [
            {"mediaType": kind, "digest": sha256_of(payload), "size": len(payload) if size is None else size}
        ],
    }


@pytest.mark.parametrize(
    "case,words",
    [
        (
            "other type",
            "not a release record this tool wrote (artifactType 'application/vnd.cyclonedx+json')",
        ),
        ("not json", "not JSON"),
        ("wrong field type", "repositories"),
        ("huge", "is not 0 to"),
    ],
)
def test_what_is_not_a_record_under_a_record_tag_is_exit_2_naming_it(registry, tmp_path, case, words):
    repo = f"rec-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    payload = {"not json": b"{nope", "wrong field type": b'{"variant": "v1", "repositories": 5}'}.get(
        case, b'{"variant": "v1"}'
    )
    kind = "application/vnd.cyclonedx+json" if case == "other type" else rr.RECORD_TYPE
    manifest = _manifest(kind, payload, size=2**40 if case == "huge" else None)
    tag = "_efa.record.20260101T000000Z.hostile"
    _push_artifact(registry, repo, tag, manifest, [oci.EMPTY_BODY, payload])
    with pytest.raises(UserError) as err:
        rr.RegistryRecordStore(_registries(), [host_repo]).all_records()
    assert words in str(err.value.message) + str(err.value), err.value
    assert f"{host_repo}:{tag}" in str(err.value.file)
    # the release that reads it: exit 2 naming it, before any gate or write, no traceback
    image = SimpleNamespace(id="sha256:" + "cd" * 32)
    entry = summary_entry("v1", image, tags=[f"{repo}:x"])
    entry.update(digest=DIGEST, pushed=[f"{host_repo}:x@{DIGEST}"])
    summary = write_summary(tmp_path / "summary.json", [entry])
    checks = write_check_report(tmp_path / "checks.json", [("v1", image.id, True)])
    res = build_py(
        "release", "--summary", summary, "--checks", checks, "--registry", registry.host, "--tag", "r1"
    )
    assert res.rc == 2 and "Traceback" not in res.err and f"{host_repo}:{tag}" in res.err, res.err
    assert [t for t in _tags(registry, repo) if not t.startswith("_efa.")] == []  # nothing written


def test_the_tools_own_tags_are_no_release_tag_channel_or_pushed_tag():
    for tag in ("_efa.record.x", "_efa.intent.y", "_efa."):
        with pytest.raises(UserError, match="tool's release records"):
            check_tag(tag, key="--tag")
        assert check_tag(tag, own=True) == tag
    assert check_tag("_efa-record", key="--tag") == "_efa-record"  # only the exact prefix is the tool's
    assert rr.record_tag(_record("h/r", "v", "2026-12-06T07:07:41+00:00", "a" * 12)) == (
        f"_efa.record.20261206T070741Z.{'ab' * 6}.{'a' * 12}"
    )


# -- release on a fresh runner -----------------------------------------------------------------------------
def _summary(tmp_path, name, image, repo):
    entry = summary_entry("chan", image, tags=[f"{repo}:content-{name}", f"{repo}:dev"])
    entry["channels"] = ["dev"]
    return write_summary(tmp_path / f"summary-{name}.json", [entry])


@pytest.mark.docker
def test_a_release_on_a_fresh_runner_reads_the_registry_records_and_moves_the_channel(
    registry, small_images, tmp_path, monkeypatch
):
    """Two releases, each from its own empty folder (two runners, nothing local, no --records): the second
    finds the first's record in the registry, so the channel it made is known and moves, with its history.
    prune then reads the same records from the registry and never takes a record tag for an image."""
    repo = f"rec-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    api = RegistryAPI(registry.host)
    image_a, image_b = small_images["a"], small_images["b"]

    def release(runner, summary, image, *extra):
        runner.mkdir(exist_ok=True)
        monkeypatch.chdir(runner)
        checks = write_check_report(runner / "checks.json", [("chan", image.id, True)])
        return build_py(
            "release", "--summary", summary, "--checks", checks, "--registry", registry.host, *extra
        )

    sum_a, sum_b = _summary(tmp_path, "a", image_a, repo), _summary(tmp_path, "b", image_b, repo)
    for summary in (sum_a, sum_b):
        assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    digest_a = json.loads(sum_a.read_text())["variants"][0]["digest"]
    digest_b = json.loads(sum_b.read_text())["variants"][0]["digest"]

    res = release(tmp_path / "runner-1", sum_a, image_a, "--tag", "r1")
    assert res.rc == 0, res.err
    assert api.manifest(repo, "dev").digest == digest_a
    assert not (tmp_path / "runner-1" / "build").exists()  # nothing local: the record is in the registry
    res = release(tmp_path / "runner-2", sum_b, image_b, "--tag", "r2", "--dry-run")
    assert res.rc == 0, res.err
    assert f"would move channel {host_repo}:dev from {digest_a} to {digest_b}" in res.out
    assert f"would record chan {digest_b} in the registry, beside the images ({host_repo})" in res.out
    res = release(tmp_path / "runner-3", sum_b, image_b, "--tag", "r2")
    assert res.rc == 0, res.err
    assert api.manifest(repo, "dev").digest == digest_b and api.manifest(repo, "r1").digest == digest_a

    store = rr.RegistryRecordStore(_registries(), [host_repo])
    latest = store.latest("chan")
    assert latest["digest"] == digest_b and latest["previous"]["digest"] == digest_a
    (dev,) = latest["channels"]
    assert [h["digest"] for h in dev["history"]] == [digest_a, digest_b] and dev["history"][-1][
        "from"
    ] == digest_a
    assert store.pending("chan") is None  # each release's record closed its intent

    # a release tag in the tool's namespace is refused before anything is written
    res = release(tmp_path / "runner-4", sum_a, image_a, "--tag", "_efa.record.x")
    assert res.rc == 2 and "tool's release records" in res.err and "Traceback" not in res.err, res.err

    # prune reads the registry's records from the repositories the summary pushed to, and never looks at a
    # record or intent tag as an image; without the registry (--engine-only) it cannot, and says so
    res = build_py(
        "prune", "--summary", sum_b, "--older-than", "0s", "--dry-run", "--registry", registry.host
    )
    assert res.rc == 0, res.err
    assert f"registry {host_repo}: 5 tag(s)" in res.err, res.err  # content-a, content-b, r1, r2, dev
    assert "_efa." not in res.out, res.out
    res = build_py("prune", "--summary", sum_b, "--older-than", "0s", "--dry-run", "--engine-only")
    assert res.rc == 2 and "the release records are in the registry" in res.err, res.err


def test_a_matrix_tag_in_the_tools_namespace_is_exit_2_naming_file_line_key(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "variants:\n"
        "  - name: v1\n"
        "    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}\n"
        '    cuda: "12.8"\n'
        '    tags: ["team/app:_efa.record.{content_hash}"]\n'
        "    components:\n"
        '      nccl: {version: "2.27.7", method: wheel}\n'
    )
    res = build_py("list", "--matrix", str(path), "--json")
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert f"{path}:5: key 'tags[0]'" in res.err and "tool's release records" in res.err, res.err
