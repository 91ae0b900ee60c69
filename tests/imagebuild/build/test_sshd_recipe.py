"""The printed mpirun recipe over the image's own sshd (issue 22, item 4): two containers of a built image
(local-dlc-layout-extend, which adds sshd), each with something already listening on port 22 in its network
namespace, as a host's sshd is under host networking; sshd on 2222 from the image's start script (this
container's host keys), root's keys mounted on /root/.ssh with modes StrictModes would refuse, as
mpi-operator mounts its Secret. The one stand-in is the GPU binary: a replay of a recorded log
(efa_validators.replay), so the report says REPLAY."""

from __future__ import annotations

import json
import shlex
import subprocess
import uuid

import pytest
from cli import build_py
from paths import ROOT
from test_dlc_extend import dlc_layout, extended  # noqa: F401 - module fixtures reused

from imagebuild.components import openssh

pytestmark = pytest.mark.docker

STAND_IN = "/opt/h5-replay"
REPLAY = "/opt/h5-replay/good-efa-p5-2node.log"
IMAGE_REF = "localhost:5000/h5/dlc@sha256:" + "9" * 64


def _docker(*argv, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture
def two_nodes(docker_client, extended, tmp_path):  # noqa: F811 - the fixture imported above
    tag = uuid.uuid4().hex[:8]
    keys = tmp_path / "ssh"
    keys.mkdir()
    made = _docker("run", "--rm", "-v", f"{keys}:/k", extended, "ssh-keygen", "-q", "-t", "ed25519", "-N", "",
                   "-f", "/k/id_ed25519")  # fmt: skip
    assert made.returncode == 0, made.stderr
    (keys / "authorized_keys").write_text((keys / "id_ed25519.pub").read_text())
    keys.chmod(0o777)  # world-writable ~/.ssh: sshd's StrictModes would refuse every key in it
    net = docker_client.networks.create(f"efa-image-build-test-ssh-{tag}", driver="bridge")
    nodes = []
    try:
        for role in ("a", "b"):
            name = f"efa-image-build-test-ssh-{role}-{tag}"
            # port 22 taken first (the host's sshd, with host networking), then the image's sshd as a worker
            # runs it
            start = f"python3 -m http.server 22 >/dev/null 2>&1 & exec {openssh.START}"
            c = docker_client.containers.run(
                extended, ["sh", "-c", start], name=name, hostname=name, detach=True, init=True,
                network=net.name, volumes={str(keys): {"bind": "/root/.ssh", "mode": "rw"}},
            )  # fmt: skip
            nodes.append(c)
        for c in nodes:
            put = _docker("exec", "-i", c.name, "sh", "-c",
                          f"mkdir -p {STAND_IN}/bin && cat > {REPLAY}", input=REPLAY_TEXT)  # fmt: skip
            assert put.returncode == 0, put.stderr
            script = f"#!/bin/sh\nexec python3 -m efa_validators.replay --rank-filter {REPLAY}\n"
            put = _docker("exec", "-i", c.name, "sh", "-c",
                          f"cat > {STAND_IN}/bin/all_reduce_perf && chmod 755 {STAND_IN}/bin/all_reduce_perf",
                          input=script)  # fmt: skip
            assert put.returncode == 0, put.stderr
        yield nodes
    finally:
        for c in nodes:
            c.remove(force=True)
        net.remove()


REPLAY_TEXT = (ROOT / "tests" / "fixtures" / "replay" / "good-efa-p5-2node.log").read_text()


def test_printed_mpirun_recipe_runs_over_sshd_on_2222_beside_a_port_22_listener(
    two_nodes,
    extended,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    a, b = two_nodes
    for c in (a, b):  # both listeners are up: 22 (the stand-in for the host's) and the image's sshd
        probe = "import socket; [socket.create_connection(('127.0.0.1', p), 1) for p in (22, 2222)]"
        wait = (
            'for i in $(seq 50); do [ -n "$(ls /etc/ssh/ssh_host_*_key 2>/dev/null)" ] && '
            f"python3 -c {shlex.quote(probe)} 2>/dev/null && exit 0; sleep 0.2; done; exit 1"
        )
        ready = _docker("exec", c.name, "sh", "-c", wait)
        assert ready.returncode == 0, _docker("logs", c.name).stderr
    keys = [_docker("exec", c.name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout for c in (a, b)]
    assert keys[0] and keys[0] != keys[1]  # each container made its own host keys at start
    lock = json.loads(
        _docker("run", "--rm", extended, "cat", "/opt/efa-image-build/variant.lock.json").stdout
    )
    lock["components"]["nccl_tests"] = {"version": "2.19.6", "method": "source", "prefix": STAND_IN}
    lock_path = tmp_path / "variant.lock.json"
    lock_path.write_text(json.dumps(lock))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        f"nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\nhosts: [{a.name}, {b.name}]\n"
        "timeout: 120\nidle_timeout: 60\n"
    )
    printed = build_py("preflight", "--print", "mpirun", "--cluster", cluster, "--lock", lock_path,
                       "--image", IMAGE_REF)  # fmt: skip
    assert printed.rc == 0, printed.err
    line = printed.out.strip()  # the workers' `docker run` as comments, then the launch line
    assert "--allow-run-as-root" in line and shlex.split(line.splitlines()[-1])[0].endswith("python3")
    run = _docker("exec", "-w", "/tmp", a.name, "sh", "-c", line, timeout=240)
    report = json.loads(_docker("exec", a.name, "cat", "/tmp/preflight-report.json").stdout)
    assert report["run"]["exit_code"] == 0, run.stderr[-3000:]
    # -N 2 over two hosts: ranks 2 and 3 ran on b, started over ssh
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1, 2, 3}, report["run"]["rank_output"]
    assert report["ranks_seen"] == 16 and report["replay"] is True  # the recorded 2-node job, replayed
    # mpirun reached b's sshd on 2222 (the client config's port), not the listener on 22
    ssh = _docker("exec", a.name, "ssh", "-G", b.name)
    assert "\nport 2222\n" in ssh.stdout
