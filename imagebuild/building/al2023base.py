"""A stand-in for the Amazon Linux 2023 PyTorch DLC's layout, built on Debian (no AL2023 image is reachable).

It is NOT Amazon Linux: it is the debootstrap Debian base with the files where AWS's AL2023 DLC has them, so
the extend steps that need no OS package manager (validators, training code, env, labels, build steps) and
the static checks run for real on that layout. The dnf/rpm steps cannot run here; their rendered text is
pinned by golden (tests/golden/al2023-dnf-pins.Dockerfile).

The layout copied, from aws/deep-learning-containers docker/pytorch/Dockerfile.cuda (commit
f1e622e430623f0afc8b51958c0483f78cbc31b2) and scripts/docker/common/install_efa_amzn2023.sh (commit
a0f1504b37bd0293bb2c195ba0ba8b8906ed1a85):
- Python is a venv at /opt/venv (`python3.12 -m venv /opt/venv`), first on PATH; torch's NCCL is its wheel
  dependency in the venv's site-packages (nvidia-nccl-cu13 for the cu13x images), named on LD_LIBRARY_PATH.
  Here: Debian's Python 3.11 in a venv at /opt/venv, the catalog's nvidia-nccl-cu13 wheel installed offline.
- The EFA installer on an rpm system: libfabric and fi_* under /opt/amazon/efa (lib64), Open MPI under
  /opt/amazon/openmpi (lib64), the plugin in /opt/amazon/ofi-nccl/lib64; mpirun moved to mpirun.real behind
  a wrapper adding --allow-run-as-root, two mca params appended (as the Ubuntu DLC: catalog dlc_openmpi).
  Here: Debian's libfabric moved to /opt/amazon/efa/lib64, Debian's Open MPI linked in at
  /opt/amazon/openmpi/{bin,lib64,etc}; no plugin (none is reachable, and nothing pretends to be one).
- sshd as install_efa_amzn2023.sh leaves it (aws/deep-learning-containers scripts/docker/common/
  install_efa_amzn2023.sh, commit 0ba696c3: dnf installs openssh-clients and openssh-server, makes
  /var/run/sshd, appends `StrictHostKeyChecking no` to /etc/ssh/ssh_config, makes pam_loginuid optional,
  and nothing runs `ssh-keygen -A`): NO host keys. Here: Debian's openssh-server and -client (the pins
  matrix.local.yaml uses), the keys Debian's install makes removed, the same client line and pam change. The
  script's baked user key (/root/.ssh/id_rsa) is not copied: a private key in an image is a credential.
- PATH and LD_LIBRARY_PATH in the DLC's order (its runtime stage's ENV), the venv's NCCL directory first.
- /etc/os-release says ID=amzn, VERSION_ID=2023 (what `inspect-base` reads to name the OS) and, in NAME,
  PRETTY_NAME and VARIANT_ID, that this is efa-image-build's stand-in on Debian; Debian's own stays in
  /usr/lib/os-release. The image label org.efa-image-build.layout=al2023-dlc-standin says it too.
"""

from __future__ import annotations

import shlex

from imagebuild.building import dlcbase
from imagebuild.variant import LAYOUT_LABEL, Artifact

# `-sshd`: the layout with the DLC's sshd and no host keys (an engine may hold the older one without sshd)
DEFAULT_NAME = "localbase/al2023-dlc-layout:standin-bookworm-sshd"
LAYOUT = "al2023-dlc-standin"
VENV = "/opt/venv"
SITE_PACKAGES = f"{VENV}/lib/python3.11/site-packages"  # Debian bookworm's Python 3.11 (the DLC's: 3.12)
CUDA_MAJOR = 13
SSH_PACKAGES = (
    "openssh-server=1:9.2p1-2+deb12u10",
    "openssh-client=1:9.2p1-2+deb12u10",
)  # the AL2023 DLCs are cu13x (nvidia/cuda:13.x-runtime-amzn2023)
OS_RELEASE = (
    'NAME="efa-image-build AL2023-layout stand-in (Debian 12 underneath)"',
    'ID="amzn"',
    'VERSION_ID="2023"',
    'VARIANT_ID="efa-image-build-standin"',
    'PRETTY_NAME="Stand-in for the Amazon Linux 2023 DLC layout, built on Debian 12 (no dnf, no rpm)"',
)
DLC_PATH = f"{VENV}/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/local/cuda/bin:{dlcbase.DOCKER_PATH}"
DLC_LD_LIBRARY_PATH = (
    f"{SITE_PACKAGES}/nvidia/nccl/lib:/opt/amazon/ofi-nccl/lib64:/opt/amazon/openmpi/lib:"
    "/opt/amazon/openmpi/lib64:/opt/amazon/efa/lib:/opt/amazon/efa/lib64:/usr/local/cuda/lib64:/usr/local/lib"
)


def nccl_wheel() -> Artifact:
    """torch's NCCL for a cu13 DLC: the catalog's nvidia-nccl-cu13 pin."""
    return dlcbase.nccl_wheel(dlcbase.NCCL_VERSION, CUDA_MAJOR)


def dockerfile(base: str, wheel: str) -> str:
    """The Dockerfile of the AL2023-layout stand-in (pure: golden-testable)."""
    os_release = " ".join(shlex.quote(line) for line in OS_RELEASE)
    return f"""\
# A STAND-IN for the Amazon Linux 2023 PyTorch DLC's layout, on Debian (imagebuild/building/al2023base.py says
# what is copied from where). Not Amazon Linux: no dnf, no rpm.
{dlcbase.debian_steps(base)}\
# Python in a venv at {VENV}, as the DLC's (python3.12 -m venv /opt/venv there).
RUN python3 -m venv {VENV} \\
 && {VENV}/bin/python -c 'import sys; assert sys.prefix == "{VENV}", sys.prefix'
# torch's NCCL where its wheel dependency puts it: the venv's site-packages (sha256-checked, offline).
{dlcbase.wheel_steps(wheel, f"{VENV}/bin/python")}\
# The EFA installer's rpm layout: libfabric and fi_* under /opt/amazon/efa (lib64; moved: one libfabric in the
# image), Debian's Open MPI linked in at /opt/amazon/openmpi (lib64, etc, orted), mpirun wrapped and the mca
# params appended as install_efa_amzn2023.sh does. No aws-ofi-nccl: nothing stands in for it.
{dlcbase.efa_layout_run("lib64")}\
# sshd as the AL2023 DLC's EFA script leaves it: installed, its client trusting the cluster's hosts, and NO
# host key (nothing there runs ssh-keygen -A; Debian's install makes some, removed here). No user key either.
RUN apt-get update \\
 && apt-get install -y --no-install-recommends {" ".join(SSH_PACKAGES)} \\
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* \\
 && mkdir -p /var/run/sshd \\
 && grep -v StrictHostKeyChecking /etc/ssh/ssh_config > /tmp/ssh_config.new \\
 && echo "    StrictHostKeyChecking no" >> /tmp/ssh_config.new \\
 && mv /tmp/ssh_config.new /etc/ssh/ssh_config \\
 && sed -i 's@session\\s*required\\s*pam_loginuid.so@session optional pam_loginuid.so@g' /etc/pam.d/sshd
# What inspect-base reads to name the OS, saying what this is; Debian's own stays in /usr/lib/os-release.
RUN rm -f /etc/os-release && printf '%s\\n' {os_release} > /etc/os-release
ENV PATH="{DLC_PATH}" \\
    LD_LIBRARY_PATH="{DLC_LD_LIBRARY_PATH}"
LABEL {LAYOUT_LABEL}="{LAYOUT}"
"""
