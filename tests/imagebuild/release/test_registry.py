"""Push by digest to a real OCI registry (Debian's docker-registry on 127.0.0.1), with and without auth.

Faults are real too: a registry port nobody listens on, a wrong password, a tag that holds another image,
and throttling injected by a small HTTP proxy (tests/services.py FaultProxy) in front of the registry.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from cli import Result, build_py
from services import (
    RUN,
    SMALL_TAGS,
    Fault,
    FaultProxy,
    free_port,
    summary_entry,
    write_summary,
)

from imagebuild.adapters.docker_engine import classify_push_error
from imagebuild.adapters.registry import Credentials, RegistryAPI, split_ref

pytest_plugins = ["services_fixtures"]  # fixtures: registry, auth_registry, moto_server, aws, small_images

pytestmark = pytest.mark.docker


def _push(argv, monkeypatch, stdin: str = "") -> Result:
    return build_py("push", *argv, stdin=stdin)


def _summary(tmp_path, image, variant="a", tags=None):
    return write_summary(tmp_path / "summary.json", [summary_entry(variant, image, tags=tags)])


def test_split_ref_follows_the_engine_rules():
    assert split_ref("127.0.0.1:5000/team/img:1.0") == split_ref("127.0.0.1:5000/team/img:1.0")
    ref = split_ref("127.0.0.1:5000/team/img:1.0")
    assert (ref.registry, ref.repository, ref.tag) == ("127.0.0.1:5000", "team/img", "1.0")
    assert split_ref("team/img").registry == ""  # the engine's default registry, not named here
    assert split_ref("localhost/img:x").registry == "localhost"
    with pytest.raises(Exception, match="bad repository"):
        split_ref("127.0.0.1:5000/Team/IMG:1")


def test_push_pull_back_digests_match(registry, small_images, docker_client, tmp_path, monkeypatch):
    image = small_images["a"]
    summary = _summary(tmp_path, image, tags=["h6-test/a:dev", "h6-test/a:nccl2.26.2"])
    assert _push(["--summary", str(summary), "--registry", registry.host], monkeypatch).rc == 0
    doc = json.loads(summary.read_text())
    entry = doc["variants"][0]
    digest = entry["digest"]
    assert digest.startswith("sha256:") and len(digest) == 71
    assert set(entry["pushed"]) == {
        f"{registry.host}/h6-test/a:dev@{digest}",
        f"{registry.host}/h6-test/a:nccl2.26.2@{digest}",
    }
    # the registry's manifest names this very image (config digest == image id)
    remote = RegistryAPI(registry.host).manifest("h6-test/a", "dev")
    assert remote.digest == digest and remote.config_digest == image.id
    # pull back by digest: same image id
    pulled = docker_client.images.pull(f"{registry.host}/h6-test/a@{digest}")
    assert pulled.id == image.id
    assert f"{registry.host}/h6-test/a@{digest}" in pulled.attrs["RepoDigests"]
    # pushing again is a no-op, not an overwrite
    rc, _out, err = _push(["--summary", str(summary), "--registry", registry.host], monkeypatch)
    assert rc == 0
    assert "already holds this image" in err


def test_a_push_leaves_the_engines_tags_as_they_were(registry, small_images, docker_client, tmp_path):
    """Issue 42 item 4: the engine pushes only a tag it holds, so push adds HOST/REPO:TAG to the image; it
    left those registry-qualified tags behind. Now only the tags the push added are removed: a tag the user
    made before (here on the other image, B) is kept and still names B."""
    repo = f"h6-test/engine-tags-{RUN}"
    image, other = small_images["a"], small_images["b"]
    users_own = f"{registry.host}/{repo}:mine"
    other.tag(f"{registry.host}/{repo}", "mine")
    summary = _summary(tmp_path, image, tags=[f"{repo}:one", f"{repo}:mine"])
    try:
        res = build_py("push", "--summary", summary, "--registry", registry.host, "--force")
        assert res.rc == 0, res.err
        assert RegistryAPI(registry.host).manifest(repo, "one").config_digest == image.id
        tags = set(docker_client.images.get(image.id).tags)
        assert not {t for t in tags if t.startswith(f"{registry.host}/")}, tags
        assert SMALL_TAGS["a"] in tags  # the image's own tag stays
        assert docker_client.images.get(users_own).id == other.id
    finally:
        docker_client.images.remove(users_own, noprune=True)


def test_existing_tag_with_other_image_is_refused_without_force(
    registry, small_images, tmp_path, monkeypatch
):
    first = _summary(tmp_path, small_images["a"], tags=["h6-test/clash:v1"])
    assert _push(["--summary", str(first), "--registry", registry.host], monkeypatch).rc == 0
    before = RegistryAPI(registry.host).manifest("h6-test/clash", "v1")
    other = write_summary(
        tmp_path / "other.json", [summary_entry("b", small_images["b"], tags=["h6-test/clash:v1"])]
    )
    rc, _out, err = _push(["--summary", str(other), "--registry", registry.host], monkeypatch)
    assert rc == 1
    assert "already exists" in err and "not overwriting" in err
    assert RegistryAPI(registry.host).manifest("h6-test/clash", "v1").digest == before.digest
    assert json.loads(other.read_text())["variants"][0]["digest"] is None


def test_force_moves_only_a_tag_extra_never_a_matrix_tag(registry, small_images, tmp_path, monkeypatch):
    """Issue 30: the summary's own tags (content tags, twins' shared tag) are write-once even with --force;
    only a `--tag` extra is the user's to move."""
    repo = f"h6-test/force-{RUN}"
    api = RegistryAPI(registry.host)
    argv = ["--registry", registry.host, "--tag", "nightly"]
    first = _summary(tmp_path, small_images["a"], tags=[f"{repo}:a-content"])
    assert _push(["--summary", str(first), *argv], monkeypatch).rc == 0
    before = api.manifest(repo, "a-content")
    # the next commit's content: its own content tag, and --force moves the extra to it
    second = write_summary(tmp_path / "b.json", [summary_entry("b", small_images["b"], tags=[f"{repo}:b"])])
    rc, _out, err = _push(["--summary", str(second), *argv], monkeypatch)
    assert rc == 1 and "not overwriting" in err and "write-once" not in err  # no --force: the extra stays
    assert api.manifest(repo, "nightly").config_digest == small_images["a"].id
    assert _push(["--summary", str(second), *argv, "--force"], monkeypatch).rc == 0
    assert api.manifest(repo, "nightly").config_digest == small_images["b"].id
    # another image under the first content's tag (a build that did not reproduce): refused, --force or not
    clash = write_summary(
        tmp_path / "clash.json", [summary_entry("b", small_images["b"], tags=[f"{repo}:a-content"])]
    )
    rc, _out, err = _push(["--summary", str(clash), "--registry", registry.host, "--force"], monkeypatch)
    assert rc == 1
    assert "write-once, --force or not" in err
    assert api.manifest(repo, "a-content").digest == before.digest


