"""`build.py base`: reuse the image by name, refuse clearly when debootstrap cannot run.

The full debootstrap (about 25 s plus downloads) is what .ci/run does before the tests; here the decisions
around it are tested against the real engine.
"""

from __future__ import annotations

import os

import cli
import pytest

from imagebuild.build.localbase import bootstrap_problem, split_name


def test_refusals_name_the_missing_piece():
    missing = bootstrap_problem(None, 0)
    assert missing is not None and "debootstrap is not installed" in str(missing)
    assert "apt-get install debootstrap" in str(missing)
    not_root = bootstrap_problem("/usr/sbin/debootstrap", 1000)
    assert not_root is not None and "must run as root" in str(not_root)
    assert bootstrap_problem("/usr/sbin/debootstrap", 0) is None


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
