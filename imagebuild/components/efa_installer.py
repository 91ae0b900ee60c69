"""efa_installer: the AWS EFA installer (libfabric with the efa provider, Open MPI, newer ones aws-ofi-nccl).

Runs in a stage of its own (`efa`, the runtime stage builds on it), after a builder-only `efa-verify` stage
checks the archive's sha256 and detached GPG signature.

Parameters:
  version   installer release; the catalog (efa_installers.yaml) gives its URL, sha256 and what it bundles
  source    url + sha256 and/or gpg_fingerprint + key_url (default: the catalog's pin and AWS's key)
  params.openmpi  "4" (default) or "5": which of the installer's Open MPI builds the image puts first
  prefix    default /opt/amazon/efa

Examples (matrix):
  efa_installer: {version: "1.41.0"}
  efa_installer: {version: "1.41.0", params: {openmpi: "5"}}
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from imagebuild import catalog
from imagebuild.components import Block, Homes, lock_component, openmpi
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component, Variant
from imagebuild.versions import Version

NAME = "efa_installer"


class EfaInstaller(Block):
    name = NAME
    tag = (2, "efa")
    layer = 30
    methods = ("installer",)
    params = {openmpi.NAME: ("4", "5")}  # which of its Open MPI builds goes first on PATH

    def catalog_source(self, version: str) -> Optional[Dict[str, Any]]:
        """The source fields of a catalogued installer (URL, sha256, AWS's signing key); None if unknown."""
        info = catalog.efa_installer(version)
        if info is None:
            return None
        data = catalog.efa_installers()
        return {
            "url": data["url_pattern"].format(version=version),
            "sha256": info.get("sha256"),
            "gpg_fingerprint": data["gpg"]["fingerprint"],
            "key_url": data["gpg"]["key_url"],
        }

    def flags(self, comp: Optional[Component] = None) -> List[str]:
        """`efa_installer.sh` flags for a container (no kernel module; --no-verify skips the device check).

        From 1.30 the installer puts Open MPI 4 and 5 side by side unless `--mpi=` names one; the image gets
        the one `params.openmpi` asks for, so `mpirun` on PATH is the only one there is."""
        layout = catalog.efa_installers()["layout"]
        flags = list(layout["installer_flags"])
        since = layout["mpi_flag_from"]
        if comp is not None and Version(comp.version) >= Version(str(since)):
            flags.append(f"--mpi=openmpi{dict(comp.params).get(openmpi.NAME, '4')}")
        return flags

    def replaced(self, comp: Component, v: Variant) -> List[Tuple[str, str]]:
        """(package, prefix) of each copy this installer bundles that the variant builds itself.

        One plugin per image: with two, NCCL loads whichever the loader finds first. No installer flag leaves
        the bundled aws-ofi-nccl out (efa_installers.yaml), so the installer's RUN removes it."""
        layout = catalog.efa_installers()["layout"]
        out = []
        for other in v.components:
            since = layout.get(f"{other.name}_bundled_from")
            if since and other.method in ("source", "wheel") and Version(comp.version) >= Version(str(since)):
                out.append((layout[f"{other.name}_package"], layout[f"{other.name}_prefix"]))
        return out

    def macro_args(self, comp: Component, v: Variant) -> Tuple[Any, ...]:
        return (self.flags(comp), self.replaced(comp, v))

    def built(self, comp: Component) -> bool:
        return False

    def stage(self, comp: Component) -> Optional[Tuple[str, str, str]]:
        return "partials/efa_installer.j2", "stages", "efa"

    def partial(self, comp: Component) -> Optional[Tuple[str, str]]:
        return None

    def bindirs(self, comp: Component) -> List[str]:
        return [f"{comp.prefix}/bin"]

    def homes(self, comp: Component) -> Homes:
        return {"LIBFABRIC_HOME": comp.prefix} if comp.prefix else {}

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        efa = lock_component(lock, NAME) or {}
        return [
            self.check(
                lock,
                "efa-installer-record",
                "efa_record",
                "the EFA installer left /opt/amazon/efa_installed_packages (what it installed, which "
                "version)",
                {
                    "version": efa.get("version"),
                    "path": catalog.efa_installers()["layout"]["installed_packages"],
                },
            ),
            self.check(
                lock,
                "fi-info-efa",
                "fi_info_efa",
                "`fi_info -l` lists the efa provider (without it NCCL falls back to sockets)",
                {"prefix": efa.get("prefix") or catalog.component(NAME)["prefix"]},
            ),
        ]


BLOCK = EfaInstaller()
