"""`build.py build` on the real engine: content-hash tags, no-op skips, parallel failures, faults.

The variants here are small hand-written ones (FROM the local base, a pinned artifact, a training file), so
the builder is tested apart from the templates; the real matrix is built by test_checks.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import List

import pytest
from cli import BUILD_PY, Result, build_py, build_py_process
from paths import ROOT
from services import RUN
from throwaway import remove_images_tagged

from imagebuild.building import contenthash
from imagebuild.variant import HASH_LABEL, LOCK_LABEL

REPO = f"efa-image-build-test-{RUN}/builder"
PAYLOAD = b"pinned payload for the builder tests\n"


def _variant(out: Path, name: str, run: str = "true", sha: str = "", training: str = "print('v1')\n") -> Path:
    """A rendered-variant folder: Dockerfile, lock naming one url artifact, a training file."""
    vdir = out / name
    (vdir / "context" / "training").mkdir(parents=True, exist_ok=True)
    (vdir / "context" / "training" / "train.py").write_text(training)
    (vdir / "Dockerfile").write_text(
        "FROM {base}\n"
        "COPY artifacts/SHA256SUMS artifacts/payload.txt /tmp/artifacts/\n"
        "RUN cd /tmp/artifacts && sha256sum -c SHA256SUMS && mkdir -p /opt/payload "
        "&& cp payload.txt /opt/payload/ && rm -rf /tmp/artifacts\n"
        f"RUN {run}\n"
        "COPY training /opt/ml/code\n".format(
            base=os.environ.get("LOCAL_BASE_IMAGE", "localbase/debian:bookworm-minbase")
        )
    )
    lock = {
        "schema": "efa-image-build/lock/v1",
        "name": name,
        "components": {
            "nccl": {
                "version": "2.27.7",
                "artifacts": [
                    {
                        "kind": "url",
                        "url": "https://downloads.invalid/pkg/payload.txt",
                        "sha256": sha or hashlib.sha256(PAYLOAD).hexdigest(),
                        "filename": "payload.txt",
                    }
                ],
            }
        },
        "labels": {"org.opencontainers.image.title": name},
        "tags": [f"{REPO}-{name}:latest"],
    }
    (vdir / "variant.lock.json").write_text(json.dumps(lock, sort_keys=True))
    return vdir


def make_mirror(root: Path) -> Path:
    """A --mirror folder holding the payload every test variant's artifact pins."""
    (root / "downloads.invalid" / "pkg").mkdir(parents=True)
    (root / "downloads.invalid" / "pkg" / "payload.txt").write_bytes(PAYLOAD)
    return root


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    return make_mirror(tmp_path_factory.mktemp("mirror"))


@pytest.fixture(scope="module")
def cleanup_images(docker_client):
    """Remove every image these tests tagged (only ours: the repository prefix is unique to this module)."""
    yield
    remove_images_tagged(docker_client, REPO)


def _build_argv(out: Path, cache: Path, mirror: Path, *extra: str) -> List[str]:
    """`build` with the classic builder: these tests read its Step and layer-cache lines (BuildKit:
    test_buildkit.py)."""
    argv = ["build", "--builder", "classic", "--no-render", "--out", str(out), "--cache", str(cache)]
    return argv + ["--mirror", str(mirror), "--plain", *extra]


def _build(out: Path, cache: Path, mirror: Path, *extra: str) -> Result:
    return build_py(*_build_argv(out, cache, mirror, *extra))


def _summary(out: Path) -> dict:
    return {e["variant"]: e for e in json.loads((out / "summary.json").read_text())["variants"]}


# ---------------------------------------------------------------- pure parts


def test_context_hash_depends_on_content_only(tmp_path):
    a = _variant(tmp_path / "a", "v")
    time.sleep(0.01)
    b = _variant(tmp_path / "b", "v")
    os.utime(b / "Dockerfile", (1, 1))  # mtimes differ; content does not
    assert contenthash.context_hash(a) == contenthash.context_hash(b)
    (b / "context" / "certs").mkdir()
    (b / "context" / "certs" / "build-ca.crt").write_text("a CA")  # builder-stage only: not in the hash
    assert contenthash.context_hash(a) == contenthash.context_hash(b)
    (b / "context" / "training" / "train.py").write_text("print('v2')\n")
    assert contenthash.context_hash(a) != contenthash.context_hash(b)
    (a / "context" / "training" / "train.py").write_text("print('v2')\n")
    assert contenthash.context_hash(a) == contenthash.context_hash(b)
    os.chmod(a / "context" / "training" / "train.py", 0o755)  # the exec bit reaches the image
    assert contenthash.context_hash(a) != contenthash.context_hash(b)


