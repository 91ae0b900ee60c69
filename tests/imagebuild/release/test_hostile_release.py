"""Release under concurrency and faults, against the real registry (Debian's docker-registry on 127.0.0.1).

Two releases of different digests to one tag at once leave the tag on one digest and one record; a tag taken
by another digest between our write and our read-back refuses the release; a registry killed between two
tag writes leaves a message naming what moved, and a rerun completes the promotion.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from cli import BUILD_PY, Result, build_py
from paths import IMPORT_PATH, ROOT
from services import (
    REGISTRY_BIN,
    Fault,
    FaultProxy,
    Registry,
    _wait_http,
    build_small_image,
    small_lock,
    summary_entry,
    write_check_report,
    write_summary,
)

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.release.destinations import Registries

pytest_plugins = ["services_fixtures"]  # fixtures: registry


@pytest.fixture(scope="module")
def small_images(docker_client, local_base):
    """Two small images of this module's own (a unique lock name: ids no other session's run shares and
    removes), removed at the end."""
    nonce = uuid.uuid4().hex[:12]
    made = {
        k: build_small_image(
            docker_client, local_base, small_lock(f"h13-{k}-{nonce}"), f"h13-test/{k}:{nonce}"
        )
        for k in ("a", "b")
    }
    yield made
    for image in made.values():
        docker_client.images.remove(image.id, force=True)


def _run(argv, monkeypatch) -> Result:
    return build_py(*argv)


def _push(tmp_path, monkeypatch, reg, image, variant, repo, tag):
    summary = write_summary(
        tmp_path / f"summary-{variant}-{tag}.json",
        [summary_entry(variant, image, tags=[f"h6-test/{repo}:{tag}"])],
    )
    assert _run(["push", "--summary", str(summary), "--registry", reg.host], monkeypatch).rc == 0
    return summary, json.loads(summary.read_text())["variants"][0]["digest"]


def _records(folder: Path) -> list:
    names = [p.name for p in folder.glob("*.json") if p.name not in ("latest.json", "pending.json")]
    return sorted(names) if folder.exists() else []


@pytest.fixture
def own_registry():
    """A registry this test may kill and restart (same storage, same port)."""
    if not os.path.exists(REGISTRY_BIN):
        pytest.fail(f"{REGISTRY_BIN} missing (apt install docker-registry)")
    reg = Registry().start()
    yield reg
    reg.stop()


def _restart(reg: Registry) -> None:
    log = reg.root / "registry.log"
    with open(log, "ab") as fh:
        reg.proc = subprocess.Popen(
            [REGISTRY_BIN, "serve", str(reg.root / "config.yml")], stdout=fh, stderr=subprocess.STDOUT
        )
    _wait_http(f"http://{reg.host}/v2/", reg.proc, 20, log)


@pytest.mark.docker
def test_two_releases_at_once_leave_one_digest_and_one_record(registry, small_images, tmp_path, monkeypatch):
    sa, da = _push(tmp_path, monkeypatch, registry, small_images["a"], "race", "race", "dev-a")
    sb, db = _push(tmp_path, monkeypatch, registry, small_images["b"], "race", "race", "dev-b")
    ca = write_check_report(tmp_path / "ca.json", [("race", small_images["a"].id, True)])
    cb = write_check_report(tmp_path / "cb.json", [("race", small_images["b"].id, True)])
    env = dict(os.environ, PYTHONPATH=IMPORT_PATH)
    procs = [
        subprocess.Popen(
            [
                *BUILD_PY,
                "release",
                "--summary",
                str(s),
                "--checks",
                str(c),
                "--tag",
                "race-1",
                "--records",
                str(tmp_path / "rec"),
            ],  # fmt: skip
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s, c in ((sa, ca), (sb, cb))
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], (codes, outs)
    winner = (da, db)[codes.index(0)]
    loser_err = outs[codes.index(1)][1]
    assert "never overwritten" in loser_err and "Traceback" not in loser_err
    assert RegistryAPI(registry.host).manifest("h6-test/race", "race-1").digest == winner
    assert len(_records(tmp_path / "rec" / "race")) == 1
    record = json.loads((tmp_path / "rec" / "race" / "latest.json").read_text())
    assert record["digest"] == winner and record["repositories"][0]["moved"] == ["race-1"]


@pytest.mark.docker
def test_a_tag_taken_between_write_and_read_back_refuses_the_release(
    registry, small_images, tmp_path, monkeypatch
):
    """Another writer (a release on another host: no shared lock) wins the tag right after our write."""
    sa, da = _push(tmp_path, monkeypatch, registry, small_images["a"], "steal", "steal", "dev-a")
    _sb, db = _push(tmp_path, monkeypatch, registry, small_images["b"], "steal", "steal", "dev-b")
    api = RegistryAPI(registry.host)
    theirs = api.manifest("h6-test/steal", "dev-b")
    real_put = Registries.put

    def put_then_stolen(self, host, repository, tag, manifest):
        got = real_put(self, host, repository, tag, manifest)
        RegistryAPI(host).put_manifest(repository, tag, theirs)
        return got

    monkeypatch.setattr(Registries, "put", put_then_stolen)
    checks = write_check_report(tmp_path / "c.json", [("steal", small_images["a"].id, True)])
    argv = ["release", "--summary", str(sa), "--checks", str(checks), "--tag", "steal-1"]
    rc, _out, err = _run([*argv, "--records", str(tmp_path / "rec")], monkeypatch)
    assert rc == 1
    assert f"names {db} after it was written as {da}: another release won the tag" in err
    assert "no record written" in err
    assert api.manifest("h6-test/steal", "steal-1").digest == db
    assert _records(tmp_path / "rec" / "steal") == []


@pytest.mark.docker
def test_registry_killed_mid_promotion_says_what_moved_and_a_rerun_completes(
    own_registry, small_images, tmp_path, monkeypatch
):
    reg = own_registry
    summary, digest = _push(tmp_path, monkeypatch, reg, small_images["a"], "half", "half", "dev")
    checks = write_check_report(tmp_path / "c.json", [("half", small_images["a"].id, True)])
    real_put = Registries.put
    puts = []

    def put_then_die(self, host, repository, tag, manifest):
        got = real_put(self, host, repository, tag, manifest)
        puts.append(tag)
        reg.proc.kill()  # the registry dies after the first tag write
        reg.proc.wait()
        return got

    monkeypatch.setattr(Registries, "put", put_then_die)
    argv = ["release", "--summary", str(summary), "--checks", str(checks), "--tag", "h-1", "--tag", "h-2"]
    argv += ["--records", str(tmp_path / "rec"), "--attempts", "2"]
    rc, _out, err = _run(argv, monkeypatch)
    assert rc == 2
    repo = f"{reg.host}/h6-test/half"
    assert puts == ["h-1"]
    assert f"tags moved to {digest} by this run: {repo}:h-1\n" in err
    assert f"tags not promoted: {repo}:h-2\n" in err
    assert "rerun the same command" in err and "Traceback" not in err
    # no record, but the intent names every tag the run was writing (the tag it wrote is never unnamed)
    assert [p.name for p in (tmp_path / "rec" / "half").iterdir()] == ["pending.json"]
    pending = json.loads((tmp_path / "rec" / "half" / "pending.json").read_text())
    assert [(w["tag"], w["digest"]) for w in pending["writes"]] == [("h-1", digest), ("h-2", digest)]

    _restart(reg)
    monkeypatch.setattr(Registries, "put", real_put)
    assert _run(argv, monkeypatch).rc == 0
    api = RegistryAPI(reg.host)
    assert [api.manifest("h6-test/half", t).digest for t in ("h-1", "h-2")] == [digest, digest]
    record = json.loads((tmp_path / "rec" / "half" / "latest.json").read_text())
    assert record["repositories"][0]["already"] == ["h-1"]
    assert record["repositories"][0]["moved"] == ["h-2"]
    assert record["repositories"][0]["tags"] == ["h-1", "h-2"]
    assert not (tmp_path / "rec" / "half" / "pending.json").exists()


@pytest.mark.docker
def test_an_unwritable_records_folder_is_exit_2_before_any_tag_moves(
    registry, small_images, tmp_path, monkeypatch
):
    summary, _digest = _push(tmp_path, monkeypatch, registry, small_images["a"], "norec", "norec", "dev")
    checks = write_check_report(tmp_path / "c.json", [("norec", small_images["a"].id, True)])
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["release", "--summary", str(summary), "--checks", str(checks), "--tag", "n-1"]
    rc, _out, err = _run([*argv, "--records", str(blocker / "rec")], monkeypatch)
    assert rc == 2
    assert f"{blocker / 'rec'}: key '--records': cannot write release records (a file is in the way)" in err
    assert RegistryAPI(registry.host).manifest("h6-test/norec", "n-1") is None


@pytest.mark.docker
def test_a_registry_serving_other_bytes_for_the_digest_gets_no_release_tag(
    registry, small_images, tmp_path, monkeypatch
):
    """In front of the real registry, GET manifests/<digest> answers with other bytes naming the same image
    (no digest header): the release refuses (exit 1, naming the registry and both digests) and PUTs nothing;
    the release tag does not exist afterwards (a release tag, once written, could never be rewritten)."""
    proxy = FaultProxy(upstream=registry.host).start()
    try:
        summary, digest = _push(tmp_path, monkeypatch, proxy, small_images["a"], "lie", "lie", "dev")
        real = RegistryAPI(registry.host).manifest("h6-test/lie", digest)
        other = json.dumps(json.loads(real.body), indent=1).encode()
        assert other != real.body and json.loads(other)["config"]["digest"] == small_images["a"].id
        puts = []

        def saw_put(method, path, _headers) -> bool:  # records every PUT, answers none of them
            if method == "PUT":
                puts.append(path)
            return False

        proxy.faults[:] = [
            Fault(saw_put),
            Fault(lambda m, p, h: m == "GET" and p.endswith(f"/manifests/{digest}"), status=200,
                  times=10**6, body=other, content_type=real.media_type),
        ]  # fmt: skip
        checks = write_check_report(tmp_path / "c.json", [("lie", small_images["a"].id, True)])
        argv = ["release", "--summary", str(summary), "--checks", str(checks), "--tag", "lie-1"]
        rc, _out, err = _run([*argv, "--records", str(tmp_path / "rec")], monkeypatch)
        assert rc == 1, err
        other_digest = "sha256:" + hashlib.sha256(other).hexdigest()
        assert f"registry {proxy.host} answered GET h6-test/lie@{digest} with other bytes" in err
        assert f"(their sha256 is {other_digest})" in err and "Traceback" not in err
        assert puts == []
        assert RegistryAPI(registry.host).manifest("h6-test/lie", "lie-1") is None
        assert _records(tmp_path / "rec" / "lie") == []
    finally:
        proxy.stop()


@pytest.mark.docker
def test_a_tag_write_whose_answer_is_lost_is_reported_as_what_the_registry_holds_now(
    registry, small_images, tmp_path, monkeypatch
):
    """The registry stores the tag but a gateway answers 502 each time: exit 2, and the message says, from
    the registry itself, that the tag exists on this digest (not only that this run did not see it move)."""
    proxy = FaultProxy(upstream=registry.host).start()
    try:
        summary, digest = _push(tmp_path, monkeypatch, proxy, small_images["a"], "lost", "lost", "dev")
        lost = Fault(lambda m, p, h: m == "PUT" and p.endswith("/manifests/lost-1"), status=502,
                     times=10**6, forward=True)  # fmt: skip
        proxy.faults[:] = [lost]
        checks = write_check_report(tmp_path / "c.json", [("lost", small_images["a"].id, True)])
        argv = ["release", "--summary", str(summary), "--checks", str(checks), "--tag", "lost-1"]
        argv += ["--tag", "lost-2", "--records", str(tmp_path / "rec"), "--attempts", "2"]
        rc, _out, err = _run(argv, monkeypatch)
        assert rc == 2, err
        repo = f"{proxy.host}/h6-test/lost"
        assert lost.hits == 2 and "HTTP 502" in err and "Traceback" not in err
        assert f"tags not promoted: {repo}:lost-1, {repo}:lost-2\n" in err
        assert f"in the registry now: tags on {digest}: {repo}:lost-1\n" in err
        assert f"in the registry now: tags absent: {repo}:lost-2\n" in err
        assert RegistryAPI(registry.host).manifest("h6-test/lost", "lost-1").digest == digest
        assert _records(tmp_path / "rec" / "lost") == []
    finally:
        proxy.stop()
