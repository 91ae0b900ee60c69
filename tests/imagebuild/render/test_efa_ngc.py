"""EFA installer 1.48+ on CUDA bases (issue 34, item 2): the NGC-mode flags, the NGC plugin in the one-plugin
removal and checks, the libcudart.so link for the installer's plugin on a -runtime image, and plugin/libfabric
pairs from one release.

Upstream sources (read at these commits):
- awslabs/awsome-distributed-ai micro-benchmarks/expert-parallelism/deepep-benchmark/deepep.Dockerfile
  (08367fe01c62de3fe6c81251dd29bce94d253ed3): `./efa_installer.sh --disable-build-ngc --disable-ngc ...` for
  every installer newer than 1.47.0 (`sort -V`), on an nvidia/cuda devel base;
- awslabs/awsome-distributed-ai micro-benchmarks/nccl-tests/nccl-tests.Dockerfile
  (9eae257ef3958c54dd2957755b6556fd651051dd): `--disable-build-ngc` with installer 1.48.0 on nvidia/cuda;
- aws/deep-learning-containers scripts/docker/common/install_efa_amzn2023.sh
  (e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0): `--disable-ngc` from 1.48.0; docker/pytorch/Dockerfile.cuda
  (same commit): the unversioned libcudart.so link on the CUDA runtime base ("NCCL OFI plugin dlopen()s");
- awslabs/awsome-distributed-ai 3.test_cases/megatron/megatron-lm/aws-megatron-lm.Dockerfile
  (ef02a2d809aee76a861c5ceece0de1813304842f): NGC mode's plugin is libnccl-ofi-ngc-v2 in
  /opt/amazon/aws-ofi-nccl/lib;
- aws/aws-ofi-nccl RELEASENOTES.md at v1.21.1 (2475c4c736907e68ebeadb3848f31231ee4a44d0): tested with
  libfabric 2.6.0amzn1.0, which EFA installer 1.50.0 ships with plugin 1.21.1 (AWS EC2 user guide,
  efa-changelog).
"""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
from paths import GOLDEN, ROOT

from imagebuild import components
from imagebuild.check.expectations import derive
from imagebuild.components import aws_ofi_nccl, efa_installer
from imagebuild.matrix import compat
from imagebuild.matrix.load import load
from imagebuild.render import dockerfile as render
from imagebuild.variant import Component
from imagebuild.versions import Version

NGC_FLAGS = "--disable-build-ngc --disable-ngc"
VARIANTS = load(str(ROOT / "matrix.yaml"))
EFA = components.block(efa_installer.NAME)


def _installer(v):
    return v.component(efa_installer.NAME)


def _comp(version: str, **params) -> Component:
    return Component(efa_installer.NAME, version, "installer", "url", params=tuple(params.items()))


def test_cuda_goldens_with_installer_148_and_newer_pass_the_ngc_flags_aws_passes():
    """Every CUDA variant of matrix.yaml with an installer >= 1.48 runs it with both flags, in each installer
    stage (the runtime's and the builder's twin); older installers (no such flags) run without."""
    cuda = [v for v in VARIANTS if v.base.kind == "cuda" and _installer(v)]
    new = [v for v in cuda if Version(_installer(v).version) >= Version("1.48.0")]
    assert len(new) >= 2 and len(cuda) > len(new)  # and the legacy 1.22.1 stack
    for v in cuda:
        golden = (GOLDEN / f"{v.name}.Dockerfile").read_text()
        runs = [ln for ln in golden.splitlines() if "./efa_installer.sh" in ln]
        assert len(runs) == 2, v.name  # system and build-system
        assert all((NGC_FLAGS in ln) is (v in new) for ln in runs), v.name


