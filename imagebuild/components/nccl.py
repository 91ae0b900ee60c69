"""nccl: NVIDIA's collective communications library.

Parameters:
  version   e.g. `2.27.7`
  method    source (default when the catalog pins a commit: `make src.build` for options.cuda_arch),
            wheel (the catalog's NVIDIA wheel for the variant's CUDA major), apt, packages, base
  prefix    default /opt/nvidia/nccl

Examples (matrix):
  nccl: {version: "2.27.7", method: source}
  nccl: {version: "2.27.7", method: wheel}
  nccl: {version: "2.26.2", source: {base: true}}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Mapping

from imagebuild.checks.expectation import Expectation
from imagebuild.components import Block, Homes, lock_component

if TYPE_CHECKING:  # annotations only: the variant module orders its components by this registry
    from imagebuild.variant import Component

NAME = "nccl"


class Nccl(Block):
    name = NAME
    tag = (0, "nccl")
    layer = 50
    methods = ("wheel", "source", "apt", "packages", "base")
    tools = ("make", "g++")
    default_homes = {"NCCL_HOME": "/usr"}

    def homes(self, comp: Component) -> Homes:
        return {"NCCL_HOME": comp.prefix} if comp.prefix else {}

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        nccl = lock_component(lock, NAME) or {}
        python = lock.get("python") or "python3"
        return [
            self.check(
                lock,
                "nccl-version-ctypes",
                "nccl_ctypes",
                "the libnccl.so.2 the loader resolves reports the locked version via ncclGetVersion",
                {"version": nccl.get("version"), "python": python},
            ),
            self.check(
                lock,
                "nccl-version-header",
                "nccl_header",
                "nccl.h (where headers are shipped) carries the same version as the library",
                {"version": nccl.get("version"), "prefix": nccl.get("prefix"), "python": python},
            ),
            self.check(
                lock,
                "single-libnccl",
                "single_library",
                "exactly one libnccl.so.2 on the library search path: two means the wrong one can win",
                {"soname": "libnccl.so.2", "python": python, "prefix": nccl.get("prefix")},
            ),
        ]


BLOCK = Nccl()
