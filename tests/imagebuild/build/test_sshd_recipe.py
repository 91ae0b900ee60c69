"""The printed mpirun recipe over the image's own sshd (issue 22, item 4): two containers of a built image
(local-dlc-layout-extend, which adds sshd), each with something already listening on port 22 in its network
namespace, as a host's sshd is under host networking; sshd on 2222 from the image's start script (this
container's host keys), root's keys mounted on /root/.ssh with modes StrictModes would refuse, as
mpi-operator mounts its Secret. The one stand-in is the GPU binary: a replay of a recorded log
(efa_validators.replay), so the report says REPLAY."""

from __future__ import annotations

import json
import shlex
import shutil
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


# ---- StrictModes against a key Secret as Kubernetes mounts it (issue 34, item 3) -------------------------
# A Secret volume (what mpi-operator mounts on /root/.ssh): a root-owned, world-writable sticky directory
# whose entries are links through `..data` to a timestamped directory holding the files, mode 0644 (the
# volume's defaultMode 420). sshd's StrictModes refuses a key behind such modes ("Authentication refused: bad
# ownership or modes").
DLC_SSHD_PIN = "1:9.2p1-2+deb12u10"  # Debian bookworm's, as matrix.local.yaml pins it


def _secret_mount(root, public_key: str):
    """`root` laid out as a Kubernetes Secret volume holding `authorized_keys`."""
    import os

    root.mkdir()
    data = root / "..2026_12_05_00_00_00.000000000"
    data.mkdir()
    (data / "authorized_keys").write_text(public_key)
    (data / "authorized_keys").chmod(0o644)
    data.chmod(0o755)
    os.symlink(data.name, root / "..data")
    os.symlink("..data/authorized_keys", root / "authorized_keys")
    root.chmod(0o1777)
    return root


@pytest.fixture
def client_key(extended, tmp_path):  # noqa: F811 - the fixture imported above
    keys = tmp_path / "client"
    keys.mkdir()
    made = _docker("run", "--rm", "-v", f"{keys}:/k", extended, "ssh-keygen", "-q", "-t", "ed25519", "-N", "",
                   "-f", "/k/id")  # fmt: skip
    assert made.returncode == 0, made.stderr
    return keys


def _login(image: str, start: str, port: int, keys, secret) -> subprocess.CompletedProcess:
    """A container of `image` running `start` (its sshd in the foreground) with `secret` on /root/.ssh; then
    an ssh login to it as root with the client key: what it prints."""
    name = f"efa-image-build-test-strictmodes-{uuid.uuid4().hex[:8]}"
    login = (
        f"ssh -p {port} -i /k/id -o BatchMode=yes -o StrictHostKeyChecking=no "
        "-o UserKnownHostsFile=/dev/null root@127.0.0.1 echo logged-in-as-$(id -un)"
    )
    wait = f'for i in $(seq 50); do out=$({login} 2>&1) && break; sleep 0.2; done; echo "$out"'
    started = _docker("run", "-d", "--init", "--name", name, "-v", f"{secret}:/root/.ssh:ro",
                      "-v", f"{keys}:/k:ro", image, "sh", "-c", start)  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        return _docker("exec", name, "sh", "-c", wait)
    finally:
        _docker("rm", "-f", name)


def test_the_dlc_extend_images_sshd_takes_a_key_from_a_secret_mount(extended, client_key, tmp_path):  # noqa: F811
    secret = _secret_mount(tmp_path / "secret", (client_key / "id.pub").read_text())
    ok = _login(extended, openssh.START, openssh.PORT, client_key, secret)
    assert "logged-in-as-root" in ok.stdout, ok.stdout + ok.stderr
    # the control: the same mount with StrictModes on is refused, so the mount is what a Secret does to sshd
    refused = _login(extended, f"{openssh.START} -o StrictModes=yes", openssh.PORT, client_key, secret)
    assert "logged-in-as-root" not in refused.stdout and "Permission denied" in refused.stdout, refused.stdout


