"""`build.py inspect-base` and the DLC-layout base: the parsers on real tool output, then the real thing.

The docker tests build the DLC-layout base (`build.py base --layout dlc`, cached by the engine after the first
run) and inspect it and the plain debootstrap base; every matrix fragment printed is loaded by the matrix
loader, as a user would paste it.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import cli
import pytest
from services import RUN

from imagebuild.building.dlcbase import dockerfile, nccl_wheel, torch_wheels
from imagebuild.building.inspect_base import (
    chosen_nccl,
    efa_record,
    facts,
    libfabric_version,
    matrix_lines,
    nccl_version,
    openmpi_version,
    os_name,
    split_sections,
)
from imagebuild.errors import UserError
from imagebuild.matrix import load as matrix

TAG = f"efa-image-build-test-{RUN}/dlc-layout:inspect-test"  # kept as build cache after the run


def _cli(*args, timeout=600):
    return cli.build_py_process(*args, timeout=timeout)


def _loads(fragment: str, tmp_path: Path):
    """Paste the printed lines into a variant and load it with the project's matrix loader."""
    text = "variants:\n  - name: pasted\n" + textwrap.indent(fragment, "    ")
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    (variant,) = matrix.load(str(path))
    return variant


# ---------------------------------------------------------------- pure parts


def test_nccl_codes_decode_across_the_2_9_encoding_change():
    assert nccl_version(22707) == "2.27.7"
    assert nccl_version(2708) == "2.7.8"  # before 2.9: MAJOR*1000 + MINOR*100 + PATCH
    assert nccl_version(None) is None and nccl_version(0) is None


def test_tool_outputs_parse_as_the_tools_print_them():
    assert libfabric_version("fi_info: 1.17.0\nlibfabric: 1.17.0\nlibfabric api: 1.17") == "1.17.0"
    assert libfabric_version("fi_info: command not found") is None
    assert openmpi_version("Open MPI v4.1.4\n\nhttp://www.open-mpi.org/community/help/") == "4.1.4"
    assert openmpi_version("mpirun (Open MPI) 5.0.6\n\nReport bugs to ...") == "5.0.6"
    assert openmpi_version("mpirun.real (OpenRTE) 4.1.4") == "4.1.4"
    assert openmpi_version("") is None


def test_efa_record_in_the_installers_format():
    real = (
        "# EFA installer version: 1.41.0\n# Debug packages installed: no\n# Packages installed:\n"
        "ibacm_55.0-1_amd64 libfabric-aws-bin_2.1.0amzn3.0_amd64 openmpi40-aws_4.1.7-1_amd64\n"
    )
    rec = efa_record(real)
    assert rec is not None and rec["version"] == "1.41.0"
    assert "openmpi40-aws_4.1.7-1_amd64" in rec["packages"] and len(rec["packages"]) == 3
    ours = efa_record(
        "# EFA installer version: none (Debian packages)\n# Packages installed:\nlibfabric1_1.17.0-3_amd64"
    )
    assert ours is not None and ours["version"] is None and ours["packages"] == ["libfabric1_1.17.0-3_amd64"]
    assert efa_record("") is None


def test_os_names_as_the_matrix_spells_them():
    assert os_name('ID=ubuntu\nVERSION_ID="22.04"\n')["matrix"] == "ubuntu22.04"
    assert os_name('ID=debian\nVERSION_ID="12"\n')["matrix"] == "debian12"
    alpine = os_name("ID=alpine\nVERSION_ID=3.20.0\n")
    assert alpine["matrix"] is None and alpine["id"] == "alpine3.20.0"


def test_a_probe_cut_off_is_a_user_error_naming_the_image():
    raw = "@@arch\nx86_64\n@@python\n/usr/bin/python3\n@@python-probe\nSegmentation fault"
    assert "end" not in split_sections(raw)
    with pytest.raises(UserError, match="img:1"):
        facts("img:1", raw)


