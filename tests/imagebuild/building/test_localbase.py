"""`build.py base`: reuse the image by name, refuse clearly when debootstrap cannot run.

The full debootstrap (about 25 s plus downloads) is what .ci/run does before the tests; here the decisions
around it are tested against the real engine.
"""

from __future__ import annotations

import os

import cli
import pytest

from imagebuild.building.localbase import bootstrap_problem, default_name, emulation_problem, split_name
from imagebuild.catalog.platforms import platform


def test_refusals_name_the_missing_piece():
    missing = bootstrap_problem(None, 0)
    assert missing is not None and "debootstrap is not installed" in str(missing)
    assert "apt-get install debootstrap" in str(missing)
    not_root = bootstrap_problem("/usr/sbin/debootstrap", 1000)
    assert not_root is not None and "must run as root" in str(not_root)
    assert bootstrap_problem("/usr/sbin/debootstrap", 0) is None


def test_another_architecture_needs_its_qemu_registered(tmp_path):
    """An arm64 base on an x86_64 host runs debootstrap's second stage under qemu (issue 25, item 5)."""
    arm64 = platform("linux/arm64")
    assert emulation_problem(arm64, "aarch64", tmp_path) is None  # native: nothing to emulate
    missing = emulation_problem(arm64, "x86_64", tmp_path)
    assert missing is not None and f"no enabled {tmp_path}/qemu-aarch64" in str(missing)
    assert "qemu-user-static" in str(missing) and "scripts/setup-host.sh" in str(missing)
    (tmp_path / "qemu-aarch64").write_text(
        "disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
    )
    assert emulation_problem(arm64, "x86_64", tmp_path) is not None
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    assert emulation_problem(arm64, "x86_64", tmp_path) is None
    assert default_name("linux/amd64") == "localbase/debian:bookworm-minbase"
    assert default_name("linux/arm64") == "localbase/debian:bookworm-minbase-arm64"


def test_image_names_split_like_docker():
    assert split_name("localbase/debian:bookworm-minbase") == ("localbase/debian", "bookworm-minbase")
    assert split_name("127.0.0.1:5000/base") == ("127.0.0.1:5000/base", "latest")


def _base(*args, path=None):
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return cli.build_py_process("base", *args, env=env, timeout=120)


@pytest.mark.docker
def test_an_existing_base_is_reused_without_work(local_base):
    proc = _base("--name", local_base, path="/nonexistent")  # no debootstrap needed: nothing to do
    assert proc.returncode == 0, proc.stderr
    assert f"base image {local_base} exists: nothing to do" in proc.stdout


@pytest.mark.docker
def test_missing_debootstrap_is_exit_2_before_anything_is_made(docker_client):
    import docker

    name = "efa-image-build-test/localbase:never-made"
    proc = _base("--name", name, path="/nonexistent")
    assert proc.returncode == 2
    assert "debootstrap is not installed" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(name)