def test_auth_registry_with_password_stdin(auth_registry, small_images, docker_client, tmp_path, monkeypatch):
    summary = _summary(tmp_path, small_images["b"], variant="b")
    argv = ["--summary", str(summary), "--registry", auth_registry.host, "--username", auth_registry.user]
    out = _push([*argv, "--password-stdin"], monkeypatch, stdin=auth_registry.password + "\n")
    assert out.rc == 0
    digest = json.loads(summary.read_text())["variants"][0]["digest"]
    api = RegistryAPI(auth_registry.host, Credentials(auth_registry.user, auth_registry.password))
    assert api.manifest("h6-test/b", "dev").digest == digest
    # no credential anywhere: not in what we printed, the summary, or the image's labels
    secret = auth_registry.password
    assert secret not in out.out + out.err
    assert secret not in summary.read_text()
    assert secret not in json.dumps(docker_client.images.get(small_images["b"].id).attrs)
    assert secret not in repr(api.creds)


def test_auth_refused_is_exit_2(auth_registry, small_images, tmp_path, monkeypatch):
    summary = _summary(tmp_path, small_images["b"], variant="b", tags=["h6-test/refused:dev"])
    argv = [
        "--summary",
        str(summary),
        "--registry",
        auth_registry.host,
        "--username",
        "h6user",
        "--password-stdin",
    ]
    rc, _out, err = _push(argv, monkeypatch, stdin="wrong-password\n")
    assert rc == 2
    assert "refused" in err and auth_registry.host in err
    assert "wrong-password" not in err
    # no credentials at all: also a clear exit 2
    argv = ["--summary", summary, "--registry", auth_registry.host, "--docker-config", tmp_path / "none"]
    rc, _out, err = _push(argv, monkeypatch)
    assert rc == 2
    assert "no credentials" in err


