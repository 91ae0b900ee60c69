"""Fan-in (issue 31, item 5): twins built and pushed by two separate `build.py` runs (two output folders, as
two CI runners) become one image index through `build.py fan-in`, gated as a whole, and a release of it with
`--require-signed` is verifiable with `build.py verify`. Against the real registry; the arm64 twin is built
FROM the arm64 local base (a LABEL step only: nothing of it runs, so no emulation is needed to build it).
"""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
from cli import build_py
from release_setup import make_keys
from services import write_check_report

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.release.fanin import is_content_tag, shared_targets
from imagebuild.release.index import INDEX_TYPE

pytest_plugins = ["services_fixtures"]  # fixtures: registry, docker_client, local_base, arm64_base


def _runner(tmp_path, name, base, tag, platform=None):
    """One CI job's build: a prepared variant (its lock tags the shared `tag`) built by `build.py build`
    into its own output folder; returns that folder."""
    out = tmp_path / f"runner-{name}"
    vdir = out / name
    (vdir / "context").mkdir(parents=True)
    (vdir / "Dockerfile").write_text(
        f"FROM {base}\nLABEL org.efa-image-build.test-fan-in={json.dumps(tag)}\n"
    )
    lock = {"schema": "efa-image-build/lock/v1", "name": name, "components": {}, "labels": {}, "tags": [tag]}
    if platform:
        lock["platform"] = platform
    (vdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    argv = ["build", "--builder", "classic", "--no-render", "--out", str(out), "--plain"]
    res = build_py(*argv, "--cache", str(tmp_path / "cache"))
    assert res.rc == 0, res.err
    return out


def test_shared_targets_leave_content_tags_and_channels_to_each_variant():
    tags = ["t/app:v1-" + "a" * 12, "t/app:v1", "t/app:dev"]
    amd = {"variant": "x", "context_hash": "a" * 64, "tags": tags, "channels": ["dev"]}
    arm = {"variant": "x-arm64", "context_hash": "b" * 64, "tags": ["t/app:v1-" + "b" * 12, "t/app:v1"]}
    solo = {"variant": "y", "context_hash": "c" * 64, "tags": ["t/y:v1-" + "c" * 12, "t/y:stable"]}
    assert is_content_tag(amd, "v1-" + "a" * 12) and not is_content_tag(amd, "v1")
    assert shared_targets([amd, arm, solo], "team/") == {
        ("team/t/app", "v1"): ["x", "x-arm64"],
        ("team/t/y", "stable"): ["y"],
    }


def test_the_fan_in_gate_asks_for_a_pre_flight_only_when_told():
    from imagebuild.release.fanin import gate_all

    image_id, digest = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    entry = {"variant": "x", "status": "built", "image_id": image_id, "digest": digest,
             "pushed": [f"h:5000/t/app:v1-amd64@{digest}"]}  # fmt: skip
    checks = {"images": [{"image_id": image_id, "passed": True, "checks": [{"name": "c", "status": "pass"}]}]}
    assert gate_all([entry], checks, [], require_preflight=False) == []
    (why,) = gate_all([entry], checks, [], require_preflight=True)
    assert why.startswith("x: no pre-flight report names digest")
    passing = ("pf.json", {"verdict": "pass", "image": {"digest": digest}})
    assert gate_all([entry], checks, [passing], require_preflight=True) == []
    assert gate_all([dict(entry, status="failed")], checks, [], False) == [
        "x: build status is 'failed': no image"
    ]


def test_fan_in_without_a_job_summary_is_exit_2(tmp_path):
    (tmp_path / "job").mkdir()
    for where in (["--registry", "127.0.0.1:9"], ["--ecr", "--region", "us-east-1"]):
        res = build_py("fan-in", "--from", str(tmp_path / "job"), *where)
        assert res.rc == 2 and "no summary.json in it" in res.err and str(tmp_path / "job") in res.err, (
            res.err
        )
        assert "Traceback" not in res.err


@pytest.mark.docker
def test_twins_from_two_runners_become_one_index_gated_released_and_verified(
    registry, docker_client, local_base, arm64_base, tmp_path
):
    repo = f"fanin-{uuid.uuid4().hex[:10]}/app"
    key, pub = make_keys(tmp_path, "team")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("variants: []\n")
    host = ["--registry", registry.host]
    api = RegistryAPI(registry.host)
    jobs = {
        "amd": _runner(tmp_path, "fan", local_base, f"{repo}:v1"),
        "arm": _runner(tmp_path, "fan-arm64", arm64_base, f"{repo}:v1", platform="linux/arm64"),
    }
    made = {k: json.loads((d / "summary.json").read_text())["variants"][0] for k, d in jobs.items()}
    try:
        assert docker_client.images.get(made["arm"]["image_id"]).attrs["Architecture"] == "arm64"
        # each runner pushes its part (the shared tag under TAG-ARCH) and signs what it pushed
        for d in jobs.values():
            res = build_py("push", "--summary", d / "summary.json", *host, "--fan-out", "--sign-key", key,
                           "--matrix", matrix)  # fmt: skip
            assert res.rc == 0, res.err
        assert api.manifest(repo, "v1") is None  # neither runner took the shared tag
        digests = {
            k: json.loads((d / "summary.json").read_text())["variants"][0]["digest"] for k, d in jobs.items()
        }
        assert api.manifest(repo, "v1-amd64").digest == digests["amd"]
        assert api.manifest(repo, "v1-arm64").digest == digests["arm"]
        content = made["arm"]["tags"][0].split(":", 1)[1]  # the variant's own tag is pushed as it is
        assert api.manifest(repo, content).digest == digests["arm"]

        # the arm64 runner's checks have not passed: fan-in refuses, and writes nothing
        write_check_report(jobs["amd"] / "test-report.json", [("fan", made["amd"]["image_id"], True)])
        write_check_report(jobs["arm"] / "test-report.json", [("fan-arm64", made["arm"]["image_id"], False)])
        out = tmp_path / "fan-in"
        argv = ["fan-in", "--from", jobs["amd"], "--from", jobs["arm"], "--out", out, *host]
        res = build_py(*argv)
        assert res.rc == 1 and "fan-arm64: static checks did not pass" in res.err, res.err
        assert api.manifest(repo, "v1") is None and not out.exists()

        # both passed: one index of both runners' images under the shared tag, platforms from their configs
        write_check_report(jobs["arm"] / "test-report.json", [("fan-arm64", made["arm"]["image_id"], True)])
        res = build_py(*argv)
        assert res.rc == 0, res.err
        index = api.manifest(repo, "v1")
        assert index is not None and index.media_type == INDEX_TYPE
        plats = {m["platform"]["architecture"]: m["digest"] for m in json.loads(index.body)["manifests"]}
        assert plats == {"amd64": digests["amd"], "arm64": digests["arm"]}
        merged = {e["variant"]: e for e in json.loads((out / "summary.json").read_text())["variants"]}
        assert {e["index"] for e in merged.values()} == {f"{registry.host}/{repo}:v1@{index.digest}"}

        # the release of the whole, signatures required, tags the index; each platform's image verifies
        argv = ["release", "--summary", out / "summary.json", "--checks", out / "test-report.json"]
        res = build_py(*argv, "--records", tmp_path / "rec", *host, "--tag", "r1", "--require-signed", pub)
        assert res.rc == 0, res.err
        assert api.manifest(repo, "r1").digest == index.digest
        for k in ("amd", "arm"):
            res = build_py("verify", f"{registry.host}/{repo}@{digests[k]}", "--key", pub)
            assert res.rc == 0 and res.out.startswith("verified\t"), res.err
        # and the release tag itself, as a user checks it: every entry of the index it names (issue 31)
        res = build_py("verify", f"{registry.host}/{repo}:r1", "--key", pub)
        assert res.rc == 0, res.out + res.err
        record = json.loads((tmp_path / "rec" / "fan-arm64" / "latest.json").read_text())
        assert record["index"]["digest"] == index.digest
    finally:
        for entry in made.values():
            for tag in docker_client.images.get(entry["image_id"]).attrs.get("RepoTags") or []:
                if repo in tag:
                    docker_client.images.remove(tag)
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
