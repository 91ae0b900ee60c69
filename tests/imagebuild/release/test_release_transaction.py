"""A release is one transaction, across runners (issue 31, items 3 and 4), against the real registry and moto.

- the plan of every variant is refused as a whole when two writes disagree on one tag, and the dry run
  prints that plan and exits 1;
- a run cut part-way by a real fault (a registry that stores a channel write but loses its answer) leaves
  every tag it wrote named by the variant's intent, and the same command again completes it with a record;
- two release processes on one tag, with separate temp folders (two runners: no shared flock) and one S3
  record store, end with one winner and one refused loser that wrote nothing; record names never collide.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import boto3
import pytest
from cli import BUILD_PY, build_py
from paths import IMPORT_PATH, ROOT
from services import Fault, FaultProxy, MotoServer, summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.errors import UserError
from imagebuild.release import record as rel
from imagebuild.release import s3records

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images, moto_server, aws


def _entries(small_images, repo, channels):
    """Variants `ta` and `tb` (images A and B) sharing repository `repo`, with these matrix channels."""
    out = []
    for key, name in (("a", "ta"), ("b", "tb")):
        entry = summary_entry(name, small_images[key], tags=[f"{repo}:content-{key}"])
        entry["channels"] = channels[key]
        out.append(entry)
    return out


def _push(tmp_path, registry, entries):
    summary = write_summary(tmp_path / "summary.json", entries)
    res = build_py("push", "--summary", str(summary), "--registry", registry.host)
    assert res.rc == 0, res.err
    return summary, {e["variant"]: e["digest"] for e in json.loads(summary.read_text())["variants"]}


def _checks(tmp_path, small_images):
    results = [("ta", small_images["a"].id, True), ("tb", small_images["b"].id, True)]
    return write_check_report(tmp_path / "checks.json", results)


@pytest.mark.docker
def test_two_variants_moving_one_channel_to_two_digests_is_refused_dry_run_included(
    registry, small_images, tmp_path
):
    repo = f"txn-{uuid.uuid4().hex[:10]}/app"
    summary, digests = _push(tmp_path, registry, _entries(small_images, repo, {"a": ["dev"], "b": ["dev"]}))
    records = tmp_path / "rec"
    argv = ["release", "--summary", str(summary), "--checks", str(_checks(tmp_path, small_images))]
    argv += ["--records", str(records), "--registry", registry.host, "--tag", "r1-{variant}"]
    host_repo = f"{registry.host}/{repo}"

    res = build_py(*argv, "--dry-run")
    assert res.rc == 1, (res.out, res.err)
    assert res.out.splitlines() == [
        f"would tag {host_repo}@{digests['ta']} as r1-ta",
        f"would move channel {host_repo}:dev from (nothing) to {digests['ta']}",
        f"would record ta {digests['ta']} in {records}",
        f"would tag {host_repo}@{digests['tb']} as r1-tb",
        f"would move channel {host_repo}:dev from (nothing) to {digests['tb']}",
        f"would record tb {digests['tb']} in {records}",
    ]
    assert f"{host_repo}:dev would be written with 2 different digests" in res.err

    res = build_py(*argv)
    assert res.rc == 1 and "nothing was promoted" in res.err, res.err
    api = RegistryAPI(registry.host)
    assert [api.manifest(repo, t) for t in ("dev", "r1-ta", "r1-tb")] == [None, None, None]
    assert not records.exists()


@pytest.mark.docker
def test_a_release_cut_part_way_by_the_registry_is_completed_by_the_same_command(
    registry, small_images, tmp_path
):
    """The registry stores tb's channel write but its answer is lost (500, every retry): the run stops with
    ta released and tb's tags written but unrecorded. The same command again completes tb; on today's
    main the rerun refused tb's channel ("no release record knows it as a channel")."""
    repo = f"txn-{uuid.uuid4().hex[:10]}/app"
    entries = _entries(small_images, repo, {"a": ["edge-a"], "b": ["edge-b"]})
    _summary, digests = _push(tmp_path, registry, entries)
    proxy = FaultProxy(registry.host).start()
    try:
        lost = Fault(lambda m, p, _h: m == "PUT" and p == f"/v2/{repo}/manifests/edge-b", status=500,
                     times=100, forward=True)  # fmt: skip
        proxy.faults.append(lost)
        # the same registry through the proxy's address: the summary names it as where the images went
        doc = json.loads((tmp_path / "summary.json").read_text())
        for e in doc["variants"]:
            e["pushed"] = [r.replace(registry.host, proxy.host) for r in e["pushed"]]
        summary = write_summary(tmp_path / "summary-proxy.json", doc["variants"])
        records = tmp_path / "rec"
        argv = ["release", "--summary", str(summary), "--checks", str(_checks(tmp_path, small_images))]
        argv += [
            "--records",
            str(records),
            "--registry",
            proxy.host,
            "--tag",
            "r1-{variant}",
            "--attempts",
            "2",
        ]

        res = build_py(*argv)
        assert res.rc == 2 and lost.hits >= 1 and "stopped part-way" in res.err, res.err
        api = RegistryAPI(registry.host)
        assert api.manifest(repo, "edge-b").digest == digests["tb"]  # the write landed
        assert api.manifest(repo, "r1-tb").digest == digests["tb"]
        assert not (records / "tb" / "latest.json").exists()
        pending = json.loads((records / "tb" / "pending.json").read_text())
        assert {(w["tag"], w["digest"]) for w in pending["writes"]} == {
            ("r1-tb", digests["tb"]),
            ("edge-b", digests["tb"]),
        }

        proxy.faults.clear()
        res = build_py(*argv)
        assert res.rc == 0, res.err
    finally:
        proxy.stop()
    host_repo = f"{proxy.host}/{repo}"
    named = {}
    for variant in ("ta", "tb"):
        record = json.loads((records / variant / "latest.json").read_text())
        for r in record["repositories"]:
            named.update({(r["repository"], t): record["digest"] for t in r["tags"]})
        named.update({(c["repository"], c["tag"]): c["digest"] for c in record["channels"]})
        assert not (records / variant / "pending.json").exists()
    for tag in ("r1-ta", "edge-a", "r1-tb", "edge-b"):
        assert named[(host_repo, tag)] == api.manifest(repo, tag).digest, tag
    edge_b = json.loads((records / "tb" / "latest.json").read_text())["channels"]
    assert [(h["from"], h["digest"]) for h in edge_b[0]["history"]] == [(None, digests["tb"])]


