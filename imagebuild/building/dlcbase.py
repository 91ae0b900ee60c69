"""A local base laid out like the PyTorch DLC, built from Debian packages and one PyPI wheel (no registry).

CI cannot pull a DLC, yet the extend-a-DLC path must be tested on the layout a DLC really has. The PyTorch
2.7 cu128 DLC (aws/deep-learning-containers pytorch/training/docker/2.7/py3/cu128/Dockerfile.gpu, on
base/x86_64/gpu/cu128/ubuntu22.04/Dockerfile, both read at commit e17a13ce) has no conda: Python is built into
/usr/local (its site-packages under /usr/local/lib/pythonX.Y); torch comes from pip, so torch's NCCL is the
nvidia-nccl-cu12 wheel in site-packages (nvidia/nccl/lib/libnccl.so.2). It holds a second NCCL: the base's
scripts/install_cuda.sh builds NCCL from source (`make -j src.build`) and copies `build/lib/*` to
/usr/local/cuda/lib64 and `build/include/*` to /usr/local/cuda/include, and the base's LD_LIBRARY_PATH names
/usr/local/cuda/lib64 (torch's site-packages directory it does not name). The EFA installer
(scripts/install_efa.sh at e17a13ce; scripts/docker/common/install_efa.sh at e0ecedea) puts libfabric
and fi_info under /opt/amazon/efa, Open MPI under /opt/amazon/openmpi, aws-ofi-nccl under
/opt/amazon/ofi-nccl, and records /opt/amazon/efa_installed_packages; then the script moves `mpirun` to
`mpirun.real` behind a wrapper that adds `--allow-run-as-root` and appends two mca params (catalog
efa_installers.yaml `dlc_openmpi`).

This image, FROM the debootstrap base, reproduces that layout with what is reachable here:
- Python: a venv created at /usr/local (`python3 -m venv /usr/local`). It gives /usr/local/bin/python3 with
  sys.prefix /usr/local and its own /usr/local/lib/python3.11/site-packages, as the DLC's source-built
  Python has, without compiling CPython; a symlink set alone would keep Debian's prefix and dist-packages.
- torch's NCCL: the nvidia-nccl-cu12 wheel, fetched and sha256-verified on the host by the artifact cache (the
  catalog's pin), pip-installed offline into that site-packages.
- torch: the CPU build of the catalog's torch pin (torch 2.13.0+cpu, with typing_extensions, the one
  dependency `import torch` and torchrun need), fetched and installed the same way, so the torchrun recipe
  runs torch's own launcher and the probe for real (gloo: no GPU here). A DLC's CUDA torch is gigabytes and
  needs a GPU to run; the CPU build holds no NCCL of its own, so the NCCL checks still judge the wheel's.
- The second NCCL is a stand-in for the DLC's source build, which cannot be compiled here (no CUDA toolkit): a
  copy of the wheel's libnccl.so.2 (so the same version: another file at another path, and the checks tell the
  two apart by path) under the source build's names (libnccl.so.X.Y.Z, libnccl.so.2, libnccl.so), with the
  wheel's nccl.h, in /usr/local/cuda-12.8/{lib64,include}; /usr/local/cuda links to it and
  /usr/local/cuda/lib64 is on LD_LIBRARY_PATH, as in the DLC's base.
- libfabric: Debian's 1.17 library and fi_* tools moved to /opt/amazon/efa/{lib,bin}, so the image holds one
  libfabric, where the DLC has it. Open MPI: Debian's 4.1 linked in at /opt/amazon/openmpi/{bin,lib,etc} (its
  prefix is compiled in, so it is linked, not moved; etc is Debian's /etc/openmpi, the mca params file this
  Open MPI reads), mpirun wrapped and the mca params appended as install_efa.sh does.
- aws-ofi-nccl: left out. No source of it is reachable here and a stand-in would pretend to be a plugin.
- /opt/amazon/efa_installed_packages in the installer's format, saying that no EFA installer ran.
"""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from imagebuild import catalog
from imagebuild.adapters.docker_engine import find_image
from imagebuild.building.artifacts import ArtifactCache, ArtifactError, stage
from imagebuild.building.localbase import DEFAULT_NAME as DEBOOTSTRAP_BASE
from imagebuild.components import nccl, torch
from imagebuild.errors import UserError
from imagebuild.variant import LAYOUT_LABEL, Artifact

# `-2nccl`: the layout with the DLC's two NCCLs and its mpirun settings (an engine may still hold the older
# one-NCCL layout under `bookworm`; a new tag never lets a build take that one for this one).
# `-torch`: and torch (CPU) in site-packages; an engine holding `-2nccl` (no torch) builds the new tag.
DEFAULT_NAME = "localbase/dlc-layout:bookworm-2nccl-torch"
TORCH_VERSION = "2.13.0"
NCCL_VERSION = "2.27.7"
CUDA_MAJOR = 12
CUDA_DIR = "/usr/local/cuda-12.8"  # the DLC's toolkit directory (cu128); /usr/local/cuda links to it
SITE_PACKAGES = "/usr/local/lib/python3.11/site-packages"  # the venv's (Debian bookworm's Python 3.11)
# Debian bookworm pins, as matrix.local.yaml uses them
APT_PACKAGES = (
    "ca-certificates=20230311+deb12u1",
    "python3=3.11.2-1+b1",
    "python3-venv=3.11.2-1+b1",
    "libfabric1=1.17.0-3",
    "libfabric-bin=1.17.0-3",
    "openmpi-bin=4.1.4-3+b1",
    "libopenmpi3=4.1.4-3+b1",
)
RECORDED = ("libfabric1", "libfabric-bin", "openmpi-bin", "libopenmpi3")
DOCKER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Say = Callable[[str], None]


