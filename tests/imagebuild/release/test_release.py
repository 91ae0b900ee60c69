"""`build.py release` against a real registry (and moto's S3 for records): promote only what passed.

Images are real (built FROM the local base, the lock in a label), pushed to Debian's docker-registry on
127.0.0.1 by `build.py push`; summaries and check reports are written here in the agreed formats.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from cli import Result, build_py
from services import small_lock, summary_entry, write_check_report, write_summary

from imagebuild.adapters.registry import Credentials, RegistryAPI
from imagebuild.release import record as rel

pytest_plugins = ["services_fixtures"]  # fixtures: registry, auth_registry, moto_server, aws, small_images


def _run(argv, monkeypatch, stdin="") -> Result:
    return build_py(*argv, stdin=stdin)


def _pushed(tmp_path, monkeypatch, registry, image, variant, repo, extra=(), tag="dev"):
    """A summary for `image` as variant `variant`, pushed to `registry` as h6-test/<repo>:<tag>."""
    summary = write_summary(
        tmp_path / f"summary-{variant}-{tag}.json",
        [summary_entry(variant, image, tags=[f"h6-test/{repo}:{tag}"])],
    )
    assert _run(["push", "--summary", str(summary), "--registry", registry.host, *extra], monkeypatch).rc == 0
    return summary


def _release(tmp_path, monkeypatch, summary, checks, *extra, stdin=""):
    argv = ["release", "--summary", str(summary), "--checks", str(checks), "--records", str(tmp_path / "rec")]
    return _run([*argv, *extra], monkeypatch, stdin)


@pytest.mark.docker
def test_release_promotes_the_checked_digest_and_writes_record_and_notes(
    registry, small_images, tmp_path, monkeypatch
):
    image = small_images["a"]
    summary = _pushed(tmp_path, monkeypatch, registry, image, "rel", "rel")
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    checks = write_check_report(tmp_path / "checks.json", [("rel", image.id, True)])
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "{variant}-r1").rc == 0
    api = RegistryAPI(registry.host)
    promoted = api.manifest("h6-test/rel", "rel-r1")
    assert promoted.digest == digest and promoted.config_digest == image.id
    record = json.loads((tmp_path / "rec" / "rel" / "latest.json").read_text())
    assert record["schema"] == rel.RECORD_SCHEMA
    assert (record["digest"], record["image_id"]) == (digest, image.id)
    assert record["repositories"][0]["tags"] == ["rel-r1"]
    assert record["lock"] == small_lock("h6-a", nccl="2.26.2")  # read from the pushed image's label
    assert record["lock_source"].startswith("image label")
    assert record["reports"]["checks"]["sha256"] == rel.sha256_file(checks)
    assert record["previous"] is None
    notes = next((tmp_path / "rec" / "rel").glob("*.md")).read_text()
    assert "| nccl | - | 2.26.2 | first release |" in notes and digest in notes

    # next release of the same variant: a new image (nccl 2.27.7); notes compare with the record above
    image_b = small_images["b"]
    summary2 = _pushed(tmp_path, monkeypatch, registry, image_b, "rel", "rel", tag="dev2")
    checks2 = write_check_report(tmp_path / "checks2.json", [("rel", image_b.id, True)])
    # the old release tag is taken by another digest: refused, nothing promoted, nothing recorded
    rc, _out, err = _release(tmp_path, monkeypatch, summary2, checks2, "--tag", "rel-r1")
    assert rc == 1
    assert "never overwritten" in err and "nothing was promoted" in err
    assert api.manifest("h6-test/rel", "rel-r1").digest == digest
    assert json.loads((tmp_path / "rec" / "rel" / "latest.json").read_text())["digest"] == digest
    # a fresh tag works, and the notes say what changed
    assert _release(tmp_path, monkeypatch, summary2, checks2, "--tag", "rel-r2").rc == 0
    record2 = json.loads((tmp_path / "rec" / "rel" / "latest.json").read_text())
    assert record2["previous"]["digest"] == digest
    notes2 = (tmp_path / "rec" / "rel" / (rel.record_name(record2) + ".md")).read_text()
    assert "| nccl | 2.26.2 | 2.27.7 | upgraded |" in notes2
    assert "| aws_ofi_nccl | 1.16.0 | 1.16.0 | unchanged |" in notes2


@pytest.mark.docker
def test_release_refuses_what_did_not_pass_for_that_image(registry, small_images, tmp_path, monkeypatch):
    image = small_images["a"]
    summary = _pushed(tmp_path, monkeypatch, registry, image, "gate", "gate")
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    api = RegistryAPI(registry.host)

    def refused(checks, *extra):
        rc, _out, err = _release(tmp_path, monkeypatch, summary, checks, "--tag", "gate-r1", *extra)
        assert rc == 1
        assert api.manifest("h6-test/gate", "gate-r1") is None
        assert not (tmp_path / "rec" / "gate").exists()
        return err

    failed = write_check_report(tmp_path / "failed.json", [("gate", image.id, False)])
    assert "did not pass" in refused(failed)
    other = write_check_report(tmp_path / "other.json", [("gate", small_images["b"].id, True)])
    assert f"no static check report entry names image {image.id}" in refused(other)
    good = write_check_report(tmp_path / "good.json", [("gate", image.id, True)])
    # pre-flight required: for another digest, failed, or naming no image -> refused
    for name, doc, why in [
        (
            "pf-other.json",
            {"verdict": "pass", "image": {"digest": "sha256:" + "1" * 64}},
            "no pre-flight report names",
        ),
        ("pf-fail.json", {"verdict": "fail", "image": {"digest": digest}}, "verdict 'fail'"),
        ("pf-unknown.json", {"verdict": "unknown", "image": {"image_id": image.id}}, "verdict 'unknown'"),
        ("pf-anon.json", {"verdict": "pass"}, "no pre-flight report names"),
    ]:
        (tmp_path / name).write_text(json.dumps(doc))
        assert why in refused(good, "--require-preflight", str(tmp_path / name))
    # the right one passes
    (tmp_path / "pf.json").write_text(
        json.dumps(
            {"verdict": "pass", "image": {"ref": f"x/y@{digest}"}, "instance_type": "p5.48xlarge", "nodes": 2}
        )
    )
    assert _release(tmp_path, monkeypatch, summary, good, "--tag", "gate-r1", "--require-preflight",
                    str(tmp_path / "pf.json")).rc == 0  # fmt: skip
    record = json.loads((tmp_path / "rec" / "gate" / "latest.json").read_text())
    assert record["reports"]["preflight"]["verdict"] == "pass"
    assert record["reports"]["preflight"]["sha256"] == rel.sha256_file(tmp_path / "pf.json")


@pytest.mark.docker
def test_summary_that_lies_about_the_digest_is_refused(registry, small_images, tmp_path, monkeypatch):
    """The summary pairs image A's id with image B's digest: the registry's manifest says otherwise."""
    a, b = small_images["a"], small_images["b"]
    summary_b = _pushed(tmp_path, monkeypatch, registry, b, "liar", "liar")
    entry = json.loads(summary_b.read_text())["variants"][0]
    entry["image_id"] = a.id
    lying = write_summary(tmp_path / "lying.json", [entry])
    checks = write_check_report(tmp_path / "checks.json", [("liar", a.id, True)])
    rc, _out, err = _release(tmp_path, monkeypatch, lying, checks, "--tag", "liar-r1")
    assert rc == 1
    assert f"is image {b.id}, not {a.id}" in err
    assert RegistryAPI(registry.host).manifest("h6-test/liar", "liar-r1") is None


