"""cuda_runtime: the CUDA runtime (cudart) and headers other builds compile against.

Parameters:
  version   e.g. `12.8.90`; must match the variant's `cuda` major (compat rule)
  method    wheel (default: the catalog's pinned NVIDIA wheel for the variant's CUDA major), apt,
            packages, base
  params.toolkit  "no" (default) or "yes": also unpack the catalog's build-only wheels (nvcc, headers) into a
            builder-only CUDA_HOME (TOOLKIT); the image gets the runtime prefix only
  prefix    default /opt/nvidia/cuda

Examples (matrix):
  cuda_runtime: {version: "12.8.90", method: wheel}
  cuda_runtime: {version: "13.0.96", method: wheel, params: {toolkit: "yes"}}
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from imagebuild.components import Block, Homes
from imagebuild.variant import Component

NAME = "cuda_runtime"
TOOLKIT = "/opt/nvidia/cuda-toolkit"  # builder-only CUDA_HOME: the runtime wheel plus build-only wheels


class CudaRuntime(Block):
    name = NAME
    tag = (4, "cuda")
    layer = 40
    methods = ("wheel", "apt", "packages", "base")
    default_method = "wheel"
    params = {"toolkit": ("no", "yes")}
    default_homes = {"CUDA_HOME": "/usr/local/cuda"}  # a CUDA base image (nvidia/cuda *-devel)

    def extra_wheels(
        self, params: Mapping[str, Any], wheel: Mapping[str, Any]
    ) -> Optional[Tuple[str, List[Dict[str, Any]]]]:
        return ("toolkit", list(wheel.get("toolkit") or [])) if params.get("toolkit") == "yes" else None

    def homes(self, comp: Component) -> Homes:
        if comp.method != "wheel":
            return {}
        home = TOOLKIT if len(comp.artifacts) > 1 else comp.prefix or "/opt/nvidia/cuda"
        return {"CUDA_HOME": home, "CUDART": "shared"}  # a wheel carries the shared cudart only


BLOCK = CudaRuntime()