def nccl_wheel(version: str = NCCL_VERSION, cuda_major: int = CUDA_MAJOR) -> Artifact:
    """The catalog's pin of the nvidia-nccl-cuNN wheel (torch's NCCL dependency)."""
    for w in (catalog.component(nccl.NAME).get("wheels") or {}).get(version) or []:
        if int(w.get("cuda_major", 0)) == cuda_major and w.get("arch", "x86_64") == "x86_64":
            return Artifact(
                component=nccl.NAME,
                kind="pypi",
                filename=w["filename"],
                sha256=w["sha256"],
                requirement=w["pypi"],
            )
    raise UserError(
        f"the catalog has no nvidia-nccl-cu{cuda_major} wheel pin for NCCL {version}", key=nccl.NAME
    )


def torch_wheels(version: str = TORCH_VERSION) -> List[Artifact]:
    """The catalog's pins of the torch wheel (CPU build) and the dependencies it imports, install order."""
    pins = (catalog.component(torch.NAME).get("wheels") or {}).get(version) or []
    if not pins:
        raise UserError(f"the catalog has no torch wheel pin for torch {version}", key=torch.NAME)
    return [
        Artifact(
            component=torch.NAME,
            kind="pypi",
            filename=w["filename"],
            sha256=w["sha256"],
            requirement=w["pypi"],
        )
        for w in pins
    ]


def debian_steps(base: str) -> str:
    """FROM `base` and Debian's pinned packages (Python, libfabric, Open MPI): what both DLC-layout stand-ins
    start with (this one and al2023base's)."""
    apt = " \\\n      ".join(APT_PACKAGES)
    return f"""\
FROM {base}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \\
 && apt-get install -y --no-install-recommends \\
      {apt} \\
 && rm -rf /var/lib/apt/lists/*
"""


def wheel_steps(wheel: str, python: str, *more: str) -> str:
    """The NCCL wheel (and `more` wheels: torch's), sha256-checked, pip-installed offline into `python`'s
    site-packages."""
    files = " ".join(shlex.quote(f"/tmp/artifacts/{w}") for w in (wheel, *more))
    return f"""\
COPY artifacts/ /tmp/artifacts/
RUN cd /tmp/artifacts && sha256sum -c SHA256SUMS \\
 && {python} -m pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check \\
      {files} \\
 && rm -rf /tmp/artifacts
"""


def efa_layout_run(lib: str) -> str:
    """The RUN that puts Debian's libfabric and Open MPI where the EFA installer does, in its library folder
    `lib` (lib on Debian/Ubuntu, lib64 on an rpm system), wraps mpirun and appends the mca params as AWS's
    install_efa scripts do, and writes /opt/amazon/efa_installed_packages saying no installer ran."""
    recorded = " ".join(RECORDED)
    dlc = catalog.efa_installers()["dlc_openmpi"]
    prefix = dlc["prefix"]
    wrapper, real = f"{prefix}/{dlc['wrapper']}", f"{prefix}/{dlc['real']}"
    mca_file = f"{prefix}/{dlc['mca_params_file']}"
    mca = " ".join(shlex.quote(f"{k} = {v}") for k, v in dlc["mca_params"].items())
    return f"""\
RUN multiarch="/usr/lib/$(uname -m)-linux-gnu" \\
 && mkdir -p /opt/amazon/efa/{lib} /opt/amazon/efa/bin /opt/amazon/openmpi/bin \\
 && mv "$multiarch"/libfabric.so.1* /opt/amazon/efa/{lib}/ \\
 && ln -s libfabric.so.1 /opt/amazon/efa/{lib}/libfabric.so \\
 && mv /usr/bin/fi_* /opt/amazon/efa/bin/ \\
 && ln -s "$multiarch/openmpi/lib" /opt/amazon/openmpi/{lib} \\
 && ln -s /etc/openmpi /opt/amazon/openmpi/etc \\
 && for t in ompi_info mpiexec orterun orted; do ln -s "/usr/bin/$t" "/opt/amazon/openmpi/bin/$t"; done \\
 && ln -s "$(readlink -f /usr/bin/mpirun)" {real} \\
 && printf '%s\\n' '#!/bin/bash' '{real} --allow-run-as-root "$@"' > {wrapper} \\
 && chmod 0755 {wrapper} \\
 && {{ [ -z "$(tail -c1 {mca_file})" ] || echo >> {mca_file}; }} \\
 && printf '%s\\n' {mca} >> {mca_file} \\
 && {{ echo '# EFA installer version: none (Debian packages in its layout, by efa-image-build)'; \\
      echo '# Debug packages installed: no'; \\
      echo '# Packages installed:'; \\
      dpkg-query -W -f='${{Package}}_${{Version}}_${{Architecture}} ' {recorded}; echo; }} \\
      > /opt/amazon/efa_installed_packages \\
 && ldconfig
"""


