"""Shared fixtures. Services a test needs are started by the test (registry, moto, sshd); docker is the
exception: CI starts dockerd and sets REQUIRE_DOCKER=1, which turns a missing daemon from a skip into a
failure."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from paths import ROOT

# This session's mark, inherited by every process a test starts: tests that look for processes left behind
# (preflight_util.pids_with) then ignore those of another pytest running on the same machine.
os.environ["EFA_TEST_SESSION"] = uuid.uuid4().hex

# The Ctrl-C, SIGTERM and parent-death tests need the signals a terminal gives. A suite started in the
# background of a non-interactive shell (`cmd &`: POSIX ignores SIGINT there) or under nohup (SIGHUP ignored)
# inherits them ignored, and an ignored signal stays ignored across exec in every process a test starts:
# Python then never raises KeyboardInterrupt, and build.py's lifeline takes SIGHUP ignored as "outlive the
# parent" (as designed, see imagebuild/building/lifeline.py). So the session restores the defaults first.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _nccl_logs_dir() -> Path:
    return Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))


def in_ci() -> bool:
    """CI (CI=true, as .ci/run sets) must have everything the suite reads: the real-log corpus, the source
    mirror, every tool. A developer's clone without ../shared skips those tests with their reason instead.
    REQUIRE_DOCKER=1 (the Makefile's) asks for a docker engine only: a fresh clone has one after `make test`
    set up the host, but it has no ../shared."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def needed(what: str, hint: str) -> None:
    """A tool or package a test needs is missing: skip on a developer's machine, fail in CI (.ci/run installs
    every one of them, so a missing one there is a broken setup, not a reason to pass on skips)."""
    if in_ci():
        pytest.fail(f"{what} missing in CI: {hint}")
    pytest.skip(f"{what} missing ({hint})")


def import_or_fail(module: str, hint: str):
    """pytest.importorskip, except that CI fails instead of skipping."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        needed(f"python module {module}", hint)


def corpus_missing(message: str) -> None:
    """Skip a corpus test on a developer clone without ../shared/nccl-logs; fail it in CI."""
    if in_ci():
        pytest.fail(f"{message}: the real NCCL log corpus is required in CI (set NCCL_LOGS_DIR)")
    pytest.skip(message)


def gpu_capture(name: str) -> Path:
    """A real GPU health capture of ../shared/gpu-captures (GPU_CAPTURES_DIR overrides), by file name: skips
    with the reason on a developer clone without it, fails in CI (which has it)."""
    folder = Path(os.environ.get("GPU_CAPTURES_DIR", ROOT.parent / "shared" / "gpu-captures"))
    path = folder / name
    if not path.is_file():
        message = f"real GPU capture {path} not here (../shared/gpu-captures)"
        if in_ci():
            pytest.fail(f"{message}: required in CI (set GPU_CAPTURES_DIR)")
        pytest.skip(message)
    return path


def gpu_captures_index() -> list:
    """The rows of ../shared/gpu-captures/index.jsonl (file, kind, gpu, driver_version, healthy, reason)."""
    import json

    return [json.loads(line) for line in gpu_capture("index.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def nccl_logs_dir() -> Path:
    """The public NCCL logs corpus, read by path; never copied into the project."""
    path = _nccl_logs_dir()
    if not path.is_dir():
        corpus_missing(f"real NCCL log corpus not found at {path}")
    return path


def mirror_dir() -> Path:
    """The bare git mirrors of the source-built components (`<host>/<path>`, what `build.py build --mirror`
    reads): ../shared/mirror beside the project, or SOURCE_MIRROR."""
    return Path(os.environ.get("SOURCE_MIRROR", ROOT.parent / "shared" / "mirror"))


@pytest.fixture(scope="session")
def source_mirror() -> Path:
    """The source mirror; skip without it on a developer clone, fail in CI (CI builds the real stack)."""
    path = mirror_dir()
    if not (path / "github.com").is_dir():
        if in_ci():
            pytest.fail(f"source mirror not found at {path}: required in CI, which builds the real stack")
        pytest.skip(f"source mirror not found at {path} (../shared/mirror; set SOURCE_MIRROR)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[object]:
    """A docker SDK client for the real engine; skip without one unless REQUIRE_DOCKER=1 (CI)."""
    import docker  # host-side dependency

    try:
        client = docker.from_env(timeout=300)
        client.ping()
    except Exception as err:  # noqa: BLE001 - any failure to reach the daemon means the same here
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker engine required (REQUIRE_DOCKER=1) but unreachable: {err}")
        pytest.skip(f"no docker engine: {err}")
    yield client
    client.close()


LOCAL_BASE = os.environ.get("LOCAL_BASE_IMAGE", "localbase/debian:bookworm-minbase")


@pytest.fixture(scope="session")
def local_base(docker_client) -> str:
    """The debootstrap base image every local build starts from (made by `build.py base` / .ci/run)."""
    import docker

    try:
        docker_client.images.get(LOCAL_BASE)
    except docker.errors.ImageNotFound:
        if os.environ.get("REQUIRE_DOCKER") == "1" or in_ci():
            pytest.fail(f"local base image {LOCAL_BASE} missing: run `python build.py base`")
        pytest.skip(f"local base image {LOCAL_BASE} missing: run `python build.py base`")
    return LOCAL_BASE


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory):
    """The wheel built from this tree, installed with its dependencies (and the attest extra) into a fresh
    venv: the tool as a team installs it (tests/wheelvenv.py)."""
    from wheelvenv import install

    return install(tmp_path_factory.mktemp("wheel"))