@pytest.mark.docker
def test_records_to_s3_and_previous_from_s3(registry, small_images, aws, tmp_path, monkeypatch):
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    s3.create_bucket(Bucket="h6-releases")
    image = small_images["a"]
    summary = _pushed(tmp_path, monkeypatch, registry, image, "s3v", "s3v")
    checks = write_check_report(tmp_path / "checks.json", [("s3v", image.id, True)])
    s3args = [
        "--s3",
        "s3://h6-releases/team/efa",
        "--endpoint-url",
        aws.endpoint_url,
        "--region",
        "us-east-1",
    ]
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "s3v-r1", *s3args).rc == 0
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="h6-releases")["Contents"])
    assert "team/efa/s3v/latest.json" in keys
    assert any(k.endswith(".md") for k in keys) and len(keys) == 3
    latest = json.loads(s3.get_object(Bucket="h6-releases", Key="team/efa/s3v/latest.json")["Body"].read())
    assert latest["digest"] == json.loads(summary.read_text())["variants"][0]["digest"]
    # second release: the previous record comes from S3 even with a fresh local folder
    image_b = small_images["b"]
    summary2 = _pushed(tmp_path, monkeypatch, registry, image_b, "s3v", "s3v", tag="dev2")
    checks2 = write_check_report(tmp_path / "checks2.json", [("s3v", image_b.id, True)])
    argv = [
        "release",
        "--summary",
        str(summary2),
        "--checks",
        str(checks2),
        "--records",
        str(tmp_path / "fresh"),
    ]
    assert _run([*argv, "--tag", "s3v-r2", *s3args], monkeypatch).rc == 0
    latest2 = json.loads(s3.get_object(Bucket="h6-releases", Key="team/efa/s3v/latest.json")["Body"].read())
    assert latest2["previous"]["digest"] == latest["digest"]


