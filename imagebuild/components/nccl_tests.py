"""nccl_tests: NVIDIA's NCCL performance and correctness tests (all_reduce_perf, ...).

Parameters:
  version   e.g. `2.19.6` (the catalog pins the commit)
  method    source (`make MPI=1 MPI_HOME NCCL_HOME CUDA_HOME`), base
  params.mpi  "1" (default: MPI=1, multi-node runs under mpirun) or "0"
  params.binaries  (in the lock only) which *_perf binaries the static check looks for
  prefix    default /opt/nccl-tests (binaries in bin/, put on PATH)

Examples (matrix):
  nccl_tests: {version: "2.19.6"}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild.components import Block, Needs, lock_component, nccl, openmpi
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component

NAME = "nccl_tests"
BINARIES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf")


class NcclTests(Block):
    name = NAME
    layer = 70
    methods = ("source", "base")
    params = {"mpi": ("1", "0")}
    tools = ("make", "g++")
    needs = (
        Needs(nccl.NAME, "needs-nccl", f"{NAME} needs {nccl.NAME} in the same variant", "nccl-tests README"),
        Needs(
            openmpi.NAME,
            "needs-mpi",
            f"{NAME} is built with MPI=1 and needs {openmpi.NAME}",
            "nccl-tests README",
        ),
    )

    def libdirs(self, comp: Component) -> List[str]:
        return []

    def bindirs(self, comp: Component) -> List[str]:
        return [f"{comp.prefix}/bin"]

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        tests = lock_component(lock, NAME) or {}
        nccl_lock = lock_component(lock, nccl.NAME) or {}
        params = tests.get("params") or {}
        return [
            self.check(
                lock,
                "nccl-tests-binaries",
                "binaries_load",
                "nccl-tests binaries are present and every library they link resolves",
                {"binaries": list(params.get("binaries") or BINARIES), "prefix": tests.get("prefix")},
            ),
            self.check(
                lock,
                "nccl-tests-nccl",
                "binary_nccl",
                "which libnccl.so.2 all_reduce_perf loads (ldd), and that it is the lock's NCCL version: "
                "nccl-tests measure that NCCL, which may not be torch's",
                {
                    "binary": BINARIES[0],
                    "prefix": tests.get("prefix"),
                    "version": nccl_lock.get("version"),
                    "framework_prefix": nccl_lock.get("prefix")
                    if nccl.is_wheel_home(nccl_lock.get("prefix"))
                    else None,
                },
            ),
        ]


BLOCK = NcclTests()
