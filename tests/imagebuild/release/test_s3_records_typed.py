"""Release records in S3: one typed reader, and locks and intents where records are never looked for
(issue 41, hostile input round five, item 3), against moto's server over real HTTP.

On main, `{"repositories": 5}` under the prefix made every later release (dry run included) a TypeError
traceback; `prefix/*/*.json` matched the release locks and other variants' intents, so a live lock counted
as a record and a lock deleted between LIST and GET failed the release."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import boto3
import pytest
from cli import build_py
from services import summary_entry, write_check_report, write_summary

from imagebuild.errors import UserError
from imagebuild.release import record as rel
from imagebuild.release import s3records
from imagebuild.release.names import read_s3_records

pytest_plugins = ["services_fixtures"]  # fixtures: moto_server, aws

RECORD = {"variant": "v", "digest": "sha256:" + "ab" * 32, "released_at": "2026-12-05T07:00:00+00:00"}


def _s3(aws):
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    bucket = f"rec-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return s3, bucket


def _put(s3, bucket, key, doc):
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(doc).encode())


def test_a_record_of_the_wrong_shape_is_exit_2_naming_the_object_and_key(aws):
    s3, bucket = _s3(aws)
    _put(s3, bucket, "p/v/20261205T070000Z-abababababab.json", dict(RECORD, repositories=5))
    with pytest.raises(UserError) as err:
        read_s3_records(s3, bucket, "p")
    assert err.value.file == f"s3://{bucket}/p/v/20261205T070000Z-abababababab.json"
    assert err.value.key == "repositories"


def test_a_release_dry_run_over_a_bad_record_is_exit_2_not_a_traceback(aws, tmp_path):
    s3, bucket = _s3(aws)
    _put(s3, bucket, "p/v/20261205T070000Z-abababababab.json", dict(RECORD, repositories=5))
    image = SimpleNamespace(id="sha256:" + "0" * 64)
    entry = summary_entry("v", image, tags=["127.0.0.1:9/team/app:c1"])
    entry["digest"] = "sha256:" + "cd" * 32  # pushed: the gate passes on to the names' roles
    entry["pushed"] = ["127.0.0.1:9/team/app:c1@" + entry["digest"]]
    summary = write_summary(tmp_path / "s.json", [entry])
    checks = write_check_report(tmp_path / "c.json", [("v", image.id, True)])
    res = build_py("release", "--summary", summary, "--checks", checks, "--tag", "r1", "--dry-run",
                   "--registry", "127.0.0.1:9", "--records", f"s3://{bucket}/p",
                   "--endpoint-url", aws.endpoint_url)  # fmt: skip
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert f"s3://{bucket}/p/v/20261205T070000Z-abababababab.json" in res.err and "repositories" in res.err


def test_the_latest_record_is_typed_too(aws, tmp_path):
    s3, bucket = _s3(aws)
    _put(s3, bucket, "p/v/latest.json", dict(RECORD, channels="dev"))
    store = rel.RecordStore(None, s3, f"s3://{bucket}/p")
    with pytest.raises(UserError) as err:
        store.latest("v")
    assert err.value.file == f"s3://{bucket}/p/v/latest.json" and err.value.key == "channels"


def test_a_live_lock_and_an_intent_are_not_records(aws):
    s3, bucket = _s3(aws)
    store = rel.RecordStore(None, s3, f"s3://{bucket}/p")
    store.write_pending("other", {"schema": "x", "variant": "other", "writes": []})
    (key,) = store.lock_keys(["127.0.0.1:9/team/app"])
    with s3records.hold_lock(s3, bucket, key, 5, lambda _m: None):
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
        assert len(keys) == 2 and all(k.startswith(("p/.locks/", "p/.intents/")) for k in keys), keys
        assert read_s3_records(s3, bucket, "p") == []
    assert store.pending("other")["variant"] == "other"  # the intent is read where it is written
    store.clear_pending("other")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)


class _DeletesAfterListing:
    """An S3 client whose listing is followed by another runner deleting what it listed (a lock given
    back)."""

    def __init__(self, s3, bucket):
        self._s3, self._bucket = s3, bucket

    def list_objects_v2(self, **kw):
        page = self._s3.list_objects_v2(**kw)
        for item in page.get("Contents") or []:
            self._s3.delete_object(Bucket=self._bucket, Key=item["Key"])
        return page

    def __getattr__(self, name):
        return getattr(self._s3, name)


def test_an_object_deleted_between_list_and_get_is_gone_not_an_error(aws):
    s3, bucket = _s3(aws)
    _put(s3, bucket, "p/v/20261205T070000Z-abababababab.json", RECORD)
    assert read_s3_records(s3, bucket, "p") == [RECORD]
    assert read_s3_records(_DeletesAfterListing(s3, bucket), bucket, "p") == []


def test_an_intent_of_the_wrong_shape_is_exit_2(aws):
    s3, bucket = _s3(aws)
    store = rel.RecordStore(None, s3, f"s3://{bucket}/p")
    store.write_pending("v", {"schema": "x", "writes": [{"tag": 5}]})
    with pytest.raises(UserError) as err:
        store.pending("v")
    assert err.value.file == f"s3://{bucket}/p/.intents/v.json" and err.value.key == "writes[0].tag"
