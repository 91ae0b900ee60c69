"""Extending a DLC as a team would: the DLC's EFA installer is not run again unless the matrix asks, a run
over it keeps the DLC's root mpirun wrapper and mca params, and a base NCCL adds no second NCCL to the
loader's path.

Pure: matrices written here are loaded and rendered; the same lines run in a container in
tests/imagebuild/building/test_dlc_extend.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from paths import ROOT

from imagebuild.check.expectations import derive
from imagebuild.errors import UserError
from imagebuild.matrix.load import load
from imagebuild.render.dockerfile import dockerfile

DLC = """\
variants:
  - name: dlc
    base:
      image: pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker
      registry_arg: BASE_REGISTRY
      kind: {kind}
      os: ubuntu22.04
    cuda: "12.8"
    options: {{nccl_net: socket}}
    components:
      nccl: {{version: "2.26.2", source: {{base: true}}}}
      efa_installer: {efa}
      libfabric: {{source: {{installer: efa_installer}}}}
      openmpi: {{source: {{installer: efa_installer}}}}
"""


def _load(tmp_path: Path, efa: str, kind: str = "dlc"):
    path = tmp_path / "matrix.yaml"
    text = DLC.format(efa=efa, kind=kind)
    if kind != "dlc":
        text = text.replace("      registry_arg: BASE_REGISTRY\n", "")
    path.write_text(textwrap.dedent(text))
    (v,) = load(str(path))
    return v


def test_a_version_alone_on_a_dlc_is_exit_2_naming_both_ways(tmp_path):
    with pytest.raises(UserError) as err:
        _load(tmp_path, '{version: "1.41.0"}')
    e = err.value
    assert e.key == "components.efa_installer.params.reinstall" and e.line
    assert "already has the EFA installer's stack" in str(e)
    assert "source: {base: true}" in (e.hint or "") and 'reinstall: "yes"' in (e.hint or "")


def test_reinstall_is_refused_where_there_is_nothing_to_reinstall_over(tmp_path):
    with pytest.raises(UserError, match="kind: cuda base"):
        _load(tmp_path, '{version: "1.41.0", params: {reinstall: "yes"}}', kind="cuda")
    with pytest.raises(UserError, match="source base"):
        _load(tmp_path, '{version: "1.41.0", params: {reinstall: "yes"}, source: {base: true}}')


def test_the_dlcs_own_installer_recorded_renders_no_installer_and_is_checked(tmp_path):
    v = _load(tmp_path, '{version: "1.41.0", source: {base: true}}')
    efa = next(c for c in v.components if c.name == "efa_installer")
    assert (efa.method, efa.artifacts) == ("base", ())
    text = dockerfile(v)
    assert "efa_installer.sh" not in text and "AS efa" not in text and "FROM system AS runtime" in text
    by = {e.name: e for e in derive(v.to_lock())}
    assert (
        by["efa-installer-record"].skip is None and by["efa-installer-record"].params["version"] == "1.41.0"
    )
    assert by["fi-info-efa"].skip is None


def test_a_run_over_the_dlc_keeps_its_mpirun_wrapper_and_mca_params(tmp_path):
    v = _load(tmp_path, '{version: "1.41.0", params: {reinstall: "yes"}}')
    text = dockerfile(v)
    run = text[text.index("apt-get update \\\n && kept=") : text.index("rm -rf /tmp/aws-efa-installer")]
    keep, rest = run.split("./efa_installer.sh", 1)
    assert 'cp -a /opt/amazon/openmpi/bin/mpirun "$kept/mpirun"' in keep  # saved before the installer
    assert (
        "mv -f /opt/amazon/openmpi/bin/mpirun /opt/amazon/openmpi/bin/mpirun.real" in rest
    )  # restored after
    for line in ("hwloc_base_binding_policy = none", "rmaps_base_mapping_policy = slot"):
        assert f"echo '{line}' >> /opt/amazon/openmpi/etc/openmpi-mca-params.conf" in rest
    assert "'reinstall': 'yes'" in repr(
        dict(next(c for c in v.components if c.name == "efa_installer").params)
    )


def test_on_other_bases_the_installer_run_has_no_dlc_lines():
    for name in ("cuda12.8-efa1.51-nccl2.27.7-ofi1.22", "dlc-pt2.7-efa1.41.0"):
        (v,) = load(str(ROOT / "matrix.yaml"), only=[name])
        assert ("kept=/tmp/efa-image-build-dlc-kept" in dockerfile(v)) == (v.base.kind == "dlc")


def test_a_base_nccl_adds_no_directory_to_the_loader_path(tmp_path):
    """A DLC's loader path already holds its own NCCL (/usr/local/cuda/lib64); torch finds its wheel's."""
    (v,) = load(str(ROOT / "matrix.yaml"), only=["dlc-pt2.7-efa1.41.0"])
    text = dockerfile(v)
    ld = next(e.value for e in v.env if e.name == "LD_LIBRARY_PATH")
    conf = next(ln for ln in text.splitlines() if "/etc/ld.so.conf.d/efa-image-build.conf" in ln)
    assert "nvidia/nccl" not in ld and "nvidia/nccl" not in conf
    by = {e.name: e for e in derive(v.to_lock())}
    assert by["nccl-torch-loads"].skip is None and by["nccl-torch-loads"].params["import"] is True
    assert by["mpirun-plain-root"].skip is None and by["openmpi-dlc-mca-params"].skip is None


def test_dlc_only_checks_are_skipped_with_their_reason_elsewhere():
    (v,) = load(str(ROOT / "matrix.local.yaml"), only=["local-debian-nccl2.27"])
    by = {e.name: e for e in derive(v.to_lock())}
    for name in ("mpirun-plain-root", "openmpi-dlc-mca-params"):
        assert "not a kind: dlc base" in (by[name].skip or "")
    assert "no framework NCCL" in (by["nccl-torch-loads"].skip or "")
    assert by["mpirun-as-root"].skip is None  # the flag check stays on every base