def _release_proc(tmp_path, name, summary, checks, registry, aws, store):
    """`build.py release` as its own process with its own TMPDIR (as a second runner has)."""
    tmp = tmp_path / f"tmp-{name}"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=IMPORT_PATH, TMPDIR=str(tmp), **MotoServer.env())
    argv = [*BUILD_PY, "release", "--summary", str(summary), "--checks", str(checks), "--tag", "rel-1"]
    argv += ["--registry", registry.host, "--records", store, "--endpoint-url", aws.endpoint_url]
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.docker
def test_two_runners_releasing_one_tag_share_the_s3_lock_and_records(registry, small_images, aws, tmp_path):
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    bucket = f"rel-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    repo = f"txn-{uuid.uuid4().hex[:10]}/race"
    runs = []
    for key in ("a", "b"):
        entry = summary_entry("race", small_images[key], tags=[f"{repo}:content-{key}"])
        summary = write_summary(tmp_path / f"summary-{key}.json", [entry])
        assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
        checks = write_check_report(tmp_path / f"checks-{key}.json", [("race", small_images[key].id, True)])
        runs.append((key, summary, checks, json.loads(summary.read_text())["variants"][0]["digest"]))
    store = f"s3://{bucket}/team/releases"
    procs = [_release_proc(tmp_path, k, s, c, registry, aws, store) for k, s, c, _d in runs]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], (codes, outs)
    winner = runs[codes.index(0)][3]
    loser_err = outs[codes.index(1)][1]
    # the loser waited for the lock, then saw the tag taken: refused at the plan, nothing written
    assert "never overwritten" in loser_err and "Traceback" not in loser_err, loser_err
    assert "tagged" not in loser_err and "wrote s3://" not in loser_err
    assert RegistryAPI(registry.host).manifest(repo, "rel-1").digest == winner
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    records = [k for k in keys if k.endswith(".json") and not k.endswith(("latest.json", "pending.json"))]
    assert len(records) == 1 and [k for k in keys if "/.locks/" in k or "/.intents/" in k] == [], keys
    record = json.loads(s3.get_object(Bucket=bucket, Key=records[0])["Body"].read())
    assert record["digest"] == winner and record["repositories"][0]["moved"] == ["rel-1"]
    assert record["repositories"][0]["repository"] == f"{registry.host}/{repo}"