@pytest.mark.docker
def test_missing_bucket_is_exit_2_before_anything_is_promoted(
    registry, small_images, aws, tmp_path, monkeypatch
):
    image = small_images["b"]
    summary = _pushed(tmp_path, monkeypatch, registry, image, "nob", "nob")
    checks = write_check_report(tmp_path / "checks.json", [("nob", image.id, True)])
    s3args = ["--s3", "s3://h6-no-such-bucket/x", "--endpoint-url", aws.endpoint_url, "--region", "us-east-1"]
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "nob-r1", *s3args).rc == 2
    assert RegistryAPI(registry.host).manifest("h6-test/nob", "nob-r1") is None


@pytest.mark.docker
def test_release_on_auth_registry_writes_no_credential(auth_registry, small_images, tmp_path, monkeypatch):
    image = small_images["b"]
    login = ["--username", auth_registry.user, "--password-stdin"]
    summary = write_summary(tmp_path / "s.json", [summary_entry("sec", image, tags=["h6-test/sec:dev"])])
    argv = ["push", "--summary", str(summary), "--registry", auth_registry.host, *login]
    pushed = _run(argv, monkeypatch, auth_registry.password + "\n")
    assert pushed.rc == 0
    checks = write_check_report(tmp_path / "checks.json", [("sec", image.id, True)])
    released = _release(
        tmp_path, monkeypatch, summary, checks, "--tag", "sec-r1", *login, stdin=auth_registry.password
    )
    assert released.rc == 0
    api = RegistryAPI(auth_registry.host, Credentials(auth_registry.user, auth_registry.password))
    assert api.manifest("h6-test/sec", "sec-r1").config_digest == image.id
    written = "".join(p.read_text() for p in Path(tmp_path / "rec").rglob("*") if p.is_file())
    for text in (*pushed[1:], *released[1:], written, summary.read_text()):
        assert auth_registry.password not in text
    # and without the password: exit 2, not a traceback
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "sec-r2", "--docker-config",
                    str(tmp_path / "nocfg")).rc == 2  # fmt: skip


def test_bad_inputs_are_exit_2(tmp_path, monkeypatch):
    summary = write_summary(tmp_path / "s.json", [])
    (tmp_path / "bad.json").write_text("{not json")
    missing, bad = tmp_path / "missing.json", tmp_path / "bad.json"
    rc, _out, err = _release(tmp_path, monkeypatch, missing, bad, "--tag", "x")
    assert rc == 2
    assert "build summary not found" in err
    assert _release(tmp_path, monkeypatch, summary, tmp_path / "bad.json", "--tag", "x").rc == 2
    write_summary(
        tmp_path / "s.json", [{"variant": "v", "status": "built", "image_id": "sha256:" + "0" * 64}]
    )
    rc, _out, err = _release(tmp_path, monkeypatch, summary, tmp_path / "bad.json", "--tag", "x")
    assert rc == 2
    assert "not JSON" in err
    checks = write_check_report(tmp_path / "c.json", [])
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "bad tag!").rc == 2
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "x", "--variant", "nope").rc == 2
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "x", "--s3", "http://x").rc == 2