def test_context_hash_memo_skips_rereading_unchanged_files(tmp_path):
    v = _variant(tmp_path, "v")
    memo: dict = {}
    first = contenthash.context_hash(v, memo)
    assert str(v / "Dockerfile") in memo
    assert contenthash.context_hash(v, memo) == first
    (v / "Dockerfile").write_text("FROM scratch\n")
    assert contenthash.context_hash(v, memo) != first  # size/mtime changed: re-read


def test_hash_memo_outlives_a_rerender_so_staged_wheels_are_not_read_again(tmp_path, monkeypatch):
    from imagebuild.matrix.load import load
    from imagebuild.render.folders import render_all, write

    (v,) = load(str(ROOT / "matrix.local.yaml"), ["local-debian-nccl2.27"])
    out = tmp_path / "build"
    cached = tmp_path / "cache" / "nccl.whl"  # the artifact cache; staging hard-links from it
    cached.parent.mkdir()
    cached.write_bytes(b"w" * 4096)
    opened: list = []

    def counting_open(path, *args, **kwargs):
        opened.append(Path(path).name)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(contenthash, "open", counting_open, raising=False)
    for run, lines in enumerate((("true",), ("false",))):
        v = dataclasses.replace(v, build_steps=lines)
        write(str(out), render_all([v], str(ROOT)))  # the second render changes the variant: new folder
        vdir = out / v.name
        os.link(cached, vdir / "context" / "artifacts" / "nccl.whl")
        opened.clear()
        contenthash.memo_hash(vdir)
        assert ("nccl.whl" in opened) == (run == 0), opened  # read once, then a memo hit
        assert "Dockerfile" in opened  # the changed Dockerfile is read again: new inode
    assert contenthash.hash_memo_path(vdir).is_file() and not (vdir / ".hash-memo.json").exists()


def test_tags_carry_component_versions_and_the_content_hash():
    lock = {
        "name": "x",
        "components": {"nccl": {"version": "2.27.7"}, "aws_ofi_nccl": {"version": "1.16.3"}},
        "tags": ["org/img:local", "org/img:stable"],
    }
    tags = contenthash.image_tags(lock, "ab" * 32)
    assert tags == ["org/img:nccl2.27.7-ofi1.16.3-abababababab", "org/img:local", "org/img:stable"]
    assert (
        contenthash.image_tags({"name": "My Variant"}, "cd" * 32)[0]
        == "efa-image-build/my_variant:noversions-cdcdcdcdcdcd"
    )


