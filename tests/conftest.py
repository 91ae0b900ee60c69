"""Shared fixtures. Services a test needs are started by the test (registry, moto, sshd); docker is the
exception: CI starts dockerd and sets REQUIRE_DOCKER=1, which turns a missing daemon from a skip into a
failure."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterator

import pytest
from paths import ROOT


def _nccl_logs_dir() -> Path:
    return Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))


def corpus_required() -> bool:
    """CI (CI=true, or REQUIRE_DOCKER=1 as .ci/run sets) must have the real-log corpus: its tests are the
    validator's truth test, so a clone without it fails there instead of passing on skips."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get("REQUIRE_DOCKER") == "1"


def needed(what: str, hint: str) -> None:
    """A tool or package a test needs is missing: skip on a developer's machine, fail in CI (.ci/run installs
    every one of them, so a missing one there is a broken setup, not a reason to pass on skips)."""
    if corpus_required():
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
    if corpus_required():
        pytest.fail(f"{message}: the real NCCL log corpus is required in CI (set NCCL_LOGS_DIR)")
    pytest.skip(message)


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
        if os.environ.get("REQUIRE_DOCKER") == "1":
            pytest.fail(f"local base image {LOCAL_BASE} missing: run `python build.py base`")
        pytest.skip(f"local base image {LOCAL_BASE} missing: run `python build.py base`")
    return LOCAL_BASE