def _raw(nccl, torch=None, files="", fi="", python="/usr/local/bin/python3"):
    probe = {"executable": python, "version": "3.12.10", "site_packages": [], "nccl": nccl, "torch": torch}
    return (
        f'@@arch\nx86_64\n@@os-release\nID=ubuntu\nVERSION_ID="22.04"\n@@fi_info\n{fi}\n@@files\n{files}\n'
        f"@@python\n{python}\n@@python-probe\n{json.dumps(probe)}\n@@end\n"
    )


def test_two_nccls_without_torch_are_not_guessed(tmp_path):
    two = [
        {"path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "code": 22102, "error": None},
        {"path": "/opt/nvidia/nccl/lib/libnccl.so.2", "code": 22707, "error": None},
    ]
    f = facts("img", _raw(two))
    assert chosen_nccl(f)["version"] is None and "2.21.2, 2.27.7" in chosen_nccl(f)["why"]
    lines = matrix_lines(f)
    assert "  nccl: {" not in lines and "# nccl: left out: several NCCL versions" in lines
    assert "nccl" not in {c.name for c in _loads(lines, tmp_path).components}


def test_torchs_nccl_wins_and_a_dlc_layout_prints_a_loadable_dlc_base(tmp_path):
    nccl = [
        {"path": "/usr/local/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2", "code": 22605},
        {"path": "/usr/local/cuda-12.8/lib/libnccl.so.2", "code": 22505},
    ]
    torch = {"version": "2.7.1+cu128", "cuda": "12.8", "nccl": [2, 26, 5]}
    files = "/opt/amazon/efa/lib/libfabric.so.1\n/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so"
    f = facts("registry.example:5000/pytorch-training:2.7.1", _raw(nccl, torch, files, "libfabric: 2.1.0"))
    assert f["kind"] == "dlc"
    text = matrix_lines(f)
    assert "registry.example" not in text  # the registry host never goes into a matrix
    assert "# aws_ofi_nccl: left out: plugin at /opt/amazon/ofi-nccl" in text
    v = _loads(text, tmp_path)
    assert (v.base.kind, v.base.image, v.base.registry_arg) == (
        "dlc",
        "pytorch-training:2.7.1",
        "BASE_REGISTRY",
    )
    assert v.python == "/usr/local/bin/python3"
    got = {c.name: (c.version, c.source) for c in v.components}
    assert got == {"torch": ("2.7.1", "base"), "nccl": ("2.26.5", "base"), "libfabric": ("2.1.0", "base")}


@pytest.mark.parametrize(
    ("digests", "local"), [([], True), (["pytorch-training@sha256:" + "a" * 64], False), (None, False)]
)
def test_an_image_only_in_this_engine_prints_base_local_not_a_registry_arg(tmp_path, digests, local):
    files = "/opt/amazon/efa/lib/libfabric.so.1"
    nccl = [{"path": "/usr/local/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2", "code": 22605}]
    torch = {"version": "2.7.1+cu128", "cuda": "12.8", "nccl": [2, 26, 5]}
    f = facts("pytorch-training:2.7.1", _raw(nccl, torch, files, "libfabric: 2.1.0"), digests)
    assert (f["kind"], f["local"]) == ("dlc", local)
    text = matrix_lines(f)
    assert ("  local: true" in text, "registry_arg" in text) == (local, not local)
    v = _loads(text, tmp_path)  # both load; local: true without registry_arg is what resolve asks for
    assert (
        v.base.registry_arg == (None if local else "BASE_REGISTRY")
        and v.base.image == "pytorch-training:2.7.1"
    )


def test_the_dlc_layout_dockerfile_pins_the_wheel_and_stands_in_no_plugin():
    wheel = nccl_wheel()
    assert wheel.requirement == "nvidia-nccl-cu12==2.27.7" and len(wheel.sha256 or "") == 64
    text = dockerfile("localbase/debian:bookworm-minbase", wheel.filename)
    assert text.startswith("# A local base") and "FROM localbase/debian:bookworm-minbase\n" in text
    assert "sha256sum -c SHA256SUMS" in text and "--no-index --no-deps" in text
    assert "python3 -m venv /usr/local" in text
    assert "libnccl-net" not in text and "ofi-nccl/lib" not in text
    # torch as a DLC has it, from pip: the CPU build and the one dependency it imports, pinned, offline
    pins = torch_wheels()
    assert [w.requirement for w in pins] == ["torch==2.13.0+cpu", "typing_extensions==4.16.0"]
    assert all(len(w.sha256 or "") == 64 and f"/tmp/artifacts/{w.filename}" in text for w in pins)
    assert "import torch.distributed.run" in text


# ---------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def dlc_layout(docker_client, local_base):
    proc = _cli("base", "--layout", "dlc", "--name", TAG)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    yield TAG
    docker_client.images.remove(TAG, noprune=True)  # the layers stay as build cache for the next run


def _inspect(image):
    proc = _cli("inspect-base", image, "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.docker
def test_inspect_base_reads_the_dlc_layout(dlc_layout, tmp_path):
    f = _inspect(dlc_layout)
    assert f["kind"] == "dlc"
    assert f["python"]["path"] == "/usr/local/bin/python3" and f["python"]["version"].startswith("3.11.")
    # torch's wheel NCCL and the DLC's second one (a stand-in copy in the CUDA directory), each loaded through
    # ctypes: ncclGetVersion answered for both, one version, so the matrix lines may name it
    by_path = {n["path"]: (n["version"], n["error"]) for n in f["nccl"]}
    assert by_path["/usr/local/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"] == ("2.27.7", None)
    cuda = [p for p in by_path if p.startswith("/usr/local/cuda")]
    assert cuda and all(by_path[p] == ("2.27.7", None) for p in cuda)
    assert (
        f["libfabric"]["version"] == "1.17.0" and f["libfabric"]["fi_info"] == "/opt/amazon/efa/bin/fi_info"
    )
    assert f["libfabric"]["libraries"] and all(
        p.startswith("/opt/amazon/efa/lib/") for p in f["libfabric"]["libraries"]
    )
    assert f["openmpi"]["version"] == "4.1.4" and f["openmpi"]["tool"].startswith("/opt/amazon/openmpi/bin/")
    assert f["aws_ofi_nccl"]["plugins"] == []  # left out, not faked
    assert f["efa_installer"]["version"] is None and f["efa_installer"]["packages"]
    assert f["local"] is True and "  local: true" in f["matrix"]  # built here: no RepoDigests
    v = _loads(f["matrix"], tmp_path)
    assert (v.base.kind, v.base.os, v.python) == ("dlc", "debian12", "/usr/local/bin/python3")
    assert v.base.registry_arg is None
    got = {c.name: (c.version, c.source) for c in v.components}
    assert got == {"nccl": ("2.27.7", "base"), "libfabric": ("1.17.0", "base"), "openmpi": ("4.1.4", "base")}
    # its torch is the CPU build (dlcbase.py): found, and said in a comment, not a line whose torch-nccl
    # check could only be unknown (no NCCL of its own)
    assert f["torch"]["version"] == "2.13.0+cpu" and not f["torch"]["nccl"]
    assert "  # torch: left out: torch 2.13.0+cpu is a CPU build (no CUDA, no NCCL of its own)" in f["matrix"]


@pytest.mark.docker
def test_inspect_base_on_the_debootstrap_base_says_it_has_no_python(local_base, tmp_path):
    f = _inspect(local_base)
    assert f["python"] is None and f["nccl"] == [] and f["kind"] == "local"
    assert "# python: none found" in f["matrix"]
    v = _loads(f["matrix"], tmp_path)
    assert (v.base.image, v.base.kind, v.components) == (local_base, "local", ())
    text = _cli("inspect-base", local_base, timeout=300)
    assert text.returncode == 0 and "python         none found" in text.stdout


@pytest.mark.docker
def test_an_unknown_image_is_exit_2_naming_it(docker_client):
    proc = _cli("inspect-base", "efa-image-build-test/never-built:nope")
    assert proc.returncode == 2
    assert "efa-image-build-test/never-built:nope" in proc.stderr and "Traceback" not in proc.stderr
