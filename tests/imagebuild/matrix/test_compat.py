"""Compatibility rules and the version parser: real version comparison, never string comparison."""

from __future__ import annotations

import pytest
from paths import ROOT

from imagebuild.errors import UserError
from imagebuild.matrix import compat
from imagebuild.matrix.load import load
from imagebuild.variant import Artifact, Component, EnvVar
from imagebuild.versions import Version, satisfies


def test_versions_compare_numerically():
    assert Version("1.10") > Version("1.9")
    assert Version("1.22") == Version("1.22.0")
    assert Version("1.5.0-aws") == Version("1.5.0") and Version("v1.13.2-aws") < Version("1.14")
    assert Version("2.27.7-1") > Version("2.27.6") and Version("2.26.2.post1") == Version("2.26.2")
    assert satisfies("1.21.1", ">=1.7, <1.22") and not satisfies("1.22.0", ">=1.7, <1.22")
    with pytest.raises(ValueError):
        Version("abc")
    with pytest.raises(ValueError):
        satisfies("1.0", "~=1.0")


def comp(name, version, **kw):
    return Component(
        name=name, version=version, method=kw.pop("method", "source"), source=kw.pop("source", "git"), **kw
    )


def rules(problems):
    return {p.rule for p in problems}


def test_plugin_needs_libfabric_122_from_113_and_118_from_19():
    new = {
        "aws_ofi_nccl": comp("aws_ofi_nccl", "1.13.0"),
        "libfabric": comp("libfabric", "1.21.0"),
        "nccl": comp("nccl", "2.27.7"),
    }
    assert "plugin-libfabric" in rules(compat.check(new, None, [], None))
    new["libfabric"] = comp("libfabric", "1.22.0")
    assert "plugin-libfabric" not in rules(compat.check(new, None, [], None))
    mid = {
        "aws_ofi_nccl": comp("aws_ofi_nccl", "1.9.1"),
        "libfabric": comp("libfabric", "1.17.1"),
        "nccl": comp("nccl", "2.18.5"),
    }
    assert "plugin-libfabric" in rules(compat.check(mid, None, [], None))
    old = dict(mid, aws_ofi_nccl=comp("aws_ofi_nccl", "1.5.0"))
    assert "plugin-libfabric" not in rules(compat.check(old, None, [], None))
    off = dict(
        new,
        libfabric=comp("libfabric", "1.17.0"),
        aws_ofi_nccl=comp("aws_ofi_nccl", "1.16.3", params=(("platform_aws", "no"),)),
    )
    assert "plugin-libfabric" not in rules(compat.check(off, None, [], None))


def test_nccl_219_on_efa_before_129_needs_sync_memops_off():
    comps = {
        "nccl": comp("nccl", "2.19.3"),
        "efa_installer": comp("efa_installer", "1.28.0", method="installer"),
    }
    assert "nccl219-efa129" in rules(compat.check(comps, None, [], None))
    env = [EnvVar("FI_EFA_SET_CUDA_SYNC_MEMOPS", "0", "r", "s")]
    assert "nccl219-efa129" not in rules(compat.check(comps, None, env, None))
    comps["efa_installer"] = comp("efa_installer", "1.29.0", method="installer")
    assert "nccl219-efa129" not in rules(compat.check(comps, None, [], None))


def test_cuda_build_of_nccl_and_arch_need_matching_cuda():
    wheel = comp(
        "nccl",
        "2.27.7",
        method="wheel",
        source="pypi",
        artifacts=(Artifact("pypi", "x.whl", "a" * 64, requirement="nvidia-nccl-cu12==2.27.7"),),
    )
    assert "cuda-build" in rules(compat.check({"nccl": wheel}, "11.8", [], None))
    assert "cuda-build" not in rules(compat.check({"nccl": wheel}, "12.4", [], None))
    apt = comp("nccl", "2.18.5", method="packages", source="apt", packages=("libnccl2=2.18.5-1+cuda12.2",))
    assert "cuda-build" in rules(compat.check({"nccl": apt}, "11.8", [], None))
    assert "cuda-arch" in rules(compat.check({}, "12.4", [], "90;100"))
    assert "cuda-arch" not in rules(compat.check({}, "12.8", [], "90;100"))


def test_two_libfabrics_refused():
    comps = {
        "efa_installer": comp("efa_installer", "1.41.0", method="installer"),
        "libfabric": comp("libfabric", "1.17.0", method="apt", source="apt"),
    }
    assert "two-libfabrics" in rules(compat.check(comps, None, [], None))