def dockerfile(base: str, wheel: str) -> str:
    """The Dockerfile of the DLC-layout base (pure: golden-testable)."""
    return f"""\
# A local base laid out like the PyTorch DLC (see imagebuild/building/dlcbase.py for the layout and its
# sources).
{debian_steps(base)}\
# Python at /usr/local/bin/python3 with its site-packages under /usr/local, as the DLC's.
RUN python3 -m venv /usr/local \\
 && /usr/local/bin/python3 -c 'import sys; assert sys.prefix == "/usr/local", sys.prefix'
# torch's NCCL where its wheel dependency puts it: site-packages/nvidia/nccl/lib, and torch (the CPU build)
# with the dependency it imports (sha256-checked, offline). The import proves the install.
{wheel_steps(wheel, "/usr/local/bin/python3", *(w.filename for w in torch_wheels()))}\
RUN /usr/local/bin/python3 -c 'import torch.distributed.run' \\
 && /usr/local/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()'
# The DLC's second NCCL, which its base builds from source into the CUDA directory (install_cuda.sh).
# Stand-in: a copy of the wheel's library under the source build's names (same version, other file and path).
RUN mkdir -p {CUDA_DIR}/lib64 {CUDA_DIR}/include \\
 && ln -s {CUDA_DIR} /usr/local/cuda \\
 && cp {SITE_PACKAGES}/nvidia/nccl/lib/libnccl.so.2 {CUDA_DIR}/lib64/libnccl.so.{NCCL_VERSION} \\
 && ln -s libnccl.so.{NCCL_VERSION} {CUDA_DIR}/lib64/libnccl.so.2 \\
 && ln -s libnccl.so.2 {CUDA_DIR}/lib64/libnccl.so \\
 && cp {SITE_PACKAGES}/nvidia/nccl/include/nccl.h {CUDA_DIR}/include/
# The EFA installer's layout: libfabric and fi_* under /opt/amazon/efa (moved: one libfabric in the image),
# Debian's Open MPI linked in at /opt/amazon/openmpi (etc: Debian's /etc/openmpi, the file it reads; orted
# too: mpirun by absolute path starts the remote daemons from the same prefix), then
# mpirun wrapped and the mca params appended as the DLC's install_efa.sh does (after a newline: Debian's file
# ends without one, and a line appended to its last line would spoil both).
# No aws-ofi-nccl: its source is not reachable here, and nothing stands in for it.
{efa_layout_run("lib")}\
ENV PATH="/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:{DOCKER_PATH}" \\
    LD_LIBRARY_PATH="/usr/local/lib:/usr/local/cuda/lib64:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib"
LABEL {LAYOUT_LABEL}="dlc"
"""


def make_dlc_base(
    client,
    name: str = DEFAULT_NAME,
    base: str = DEBOOTSTRAP_BASE,
    cache: Optional[ArtifactCache] = None,
    say: Say = print,
    layout: Callable[[str, str], str] = dockerfile,
    wheel: Optional[Artifact] = None,
    extra: Optional[Sequence[Artifact]] = None,
) -> str:
    """Build (or refresh from the build cache) `name` FROM `base`; return the image id. `layout` writes the
    Dockerfile from (base, wheel file name): this module's, or the AL2023 stand-in's (al2023base.py), with
    `wheel` its NCCL pin (default: this layout's) and `extra` the other wheels it installs (default: torch's
    for this layout, none for another)."""
    if find_image(client, base) is None:
        raise UserError(f"base image {base} not found", key="--base", hint="make it: `efa-image-build base`")
    cache = cache or ArtifactCache(say=say)
    wheel = wheel or nccl_wheel()
    if extra is None:
        extra = torch_wheels() if layout is dockerfile else ()
    with tempfile.TemporaryDirectory(prefix="efa-dlc-layout-") as tmp:
        ctx = Path(tmp)
        try:
            stage(cache, [wheel, *extra], ctx)
        except ArtifactError as err:
            raise UserError(f"cannot fetch a wheel of the base: {err}", key=nccl.NAME) from None
        (ctx / "Dockerfile").write_text(layout(base, wheel.filename))
        say(f"building {name} FROM {base}")
        image_id = None
        for chunk in client.api.build(path=tmp, tag=name, rm=True, forcerm=True, decode=True):
            if "stream" in chunk and chunk["stream"].strip():
                say("  " + chunk["stream"].rstrip())
            elif "error" in chunk:
                raise UserError(f"building {name} failed: {chunk['error'].strip()}", key="build")
            elif "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    if not image_id:
        image_id = client.images.get(name).id
    say(f"DLC-layout base {name} ready: {image_id}")
    return image_id
