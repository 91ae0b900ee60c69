"""The libcudart.so link for the EFA installer's plugin on a CUDA -runtime image (issue 34, item 2), for
real: the golden's own RUN lines in a container whose CUDA directory holds only versioned names, as a
-runtime image's does, and the static check `plugin-cudart-dlopen` before (fails, as the plugin's dlopen
would) and after.

The DLC adds the same link for the same reason (aws/deep-learning-containers docker/pytorch/Dockerfile.cuda
at commit e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0). No CUDA here: a real shared library of the image (libz)
stands in for libcudart under its names; what is tested is the link and the loader's search, not CUDA. The
container is the DLC-layout base: /usr/local/cuda -> /usr/local/cuda-12.8, lib64 on LD_LIBRARY_PATH."""

from __future__ import annotations

import shlex

import pytest
from paths import GOLDEN
from test_dlc_extend import dlc_layout  # noqa: F401 - module fixture reused
from throwaway import run_script

from imagebuild.check.expectations import derive
from imagebuild.components import aws_ofi_nccl

pytestmark = pytest.mark.docker

VARIANT = "cuda12.8-efa1.51-nccl2.27.7-ofi1.22"
LIB64 = "/usr/local/cuda/lib64"


def _link_run() -> str:
    """The golden's link RUN, as one shell line (its continuation lines joined)."""
    text = (GOLDEN / f"{VARIANT}.Dockerfile").read_text()
    head = f"RUN test -e {LIB64}/libcudart.so"
    (run,) = [block for block in text.split("\n\n") if head in block]
    lines = run[run.index(head) + len("RUN ") :].split("\nWORKDIR")[0]
    return lines.replace("\\\n", " ")


def test_the_link_lines_make_the_name_the_plugin_dlopens_and_the_check_sees_it(dlc_layout):  # noqa: F811
    (check,) = [
        e
        for e in derive({"components": {aws_ofi_nccl.NAME: {"method": "installer"}}, "python": "python3"})
        if e.name == "plugin-cudart-dlopen"
    ]
    assert check.skip is None
    probe = check.params["command"]
    runtime_like = (
        f"cp -L /lib/$(uname -m)-linux-gnu/libz.so.1 {LIB64}/libcudart.so.12.8.90 "
        f"&& ln -s libcudart.so.12.8.90 {LIB64}/libcudart.so.12 && ldconfig"
    )
    script = "\n".join(
        [
            "set -o pipefail",
            runtime_like,
            f"if {probe} 2>/dev/null; then echo BEFORE-PASSED; exit 3; fi",  # a -runtime image: no such name
            _link_run(),
            f"readlink {LIB64}/libcudart.so",
            probe,
            _link_run(),  # again: an existing link is kept
            f"readlink {LIB64}/libcudart.so",
        ]
    )
    run = run_script(dlc_layout, script, "efa-image-build-test-cudart")
    assert run.returncode == 0, (shlex.quote(script), run.stdout, run.stderr)
    assert run.stdout.split() == ["libcudart.so.12", "libcudart.so.12"]  # the soname link, made once