def test_user_override_breaking_a_rule_is_bad_input(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "variants:\n"
        "  - name: v\n"
        "    base: {image: nvidia/cuda:12.4.1-devel-ubuntu22.04, kind: cuda, os: ubuntu22.04}\n"
        '    cuda: "12.4"\n'
        "    components:\n"
        '      efa_installer: {version: "1.22.1"}\n'
        "      libfabric: {source: {installer: efa_installer}}\n"
        '      nccl: {version: "2.23.4", method: source}\n'
        '    env: {FI_EFA_SET_CUDA_SYNC_MEMOPS: "1"}\n'
        "    lint_ignore: [FI_EFA_SET_CUDA_SYNC_MEMOPS]\n"
    )
    with pytest.raises(UserError) as err:
        load(str(path))
    assert err.value.line == 9 and err.value.key == "env.FI_EFA_SET_CUDA_SYNC_MEMOPS"
    path.write_text(path.read_text().replace('    env: {FI_EFA_SET_CUDA_SYNC_MEMOPS: "1"}\n', ""))
    (v,) = load(str(path))
    assert ("FI_EFA_SET_CUDA_SYNC_MEMOPS", "0") in [(e.name, e.value) for e in v.env]


def test_installer_bundle_versions_come_from_the_catalog(tmp_path):
    root = ROOT
    (v,) = [x for x in load(str(root / "matrix.yaml")) if x.name.startswith("dlc-pt2.7-")]
    assert v.version_of("libfabric") == "2.1.0" and v.component("libfabric").bundled_by == "efa_installer"
    assert v.component("aws_ofi_nccl").prefix == "/opt/amazon/ofi-nccl"


def test_installer_openmpi5_sets_prefix_and_version(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "variants:\n"
        "  - name: m{mpi}\n"
        "    base: {image: nvidia/cuda:12.8.1-devel-ubuntu22.04, kind: cuda, os: ubuntu22.04}\n"
        '    cuda: "12.8"\n'
        "    components:\n"
        "      libfabric: {source: {installer: efa_installer}}\n"
        "      openmpi: {source: {installer: efa_installer}}\n"
        "    axes:\n"
        "      mpi:\n"
        '        "4": {components: {efa_installer: {version: "1.41.0"}}}\n'
        '        "5": {components: {efa_installer: {version: "1.41.0", params: {openmpi: "5"}}}}\n'
    )
    m4, m5 = load(str(path))
    assert (m4.version_of("openmpi"), m4.component("openmpi").prefix) == ("4.1.7", "/opt/amazon/openmpi")
    assert (m5.version_of("openmpi"), m5.component("openmpi").prefix) == ("5.0.6", "/opt/amazon/openmpi5")
    path.write_text(
        path.read_text().replace(
            "      openmpi: {source: {installer: efa_installer}}\n",
            '      openmpi: {version: "4.1.5", source: {installer: efa_installer}}\n',
        )
    )
    with pytest.raises(UserError) as err:
        load(str(path))
    assert "bundles openmpi 4.1.7, not 4.1.5" in str(err.value) and err.value.line == 7
    # installer 1.32.0 bundles Open MPI 5.0.2 too (aws-parallelcluster-cookbook commit 3c033553, CHANGELOG)
    path.write_text(path.read_text().replace('version: "4.1.5", ', "").replace('"1.41.0"', '"1.32.0"'))
    m4, m5 = load(str(path))
    assert (m4.version_of("openmpi"), m5.version_of("openmpi")) == ("4.1.6", "5.0.2")
    assert m5.component("openmpi").prefix == "/opt/amazon/openmpi5"


def test_plugin_before_117_does_not_build_with_cuda13():
    ofi = comp("aws_ofi_nccl", "1.16.3", params=(("platform_aws", "no"),))
    comps = {"aws_ofi_nccl": ofi, "nccl": comp("nccl", "2.27.7"), "libfabric": comp("libfabric", "1.17.0")}
    assert "plugin-cuda13" in rules(compat.check(comps, "13.0", [], None))
    assert "plugin-cuda13" not in rules(compat.check(comps, "12.8", [], None))
    comps["aws_ofi_nccl"] = comp("aws_ofi_nccl", "1.17.3", params=(("platform_aws", "no"),))
    assert "plugin-cuda13" not in rules(compat.check(comps, "13.0", [], None))


