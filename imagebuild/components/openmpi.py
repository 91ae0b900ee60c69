"""openmpi: Open MPI, the launcher of nccl-tests and mpirun jobs.

Parameters:
  version   upstream release; bundled by the EFA installer it may be left out (the catalog says which)
  source    apt pins, `installer` (efa_installer's `params.openmpi` picks its Open MPI 4 or 5), or `base`
  prefix    default /usr; the installer's /opt/amazon/openmpi or /opt/amazon/openmpi5

Examples (matrix):
  openmpi: {version: "4.1.4", source: {apt: [openmpi-bin=4.1.4-3+b1], apt_dev: [libopenmpi-dev=4.1.4-3+b1]}}
  openmpi: {source: {installer: efa_installer}}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild import catalog
from imagebuild.components import Block, Homes, lock_component
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component

NAME = "openmpi"
NOT_DLC = (
    "not a kind: dlc base: root mpirun as typed and the DLC's mca params are a DLC's promise "
    "(mpirun-as-root checks the flag)"
)


class Openmpi(Block):
    name = NAME
    layer = 20
    methods = ("apt", "packages", "installer", "base")
    bundled = True
    system = True
    # Debian/Ubuntu's libopenmpi-dev keeps mpi.h and the libraries here (MPI_HOME of nccl-tests' make);
    # {multiarch}: the platform's (imagebuild.catalog.platforms), x86_64-linux-gnu or aarch64-linux-gnu
    default_homes = {"MPI_HOME": "/usr/lib/{multiarch}/openmpi"}

    def installer_key(self, efa_params: Mapping[str, Any]) -> str:
        return f"{NAME}5" if str(efa_params.get(NAME)) == "5" else NAME

    def bindirs(self, comp: Component) -> List[str]:
        return [f"{comp.prefix}/bin"]

    def homes(self, comp: Component) -> Homes:
        return {"MPI_HOME": comp.prefix} if comp.prefix not in (None, "/usr") else {}

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        mpi = lock_component(lock, NAME) or {}
        dlc = ((lock.get("base") or {}).get("kind")) == "dlc"  # a DLC promises root mpirun as typed
        return [
            self.check(
                lock,
                "openmpi-version",
                "openmpi_version",
                "mpirun is the locked Open MPI",
                {"version": mpi.get("version"), "prefix": mpi.get("prefix")},
            ),
            self.check(
                lock,
                "mpirun-as-root",
                "mpirun_root",
                "containers run as root: mpirun must accept it (--allow-run-as-root or "
                "OMPI_ALLOW_RUN_AS_ROOT)",
                {"prefix": mpi.get("prefix")},
            ),
            self.check(
                lock,
                "mpirun-plain-root",
                "mpirun_plain_root",
                "a DLC's `mpirun` runs as root as typed (its wrapper adds --allow-run-as-root): the check "
                "adds no flag, so a wrapper lost to a second EFA installer run shows",
                {},
                present=bool(mpi) and dlc,
                unless=NOT_DLC,
            ),
            self.check(
                lock,
                "openmpi-dlc-mca-params",
                "mca_params",
                "Open MPI reads the mca params the DLC's install_efa.sh sets (kept when the installer runs "
                "again)",
                {
                    "prefix": mpi.get("prefix"),
                    "params": dict(catalog.efa_installers()["dlc_openmpi"]["mca_params"]),
                },
                present=bool(mpi) and dlc,
                unless=NOT_DLC,
            ),
        ]


BLOCK = Openmpi()
