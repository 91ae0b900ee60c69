"""Amazon Linux 2023: `inspect-base` on an AL2023 DLC's layout; the AL2023-layout stand-in extended for real.

No AL2023 image can be pulled here. The pure tests feed the probe's sections as an AL2023 PyTorch DLC would
print them (its layout: aws/deep-learning-containers docker/pytorch/Dockerfile.cuda at commit
f1e622e430623f0afc8b51958c0483f78cbc31b2: /opt/venv Python 3.12, torch's NCCL in the venv, the plugin in
/opt/amazon/ofi-nccl/lib64). The docker tests build the stand-in (`build.py base --layout al2023-standin`:
Debian with those paths, named a stand-in in its os-release and label), inspect it, build
matrix.local.yaml's local-al2023-standin-extend on it (the steps that need no package manager: validators,
training code, env, labels) and run every static check on the image.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml
from cli import build_py
from localbuild import build_variant, passing_checks
from paths import ROOT

from imagebuild.building import al2023base
from imagebuild.building.inspect_base import facts, matrix_lines, os_name
from imagebuild.matrix import load as matrix
from imagebuild.preflight import recipes
from imagebuild.variant import LAYOUT_LABEL

VARIANT = "local-al2023-standin-extend"
AL2023_OS_RELEASE = 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"\n'


def _raw(os_release: str = AL2023_OS_RELEASE, py: str = "python3.12") -> str:
    nccl = [{"path": f"/opt/venv/lib/{py}/site-packages/nvidia/nccl/lib/libnccl.so.2", "code": 22907}]
    torch = {"version": "2.13.0+cu130", "cuda": "13.0", "nccl": [2, 29, 7]}
    probe = {"executable": "/opt/venv/bin/python", "version": "3.12.12", "nccl": nccl, "torch": torch}
    files = "\n".join(
        [
            "/opt/amazon/efa/lib64/libfabric.so.1",
            "/opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so",
            "/opt/amazon/openmpi/lib64/libmpi.so.40",
            "/usr/local/cuda/lib64/libcudart.so.13",
        ]
    )
    return (
        f"@@arch\nx86_64\n@@os-release\n{os_release}"
        "@@fi_info\n# /opt/amazon/efa/bin/fi_info\nlibfabric: 2.4.0\n"
        f"@@mpi\n# /opt/amazon/openmpi/bin/ompi_info\nOpen MPI v4.1.8\n@@files\n{files}\n"
        f"@@python\n/opt/venv/bin/python\n@@python-probe\n{json.dumps(probe)}\n@@end\n"
    )


def _loads(fragment: str, tmp_path: Path):
    path = tmp_path / "matrix.yaml"
    path.write_text("variants:\n  - name: pasted\n" + textwrap.indent(fragment, "    "))
    (variant,) = matrix.load(str(path))
    return variant


def test_amazon_linux_2023_is_named_as_the_matrix_spells_it_with_its_family():
    osn = os_name(AL2023_OS_RELEASE)
    assert (osn["matrix"], osn["family"]) == ("amzn2023", "dnf/rpm")
    assert os_name('ID="amzn"\nVERSION_ID="2"\n')["matrix"] is None  # Amazon Linux 2: not a matrix OS
    assert os_name('ID=ubuntu\nVERSION_ID="22.04"\n')["family"] == "apt/dpkg"


def test_an_al2023_dlc_layout_prints_lines_that_load_with_the_venv_python_and_nccl(tmp_path):
    f = facts("pytorch:2.13-cu133-amzn2023-sagemaker", _raw(), ["pytorch@sha256:" + "b" * 64])
    assert f["kind"] == "dlc" and f["python"]["path"] == "/opt/venv/bin/python"
    text = matrix_lines(f)
    assert "  os: amzn2023   # OS packages with dnf/rpm" in text
    assert "python: /opt/venv/bin/python   # Python 3.12.12" in text
    assert "plugin at /opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so" in text
    assert "prefix:" not in text  # torch's NCCL is where the catalog puts an AL2023 DLC's
    v = _loads(text, tmp_path)
    assert (v.base.os, v.base.kind, v.python) == ("amzn2023", "dlc", "/opt/venv/bin/python")
    got = {c.name: (c.version, c.prefix) for c in v.components}
    # torch's NCCL where the AL2023 DLC keeps it: the catalog's dlc-amzn2023 prefix, no `prefix` written
    assert got["nccl"] == ("2.29.7", "/opt/venv/lib/python3.12/site-packages/nvidia/nccl")
    assert got["libfabric"] == ("2.4.0", "/opt/amazon/efa") and got["openmpi"] == (
        "4.1.8",
        "/opt/amazon/openmpi",
    )
    ld = next(e.value for e in v.env if e.name == "LD_LIBRARY_PATH")
    assert "/opt/amazon/efa/lib64" in ld and "/opt/amazon/openmpi/lib64" in ld


def test_a_wheel_nccl_in_another_python_gets_its_prefix_written(tmp_path):
    """Another Python than the DLC's 3.12 (the stand-in's 3.11): the printed lines name where NCCL is."""
    f = facts("standin:1", _raw(py="python3.11"), [])
    text = matrix_lines(f)
    where = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl"
    assert f'nccl: {{version: "2.29.7", source: {{base: true}}, prefix: "{where}"}}' in text
    assert next(c for c in _loads(text, tmp_path).components if c.name == "nccl").prefix == where


def test_the_standin_dockerfile_says_what_it_is_and_stands_in_no_plugin():
    wheel = al2023base.nccl_wheel()
    assert wheel.requirement == "nvidia-nccl-cu13==2.27.7" and len(wheel.sha256 or "") == 64
    text = al2023base.dockerfile("localbase/debian:bookworm-minbase", wheel.filename)
    assert text.startswith("# A STAND-IN for the Amazon Linux 2023 PyTorch DLC's layout, on Debian")
    assert "python3 -m venv /opt/venv" in text and "/opt/amazon/efa/lib64/" in text
    assert (
        "'VARIANT_ID=\"efa-image-build-standin\"'" in text and f'{LAYOUT_LABEL}="al2023-dlc-standin"' in text
    )
    assert "libnccl-net" not in text and "dnf install" not in text


# ---------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def standin(docker_client, local_base):
    """The stand-in under its default name (a rebuild from the engine's cache when it exists)."""
    res = build_py("base", "--layout", "al2023-standin")
    assert res.rc == 0, res.err[-2000:]
    docker_client.images.get(al2023base.DEFAULT_NAME)
    return al2023base.DEFAULT_NAME


@pytest.fixture(scope="module")
def extended(standin, tmp_path_factory):
    out = tmp_path_factory.mktemp("al2023-extend") / "build"
    return build_variant(ROOT / "matrix.local.yaml", VARIANT, out)


@pytest.mark.docker
def test_inspect_base_reads_the_standin_as_an_al2023_dlc_layout(standin, docker_client, tmp_path):
    res = build_py("inspect-base", standin, "--json")
    assert res.rc == 0, res.err
    f = json.loads(res.out)
    assert f["kind"] == "dlc" and f["os"]["matrix"] == "amzn2023" and f["os"]["family"] == "dnf/rpm"
    assert "Stand-in" in f["os"]["pretty"]  # the os-release says what it is
    assert f["python"]["path"] == "/opt/venv/bin/python"
    assert [n["path"] for n in f["nccl"]] == [
        "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
    ]
    assert f["libfabric"]["libraries"] and all(
        p.startswith("/opt/amazon/efa/lib64/") for p in f["libfabric"]["libraries"]
    )
    assert docker_client.images.get(standin).labels[LAYOUT_LABEL] == "al2023-dlc-standin"
    v = _loads(f["matrix"], tmp_path)  # the printed lines declare the stand-in as matrix.local.yaml does
    assert (v.base.os, v.base.registry_arg, v.python) == ("amzn2023", None, "/opt/venv/bin/python")
    (local,) = matrix.load(str(ROOT / "matrix.local.yaml"), only=[VARIANT])
    # inspect-base reads the NCCL/EFA stack, not sshd: the matrix declares the base's sshd itself
    assert {c.name: (c.version, c.prefix) for c in v.components} == {
        c.name: (c.version, c.prefix) for c in local.components if c.name != "openssh"
    }


@pytest.mark.docker
def test_extending_the_standin_builds_and_passes_every_static_check(extended, tmp_path):
    names = (
        "validators-import",  # with the venv's /opt/venv/bin/python
        "validators-compiled",
        "labels-match-lock",
        "env-policy",
        "nccl-version-ctypes",
        "single-libnccl",
        "nccl-torch-loads",
        "libfabric-version",
        "single-libfabric",
        "openmpi-version",
        "mpirun-plain-root",
        "openmpi-dlc-mca-params",
    )
    st = passing_checks(extended, tmp_path / "report.json", names)
    assert "/opt/venv/bin/python -m efa_validators --help" in st["validators-import"][1]
    assert "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2" in st["single-libnccl"][1]
    assert "/opt/amazon/efa/lib64/" in st["single-libfabric"][1]


@pytest.mark.docker
def test_the_standin_is_made_for_amd64_only():
    res = build_py("base", "--layout", "al2023-standin", "--platform", "linux/arm64")
    assert res.rc == 2 and "--layout al2023-standin is made for linux/amd64 only" in res.err, res


def _docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=120)
    assert not check or proc.returncode == 0, (argv, proc.stderr[-2000:])
    return proc