def test_a_method_without_a_partial_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "variants:\n"
        "  - name: v\n"
        "    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}\n"
        "    components:\n"
        '      torch: {version: "2.7.1", source: {pypi: "torch==2.7.1", filename: t.whl, sha256: "'
        + "c" * 64
        + '"}}\n'
    )
    with pytest.raises(UserError) as err:
        load(str(path))
    assert "torch cannot be installed with method wheel" in str(err.value) and err.value.line == 5


def test_a_component_without_what_its_block_needs_is_refused():
    nccl, fab, mpi = comp("nccl", "2.27.7"), comp("libfabric", "1.22.0"), comp("openmpi", "4.1.7")
    ofi, tests = comp("aws_ofi_nccl", "1.16.3"), comp("nccl_tests", "2.19.6")
    full = {"nccl": nccl, "libfabric": fab, "openmpi": mpi, "aws_ofi_nccl": ofi, "nccl_tests": tests}
    assert not rules(compat.check(full, None, [], None)) & {"needs-nccl", "needs-libfabric", "needs-mpi"}
    for missing, rule, about in (
        ("nccl", "needs-nccl", "components.aws_ofi_nccl"),
        ("libfabric", "needs-libfabric", "components.aws_ofi_nccl"),
        ("openmpi", "needs-mpi", "components.nccl_tests"),
    ):
        problems = compat.check({k: v for k, v in full.items() if k != missing}, None, [], None)
        hit = [p for p in problems if p.rule == rule]
        assert hit and hit[0].key == about and hit[0].source, (missing, problems)
    alone = compat.check({"nccl_tests": tests}, None, [], None)
    assert {(p.rule, p.key) for p in alone} == {
        ("needs-nccl", "components.nccl_tests"),
        ("needs-mpi", "components.nccl_tests"),
    }


def test_a_source_plugin_must_be_newer_than_the_installers_own():
    """EFA 1.49.0 bundles aws-ofi-nccl 1.20.0 (catalog): building 1.20.0 or older replaces it with no gain."""
    comps = {
        "efa_installer": comp("efa_installer", "1.49.0", method="installer"),
        "libfabric": comp("libfabric", "2.4.0", method="installer"),
        "nccl": comp("nccl", "2.27.7"),
        "aws_ofi_nccl": comp("aws_ofi_nccl", "1.20.0"),
    }
    assert "plugin-not-newer" in rules(compat.check(comps, None, [], None))
    comps["aws_ofi_nccl"] = comp("aws_ofi_nccl", "1.21.1")
    assert "plugin-not-newer" not in rules(compat.check(comps, None, [], None))
    bundled = dict(comps, aws_ofi_nccl=comp("aws_ofi_nccl", "1.20.0", method="installer"))
    assert "plugin-not-newer" not in rules(compat.check(bundled, None, [], None))
    # an installer whose bundle no source states cannot be judged: not refused on a guess
    unknown = dict(comps, efa_installer=comp("efa_installer", "1.47.0", method="installer"))
    unknown["aws_ofi_nccl"] = comp("aws_ofi_nccl", "1.14.0")
    assert "plugin-not-newer" not in rules(compat.check(unknown, None, [], None))


def test_targets_refuse_efa_without_plugin_and_cuda_arch_gaps():
    from imagebuild import catalog

    profiles = catalog.instances()
    src_nccl = {"nccl": comp("nccl", "2.27.7")}
    assert rules(compat.targets(src_nccl, ("p5.48xlarge",), profiles, None, None)) == {"efa-without-plugin"}
    assert rules(compat.targets(src_nccl, ("p5.48xlarge",), profiles, None, "socket")) == set()
    assert rules(compat.targets(src_nccl, (), profiles, None, None)) == set()
    cov = compat.targets(src_nccl, ("p5.48xlarge", "p6-b200.48xlarge"), profiles, "90", "socket")
    assert [p.rule for p in cov] == ["cuda-arch-coverage"] and "sm_100" in cov[0].message
    assert compat.targets(src_nccl, ("p5.48xlarge", "p6-b200.48xlarge"), profiles, "90;100", "socket") == []
    # wheels carry every architecture: nothing compiled here, nothing to cover
    wheel = {"nccl": comp("nccl", "2.27.7", method="wheel", source="pypi")}
    assert compat.targets(wheel, ("p6-b300.48xlarge",), profiles, "90", "socket") == []
    assert rules(compat.targets(src_nccl, ("p6-b300.48xlarge",), profiles, None, "socket")) == {
        "cuda-arch-unknown"
    }
