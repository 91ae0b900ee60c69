"""The image's own sshd as a worker runs it (issue 22, item 4; issue 34, item 3): containers of a built image
(local-dlc-layout-extend, which adds sshd) with root's keys mounted on /root/.ssh with modes StrictModes would
refuse, as mpi-operator mounts its Secret. The printed mpirun recipe itself, with the key it makes per run,
runs across two containers in tests/validators/run/test_twohost_docker.py (issue 40): the test that ran it
here with keys mounted from the test replaced it."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest
from cli import build_py
from paths import ROOT
from test_dlc_extend import dlc_layout, extended  # noqa: F401 - module fixtures reused

from imagebuild.components import openssh

pytestmark = pytest.mark.docker


def _docker(*argv, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, **kw)


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
        .replace("image: localbase/dlc-layout:bookworm-2nccl-torch", f'image: "{base}"', 1)
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