def test_the_ngc_gate_compares_versions_and_asks_for_a_cuda_built_base():
    """1.100.0 is newer than 1.48.0 (as a string it sorts before); a Debian base is no NVIDIA container."""
    gates = (("1.47.0", False), ("1.48.0", True), ("1.50.0", True), ("1.100.0", True), ("1.9.0", False))
    for version, on in gates:
        flags = EFA.flags(_comp(version), "cuda")
        assert (flags[-2:] == NGC_FLAGS.split()) is on, version
        assert not any("ngc" in f for f in EFA.flags(_comp(version), "local")), version
    # a DLC is built on nvidia/cuda: reinstalling a new installer over one gets the flags too
    assert EFA.flags(_comp("1.50.0", reinstall="yes"), "dlc")[-2:] == NGC_FLAGS.split()


def test_reinstall_over_a_dlc_renders_the_flags():
    dlc = next(v for v in VARIANTS if v.base.kind == "dlc" and _installer(v))
    new = dataclasses.replace(_installer(dlc), version="1.50.0")
    v = dataclasses.replace(dlc, components=tuple(new if c.name == new.name else c for c in dlc.components))
    text = render.render_block(new, v, render.plan(v))["stage"]
    assert NGC_FLAGS in text and "mpirun.real" in text  # the DLC's wrapper is still kept
    old = render.render_block(_installer(dlc), dlc, render.plan(dlc))["stage"]
    assert "ngc" not in old  # 1.41.0 knows no NGC mode


def test_a_source_plugin_purges_the_ngc_package_and_place_too():
    legacy = next(v for v in VARIANTS if v.name == "cuda12.1-efa1.22-ofi1.5-legacy")
    ofi = dataclasses.replace(legacy.component(aws_ofi_nccl.NAME), version="1.22.1")

    def removal(version):
        efa = dataclasses.replace(_installer(legacy), version=version)
        v = dataclasses.replace(legacy, components=tuple(
            efa if c.name == efa.name else ofi if c.name == ofi.name else c for c in legacy.components
        ))  # fmt: skip
        text = render.render_block(efa, v, render.plan(v))["stage"]
        return [ln for ln in text.splitlines() if "dpkg --purge" in ln or "rm -rf /opt/amazon" in ln]

    assert (
        removal("1.50.0")
        == [
            " && dpkg --purge libnccl-ofi libnccl-ofi-ngc-v2 libnccl-ofi-ngc-v2-dbgsym \\",
            " && rm -rf /opt/amazon/ofi-nccl /opt/amazon/aws-ofi-nccl \\",
        ]
        * 2
    )  # both installer stages
    assert removal("1.43.2") == [" && dpkg --purge libnccl-ofi \\", " && rm -rf /opt/amazon/ofi-nccl \\"] * 2


def test_the_installers_plugin_on_a_runtime_image_gets_the_libcudart_link_once():
    v = next(v for v in VARIANTS if v.name == "cuda12.8-efa1.51-nccl2.27.7-ofi1.22")
    assert v.base.split and v.component(aws_ofi_nccl.NAME).bundled_by == efa_installer.NAME
    assert EFA.cudart_link(v) == "/usr/local/cuda/lib64/libcudart.so"
    golden = (GOLDEN / f"{v.name}.Dockerfile").read_text()
    efa_stage = golden.split("AS efa\n", 1)[1].split("\nFROM ", 1)[0]
    twin = golden.split("AS efa-build\n", 1)[1].split("\nFROM ", 1)[0]
    assert "ln -s" in efa_stage and "libcudart.so" in efa_stage and "libcudart" not in twin  # -devel has it
    # a plugin built here links cudart itself: no link
    legacy = next(v for v in VARIANTS if v.name == "cuda12.1-efa1.22-ofi1.5-legacy")
    assert EFA.cudart_link(legacy) is None
    assert "libcudart" not in (GOLDEN / f"{legacy.name}.Dockerfile").read_text()


