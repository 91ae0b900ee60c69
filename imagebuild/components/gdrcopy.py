"""gdrcopy: NVIDIA GDRCopy's user-space library and its test binaries (the gdrdrv kernel module belongs to
the host).

Parameters:
  version   e.g. `2.6` (the catalog pins the commit)
  method    source (`make prefix=... lib lib_install`, and with tests `exes exes_install`), base
  prefix    default /opt/gdrcopy
  params.tests  "yes" (default) or "no": also build gdrcopy_copybw, gdrcopy_copylat, gdrcopy_apiperf,
            gdrcopy_sanity and gdrcopy_pplat into <prefix>/bin, the tools a node check runs to prove the
            GPU-mapped copy path (`gdrcopy_sanity`, `gdrcopy_copybw`); they need nvcc in the builder

Why the tests by default: AWS's and NVIDIA's own images install them (`make ... lib_install exes_install`),
and without them nobody on the node can tell a loaded gdrdrv from a working one. They link libcuda.so.1,
which the host's driver provides at run time; the builder links against a stub of it, as the CUDA
toolkit's `lib64/stubs` does (the NVIDIA wheels ship no stub), and no libcuda enters the image.

Examples (matrix):
  gdrcopy: {version: "2.6"}
  gdrcopy: {version: "2.6", params: {tests: "no"}}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild.components import Block, lock_component
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component

NAME = "gdrcopy"
BINARIES = ("gdrcopy_copybw", "gdrcopy_copylat", "gdrcopy_apiperf", "gdrcopy_sanity", "gdrcopy_pplat")
HOST_PROVIDED = ("libcuda.so.1",)  # the driver's, mounted by the NVIDIA container runtime


class Gdrcopy(Block):
    name = NAME
    layer = 45  # below NCCL and the plugin: it changes rarely, so their frequent bumps keep its layer cached
    methods = ("source", "base")
    params = {"tests": ("yes", "no")}
    tools = ("make", "gcc", "g++")

    def bindirs(self, comp: Component) -> List[str]:
        return [f"{comp.prefix}/bin"] if comp.param("tests", "yes") == "yes" else []

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        gdr = lock_component(lock, NAME) or {}
        tests = (gdr.get("params") or {}).get("tests", "yes") == "yes" and gdr.get("method") == "source"
        out = [
            self.check(
                lock,
                "gdrcopy-library",
                "find_library",
                "GDRCopy's user-space library is installed (the kernel module is the host's)",
                {"patterns": ["libgdrapi.so*"], "prefix": gdr.get("prefix")},
            )
        ]
        if tests or not gdr:
            out.append(
                self.check(
                    lock,
                    "gdrcopy-tests",
                    "binaries_load",
                    "GDRCopy's test binaries are present and load (libcuda.so.1 is the host driver's)",
                    {
                        "binaries": list(BINARIES),
                        "prefix": gdr.get("prefix"),
                        "host_provided": list(HOST_PROVIDED),
                    },
                )
            )
        return out


BLOCK = Gdrcopy()
