"""libfabric: OpenFabrics Interfaces; its efa provider is how NCCL's plugin talks to the EFA device.

Parameters:
  version   upstream release (`1.17.0`); with `source: {installer: efa_installer}` it may be left out and is
            read from what the catalog says that installer bundles
  source    apt pins (`apt: [libfabric1=1.17.0-3]`, `apt_dev` for the build), `installer`, or `base`
  prefix    default /usr; the EFA installer's lands in /opt/amazon/efa (its block owns those directories)

Examples (matrix):
  libfabric: {version: "1.17.0", source: {apt: [libfabric1=1.17.0-3], apt_dev: [libfabric-dev=1.17.0-3]}}
  libfabric: {source: {installer: efa_installer}}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild.components import Block, Homes, efa_installer, lock_component
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component

NAME = "libfabric"


class Libfabric(Block):
    name = NAME
    tag = (3, "fab")
    layer = 10
    methods = ("apt", "packages", "installer", "base")
    bundled = True
    system = True
    default_homes = {"LIBFABRIC_HOME": "/usr"}

    def libdirs(self, comp: Component) -> List[str]:
        # the system's, or the EFA installer's (listed by that block); a base's in its own place (a DLC's
        # /opt/amazon/efa) is listed here, so ldconfig knows it too
        return [f"{comp.prefix}/lib"] if comp.method == "base" and comp.prefix else []

    def bindirs(self, comp: Component) -> List[str]:
        return [f"{comp.prefix}/bin"] if comp.method == "base" and comp.prefix else []

    def homes(self, comp: Component) -> Homes:
        return {"LIBFABRIC_HOME": comp.prefix} if comp.prefix else {}

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        fab = lock_component(lock, NAME) or {}
        efa = lock_component(lock, efa_installer.NAME)
        return [
            self.check(
                lock,
                "libfabric-version",
                "libfabric_version",
                "the libfabric the tools load is the locked one (the AWS plugin needs >= 1.22 for EFA)",
                {"version": fab.get("version")},
            ),
            self.check(
                lock,
                "single-libfabric",
                "single_library",
                "exactly one libfabric.so.1 on the search path: a second breaks the efa provider (EFA_1.2 "
                "not found)",
                {
                    "soname": "libfabric.so.1",
                    "python": lock.get("python") or "python3",
                    "prefix": fab.get("prefix") or (efa or {}).get("prefix"),
                },
                present=bool(fab) or efa is not None,
            ),
        ]


BLOCK = Libfabric()