def test_gate_is_strict_about_contradictions():
    entry = {"variant": "v", "status": "built", "image_id": "sha256:a", "digest": "sha256:" + "d" * 64,
             "pushed": ["h/r:t@sha256:" + "d" * 64]}  # fmt: skip
    report = {
        "images": [{"image_id": "sha256:a", "passed": True, "checks": [{"name": "x", "status": "unknown"}]}]
    }
    gate = rel.gate_variant(entry, report, [], False)
    assert not gate.ok and "fail/unknown: x" in gate.reasons[0]
    report["images"][0]["checks"][0]["status"] = "skip"
    assert rel.gate_variant(entry, report, [], False).ok
    assert not rel.gate_variant(dict(entry, pushed=[]), report, [], False).ok
    assert not rel.gate_variant(dict(entry, status="failed"), report, [], False).ok
    assert rel.gate_variant(dict(entry, status="skipped"), report, [], False).ok  # up to date, same image
    report["images"][0]["passed"] = "true"  # a string is not true
    assert not rel.gate_variant(entry, report, [], False).ok


def test_a_refusal_names_each_failing_check_and_the_command_for_a_missing_report():
    entry = {"variant": "v", "status": "built", "image_id": "sha256:a", "digest": "sha256:" + "d" * 64,
             "pushed": ["h/r:t@sha256:" + "d" * 64]}  # fmt: skip
    failed = {"images": [{"image_id": "sha256:a", "passed": False, "checks": [
        {"name": "plugin-ldd", "status": "fail"}, {"name": "fi-info-efa", "status": "unknown"},
        {"name": "nccl-version-ctypes", "status": "pass"}]}]}  # fmt: skip
    (why,) = rel.gate_variant(entry, failed, [], False).reasons
    assert "for v (image sha256:a)" in why and "plugin-ldd (fail), fi-info-efa (unknown)" in why
    assert "nccl-version-ctypes" not in why
    (why,) = rel.gate_variant(entry, {"images": []}, [], False).reasons
    assert "efa-image-build test --variant v" in why and "--checks" in why


def test_a_replayed_or_contradicted_preflight_never_clears_the_gate():
    digest = "sha256:" + "d" * 64
    entry = {"variant": "v", "status": "built", "image_id": "sha256:a", "digest": digest,
             "pushed": ["h/r:t@" + digest]}  # fmt: skip
    checks = {"images": [{"image_id": "sha256:a", "passed": True, "checks": []}]}
    good = {"verdict": "pass", "image": {"digest": digest},
            "checks": [{"name": "launch-matches-log", "status": "pass"}]}  # fmt: skip
    assert rel.gate_variant(entry, checks, [("pf.json", good)], True).ok
    replayed = dict(good, run={"replay": True})
    gate = rel.gate_variant(entry, checks, [("pf.json", replayed)], True)
    assert not gate.ok and "REPLAY" in gate.reasons[0]
    assert not rel.gate_variant(entry, checks, [("pf.json", dict(good, replay=True))], True).ok
    spoofed = dict(good, checks=[{"name": "launch-matches-log", "status": "fail"}])
    gate = rel.gate_variant(entry, checks, [("pf.json", spoofed)], True)
    assert not gate.ok and "launch-matches-log" in gate.reasons[0]