def test_checks_for_ngc_mode_and_the_dlopen_target_follow_the_lock():
    def names(**comps):
        return {e.name for e in derive({"components": comps}) if not e.skip}

    efa_new = {"version": "1.50.0", "method": "installer", "prefix": "/opt/amazon/efa"}
    assert "efa-installer-not-ngc" in names(efa_installer=efa_new)
    assert "efa-installer-not-ngc" not in names(efa_installer=dict(efa_new, version="1.47.0"))
    assert "efa-installer-not-ngc" not in names(efa_installer=dict(efa_new, method="base"))
    assert "plugin-cudart-dlopen" in names(aws_ofi_nccl={"version": "1.21.1", "method": "installer"})
    assert "plugin-cudart-dlopen" not in names(aws_ofi_nccl={"version": "1.21.1", "method": "source"})


@pytest.mark.parametrize(
    "installed, ngc_there, passes",
    [(False, False, True), (False, True, False)],
)
def test_the_not_ngc_check_fails_on_the_ngc_place(tmp_path, installed, ngc_there, passes):
    lock = {"components": {efa_installer.NAME: {"version": "1.50.0", "method": "installer"}}}
    (check,) = [e for e in derive(lock) if e.name == "efa-installer-not-ngc"]
    place = tmp_path / "aws-ofi-nccl"
    if ngc_there:
        (place / "lib").mkdir(parents=True)
    command = check.params["command"].replace("/opt/amazon/aws-ofi-nccl", str(place))
    rc = subprocess.run(["bash", "-c", command], capture_output=True, timeout=60).returncode
    assert (rc == 0) is passes


def test_a_source_plugin_is_paired_with_the_installer_of_its_era():
    """aws-ofi-nccl 1.21.1 was tested with libfabric 2.6.0 (its RELEASENOTES.md); installer 1.49.0 brings
    2.4.0: refused, naming 1.50.0, which brings 2.6.0. A libfabric from apt is no installer's: not judged."""

    def c(name, version, method="source", bundled_by=None):
        return Component(name, version, method, method, bundled_by=bundled_by)

    comps = {
        "efa_installer": c("efa_installer", "1.49.0", "installer"),
        "libfabric": c("libfabric", "2.4.0", "installer", bundled_by="efa_installer"),
        "nccl": c("nccl", "2.27.7"),
        "aws_ofi_nccl": c("aws_ofi_nccl", "1.21.1"),
    }
    (era,) = [p for p in compat.check(comps, None, [], None) if p.rule == "plugin-libfabric-era"]
    assert "2.6.0" in era.message and "1.50.0" in era.message and "RELEASENOTES.md" in era.source
    assert era.key == "components.aws_ofi_nccl.version"
    comps["aws_ofi_nccl"] = c("aws_ofi_nccl", "1.20.0")  # 1.20.0 was tested with 2.4.0: its era
    problems = compat.check(comps, None, [], None)
    assert "plugin-libfabric-era" not in {p.rule for p in problems}
    apt = dict(comps, libfabric=c("libfabric", "1.17.0", "apt"), aws_ofi_nccl=c("aws_ofi_nccl", "1.21.1"))
    del apt["efa_installer"]
    assert "plugin-libfabric-era" not in {p.rule for p in compat.check(apt, None, [], None)}


def test_the_old_pairing_in_a_matrix_is_exit_2_naming_file_line_and_key(tmp_path):
    from cli import build_py

    text = (ROOT / "matrix.yaml").read_text()
    old = text.replace(
        'efa_installer: {version: "1.51.0"}\n      aws_ofi_nccl: {source: {installer: efa_installer}}',
        'efa_installer: {version: "1.49.0"}\n      aws_ofi_nccl: {version: "1.21.1", method: source}',
        1,
    )
    assert old != text
    path = tmp_path / "matrix.yaml"
    path.write_text(old)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "training").symlink_to(ROOT / "examples" / "training")
    res = build_py("list", "--matrix", path)
    assert res.rc == 2 and "Traceback" not in res.err
    assert f"{path}:" in res.err and "components.aws_ofi_nccl.version" in res.err and "1.50.0" in res.err
