"""Extend-a-DLC on the local DLC-layout base: the variant builds, and every static check passes on the image.

`localbase/dlc-layout:bookworm` (`build.py base --layout dlc`, made by `make base` in CI) has the DLC's
layout: Python in /usr/local, libfabric and Open MPI under /opt/amazon, NCCL in site-packages. The variant
records them as `source: {base: true}` (DLC prefixes from the catalog, NCCL's from the matrix), adds sshd.
"""

from __future__ import annotations

import json

import pytest
from cli import build_py
from paths import ROOT

from imagebuild.build.dlcbase import DEFAULT_NAME as DLC_LAYOUT
from imagebuild.matrix.load import load

VARIANT = "local-dlc-layout-extend"


def test_the_extend_variant_takes_the_dlc_prefixes_and_python():
    (v,) = load(str(ROOT / "matrix.local.yaml"), only=[VARIANT])
    assert (v.base.kind, v.base.registry_arg, v.python) == ("dlc", None, "/usr/local/bin/python3")
    prefixes = {c.name: (c.source, c.prefix) for c in v.components}
    assert prefixes["libfabric"] == ("base", "/opt/amazon/efa")
    assert prefixes["openmpi"] == ("base", "/opt/amazon/openmpi")
    assert prefixes["nccl"] == ("base", "/usr/local/lib/python3.11/site-packages/nvidia/nccl")
    ld = next(e.value for e in v.env if e.name == "LD_LIBRARY_PATH")
    assert "/opt/amazon/efa/lib" in ld and "/site-packages/nvidia/nccl/lib" in ld


@pytest.fixture(scope="module")
def dlc_layout(docker_client, local_base):
    """The DLC-layout base under its default name (a rebuild from the engine's cache when it exists)."""
    assert build_py("base", "--layout", "dlc").rc == 0
    docker_client.images.get(DLC_LAYOUT)
    return DLC_LAYOUT


@pytest.mark.docker
def test_extending_the_dlc_layout_builds_and_passes_every_static_check(dlc_layout, tmp_path):
    out = tmp_path / "build"
    argv = ["build", "--matrix", str(ROOT / "matrix.local.yaml"), "--variant", VARIANT, "--out", str(out)]
    rc = build_py(*argv, "--cache", ROOT / ".cache" / "artifacts", "--plain").rc
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = [e for e in summary["variants"] if e["variant"] == VARIANT]
    assert rc == 0, f"building {VARIANT} failed: {entry.get('error')} (log {entry['log']})"
    report_path = tmp_path / "report.json"
    rc = build_py("test", "--image", entry["tags"][0], "--json", report_path).rc
    (image,) = json.loads(report_path.read_text())["images"]
    st = {c["name"]: (c["status"], c["detail"]) for c in image["checks"]}
    assert rc == 0 and image["passed"], {k: v for k, v in st.items() if v[0] not in ("pass", "skip")}
    for name in (
        "validators-import",  # with the DLC's /usr/local/bin/python3
        "nccl-version-ctypes",
        "single-libnccl",
        "libfabric-version",
        "single-libfabric",
        "openmpi-version",
        "mpirun-as-root",
        "sshd-ready",
        "ssh-version",
        "ssh-client-trusts-cluster",
    ):
        assert st[name][0] == "pass", (name, st[name])
    assert "site-packages/nvidia/nccl/lib/libnccl.so.2" in st["nccl-version-ctypes"][1]
    assert "/opt/amazon/efa/lib/" in st["single-libfabric"][1]
