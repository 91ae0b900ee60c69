"""`build.py prune` fails closed and cleans up after itself (issue 31, item 6): a records folder that does not
exist or is not a folder is exit 2 before anything is removed (a typo must not read as "nothing was ever
released"); the `sha256-<hex>.sbom`/`.att` tags of a deleted manifest go with it, those of a kept one stay.
Against the real engine and the registry the tests start."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from cli import build_py
from release_setup import content_image, prune_argv, push_content_images, release, remove_images, signing
from services import write_check_report, write_summary

from imagebuild.adapters.oci_artifacts import fallback_tag
from imagebuild.adapters.registry import RegistryAPI
from imagebuild.errors import UserError
from imagebuild.release import names, prune

pytest_plugins = ["services_fixtures"]  # fixtures: registry, local_base


def test_the_records_folder_must_exist_and_be_a_folder(tmp_path):
    with pytest.raises(UserError, match="does not exist") as err:
        names.read_local_records(tmp_path / "typo", must_exist=True)
    assert err.value.file == str(tmp_path / "typo") and err.value.key == "--records"
    (tmp_path / "file").write_text("{}")
    with pytest.raises(UserError, match="is not a folder"):
        names.read_local_records(tmp_path / "file", must_exist=True)
    assert names.read_local_records(tmp_path / "typo", must_exist=False) == []  # a first release
    (tmp_path / "rec" / "v").mkdir(parents=True)
    (tmp_path / "rec" / "v" / "a.json").write_text('{"variant": "v"}')
    (tmp_path / "rec" / "v" / "a.md").write_text("# notes")
    assert names.read_local_records(tmp_path / "rec", must_exist=True) == [{"variant": "v"}]


def test_only_the_attestation_tags_of_a_deleted_manifest_are_candidates():
    now = datetime(2026, 12, 5, tzinfo=timezone.utc)
    old = now - timedelta(days=10)
    gone, kept = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    repo = "h:5000/r"
    tags = [
        prune.RemoteTag(repo, f"v-{'a' * 12}", gone, "sha256:i1", "a" * 64, old),
        prune.RemoteTag(repo, f"w-{'b' * 12}", kept, "sha256:i2", "b" * 64, old),
        prune.RemoteTag(repo, fallback_tag(gone, "sbom"), "sha256:s1", None, None, None, gone),
        prune.RemoteTag(repo, fallback_tag(gone, "att"), "sha256:a1", None, None, None, gone),
        prune.RemoteTag(repo, fallback_tag(kept, "sbom"), "sha256:s2", None, None, None, kept),
        # a tag that only looks like one is no attestation tag
        prune.RemoteTag("h:5000/r", fallback_tag(gone, "sbom") + "x", "sha256:s3", None, None, None, gone),
    ]
    named = prune.Named(image_ids={"sha256:i2"}, repositories={repo})
    found = prune.registry_candidates(tags, named, now - timedelta(days=7))
    assert [(c.ref, c.subject) for c in found] == [
        (f"{repo}:v-{'a' * 12}", None),
        (f"{repo}:{fallback_tag(gone, 'att')}", gone),
        (f"{repo}:{fallback_tag(gone, 'sbom')}", gone),
    ]
    assert {c.created for c in found} == {old}  # an artifact is as old as its image
    # an attestation tag whose artifact names another subject than its name says stays
    other = [prune.RemoteTag(repo, fallback_tag(gone, "sbom"), "sha256:s1", None, None, None, kept), tags[0]]
    assert [c.ref for c in prune.registry_candidates(other, named, now)] == [f"{repo}:v-{'a' * 12}"]


@pytest.mark.docker
def test_prune_with_a_records_folder_that_is_not_there_is_exit_2_and_removes_nothing(
    registry, docker_client, local_base, tmp_path
):
    repo = f"prune-rec-{uuid.uuid4().hex[:10]}/app"
    made = [content_image(docker_client, local_base, repo, n) for n in range(2)]
    try:
        entries = push_content_images(registry.host, tmp_path / "pushed.json", "q", made, [repo] * 2)
        # #1 is released (its record is all that names its image: the latest build is #0)
        one = write_summary(tmp_path / "one.json", [entries[1]])
        checks = write_check_report(tmp_path / "checks.json", [("q1", made[1][0].id, True)])
        records = tmp_path / "rec"
        res = release(registry.host, one, checks, records, "--tag", "r1")
        assert res.rc == 0, res.err
        latest = write_summary(tmp_path / "summary.json", [entries[0]])
        (tmp_path / "afile").write_text("")
        for wrong, why in ((tmp_path / "recs", "does not exist"), (tmp_path / "afile", "is not a folder")):
            res = build_py(*prune_argv(registry.host, latest, wrong), "--older-than", "0s")
            assert res.rc == 2 and why in res.err and str(wrong) in res.err, res.err
            assert "Traceback" not in res.err and res.out == ""
        # nothing removed: the released image keeps its content tags, local and in the registry
        assert set(docker_client.images.get(made[1][0].id).tags) >= {f"{repo}:{made[1][1]}"}
        assert RegistryAPI(registry.host).manifest(repo, made[1][1]).digest == entries[1]["digest"]
        # the right folder: the released image stays, as it must
        res = build_py(*prune_argv(registry.host, latest, records), "--older-than", "0s", "--dry-run")
        assert res.rc == 0 and made[1][1] not in res.out, res.out
        assert f"{repo}:{made[1][1]}" in docker_client.images.get(made[1][0].id).tags
    finally:
        remove_images(docker_client, [image for image, _tag in made])


@pytest.mark.docker
def test_prune_removes_the_attestation_tags_of_what_it_deletes_and_keeps_the_others(
    registry, docker_client, local_base, tmp_path
):
    repo = f"prune-att-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    api = RegistryAPI(registry.host)
    made = [content_image(docker_client, local_base, repo, n) for n in range(2)]
    try:
        pushed = tmp_path / "pushed.json"
        push_content_images(registry.host, pushed, "t", made, [repo] * 2)
        key, pub, matrix = signing(tmp_path)
        attest = ["attest", "--summary", str(pushed), "--registry", registry.host, "--sign-key", key]
        assert build_py(*attest, "--matrix", matrix).rc == 0
        entries = json.loads(pushed.read_text())["variants"]
        kept, gone = entries[0]["digest"], entries[1]["digest"]
        att = {d: [fallback_tag(d, k) for k in ("att", "sbom")] for d in (kept, gone)}
        assert all(api.manifest(repo, t) is not None for d in (kept, gone) for t in att[d])
        (tmp_path / "rec").mkdir()
        latest = write_summary(tmp_path / "summary.json", [entries[0]])  # #0 is the latest build
        argv = [*prune_argv(registry.host, latest, tmp_path / "rec"), "--older-than", "0s"]

        res = build_py(*argv, "--dry-run")
        assert res.rc == 0, res.err
        listed = [line.split("\t")[:3] for line in res.out.splitlines() if "\tregistry\t" in line]
        assert listed == [
            ["would remove", "registry", f"{host_repo}:{made[1][1]}"],
            *(["would remove", "registry", f"{host_repo}:{t}"] for t in att[gone]),
        ], res.out

        res = build_py(*argv)
        assert res.rc == 0, res.err
        assert api.manifest(repo, made[1][1]) is None and api.manifest(repo, gone) is None
        assert [api.manifest(repo, t) for t in att[gone]] == [None, None]
        assert all(api.manifest(repo, t) is not None for t in att[kept])
        res = build_py("verify", f"{host_repo}:{made[0][1]}", "--key", pub)
        assert res.rc == 0, res.err
    finally:
        remove_images(docker_client, [image for image, _tag in made])
