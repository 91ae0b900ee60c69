"""One rule for release names (issue 31, item 1): a release tag or a channel name is exact (no trailing
newline the registry would drop), and a name is a channel or a release tag of a repository forever, read
from every release record of it, before anything is written. Against the real registry the tests start."""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py
from services import summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import RegistryAPI, check_tag, split_ref
from imagebuild.adapters.registry_tags import delete_manifest
from imagebuild.errors import UserError
from imagebuild.release import names

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images


@pytest.mark.parametrize("bad", ["r9\n", " r9", "r9 ", "r9\t", "\nr9", "r\n9"])
def test_a_name_with_whitespace_is_no_tag(bad):
    with pytest.raises(UserError, match="bad tag"):
        check_tag(bad, key="--tag")
    with pytest.raises(UserError):
        split_ref(f"h:5000/a/b:{bad}@sha256:{'0' * 64}".strip(" "), key="IMAGE")
    assert check_tag("r9") == "r9"


def test_roles_come_from_every_record_of_the_repository():
    repo, other = "h:5000/team/app", "h:5000/team/else"
    old = {"variant": "x", "released_at": "T1", "repositories": [{"repository": repo, "tags": ["r1"]}]}
    new = {
        "variant": "y",
        "released_at": "T2",
        "repositories": [{"repository": other, "tags": ["dev"]}],
        "channels": [{"repository": repo, "tag": "dev", "digest": "sha256:1"}],
    }
    assert names.roles([old, new], repo) == ({"r1": "x's release of T1"}, {"dev": "y's release of T2"})
    got = names.role_refusals(repo, ["dev", "r2"], ["r1", "staging"], [old, new])
    assert len(got) == 2
    assert got[0].startswith(f"{repo}:dev is a channel (y's release of T2)")
    assert got[1].startswith(f"{repo}:r1 is a release tag (x's release of T1)")
    # `dev` is a release tag in the other repository only: it may be a channel here, and the reverse
    assert names.role_refusals(other, ["r1"], ["staging"], [old, new]) == []


def _setup(registry, small_images, tmp_path):
    repo = f"names-{uuid.uuid4().hex[:10]}/app"
    summaries = {}
    for key in ("a", "b"):
        image = small_images[key]
        summary = write_summary(
            tmp_path / f"s-{key}.json", [summary_entry("nm", image, tags=[f"{repo}:content-{key}"])]
        )
        assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
        checks = write_check_report(tmp_path / f"c-{key}.json", [("nm", image.id, True)])
        summaries[key] = (summary, checks, json.loads(summary.read_text())["variants"][0]["digest"])
    records = tmp_path / "rec"

    def release(key, *extra):
        summary, checks, _digest = summaries[key]
        argv = ["release", "--summary", str(summary), "--checks", str(checks), "--records", str(records)]
        return build_py(*argv, "--registry", registry.host, *extra)

    return repo, {k: v[2] for k, v in summaries.items()}, records, release


@pytest.mark.docker
def test_a_tag_or_channel_with_a_trailing_newline_is_exit_2_and_nothing_is_written(
    registry, small_images, tmp_path
):
    repo, _digests, records, release = _setup(registry, small_images, tmp_path)
    api = RegistryAPI(registry.host)
    for flag, name in (("--tag", "r9"), ("--channel", "r1")):
        res = release("a", flag, name + "\n")
        assert res.rc == 2 and "bad tag" in res.err and flag in res.err, res.err
        assert "Traceback" not in res.err
        assert api.manifest(repo, name) is None
    assert not records.exists()


@pytest.mark.docker
def test_a_channel_never_becomes_a_release_tag_and_a_release_tag_never_a_channel(
    registry, small_images, tmp_path
):
    repo, digests, records, release = _setup(registry, small_images, tmp_path)
    host_repo = f"{registry.host}/{repo}"
    api = RegistryAPI(registry.host)
    assert release("a", "--channel", "dev").rc == 0
    # `--tag dev` on the digest channel dev names: not "already", a channel is never a release tag
    res = release("a", "--tag", "dev")
    assert res.rc == 1 and f"{host_repo}:dev is a channel (nm's release of" in res.err, res.err
    assert not any("dev" in r["tags"] for r in json.loads((records / "nm" / "latest.json").read_text())[
        "repositories"
    ])  # fmt: skip
    # so dev keeps moving, as a channel
    assert release("b", "--channel", "dev").rc == 0
    assert api.manifest(repo, "dev").digest == digests["b"]

    # a release tag, recorded once (not in the newest record) and then deleted from the registry, never
    # comes back as a channel: it would move where a release tag was promised never to
    assert release("a", "--tag", "r1").rc == 0
    assert release("b", "--tag", "r2").rc == 0
    delete_manifest(api, repo, digests["a"])
    assert api.manifest(repo, "r1") is None
    res = release("b", "--channel", "r1")
    assert res.rc == 1 and f"{host_repo}:r1 is a release tag (nm's release of" in res.err, res.err
    assert api.manifest(repo, "r1") is None


@pytest.mark.docker
def test_a_channel_of_another_variant_in_the_repository_is_no_release_tag(registry, small_images, tmp_path):
    """The roles are read from every variant's records: another variant's channel is no release tag here."""
    repo, digests, records, release = _setup(registry, small_images, tmp_path)
    assert release("a", "--channel", "stable").rc == 0
    record = json.loads((records / "nm" / "latest.json").read_text())
    record["variant"] = "nm-other"
    (records / "nm-other").mkdir()
    (records / "nm-other" / "latest.json").write_text(json.dumps(record))
    for path in (records / "nm").iterdir():  # only the other variant's record knows `stable` now
        path.unlink()
    res = release("a", "--tag", "stable")
    assert res.rc == 1 and "stable is a channel (nm-other's release of" in res.err, res.err
    assert not (records / "nm" / "latest.json").exists()
    assert RegistryAPI(registry.host).manifest(repo, "stable").digest == digests["a"]


@pytest.mark.docker
def test_the_roles_are_read_from_the_s3_records_on_a_fresh_runner(registry, small_images, aws, tmp_path):
    """Records kept in S3 (`--s3`): a runner whose local folder is empty still knows `dev` is a channel."""
    import boto3

    bucket = f"names-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    repo, digests, records, release = _setup(registry, small_images, tmp_path)
    s3args = ["--s3", f"s3://{bucket}/team", "--endpoint-url", aws.endpoint_url, "--region", "us-east-1"]
    assert release("a", "--channel", "dev", *s3args).rc == 0
    for path in (records / "nm").iterdir():  # another runner: nothing local
        path.unlink()
    res = release("a", "--tag", "dev", *s3args)
    assert res.rc == 1 and "dev is a channel (nm's release of" in res.err, res.err
    s3.put_object(Bucket=bucket, Key="team/nm/broken.json", Body=b"{not json")
    res = release("a", "--tag", "r5", *s3args)
    assert res.rc == 2 and f"s3://{bucket}/team/" in res.err and "Traceback" not in res.err, res.err
    assert RegistryAPI(registry.host).manifest(repo, "r5") is None
    assert RegistryAPI(registry.host).manifest(repo, "dev").digest == digests["a"]