def test_auth_from_docker_config(auth_registry, small_images, tmp_path, monkeypatch):
    cfg = tmp_path / "dockercfg"
    cfg.mkdir()
    token = base64.b64encode(f"{auth_registry.user}:{auth_registry.password}".encode()).decode()
    (cfg / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": token}}}))
    summary = _summary(tmp_path, small_images["a"], tags=["h6-test/fromcfg:dev"])
    argv = ["--summary", str(summary), "--registry", auth_registry.host, "--docker-config", str(cfg)]
    assert _push(argv, monkeypatch).rc == 0
    assert json.loads(summary.read_text())["variants"][0]["digest"].startswith("sha256:")


def test_registry_down_is_exit_2_and_bounded(small_images, tmp_path, monkeypatch):
    summary = _summary(tmp_path, small_images["a"])
    down = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    rc, _out, err = _push(["--summary", str(summary), "--registry", down, "--attempts", "3"], monkeypatch)
    assert rc == 2
    assert time.monotonic() - start < 30
    assert "unreachable" in err and down in err and "after 3 attempts" in err
    assert json.loads(summary.read_text())["variants"][0]["digest"] is None


def test_throttled_registry_is_retried(registry, small_images, tmp_path, monkeypatch):
    """429 then 503 on the manifest look-up and on the manifest PUT: our bounded retries get through."""
    lookups = Fault(lambda m, p, h: m == "GET" and "/manifests/" in p, status=429, times=1, retry_after="1")
    puts = Fault(lambda m, p, h: m == "PUT" and "/manifests/" in p, status=503, times=1)
    proxy = FaultProxy(upstream=registry.host, faults=[lookups, puts]).start()
    try:
        summary = _summary(tmp_path, small_images["a"], tags=["h6-test/throttled:dev"])
        rc, _out, err = _push(["--summary", str(summary), "--registry", proxy.host], monkeypatch)
        assert rc == 0
        assert (lookups.hits, puts.hits) == (1, 1)
        assert "HTTP 429" in err and "retry 1" in err
        remote = RegistryAPI(registry.host).manifest("h6-test/throttled", "dev")
        assert remote.config_digest == small_images["a"].id
        assert json.loads(summary.read_text())["variants"][0]["digest"] == remote.digest
        # a registry that keeps throttling: a bounded number of tries, then exit 2
        always = Fault(lambda m, p, h: "/manifests/" in p, status=503, times=10**6)
        proxy.faults[:] = [always]
        start = time.monotonic()
        summary2 = _summary(tmp_path, small_images["b"], variant="b", tags=["h6-test/throttled:other"])
        argv = ["--summary", str(summary2), "--registry", proxy.host, "--attempts", "2"]
        rc, _out, err = _push(argv, monkeypatch)
        assert rc == 2
        assert always.hits == 2 and time.monotonic() - start < 30
        assert "after 2 attempts" in err
    finally:
        proxy.stop()


def test_classify_push_error_messages():
    assert classify_push_error("unauthorized: authentication required") == "auth"
    assert classify_push_error("toomanyrequests: rate limit") == "retry"
    assert classify_push_error("received unexpected HTTP status: 503 Service Unavailable") == "retry"
    assert (
        classify_push_error("Get http://127.0.0.1:1/v2/: dial tcp 127.0.0.1:1: connect: connection refused")
        == "down"
    )
    assert classify_push_error("tag invalid: The image tag 'v1' already exists") == "exists"
    assert classify_push_error("manifest invalid") == "other"
