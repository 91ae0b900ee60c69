"""arm64 (#12.6): `platform` per variant, paths by architecture, aarch64 wheels, and the local matrix rendered
for arm64 and pinned as goldens (building it needs an arm64 engine)."""

from __future__ import annotations

import pytest
from cli import build_py
from paths import ROOT, TESTS, assert_golden

from efa_validators.node.nodecheck import default_lib_dirs
from imagebuild.building import buildkit
from imagebuild.catalog import platforms
from imagebuild.matrix.load import load
from imagebuild.render.dockerfile import dockerfile

GOLDEN = TESTS / "golden" / "arm64"
ARM64 = {v.name: v for v in load(str(ROOT / "matrix.local.yaml"), platform="linux/arm64")}


@pytest.mark.parametrize("name", sorted(ARM64))
def test_local_matrix_for_arm64_matches_its_golden(name):
    """UPDATE_GOLDEN=1 rewrites tests/golden/arm64/ after a deliberate change."""
    text = dockerfile(ARM64[name])
    assert_golden(text, GOLDEN / f"{name}.Dockerfile")


@pytest.mark.parametrize("name", sorted(ARM64))
def test_arm64_render_has_no_x86_path_or_wheel(name):
    v = ARM64[name]
    text = dockerfile(v)
    assert v.platform == "linux/arm64" and v.to_lock()["platform"] == "linux/arm64"
    assert "x86_64" not in text and "x86-64" not in text
    wheels = [a.filename for c in v.components for a in c.artifacts if a.kind == "pypi"]
    assert all("aarch64" in w for w in wheels)
    assert bool(wheels) == any(c.method == "wheel" for c in v.components)  # a base-only variant has none
    if v.has("nccl_tests"):
        assert "MPI_HOME=/usr/lib/aarch64-linux-gnu/openmpi" in text


def test_default_platform_is_amd64_and_the_matrix_has_a_gb200_variant():
    variants = {v.name: v for v in load(str(ROOT / "matrix.yaml"))}
    assert {v.platform for n, v in variants.items() if not n.endswith("-arm64")} == {"linux/amd64"}
    gb200 = variants["cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64"]
    assert gb200.platform == "linux/arm64" and gb200.instance_types == ("p6e-gb200.36xlarge",)
    assert gb200.option("cuda_arch") == "100" and gb200.has("efa_installer")
    assert "x86_64" not in dockerfile(gb200)


def test_installer_plugin_dirs_follow_the_platform():
    dlc = next(v for v in load(str(ROOT / "matrix.yaml")) if v.base.kind == "dlc")
    ld = dict((e.name, e.value) for e in dlc.env)["LD_LIBRARY_PATH"]
    assert "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu" in ld
    arm = next(v for v in load(str(ROOT / "matrix.yaml"), platform="linux/arm64") if v.base.kind == "dlc")
    ld_arm = dict((e.name, e.value) for e in arm.env)["LD_LIBRARY_PATH"]
    assert "/opt/amazon/ofi-nccl/lib/aarch64-linux-gnu" in ld_arm and "x86_64" not in ld_arm


def test_unknown_platform_exit_2_with_line_and_key(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "variants:\n  - name: v1\n    platform: linux/ppc64le\n"
        "    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}\n"
    )
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 2
    err = res.err
    assert f"{path}:3" in err and "key 'variants[0].platform'" in err and "Traceback" not in err


def test_no_pinned_wheel_for_the_platform_names_what_the_catalog_has(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "variants:\n  - name: v1\n    platform: linux/arm64\n"
        "    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}\n"
        '    cuda: "12.8"\n    components:\n      cuda_runtime: {version: "12.8.90", method: wheel, '
        'params: {toolkit: "yes"}}\n'
    )
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 2
    err = res.err
    assert "no build toolkit for cuda_runtime 12.8.90" in err and "key 'components.cuda_runtime.params" in err


def test_platform_helpers():
    arm = platforms.platform("linux/arm64")
    assert arm.fill("/usr/lib/{multiarch}/openmpi") == "/usr/lib/aarch64-linux-gnu/openmpi"
    assert default_lib_dirs("aarch64")[-1] == "/usr/lib/aarch64-linux-gnu"
    assert default_lib_dirs("x86_64")[-1] == "/usr/lib/x86_64-linux-gnu"
    choice = buildkit.BuilderChoice("buildx", "docker", "test")
    argv, _ = buildkit.build_argv(choice, "Dockerfile", "iid", {}, {}, platform="linux/arm64")
    assert argv[argv.index("--platform") + 1] == "linux/arm64"