@pytest.fixture(scope="module")
def dlc_own_sshd_extended(docker_client, dlc_layout, tmp_path_factory):  # noqa: F811
    """A base with a DLC's own sshd, as aws/deep-learning-containers scripts/docker/common/install_efa.sh
    (commit e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0) sets it up (the packages, /var/run/sshd, pam_loginuid
    optional, a root key in /root/.ssh; port 22 and StrictModes left as the package has them), extended by a
    variant that records it (`openssh: source: {base: true}`), built for real."""
    import io

    from services import RUN

    tag = uuid.uuid4().hex[:8]
    base = f"efa-image-build-test-{RUN}/dlc-own-sshd:{tag}"
    lines = [
        f"FROM {dlc_layout}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        "RUN apt-get update && apt-get install -y --no-install-recommends "
        f"openssh-client={DLC_SSHD_PIN} openssh-server={DLC_SSHD_PIN} && rm -rf /var/lib/apt/lists/* "
        "&& mkdir -p /var/run/sshd "
        "&& sed 's@session\\s*required\\s*pam_loginuid.so@session optional pam_loginuid.so@g' "
        "-i /etc/pam.d/sshd "
        "&& rm -rf /root/.ssh && mkdir -p /root/.ssh && ssh-keygen -q -t rsa -N '' -f /root/.ssh/id_rsa "
        "&& cp /root/.ssh/id_rsa.pub /root/.ssh/authorized_keys",
    ]
    docker_client.images.build(fileobj=io.BytesIO("\n".join(lines).encode()), tag=base, rm=True, forcerm=True)
    folder = tmp_path_factory.mktemp("dlc-own-sshd")
    shutil.copytree(ROOT / "examples" / "training", folder / "examples" / "training")
    image = f"efa-image-build-test-{RUN}/dlc-own-sshd-extended:{tag}"
    # matrix.local.yaml's extend variant (defaults: the base's versions) on this base, its sshd recorded
    text = (ROOT / "matrix.local.yaml").read_text()
    extend = text[text.index("  - name: local-dlc-layout-extend") :]
    extend = extend[: extend.find("\n  - name: ", 1) + 1 or None]  # that variant alone
    ours = (
        extend.replace("name: local-dlc-layout-extend", f"name: dlc-own-sshd-{tag}", 1)
        .replace("image: localbase/dlc-layout:bookworm-2nccl", f'image: "{base}"', 1)
        .replace(
            "source: {apt: [openssh-server=1:9.2p1-2+deb12u10, openssh-client=1:9.2p1-2+deb12u10]}",
            "source: {base: true}",
            1,
        )
    )
    assert ours.count("source: {base: true}") == 2 and base in ours
    ours = ours.replace("    description:", f'    tags: ["{image}-{{content_hash}}"]\n    description:', 1)
    (folder / "matrix.yaml").write_text(text[: text.index("variants:")] + "variants:\n" + ours)
    out = folder / "build"
    try:
        built = build_py("build", "--matrix", folder / "matrix.yaml", "--variant", f"dlc-own-sshd-{tag}",
                         "--out", out, "--cache", ROOT / ".cache" / "artifacts", "--plain")  # fmt: skip
        assert (out / "summary.json").exists(), built.err
        summary = json.loads((out / "summary.json").read_text())
        assert built.rc == 0, summary["variants"][0].get("error")
        yield summary["variants"][0]["tags"][0]  # the content tag, filled in
    finally:  # the build also tags a content tag in the image's repository: every tag of both goes
        for repo in (image.rsplit(":", 1)[0], base.rsplit(":", 1)[0]):
            refs = _docker("images", "--format", "{{.Repository}}:{{.Tag}}", repo).stdout.split()
            for ref in refs:
                _docker("rmi", "-f", ref)


def test_a_dlcs_own_sshd_as_the_operator_runs_it_takes_a_key_from_a_secret_mount(
    dlc_own_sshd_extended, client_key, tmp_path
):
    """The DLC variant's workers run the base's plain `/usr/sbin/sshd -De` (port 22, the DLC's host keys):
    with StrictModes as the package has it the operator's key is refused; the extended image takes it."""
    secret = _secret_mount(tmp_path / "secret", (client_key / "id.pub").read_text())
    ok = _login(dlc_own_sshd_extended, f"exec {openssh.SSHD} -De", 22, client_key, secret)
    assert "logged-in-as-root" in ok.stdout, ok.stdout + ok.stderr
    refused = _login(
        dlc_own_sshd_extended, f"exec {openssh.SSHD} -De -o StrictModes=yes", 22, client_key, secret
    )
    assert "logged-in-as-root" not in refused.stdout and "Permission denied" in refused.stdout, refused.stdout