@pytest.mark.docker
def test_the_printed_mpijob_worker_starts_sshd_on_an_image_with_no_host_key_in_any_layer(extended, tmp_path):
    """The AL2023 DLC's sshd has no host keys (its EFA script never runs ssh-keygen -A), so mpi-operator's
    default `/usr/sbin/sshd -De` exits with 'no hostkeys available'. The printed worker command makes them in
    the container and sshd answers on the port the worker's readiness probe names; no layer holds a key."""
    # no key in the image, read without starting sshd; no layer's command makes one
    keys = _docker("run", "--rm", "--entrypoint", "/bin/sh", extended, "-c", "ls /etc/ssh/ssh_host_* || true")
    assert keys.stdout.strip() == "", keys.stdout
    history = _docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", extended).stdout
    assert "ssh-keygen -A" not in history and "ssh_host_" in history  # the stand-in removes Debian's keys
    # the worker the printed MPIJob starts, from the lock the image carries
    labels = json.loads(_docker("inspect", "--format", "{{json .Config.Labels}}", extended).stdout)
    lock = json.loads(labels["org.efa-image-build.lock"])
    assert lock["components"]["openssh"]["method"] == "base"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r.io/i@sha256:%s\n"
        "report_volume: {pvc: reports}\n" % ("a" * 64)
    )
    # the one edit: the real AL2023 DLC has torch (the launcher's probe), the stand-in has none; a worker's
    # command and probe depend only on the image's sshd, which is the lock's own
    as_dlc = dict(lock, components=dict(lock["components"], torch={"version": "2.13.0", "method": "base"}))
    doc = yaml.safe_load(recipes.mpijob_manifest(as_dlc, recipes.load_cluster(str(cluster))))
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    command, port = worker["command"], worker["readinessProbe"]["tcpSocket"]["port"]
    name = "h-recipes-al2023-sshd-" + uuid.uuid4().hex[:8]
    try:
        _docker("run", "--detach", "--name", name, "--entrypoint", command[0], extended, *command[1:])
        scan = None
        for _ in range(60):  # bounded: sshd is up in a second or two
            scan = _docker("exec", name, "ssh-keyscan", "-T", "2", "-p", str(port), "127.0.0.1", check=False)
            if "ssh-ed25519" in scan.stdout:
                break
            state = _docker("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            assert state == "true", _docker("logs", name, check=False).stderr[-2000:]
            time.sleep(1)
        assert scan is not None and "ssh-ed25519" in scan.stdout, (scan.stderr, _docker("logs", name).stderr)
        # the key was made in this container at start (its own layer), not in the image
        made = _docker("exec", name, "sh", "-c", "ls /etc/ssh/ssh_host_*_key").stdout.split()
        assert "/etc/ssh/ssh_host_ed25519_key" in made
    finally:
        _docker("rm", "--force", name, check=False)
