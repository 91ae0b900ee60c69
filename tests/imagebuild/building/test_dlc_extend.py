"""Extend-a-DLC on the local DLC-layout base: the variant builds, and every static check passes on the image.

`localbase/dlc-layout:bookworm-2nccl-torch` (`build.py base --layout dlc`, made by `make base` in CI) has the
DLC's layout: Python in /usr/local, libfabric and Open MPI under /opt/amazon (mpirun wrapped, mca params
appended), torch's NCCL in site-packages and a second NCCL in /usr/local/cuda/lib64 on LD_LIBRARY_PATH. The
variant records them as `source: {base: true}` (DLC prefixes from the catalog, NCCL's from the matrix), adds
sshd. Images derived FROM it, each differing in one way, fail exactly the check named for that way; the EFA
installer's keep/restore lines run in a container around what a second installer run does to the DLC's Open
MPI files.
"""

from __future__ import annotations

import pytest
from cli import build_py
from localbuild import build_variant, passing_checks
from paths import ROOT
from services import RUN
from throwaway import derived_images

from imagebuild.building.dlcbase import DEFAULT_NAME as DLC_LAYOUT
from imagebuild.check.runner import check_image
from imagebuild.components import efa_installer
from imagebuild.matrix.load import load
from imagebuild.render.dockerfile import environment

VARIANT = "local-dlc-layout-extend"


def test_the_extend_variant_takes_the_dlc_prefixes_and_python():
    (v,) = load(str(ROOT / "matrix.local.yaml"), only=[VARIANT])
    assert (v.base.kind, v.base.registry_arg, v.python) == ("dlc", None, "/usr/local/bin/python3")
    prefixes = {c.name: (c.source, c.prefix) for c in v.components}
    assert prefixes["libfabric"] == ("base", "/opt/amazon/efa")
    assert prefixes["openmpi"] == ("base", "/opt/amazon/openmpi")
    assert prefixes["nccl"] == ("base", "/usr/local/lib/python3.11/site-packages/nvidia/nccl")
    ld = next(e.value for e in v.env if e.name == "LD_LIBRARY_PATH")
    # the base's NCCLs stay where the base put them: no second one on the loader's path
    assert "/opt/amazon/efa/lib" in ld and "nvidia/nccl" not in ld


@pytest.fixture(scope="module")
def dlc_layout(docker_client, local_base):
    """The DLC-layout base under its default name (a rebuild from the engine's cache when it exists)."""
    assert build_py("base", "--layout", "dlc").rc == 0
    docker_client.images.get(DLC_LAYOUT)
    return DLC_LAYOUT


@pytest.fixture(scope="module")
def extended(dlc_layout, tmp_path_factory):
    return build_variant(ROOT / "matrix.local.yaml", VARIANT, tmp_path_factory.mktemp("dlc-extend") / "build")


@pytest.fixture(scope="module")
def derive_image(docker_client, extended):
    """`FROM <extended image>` + a few lines, under this run's unique tags; removed at the end."""
    shell = 'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
    with derived_images(docker_client, extended, f"efa-image-build-test-{RUN}/dlc-derived", shell) as build:
        yield build


def _checks(report) -> dict:
    return {c["name"]: (c["status"], c["detail"]) for c in report.checks}


def _failed(report) -> set:
    return {c["name"] for c in report.checks if c["status"] in ("fail", "unknown")}


@pytest.mark.docker
def test_extending_the_dlc_layout_builds_and_passes_every_static_check(extended, tmp_path):
    names = (
        "validators-import",  # with the DLC's /usr/local/bin/python3
        "nccl-version-ctypes",
        "single-libnccl",
        "nccl-torch-loads",
        "libfabric-version",
        "single-libfabric",
        "openmpi-version",
        "mpirun-as-root",
        "mpirun-plain-root",
        "openmpi-dlc-mca-params",
        "sshd-ready",
        "ssh-version",
        "ssh-client-trusts-cluster",
    )
    st = passing_checks(extended, tmp_path / "report.json", names)
    # two NCCLs, told apart by path: the loader's is the DLC's CUDA-directory one, torch's is its wheel's
    assert "/usr/local/cuda-12.8/lib64/libnccl.so.2" in st["nccl-version-ctypes"][1]
    assert "/usr/local/cuda-12.8/lib64/" in st["single-libnccl"][1]
    assert (
        "loads /usr/local/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
        in st["nccl-torch-loads"][1]
    )
    assert "is a wrapper adding the flag" in st["mpirun-plain-root"][1]
    assert "rmaps_base_mapping_policy=slot (file" in st["openmpi-dlc-mca-params"][1]
    assert "/opt/amazon/efa/lib/" in st["single-libfabric"][1]