def _s3(aws):
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    bucket = f"rel-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return s3, bucket


def test_two_records_of_one_digest_in_one_second_both_stay(aws, tmp_path):
    s3, bucket = _s3(aws)
    store = rel.RecordStore(tmp_path / "rec", s3, f"s3://{bucket}/p")
    record = {"variant": "v", "digest": "sha256:" + "ab" * 32, "released_at": "2026-12-05T07:00:00+00:00"}
    names = []
    for n in (1, 2):
        store.latest("v")
        doc = dict(record, record_id=rel.new_record_id(), n=n)
        store.write(doc, f"notes {n}\n")
        names.append(rel.record_name(doc))
    assert names[0] != names[1]
    for n, name in enumerate(names, 1):
        assert json.loads((tmp_path / "rec" / "v" / f"{name}.json").read_text())["n"] == n
        assert json.loads(s3.get_object(Bucket=bucket, Key=f"p/v/{name}.json")["Body"].read())["n"] == n
    # create-only: a record is never written over another of the same name
    with pytest.raises(UserError, match="written by another release"):
        s3records.put(s3, bucket, f"p/v/{names[0]}.json", b"{}", "application/json")
    # latest.json is replaced only if it is still the one this store read
    s3.put_object(Bucket=bucket, Key="p/v/latest.json", Body=b"{}")
    with pytest.raises(UserError, match="written by another release"):
        store.write(dict(record, record_id=rel.new_record_id()), "notes\n")


def test_the_s3_lock_waits_for_a_live_holder_and_takes_an_expired_one(aws):
    s3, bucket = _s3(aws)
    said = []
    with s3records.hold_lock(s3, bucket, "locks/x.json", 5, said.append):
        start = time.monotonic()
        with pytest.raises(UserError, match="held the lock for over 1s"):
            with s3records.hold_lock(s3, bucket, "locks/x.json", 1, said.append):
                pass
        assert time.monotonic() - start >= 1 and any("waiting" in s for s in said)
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # released
    # a runner that died: its lock (a lease of 1 s) has not changed for longer than that, by S3's clock
    dead = s3records.lock_body("dead-owner", time.time(), 1)
    s3.put_object(Bucket=bucket, Key="locks/x.json", Body=dead)
    time.sleep(2.1)
    with s3records.hold_lock(s3, bucket, "locks/x.json", 5, said.append):
        held = json.loads(s3.get_object(Bucket=bucket, Key="locks/x.json")["Body"].read())
        assert held["owner"] != "dead-owner" and held["expires_at"] > time.time()
    assert any("took over an expired lock" in s for s in said)


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--records", "s3://"], "not an S3 URI"),
        (["--records", "s3://bkt/a/../b"], "'.' or '..' part"),
        (["--records", "s3://bkt/p", "--s3", "s3://bkt/q"], "give the S3 record store once"),
    ],
)
def test_a_bad_s3_record_store_is_exit_2(tmp_path, extra, words):
    from types import SimpleNamespace

    image = SimpleNamespace(id="sha256:" + "0" * 64)
    summary = write_summary(tmp_path / "s.json", [summary_entry("v", image, tags=["team/app:c1"])])
    checks = write_check_report(tmp_path / "c.json", [("v", image.id, True)])
    res = build_py("release", "--summary", str(summary), "--checks", str(checks), "--tag", "r1",
                   "--registry", "127.0.0.1:9", *extra)  # fmt: skip
    assert res.rc == 2 and words in res.err and "Traceback" not in res.err, res.err


def test_prune_keeps_what_a_pending_intent_names():
    """A run cut part-way may have put an index's digest under a release tag before any record names it:
    the intent (read by prune with the records) keeps it."""
    from datetime import datetime, timezone

    from imagebuild.release import prune, transaction

    index, image = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    writes = [
        {"variant": "v", "repository": "h/r", "tag": "r1", "digest": index, "role": "tag", "from": None}
    ]
    intent = transaction.intent("v", image, writes, datetime(2026, 12, 5, tzinfo=timezone.utc))
    named = prune.named_by({"variants": []}, [intent])
    assert named.names(None, index) and named.names(None, image)


