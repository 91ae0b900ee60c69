"""torch: PyTorch, as the base image has it (DLC bases); recorded so its bundled NCCL can be compared.

Parameters:
  version   e.g. `2.7.1`
  method    base only (the image does not install torch)
  params.nccl  (in the lock) "match" (default): torch's bundled NCCL must be the system's (pytorch#122571)

Examples (matrix):
  torch: {version: "2.7.1", source: {base: true}}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild.components import Block, lock_component, nccl
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component

NAME = "torch"


class Torch(Block):
    name = NAME
    tag = (5, "torch")
    layer = 90
    methods = ("base",)
    framework = True  # loads its wheel's NCCL itself: nccl-torch-loads asks it which

    def libdirs(self, comp: Component) -> List[str]:
        return []

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        torch = lock_component(lock, NAME) or {}
        return [
            self.check(
                lock,
                "torch-nccl",
                "torch_nccl",
                "torch's bundled NCCL against the system's: a mismatch means two NCCLs in one job "
                "(pytorch#122571)",
                {
                    "python": lock.get("python") or "python3",
                    "system_nccl": (lock_component(lock, nccl.NAME) or {}).get("version"),
                    "policy": (torch.get("params") or {}).get(nccl.NAME, "match"),
                },
            )
        ]


BLOCK = Torch()
