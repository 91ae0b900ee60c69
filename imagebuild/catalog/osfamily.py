"""OS families: what a base's `os` value means for its package manager and, for a DLC, its layout.

The matrix names the OS of its base (`base.os`); the family decides everything the templates do with OS
packages: apt/dpkg for Debian and Ubuntu, dnf/rpm for Amazon Linux 2023. Templates branch on the family
(`v.base.family`), never on the OS string, so a new OS of a known family is one row here.

AL2023 facts, with where they were read:
- /etc/os-release of Amazon Linux 2023 says ID="amzn", VERSION_ID="2023" (AWS's AL2023 user guide, "Using the
  os-release standard", ident-os-release: ID tells Amazon Linux, VERSION_ID its release).
- The PyTorch DLC on AL2023 (aws/deep-learning-containers docker/pytorch/Dockerfile.cuda, read at commit
  f1e622e430623f0afc8b51958c0483f78cbc31b2, the one CI builds for every PyTorch minor since 2.11) makes its
  Python a venv: `python${PYTHON_VERSION} -m venv /opt/venv`, PYTHON_VERSION=3.12, PATH starting
  /opt/venv/bin, so torch's NCCL (the nvidia-nccl-cuNN wheel) is /opt/venv/lib/python3.12/site-packages/
  nvidia/nccl, which its LD_LIBRARY_PATH names. Its EFA step (scripts/docker/common/install_efa_amzn2023.sh,
  commit a0f1504b37bd0293bb2c195ba0ba8b8906ed1a85) installs with
  `dnf install -y --setopt=install_weak_deps=False` and ends with `dnf clean all; rm -rf /var/cache/dnf`;
  the plugin is /opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so (installer >= 1.44.0), Open MPI
  /opt/amazon/openmpi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Family:
    """How a family installs, pins, queries and cleans OS packages."""

    name: str  # deb | rpm
    manager: str  # apt | dnf: the tool the templates run
    query: str  # dpkg | rpm: what says which version is installed
    cache_dirs: Tuple[str, ...]  # what no layer may keep (the base's own are removed first)

    @property
    def label(self) -> str:
        return f"{self.manager}/{self.query}"

    def libdirs(self, dirs: List[str]) -> List[str]:
        """A prefix's library directories on this family. Debian's are as the blocks write them (lib, and
        lib/{multiarch} where the EFA installer uses it). On rpm systems 64-bit libraries go to lib64 and
        there is no multiarch tuple: the AL2023 DLC's LD_LIBRARY_PATH names /opt/amazon/openmpi/lib and
        lib64, /opt/amazon/efa/lib and lib64, /opt/amazon/ofi-nccl/lib64 (docker/pytorch/Dockerfile.cuda at
        f1e622e4), so each `lib` gets its `lib64` after it and `{multiarch}` ones go."""
        if self.name != "rpm":
            return list(dirs)
        out: List[str] = []
        for d in dirs:
            if "{multiarch}" in d:
                continue
            for cand in (d, d + "64") if d.endswith("/lib") else (d,):
                if cand not in out:
                    out.append(cand)
        return out


DEB = Family("deb", "apt", "dpkg", ("/var/cache/apt", "/var/lib/apt/lists"))
RPM = Family("rpm", "dnf", "rpm", ("/var/cache/dnf", "/var/cache/yum"))


@dataclass(frozen=True)
class OsSpec:
    family: Family
    os_release: Tuple[str, str]  # (ID, VERSION_ID) of /etc/os-release
    # A DLC of this OS: its Python (None: resolve's default for kind dlc). Torch's NCCL there: the catalog's
    # `base_prefix` under `dlc-<os>` (components.yaml).
    dlc_python: Optional[str] = None


OS: Dict[str, OsSpec] = {
    "debian12": OsSpec(DEB, ("debian", "12")),
    "ubuntu20.04": OsSpec(DEB, ("ubuntu", "20.04")),
    "ubuntu22.04": OsSpec(DEB, ("ubuntu", "22.04")),
    "ubuntu24.04": OsSpec(DEB, ("ubuntu", "24.04")),
    "amzn2023": OsSpec(
        RPM,
        ("amzn", "2023"),
        dlc_python="/opt/venv/bin/python",
    ),
}
NAMES: Tuple[str, ...] = tuple(OS)


def spec(os_name: str) -> OsSpec:
    """The row of a base.os value (the schema admits only these names)."""
    return OS[os_name]


def family(os_name: str) -> Family:
    return OS[os_name].family


def from_os_release(ident: str, version_id: str) -> Optional[str]:
    """The matrix's name of an /etc/os-release ID + VERSION_ID, or None for an OS the matrix does not know."""
    for name, row in OS.items():
        if row.os_release == (ident, version_id):
            return name
    return None


def rpm_pin(pin: str) -> Tuple[str, str]:
    """`name=[epoch:]version-release` (the matrix's pin syntax for every family) -> (name, evr). dnf's own
    spelling is `name-[epoch:]version-release`; `=` keeps the split unambiguous (names hold dashes)."""
    name, _, evr = pin.partition("=")
    return name, evr