@pytest.mark.docker
def test_a_lost_mpirun_wrapper_fails_only_the_plain_root_check(docker_client, derive_image):
    """What the installer's Open MPI package does to bin/mpirun (its launcher, orterun, under that name): the
    flag-adding check still passes, the plain one does not."""
    ref = derive_image("lost-wrapper", "RUN ln -sf orterun /opt/amazon/openmpi/bin/mpirun")
    report = check_image(docker_client, ref, trust_image_checks=True)
    assert _failed(report) == {"mpirun-plain-root"}
    st = _checks(report)
    assert st["mpirun-as-root"][0] == "pass" and "Open MPI refuses root" in st["mpirun-plain-root"][1]


@pytest.mark.docker
def test_torchs_nccl_on_the_loader_path_fails_single_libnccl(docker_client, derive_image):
    """What the layout did before: torch's NCCL directory in ld.so.conf.d beside the DLC's CUDA one."""
    nccl = "/usr/local/lib/python3.11/site-packages/nvidia/nccl/lib"
    ref = derive_image(
        "two-nccl-dirs", f"RUN echo {nccl} > /etc/ld.so.conf.d/000-torch-nccl.conf && ldconfig"
    )
    report = check_image(docker_client, ref, trust_image_checks=True)
    assert _failed(report) == {"single-libnccl"}
    detail = _checks(report)["single-libnccl"][1]
    assert "2 different libnccl.so.2" in detail and nccl in detail


@pytest.mark.docker
def test_the_installer_runs_keep_and_restore_lines_bring_back_the_dlcs_settings(docker_client, derive_image):
    """The EFA installer cannot be fetched here; between the rendered keep and restore lines this does to the
    DLC's files what its Open MPI package ships: bin/mpirun as the launcher itself and an mca params file
    without the DLC's lines (ending without a newline, as Debian's does). After restore every check passes."""
    keeps = {
        "wrapper": "/opt/amazon/openmpi/bin/mpirun",
        "real": "/opt/amazon/openmpi/bin/mpirun.real",
        "mca_params_file": "/opt/amazon/openmpi/etc/openmpi-mca-params.conf",
        "mca_params": ["hwloc_base_binding_policy = none", "rmaps_base_mapping_policy = slot"],
    }
    (dlc,) = load(str(ROOT / "matrix.yaml"), only=["dlc-pt2.7-efa1.41.0"])  # what the block gives a DLC
    comp = next(c for c in dlc.components if c.name == efa_installer.NAME)
    assert efa_installer.BLOCK.keeps(comp, dlc) == keeps
    partial = environment().get_template("partials/efa_installer.j2").module
    conf = keeps["mca_params_file"]
    package = (
        "ln -sf orterun /opt/amazon/openmpi/bin/mpirun"
        f" && grep -v -e hwloc_base_binding_policy -e rmaps_base_mapping_policy {conf} | head -c -1 > /tmp/c"
        f" && cat /tmp/c > {conf} && rm /tmp/c"
    )
    ref = derive_image(
        "reinstalled", f"RUN {partial.keep_dlc(keeps)} \\\n && {package} \\\n && {partial.restore_dlc(keeps)}"
    )
    report = check_image(docker_client, ref, trust_image_checks=True)
    assert _failed(report) == set(), {k: v for k, v in _checks(report).items() if v[0] in ("fail", "unknown")}
    st = _checks(report)
    assert st["mpirun-plain-root"][0] == "pass" and st["openmpi-dlc-mca-params"][0] == "pass"
    out = docker_client.containers.run(
        ref, ["bash", "-c", f"readlink {keeps['real']}; tail -n 3 {conf}"], remove=True, network_disabled=True
    ).decode()
    assert out.splitlines()[0] == "orterun"  # the launcher the "installer" put there is now the real one
    assert out.splitlines()[-2:] == keeps["mca_params"]
