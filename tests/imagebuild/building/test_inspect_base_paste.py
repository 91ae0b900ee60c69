"""`build.py inspect-base` on the local DLC-layout base prints matrix lines that build and pass as pasted.

The base (`build.py base --layout dlc`) has Python 3.11 and two NCCLs: torch's wheel in site-packages and one
in /usr/local/cuda-12.8/lib64. The catalog's DLC default for NCCL's prefix names Python 3.12's site-packages,
so a printed NCCL line without `prefix` made a lock pointing at a folder the image lacks, and the
`nccl-torch-loads` check failed. Here the printed lines are pasted under a variant name, rendered, built and
checked for real.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from cli import build_py
from paths import ROOT
from services import RUN

from imagebuild.building.dlcbase import DEFAULT_NAME as DLC_LAYOUT
from imagebuild.building.inspect_base import nccl_prefix

WHEEL = "/usr/local/lib/python3.11/site-packages/nvidia/nccl"


def test_the_prefix_is_torchs_wheel_when_there_is_one_else_the_one_all_share():
    both = ["/usr/local/cuda-12.8/lib64/libnccl.so.2.27.7", WHEEL + "/lib/libnccl.so.2"]
    assert nccl_prefix(both) == WHEEL
    assert nccl_prefix(["/opt/nccl/lib/libnccl.so.2", "/opt/nccl/lib/libnccl.so.2.27.7"]) == "/opt/nccl"
    # lib64 is not `<prefix>/lib`, and two prefixes are not guessed between
    assert nccl_prefix(["/usr/local/cuda-12.8/lib64/libnccl.so.2"]) is None
    assert nccl_prefix(["/a/lib/libnccl.so.2", "/b/lib/libnccl.so.2"]) is None


@pytest.mark.docker
def test_the_printed_lines_pasted_into_a_matrix_build_and_pass_every_check(
    docker_client, local_base, tmp_path
):
    assert build_py("base", "--layout", "dlc").rc == 0
    got = build_py("inspect-base", DLC_LAYOUT, "--json")
    assert got.rc == 0, got.err
    lines = json.loads(got.out)["matrix"]
    assert f'prefix: "{WHEEL}"' in lines
    name = f"pasted-{RUN}"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        f"format: efa-image-build/matrix/v1\nvariants:\n  - name: {name}\n" + textwrap.indent(lines, "    ")
    )
    out = tmp_path / "build"
    assert build_py("render", "--matrix", matrix, "--out", out).rc == 0
    lock = json.loads((out / name / "variant.lock.json").read_text())
    assert lock["components"]["nccl"]["prefix"] == WHEEL
    built = build_py(
        "build", "--matrix", matrix, "--out", out, "--cache", ROOT / ".cache" / "artifacts", "--plain"
    )
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = summary["variants"]
    try:
        assert built.rc == 0, entry.get("error")
        report = tmp_path / "report.json"
        checked = build_py("test", "--out", out, "--json", report)
        (image,) = json.loads(report.read_text())["images"]
        st = {c["name"]: (c["status"], c["detail"]) for c in image["checks"]}
        assert checked.rc == 0 and image["passed"], {
            k: v for k, v in st.items() if v[0] not in ("pass", "skip")
        }
        assert st["nccl-torch-loads"][0] == "pass"
        assert f"loads {WHEEL}/lib/libnccl.so.2" in st["nccl-torch-loads"][1]
    finally:
        for tag in entry.get("tags") or []:
            try:
                docker_client.images.remove(tag, force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