def test_a_preflight_from_another_image_under_this_digest_is_refused_by_its_lock():
    """`validators run/parse --image` records the lock its image carried; the gate compares it with the
    lock at the digest. A host-side report (SageMaker's) has no `lock` key: its digest is the evidence."""
    from efa_validators.run.imagebind import binding, lock_sha256

    lock = {"name": "v", "components": {"nccl": {"version": "2.27.7"}}}
    other = {"name": "w", "components": {"nccl": {"version": "2.26.2"}}}
    ref = "r/i@sha256:" + "d" * 64
    ran_here = {
        "image": {"ref": ref, "digest": ref[-71:], "lock": {"name": "v", "sha256": lock_sha256(lock)}}
    }
    assert rel.preflight_lock_refusal(ran_here, lock) is None
    why = rel.preflight_lock_refusal(ran_here, other)
    assert why and "'v'" in why and "'w'" in why
    assert "did not run in an image this tool built" in rel.preflight_lock_refusal(
        {"image": {"ref": ref, "lock": None}}, lock
    )
    assert rel.preflight_lock_refusal({"image": {"ref": ref, "digest": ref[-71:]}}, lock) is None  # SageMaker
    # the binding reads the lock the image carries, hashed the same way the gate hashes the digest's
    import json as _json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        _json.dump(
            lock, fh, indent=2
        )  # the image's file is indented: the hash is of the content, not the text
    bound = binding(ref, {"EFA_IMAGE_LOCK": fh.name})
    assert bound["digest"] == "sha256:" + "d" * 64 and bound["lock"]["sha256"] == lock_sha256(lock)
    assert binding(ref, {"EFA_IMAGE_LOCK": fh.name + ".missing"})["lock"] is None


def test_component_changes_compare_versions_as_numbers():
    old = {"components": {"aws_ofi_nccl": {"version": "1.9.1"}, "gdrcopy": {"version": "2.4"}}}
    new = {"components": {"aws_ofi_nccl": {"version": "1.10.0"}, "nccl": {"version": "2.27.7"}}}
    rows = {r[0]: r[1:] for r in rel.component_changes(new, old)}
    assert rows["aws_ofi_nccl"] == ("1.9.1", "1.10.0", "upgraded")  # a string compare would say downgraded
    assert rows["gdrcopy"] == ("2.4", None, "removed")
    assert rows["nccl"] == (None, "2.27.7", "added")


@pytest.mark.docker
def test_release_gathers_the_summaries_of_a_fanned_out_matrix(registry, small_images, tmp_path, monkeypatch):
    """Two CI jobs, one variant each, each with its own summary and check report: one release step."""
    a, b = small_images["a"], small_images["b"]
    sum_a = _pushed(tmp_path, monkeypatch, registry, a, "fan-a", "fan-a")
    sum_b = _pushed(tmp_path, monkeypatch, registry, b, "fan-b", "fan-b")
    chk_a = write_check_report(tmp_path / "chk-a.json", [("fan-a", a.id, True)])
    chk_b = write_check_report(tmp_path / "chk-b.json", [("fan-b", b.id, True)])
    argv = ["release", "--summary", str(sum_a), "--summary", str(sum_b), "--checks", str(chk_a),
            "--checks", str(chk_b), "--records", str(tmp_path / "rec"), "--tag", "{variant}-r1"]  # fmt: skip
    assert _run(argv, monkeypatch).rc == 0
    api = RegistryAPI(registry.host)
    assert api.manifest("h6-test/fan-a", "fan-a-r1").config_digest == a.id
    assert api.manifest("h6-test/fan-b", "fan-b-r1").config_digest == b.id
    rec_b = json.loads((tmp_path / "rec" / "fan-b" / "latest.json").read_text())
    assert rec_b["reports"]["checks"]["path"] == str(chk_b)
    assert rec_b["reports"]["checks"]["sha256"] == rel.sha256_file(chk_b)


def test_gather_summaries_prefers_the_built_entry_and_refuses_ambiguity():
    skipped = {"variant": "v", "status": "failed", "image_id": None}
    built = {"variant": "v", "status": "built", "image_id": "sha256:1"}
    other = {"variant": "v", "status": "built", "image_id": "sha256:2"}
    assert rel.gather_summaries([("j1", {"variants": [skipped]}), ("j2", {"variants": [built]})]) == [built]
    assert rel.gather_summaries([("j1", {"variants": [built]}), ("j2", {"variants": [skipped]})]) == [built]
    with pytest.raises(rel.UserError, match="built as sha256:2"):
        rel.gather_summaries([("j1", {"variants": [built]}), ("j2", {"variants": [other]})])


