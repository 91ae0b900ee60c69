"""Target platforms: what a variant's `platform` means for paths and wheels inside the image.

Debian and Ubuntu keep architecture-specific libraries under /usr/lib/<multiarch> (Debian policy, "multiarch
tuple": x86_64-linux-gnu, aarch64-linux-gnu); the EFA installer does the same for its aws-ofi-nccl
(FIELD-NOTES: /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu). Blocks write such paths with a `{multiarch}`
placeholder and the registry fills it in for the variant's platform. Wheels carry the machine name in their
platform tag (`manylinux2014_aarch64`), which picks a catalog wheel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

DEFAULT = "linux/amd64"


@dataclass(frozen=True)
class Platform:
    name: str  # docker's platform string, e.g. linux/arm64
    machine: str  # uname -m, and the arch in a wheel's platform tag
    multiarch: str  # Debian's multiarch tuple

    @property
    def arch(self) -> str:
        """The architecture part of `name` (amd64, arm64): also Debian's name for it (debootstrap --arch)."""
        return self.name.split("/", 1)[1]

    def fill(self, path: str) -> str:
        """A block's path with `{multiarch}` made concrete for this platform."""
        return path.replace("{multiarch}", self.multiarch)


PLATFORMS: Dict[str, Platform] = {
    "linux/amd64": Platform("linux/amd64", "x86_64", "x86_64-linux-gnu"),
    "linux/arm64": Platform("linux/arm64", "aarch64", "aarch64-linux-gnu"),
}


def platform(name: str) -> Platform:
    return PLATFORMS[name]
