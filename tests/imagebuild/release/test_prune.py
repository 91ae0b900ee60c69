"""`build.py prune` (issue 25, item 6): the tool's own content tags that nothing names, in the local engine
and the real registry the tests start; never a release tag, a channel or the latest build.

The engine is shared: the images here are made in a repository of their own (a uuid), and prune only looks
at repositories the given summary and records name.
"""

from __future__ import annotations

import json
import secrets
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from cli import build_py
from release_setup import arm64_locked, content_image, prune_argv, push_content_images, release, remove_images
from services import summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.release import prune
from imagebuild.variant import HASH_LABEL

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images


@pytest.mark.docker
def test_prune_dry_run_lists_exactly_the_unreferenced_content_tags(
    registry, docker_client, local_base, tmp_path
):
    repo = f"prune-{uuid.uuid4().hex[:10]}/app"
    host_repo = f"{registry.host}/{repo}"
    api = RegistryAPI(registry.host)
    made = [content_image(docker_client, local_base, repo, n) for n in range(5)]
    try:
        # every image pushed by its content tag; then #1 is the latest build, #2 released, #3 on channel dev
        entries = push_content_images(registry.host, tmp_path / "pushed.json", "p", made, [repo] * 5)
        records = tmp_path / "rec"
        for n, extra in ((1, ["--tag", "r1"]), (2, ["--channel", "dev"])):
            one = write_summary(tmp_path / f"one-{n}.json", [entries[n]])
            checks = write_check_report(tmp_path / f"checks-{n}.json", [(f"p{n}", made[n][0].id, True)])
            res = release(registry.host, one, checks, records, *extra)
            assert res.rc == 0, res.err
        latest = write_summary(tmp_path / "summary.json", [entries[0]])
        argv = prune_argv(registry.host, latest, records)

        res = build_py(*argv, "--dry-run", "--older-than", "0s")
        assert res.rc == 0, res.err
        listed = {tuple(line.split("\t")[:3]) for line in res.out.splitlines()}
        unreferenced = [made[3][1], made[4][1]]
        assert listed == {  # push leaves no registry-qualified tag in the engine (issue 42)
            *(("would remove", "local", f"{repo}:{t}") for t in unreferenced),
            *(("would remove", "registry", f"{host_repo}:{t}") for t in unreferenced),
        }, res.out
        # nothing is removed by a dry run, and nothing is old enough at 1d
        assert all(api.manifest(repo, t) is not None for _img, t in made)
        assert all(docker_client.images.get(f"{repo}:{t}") for _img, t in made)
        res = build_py(*argv, "--dry-run", "--older-than", "1d")
        assert res.rc == 0 and res.out == "", res.out

        # the real prune removes exactly those; the release tag, the channel and the latest build stay. A
        # container of #4 keeps its image's last tag: said, exit 1; the rest is removed, and a rerun finishes
        holder = docker_client.containers.create(made[4][0].id, ["true"])
        try:
            res = build_py(*argv, "--older-than", "0s")
            assert res.rc == 1 and "1 local content tag(s) could not be removed" in res.err, res.err
            left = [t for t in docker_client.images.get(made[4][0].id).tags]
            assert len(left) == 1 and left[0].endswith(made[4][1])
        finally:
            holder.remove(force=True)
        res = build_py(*argv, "--older-than", "0s")
        assert res.rc == 0, res.err
        assert [line.split("\t")[2] for line in res.out.splitlines()] == left
        assert [api.manifest(repo, t) is not None for _img, t in made] == [True, True, True, False, False]
        assert api.manifest(repo, "r1").digest == entries[1]["digest"]
        assert api.manifest(repo, "dev").digest == entries[2]["digest"]
        local = {t for img in docker_client.images.list(name=repo) for t in img.tags}
        assert local == {f"{repo}:{t}" for _img, t in made[:3]}
        assert build_py(*argv, "--dry-run", "--older-than", "0s").out == ""
    finally:
        remove_images(docker_client, [image for image, _tag in made])


@pytest.mark.docker
def test_a_repository_the_matrix_no_longer_names_is_said_and_pruned_only_when_named(
    registry, docker_client, local_base, tmp_path
):
    """Issue 42 item 4: prune looked only at the repositories the summary and records name, so a variant
    renamed into another repository left its old builds (local and pushed) for ever. prune now says each
    repository of the tool's images nothing names; `--repository` looks there by the same rules; without it
    nothing there is listed or removed (the engine may hold another project's images of this tool)."""
    old_repo = f"prune-{uuid.uuid4().hex[:10]}/old"
    new_repo = f"prune-{uuid.uuid4().hex[:10]}/new"
    host_old = f"{registry.host}/{old_repo}"
    api = RegistryAPI(registry.host)
    made = [content_image(docker_client, local_base, r, n) for n, r in enumerate((old_repo, new_repo))]
    try:
        pushed = push_content_images(registry.host, tmp_path / "pushed.json", "v", made, (old_repo, new_repo))
        latest = write_summary(tmp_path / "summary.json", [pushed[1]])
        records = tmp_path / "rec"
        records.mkdir()
        argv = prune_argv(registry.host, latest, records)
        old_tag = made[0][1]

        res = build_py(*argv, "--dry-run", "--older-than", "0s")
        assert res.rc == 0 and old_repo not in res.out, res.out
        said = f"repository {old_repo}: 1 image(s) of this tool that the build summary and the release"
        assert said in res.err and f"prune --repository {old_repo} --dry-run" in res.err, res.err
        res = build_py(*argv, "--older-than", "0s")  # not named: nothing there goes
        assert res.rc == 0 and old_repo not in res.out, res.out
        assert api.manifest(old_repo, old_tag) is not None
        assert docker_client.images.get(f"{old_repo}:{old_tag}")

        named = [*argv, "--repository", old_repo, "--older-than", "0s"]  # here and in the registry
        res = build_py(*named, "--dry-run")
        listed = {tuple(line.split("\t")[:3]) for line in res.out.splitlines()}
        assert listed == {
            ("would remove", "local", f"{old_repo}:{old_tag}"),
            ("would remove", "registry", f"{host_old}:{old_tag}"),
        }, res.out
        res = build_py(*named)
        assert res.rc == 0, res.err
        assert api.manifest(old_repo, old_tag) is None
        assert api.manifest(new_repo, made[1][1]) is not None  # the latest build stays
        assert [t for img in docker_client.images.list(name=old_repo) for t in img.tags] == []
    finally:
        remove_images(docker_client, [image for image, _tag in made])