def test_unreachable_daemon_is_one_clear_message_and_exit_2(tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    proc = build_py_process("build", "--no-render", "--out", tmp_path, env=env, timeout=60)
    assert proc.returncode == 2
    assert "cannot reach the docker engine" in proc.stderr and "hint: start it" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- real builds


@pytest.fixture(scope="module")
def built(docker_client, local_base, mirror, cleanup_images, tmp_path_factory):
    """One cold build of variant `good`, shared by the tests below."""
    out = tmp_path_factory.mktemp("out")
    cache = tmp_path_factory.mktemp("cache")
    _variant(out, "good")
    started = time.monotonic()
    assert _build(out, cache, mirror).rc == 0
    return out, cache, time.monotonic() - started


@pytest.mark.docker
def test_cold_build_tags_after_success_and_writes_the_summary(built, docker_client):
    out, _cache, _ = built
    entry = _summary(out)["good"]
    # built (or skipped, if an interrupted earlier run left the image: same content, same tag)
    assert entry["status"] in ("built", "skipped") and entry["image_id"].startswith("sha256:")
    assert (
        entry["tags"][0].startswith(f"{REPO}-good:nccl2.27.7-") and entry["tags"][1] == f"{REPO}-good:latest"
    )
    assert entry["tags"][0].endswith(entry["context_hash"][:12])
    image = docker_client.images.get(entry["tags"][0])
    assert image.id == entry["image_id"] and set(entry["tags"]) <= set(image.tags)
    assert image.labels[HASH_LABEL] == entry["context_hash"]
    assert json.loads(image.labels[LOCK_LABEL])["name"] == "good"
    assert image.labels["org.opencontainers.image.title"] == "good"
    assert Path(entry["log"]).read_text().count("Step ") >= 4
    assert (out / "good" / "context" / "artifacts" / "payload.txt").read_bytes() == PAYLOAD


@pytest.mark.docker
def test_unchanged_variant_is_skipped_without_work(built):
    out, cache, cold = built
    started = time.monotonic()
    res = _build(out, cache, mirror=out / "no-mirror-needed")
    assert res.rc == 0
    warm = time.monotonic() - started
    entry = _summary(out)["good"]
    assert entry["status"] == "skipped"
    assert "Step " not in Path(entry["log"]).read_text()  # docker was never asked to build
    assert warm < max(1.0, cold / 2)
    assert "1 skipped" in res.out


@pytest.mark.docker
def test_training_code_change_rebuilds_only_the_top_layer(built, docker_client):
    out, cache, _ = built
    before = _summary(out)["good"]
    (out / "good" / "context" / "training" / "train.py").write_text("print('changed')\n")
    try:
        assert _build(out, cache, mirror=out).rc == 0
        after = _summary(out)["good"]
        assert after["status"] == "built" and after["context_hash"] != before["context_hash"]
        log = Path(after["log"]).read_text()
        steps = log.split("Step ")
        # every step before `COPY training` came from the layer cache
        copy_training = next(
            i for i, s in enumerate(steps) if s.split(":", 1)[-1].strip().startswith("COPY training")
        )
        for s in steps[2:copy_training]:
            assert "Using cache" in s, s
        assert "Using cache" not in steps[copy_training]
        assert docker_client.images.get(before["tags"][0]).id == before["image_id"]  # old content tag kept
    finally:
        (out / "good" / "context" / "training" / "train.py").write_text("print('v1')\n")


@pytest.mark.docker
def test_a_failing_variant_does_not_stop_the_others(built, mirror):
    out, cache, _ = built
    _variant(out, "broken", run="echo about to fail && exit 7")
    try:
        res = _build(out, cache, mirror, "--jobs", "2", "--variant", "good", "--variant", "broken")
        assert res.rc == 1
        s = _summary(out)
        assert s["good"]["status"] in ("built", "skipped")
        assert s["broken"]["status"] == "failed" and s["broken"]["image_id"] is None
        assert "returned a non-zero code: 7" in s["broken"]["error"]
        log = Path(s["broken"]["log"]).read_text()
        assert "about to fail" in log
        assert f"log {s['broken']['log']}" in res.out
    finally:
        shutil.rmtree(out / "broken")


@pytest.mark.docker
def test_checksum_mismatch_stops_the_variant_before_any_layer(built, mirror, docker_client):
    out, cache, _ = built
    _variant(out, "tampered", sha=hashlib.sha256(b"something else").hexdigest())
    try:
        assert _build(out, cache, mirror, "--variant", "tampered").rc == 1
        entry = _summary(out)["tampered"]
        assert entry["status"] == "failed" and "checksum mismatch for payload.txt" in entry["error"]
        assert "Step 1/" not in Path(entry["log"]).read_text()
        assert not docker_client.images.list(name=f"{REPO}-tampered")
    finally:
        shutil.rmtree(out / "tampered")


@pytest.mark.docker
def test_offline_names_missing_artifacts_and_builds_nothing(built, tmp_path):
    out, _cache, _ = built
    before = (out / "summary.json").read_text()
    rc, _out, err = build_py("build", "--no-render", "--out", out, "--cache", tmp_path / "empty", "--offline")
    assert rc == 2
    assert "--offline: 1 artifact(s) not in the cache" in err and "payload.txt" in err
    assert (out / "summary.json").read_text() == before


@pytest.mark.docker
def test_build_ca_reaches_the_context_but_not_the_hash(built, tmp_path):
    out, cache, _ = built
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot a real one\n-----END CERTIFICATE-----\n")
    before = _summary(out)["good"]["context_hash"]
    assert _build(out, cache, out, "--build-ca", str(ca)).rc == 0
    assert (out / "good" / "context" / "certs" / "build-ca.crt").read_text() == ca.read_text()
    entry = _summary(out)["good"]
    assert entry["status"] == "skipped" and entry["context_hash"] == before
    assert _build(out, cache, out).rc == 0
    assert not (out / "good" / "context" / "certs" / "build-ca.crt").exists()  # not asked: not there


@pytest.mark.docker
def test_ctrl_c_leaves_no_half_tagged_image(built, mirror, docker_client, tmp_path):
    out, cache, _ = built
    _variant(out, "slow", run=f"sleep 60 && echo {uuid.uuid4().hex}")  # never a cached layer
    try:
        proc = subprocess.Popen(
            [*BUILD_PY, "build", "--no-render", "--out", str(out), "--variant", "slow"]
            + ["--cache", str(cache), "--mirror", str(mirror), "--plain"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log = out / "slow" / "build.log"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "sleep 60" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.2)
        assert "sleep 60" in log.read_text(), "the build never reached the slow step"
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert not docker_client.images.list(name=f"{REPO}-slow")
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(out / "slow")


def _build_containers(docker_client, word: str) -> list:
    """The containers (running or not) whose command holds `word`: the RUN step of a build."""
    return [
        c for c in docker_client.containers.list(all=True) if word in " ".join(c.attrs["Config"]["Cmd"] or [])
    ]


def _gone(docker_client, word: str, wait: float = 60.0) -> bool:
    deadline = time.monotonic() + wait
    while _build_containers(docker_client, word) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _build_containers(docker_client, word)


def _start_slow_build(
    out: Path, cache: Path, mirror: Path, name: str, word: str, wrap=()
) -> subprocess.Popen:
    """`build.py build` of a variant whose last RUN sleeps 300 s, once that step runs in its container."""
    _variant(out, name, run=f"sleep 300 && echo {word}")  # never a cached layer
    proc = subprocess.Popen(
        [*wrap, *BUILD_PY, *_build_argv(out, cache, mirror, "--variant", name)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = out / name / "build.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "Running in" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert word in log.read_text() and "Running in" in log.read_text(), (
        "the build never reached the slow step"
    )
    return proc


@pytest.mark.docker
def test_sigterm_ends_the_docker_build(built, mirror, docker_client):
    """SIGTERM (a cancelled CI job, `timeout`) takes the Ctrl-C path: exit 130, the build's container gone,
    nothing tagged (issue 23, item 4)."""
    out, cache, _ = built
    word = uuid.uuid4().hex
    proc = _start_slow_build(out, cache, mirror, "term", word)
    try:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "interrupted" in err, err
        assert _gone(docker_client, word), "the docker build went on after build.py was told to stop"
        assert not docker_client.images.list(name=f"{REPO}-term")
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(out / "term")


@pytest.mark.docker
def test_the_parents_death_ends_the_docker_build(built, mirror, docker_client):
    """The shell (or CI runner) that started build.py is killed -9: build.py sees its parent gone, ends its
    build and exits; nothing of it is left running (issue 23, item 4)."""
    out, cache, _ = built
    word = uuid.uuid4().hex
    shell = _start_slow_build(out, cache, mirror, "orphan", word, wrap=("bash", "-c", '"$@"; true', "sh"))
    try:
        with open("/proc/%d/task/%d/children" % (shell.pid, shell.pid)) as fh:
            build_py = int(fh.read().split()[0])
        shell.kill()
        shell.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and os.path.exists("/proc/%d/cmdline" % build_py):
            with open("/proc/%d/stat" % build_py, "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            time.sleep(0.2)
        assert _gone(docker_client, word), "the docker build went on after build.py's parent died"
        assert not docker_client.images.list(name=f"{REPO}-orphan")
    finally:
        shutil.rmtree(out / "orphan")
