"""One NCCL per image: the nccl block's system step, run for real on a base that ships held NCCL packages.

nvidia/cuda images ship libnccl2 (devel: libnccl-dev) and hold them; no such image can be pulled here, so the
test base is the debootstrap base plus two packages of those names made with dpkg-deb and held with apt-mark:
the same dpkg/apt state the step meets on a CUDA base. The step is the text the block renders (no copy).
"""

from __future__ import annotations

import io
import re
import uuid

import pytest

from imagebuild.components import nccl
from imagebuild.render import dockerfile as render
from imagebuild.variant import Artifact, BaseImage, Component, Variant

LIB = "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
QUERY = "dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n'"
# Two packages as nvidia/cuda has them: libnccl-dev depends on libnccl2, both held.
HELD_NCCL = f"""\
RUN mkdir -p /tmp/n2/DEBIAN /tmp/n2/usr/lib/x86_64-linux-gnu /tmp/nd/DEBIAN \\
 && printf '%s\\n' 'Package: libnccl2' 'Version: 2.21.5-1+cuda12.4' 'Architecture: all' \\
      'Maintainer: test <t@example.invalid>' 'Description: stand-in' > /tmp/n2/DEBIAN/control \\
 && printf '%s\\n' 'Package: libnccl-dev' 'Version: 2.21.5-1+cuda12.4' 'Architecture: all' \\
      'Maintainer: test <t@example.invalid>' 'Depends: libnccl2' 'Description: stand-in' \\
      > /tmp/nd/DEBIAN/control \\
 && echo stand-in > /tmp/n2{LIB} \\
 && dpkg-deb -b /tmp/n2 /tmp/n2.deb && dpkg-deb -b /tmp/nd /tmp/nd.deb \\
 && dpkg -i /tmp/n2.deb /tmp/nd.deb && apt-mark hold libnccl2 libnccl-dev && rm -rf /tmp/n2 /tmp/nd /tmp/*.deb
"""


def _purge_step(kind: str) -> str:
    wheel = Artifact("pypi", "nccl.whl", "0" * 64, requirement="nvidia-nccl-cu12==2.27.7")
    comp = Component(nccl.NAME, "2.27.7", "wheel", "pypi", prefix="/opt/nvidia/nccl", artifacts=(wheel,))
    v = Variant(
        name="one-nccl",
        base=BaseImage("localbase/debian:bookworm-minbase", kind, "debian12"),
        python="/usr/bin/python3",
        components=(comp,),
        options=(("build_ca", False), ("cuda_arch", "90"), ("jobs", 0)),
    )
    return render.render_block(comp, v, render.plan(v)).get("system", "")


def test_the_purge_is_rendered_for_a_cuda_base_only():
    step = _purge_step("cuda")
    assert "libnccl2 libnccl-dev" in step and "--allow-change-held-packages" in step
    assert _purge_step("local") == "" and _purge_step("dlc") == ""


@pytest.mark.docker
@pytest.mark.parametrize("held", [True, False], ids=["held-packages", "no-packages"])
def test_the_purge_removes_held_nccl_packages_and_is_a_no_op_without_them(docker_client, local_base, held):
    text = f'FROM {local_base}\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
    text += (HELD_NCCL if held else "") + _purge_step("cuda") + "\n"
    tag = f"efa-image-build-test/one-nccl:{uuid.uuid4().hex[:12]}"
    docker_client.images.build(fileobj=io.BytesIO(text.encode()), tag=tag, rm=True, forcerm=True)
    try:
        out = docker_client.containers.run(
            tag,
            ["bash", "-c", f"{QUERY} 'libnccl*'; ls {LIB} || true"],
            remove=True,
            stderr=True,
        ).decode()
    finally:
        docker_client.images.remove(tag, force=True)
    installed = re.findall(r"(?m)^(libnccl\S*) .i", out)  # `ii`, or `hi` for a held package
    assert installed == [] and f"'{LIB}': No such file" in out, out