def test_an_interrupted_intent_stops_another_release_of_the_variant_until_completed():
    from datetime import datetime, timezone

    from imagebuild.release import transaction

    d1, d2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    w = {"variant": "v", "repository": "h/r", "tag": "r1", "digest": d1, "role": "tag", "from": None}
    chan = dict(w, tag="dev", role="channel", **{"from": d2})
    pending = transaction.intent("v", d1, [w, chan], datetime(2026, 12, 5, tzinfo=timezone.utc))
    assert transaction.intent_refusal(pending, d1, [w, chan]) is None  # the same command: completes it
    assert transaction.intent_refusal(None, d2, [w]) is None
    assert "interrupted release of " + d1 in transaction.intent_refusal(pending, d2, [dict(w, digest=d2)])
    assert "also wrote or meant to write h/r:dev" in transaction.intent_refusal(pending, d1, [w])
    assert "not one this tool wrote" in transaction.intent_refusal({"writes": 3}, d1, [w])
    # it binds only while one of its writes is in the registry (else it left nothing unrecorded)
    assert transaction.landed(pending, lambda repo, tag: {"r1": d1}.get(tag))
    assert transaction.landed(pending, lambda repo, tag: {"dev": d1}.get(tag))
    assert not transaction.landed(pending, lambda repo, tag: {"dev": d2}.get(tag))  # dev not moved yet
    assert not transaction.landed(pending, lambda repo, tag: None)
    # the cut run moved dev from d2 to d1: the rerun takes that move, with its from
    assert transaction.pending_move(pending, d1, "h/r", "dev", d1, d1)["from"] == d2
    assert transaction.pending_move(pending, d1, "h/r", "dev", d2, d1) is None  # not moved: no claim
    assert transaction.pending_move(pending, d1, "h/r", "r1", d1, d1) is None  # a release tag is no channel


@pytest.mark.docker
def test_a_release_terminated_at_a_write_gives_the_s3_lock_back_and_the_rerun_completes(
    registry, small_images, aws, tmp_path
):
    """SIGTERM (a cancelled CI job) while a tag write hangs in the registry: the run ends (130) with the
    shared lock deleted and its intent kept; the same command again releases, with nothing to wait for."""
    s3, bucket = _s3(aws)
    repo = f"txn-{uuid.uuid4().hex[:10]}/term"
    entry = summary_entry("term", small_images["a"], tags=[f"{repo}:content-a"])
    summary = write_summary(tmp_path / "summary.json", [entry])
    assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    proxy = FaultProxy(registry.host).start()
    slow = Fault(lambda m, p, _h: m == "PUT" and p == f"/v2/{repo}/manifests/t-2", times=0, delay=30)
    proxy.faults.append(slow)
    doc = json.loads(summary.read_text())
    doc["variants"][0]["pushed"] = [
        r.replace(registry.host, proxy.host) for r in doc["variants"][0]["pushed"]
    ]
    summary = write_summary(tmp_path / "summary-proxy.json", doc["variants"])
    checks = write_check_report(tmp_path / "checks.json", [("term", small_images["a"].id, True)])
    env = dict(os.environ, PYTHONPATH=IMPORT_PATH, **MotoServer.env())
    argv = [*BUILD_PY, "release", "--summary", str(summary), "--checks", str(checks), "--tag", "t-1"]
    argv += ["--tag", "t-2", "--registry", proxy.host, "--records", f"s3://{bucket}/rel"]
    argv += ["--endpoint-url", aws.endpoint_url]
    try:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        api = RegistryAPI(registry.host)
        deadline = time.monotonic() + 60
        while api.manifest(repo, "t-1") is None and time.monotonic() < deadline:
            time.sleep(0.1)  # t-1 written: the run is now in t-2's write, which the proxy holds
        time.sleep(0.5)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert any("/.locks/" in k for k in keys) and "rel/.intents/term.json" in keys, keys
        proc.terminate()
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err, err
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert keys == ["rel/.intents/term.json"], keys  # the lock is given back; the intent names t-1, t-2
        proxy.faults.clear()
        res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and "waiting" not in res.stderr, res.stderr
    finally:
        proxy.stop()
    assert [api.manifest(repo, t).digest for t in ("t-1", "t-2")] == [digest, digest]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    (name,) = [k for k in keys if k.endswith(".json") and not k.endswith("latest.json")]
    record = json.loads(s3.get_object(Bucket=bucket, Key=name)["Body"].read())
    assert record["repositories"][0]["tags"] == ["t-1", "t-2"] and "rel/.intents/term.json" not in keys