@pytest.mark.docker
def test_dry_run_checks_everything_and_promotes_nothing(registry, small_images, tmp_path, monkeypatch):
    image = small_images["a"]
    summary = _pushed(tmp_path, monkeypatch, registry, image, "dry", "dry")
    checks = write_check_report(tmp_path / "checks.json", [("dry", image.id, True)])
    rc, out, _err = _release(tmp_path, monkeypatch, summary, checks, "--tag", "dry-r1", "--dry-run")
    assert rc == 0
    assert "would tag" in out
    assert RegistryAPI(registry.host).manifest("h6-test/dry", "dry-r1") is None
    assert not (tmp_path / "rec").exists()


@pytest.mark.docker
def test_release_in_ecr_on_moto(aws, registry, small_images, tmp_path, monkeypatch):
    """ECR promotion by PutImage on moto: the manifest is the real one of the image pushed to the local
    registry (moto's ECR has no registry to docker-push to); the lock comes from the local engine's image."""
    from imagebuild.adapters import ecr
    from imagebuild.adapters.aws import aws_client
    from imagebuild.adapters.registry import ImageRef

    image = small_images["b"]
    src = _pushed(tmp_path, monkeypatch, registry, image, "ecrrelsrc", "ecrrelsrc")
    manifest = RegistryAPI(registry.host).manifest("h6-test/ecrrelsrc", "dev")
    client = aws_client("ecr", "us-east-1", aws.endpoint_url)
    uri = ecr.ensure_repository(client, "h6-test/ecrrel")["repositoryUri"]
    host = uri.split("/", 1)[0]
    ecr.put_tag(client, ImageRef(host, "h6-test/ecrrel", "dev"), manifest)
    entry = json.loads(src.read_text())["variants"][0]
    entry.update(variant="ecrrel", pushed=[f"{uri}:dev@{manifest.digest}"], digest=manifest.digest)
    summary = write_summary(tmp_path / "ecr-summary.json", [entry])
    checks = write_check_report(tmp_path / "checks.json", [("ecrrel", image.id, True)])
    ecr_args = ["--ecr", "--region", "us-east-1", "--endpoint-url", aws.endpoint_url]
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "ecrrel-r1", *ecr_args).rc == 0
    look = ecr.existing_image(client)
    assert look(ImageRef(host, "h6-test/ecrrel", "ecrrel-r1")).digest == manifest.digest
    record = json.loads((tmp_path / "rec" / "ecrrel" / "latest.json").read_text())
    assert (
        record["lock"] == small_lock("h6-b")
        and record["repositories"][0]["ref"] == f"{uri}@{manifest.digest}"
    )
    # again with the same tag: already there with this digest -> fine
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "ecrrel-r1", *ecr_args).rc == 0
    # a release tag that names another image's digest -> refused, and left as it was
    other_src = _pushed(tmp_path, monkeypatch, registry, small_images["a"], "ecrother", "ecrother")
    assert json.loads(other_src.read_text())["variants"][0]["digest"]
    other = RegistryAPI(registry.host).manifest("h6-test/ecrother", "dev")
    ecr.put_tag(client, ImageRef(host, "h6-test/ecrrel", "taken"), other)
    assert _release(tmp_path, monkeypatch, summary, checks, "--tag", "taken", *ecr_args).rc == 1
    assert look(ImageRef(host, "h6-test/ecrrel", "taken")).digest == other.digest


def test_registry_down_at_release_is_exit_2_and_nothing_written(tmp_path, monkeypatch):
    from services import free_port

    down = f"127.0.0.1:{free_port()}"
    digest, image_id = "sha256:" + "d" * 64, "sha256:" + "e" * 64
    entry = {"variant": "down", "status": "built", "image_id": image_id, "digest": digest,
             "pushed": [f"{down}/h6-test/down:dev@{digest}"], "tags": ["h6-test/down:dev"]}  # fmt: skip
    summary = write_summary(tmp_path / "s.json", [entry])
    checks = write_check_report(tmp_path / "c.json", [("down", image_id, True)])
    rc, _out, err = _release(tmp_path, monkeypatch, summary, checks, "--tag", "down-r1", "--attempts", "2")
    assert rc == 2
    assert down in err and "unreachable" in err and "after 2 attempts" in err
    assert not (tmp_path / "rec").exists()