def test_the_core_keeps_what_a_release_tag_shares_and_what_is_too_young():
    now = datetime(2026, 12, 4, tzinfo=timezone.utc)
    old, young = now - timedelta(days=10), now - timedelta(hours=1)
    h = "a" * 64
    named = prune.Named(repositories={"h:5000/r"})
    tags = [
        prune.RemoteTag("h:5000/r", f"v-{h[:12]}", "sha256:1", "sha256:i1", h, old),
        prune.RemoteTag("h:5000/r", "r1", "sha256:1", "sha256:i1", h, old),  # a release tag shares it
        prune.RemoteTag("h:5000/r", f"w-{'b' * 12}", "sha256:2", "sha256:i2", "b" * 64, young),
        prune.RemoteTag("h:5000/r", f"x-{'c' * 12}", "sha256:3", "sha256:i3", "d" * 64, old),  # not its hash
        prune.RemoteTag("h:5000/r", f"y-{'e' * 12}", "sha256:4", "sha256:i4", "e" * 64, old),
    ]
    found = prune.registry_candidates(tags, named, now - timedelta(days=7))
    assert [c.ref for c in found] == [f"h:5000/r:y-{'e' * 12}"]
    assert prune.parse_age("7d") == timedelta(days=7)
    assert prune.parse_created("2026-12-04T17:40:00.123456789Z") == datetime(
        2026, 12, 4, 17, 40, tzinfo=timezone.utc
    )
    with pytest.raises(prune.UserError):
        prune.parse_age("7 days")


@pytest.mark.docker
def test_prune_keeps_every_image_a_released_index_names(registry, docker_client, small_images, tmp_path):
    """Twins released as an index: the record names the index and each entry by digest only. After a rebuild
    moved the twins' own tags (`v1-arm64`, the local `v1`), the arm64 entry is left with nothing but its
    content tag; prune must keep it (local and registry), or `r1` pulls a missing arm64 image."""
    repo = f"prune-idx-{uuid.uuid4().hex[:10]}/app"
    api = RegistryAPI(registry.host)
    chash = secrets.token_hex(32)
    ctag = f"nccl2.27.7-{chash[:12]}"
    arm = arm64_locked(docker_client, "prune-arm", {HASH_LABEL: chash}, tag=f"{repo}:{ctag}")
    try:
        amd = summary_entry("twin", small_images["a"], tags=[f"{repo}:v1"])
        twin = summary_entry("twin-arm64", arm, tags=[f"{repo}:v1", f"{repo}:{ctag}"])
        summary = write_summary(tmp_path / "summary.json", [amd, twin])
        res = build_py("push", "--summary", str(summary), "--registry", registry.host)
        assert res.rc == 0, res.err
        entries = {e["variant"]: e for e in json.loads(summary.read_text())["variants"]}
        checks = write_check_report(
            tmp_path / "checks.json", [("twin", small_images["a"].id, True), ("twin-arm64", arm.id, True)]
        )
        records = tmp_path / "rec"
        res = release(registry.host, summary, checks, records, "--variant", "twin", "--tag", "r1")
        assert res.rc == 0, res.err
        index = api.manifest(repo, "r1")
        arm_digest = entries["twin-arm64"]["digest"]
        named = json.loads((records / "twin" / "latest.json").read_text())["index"]
        assert [m["digest"] for m in named["manifests"]] == [entries["twin"]["digest"], arm_digest]
        # a rebuild moved the twins' own tags: the arm64 image keeps only its content tags
        api.put_manifest(repo, "v1-arm64", api.manifest(repo, entries["twin"]["digest"]))
        for ref in [t for t in docker_client.images.get(arm.id).tags if not t.endswith(":" + ctag)]:
            docker_client.images.remove(ref, noprune=True)
        latest = write_summary(tmp_path / "latest.json", [entries["twin"]])
        argv = prune_argv(registry.host, latest, records)

        res = build_py(*argv, "--older-than", "0s")
        assert res.rc == 0, res.err
        assert ctag not in res.out, res.out
        assert api.manifest(repo, ctag).digest == arm_digest
        assert api.manifest(repo, arm_digest) is not None and api.manifest(repo, "r1").digest == index.digest
        assert f"{repo}:{ctag}" in docker_client.images.get(arm.id).tags  # kept: the registry's r1 names it
    finally:
        docker_client.images.remove(arm.id, force=True)
