"""efa_installer: the AWS EFA installer (libfabric with the efa provider, Open MPI, newer ones aws-ofi-nccl).

Runs in a stage of its own (`efa`, the runtime stage builds on it), after a builder-only `efa-verify` stage
checks the archive's sha256 and detached GPG signature.

On a `kind: dlc` base the DLC's own installer already ran (its install_efa.sh), so the installer is not run
again unless the matrix says so: `source: {base: true}` records the DLC's installer (nothing runs; its record
and the efa provider are checked), `params.reinstall: "yes"` runs this installer over the DLC's, and its RUN
keeps what the DLC's install_efa.sh did to Open MPI (the root `mpirun` wrapper, the mca params: catalog
efa_installers.yaml `dlc_openmpi`), which the installer's Open MPI package likely puts back. A version alone
on a DLC is exit 2 naming both: a team upgrading a DLC's EFA says so, one extending a DLC keeps the DLC's.
On a DLC: `efa_installer: {version: "1.41.0", params: {reinstall: "yes"}}` or
`{version: "1.40.0", source: {base: true}}` (matrix.yaml's dlc-pt2.7-efa1.41.0 runs the first;
tests/imagebuild/render/test_dlc_efa.py renders both).

Parameters:
  version   installer release; the catalog (efa_installers.yaml) gives its URL, sha256 and what it bundles
  source    url + sha256 and/or gpg_fingerprint + key_url (default: the catalog's pin and AWS's key), or
            `base: true` (already in the base: a DLC's)
  params.openmpi  "4" (default) or "5": which of the installer's Open MPI builds the image puts first
  params.reinstall  "no" (default) or "yes": run the installer over a DLC's (only on a `kind: dlc` base)
  prefix    default /opt/amazon/efa

Examples (matrix):
  efa_installer: {version: "1.41.0"}
  efa_installer: {version: "1.41.0", params: {openmpi: "5"}}
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Mapping, Optional, Tuple

from imagebuild import catalog
from imagebuild import components as blocks
from imagebuild.components import Block, Homes, lock_component, openmpi
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component, Variant
from imagebuild.versions import Version

NAME = "efa_installer"
REINSTALL = "reinstall"


def ngc_mode(version: str) -> bool:
    """Whether this installer detects NVIDIA containers (NGC mode, efa_installers.yaml `ngc`): by version."""
    return Version(version) >= Version(str(catalog.efa_installers()["ngc"]["flags_from"]))


class EfaInstaller(Block):
    name = NAME
    tag = (2, "efa")
    layer = 30
    methods = ("installer", "base")
    # openmpi: which of its Open MPI builds goes first on PATH; reinstall: run it over a DLC's own
    params = {openmpi.NAME: ("4", "5"), REINSTALL: ("no", "yes")}

    def base_rule(self, comp: Component, base_kind: str) -> Optional[Tuple[str, str, str]]:
        """(message, key under the component, hint) when the installer and the base's kind disagree.

        A DLC holds the EFA stack its install_efa.sh put there: running the installer again is a decision
        (it replaces the DLC's Open MPI files), so the matrix says it; elsewhere there is nothing to rerun."""
        again = dict(comp.params).get(REINSTALL) == "yes"
        if base_kind == "dlc" and comp.method == "installer" and not again:
            return (
                f"a kind: dlc base already has the EFA installer's stack (the DLC's install_efa.sh ran it); "
                f"EFA installer {comp.version} would run over it",
                "params.reinstall",
                "keep the DLC's: source: {base: true} with its version (or no efa_installer at all); "
                'upgrade it: params: {reinstall: "yes"} (the DLC\'s root mpirun wrapper and mca params '
                "are kept)",
            )
        if again and (base_kind != "dlc" or comp.method != "installer"):
            return (
                "params.reinstall: yes runs the installer over a DLC's own; this is "
                + (
                    f"a kind: {base_kind} base" if base_kind != "dlc" else "the DLC's installer (source base)"
                ),
                "params.reinstall",
                "drop params.reinstall",
            )
        return None

    def keeps(self, comp: Component, v: Variant) -> Optional[Dict[str, Any]]:
        """What the installer's RUN keeps of a DLC's Open MPI (its wrapper and real launcher; the mca params
        file and the lines the DLC's install_efa.sh appends); None when it runs on another base."""
        if v.base.kind != "dlc" or dict(comp.params).get(REINSTALL) != "yes":
            return None
        dlc = catalog.efa_installers()["dlc_openmpi"]
        prefix = dlc["prefix"]
        return {
            "wrapper": f"{prefix}/{dlc['wrapper']}",
            "real": f"{prefix}/{dlc['real']}",
            "mca_params_file": f"{prefix}/{dlc['mca_params_file']}",
            "mca_params": [f"{k} = {v}" for k, v in dlc["mca_params"].items()],
        }

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

    def flags(self, comp: Optional[Component] = None, base_kind: Optional[str] = None) -> List[str]:
        """`efa_installer.sh` flags for a container (no kernel module; --no-verify skips the device check).

        From 1.30 the installer puts Open MPI 4 and 5 side by side unless `--mpi=` names one; the image gets
        the one `params.openmpi` asks for, so `mpirun` on PATH is the only one there is. From 1.48 on a base
        built on nvidia/cuda (a CUDA base, a DLC) it would switch to NGC mode (no rdma-core, the plugin as
        another package elsewhere): the catalog's `ngc.flags` force the standard install, as AWS's scripts
        do (efa_installers.yaml `ngc`)."""
        data = catalog.efa_installers()
        layout = data["layout"]
        flags = list(layout["installer_flags"])
        if comp is None:
            return flags
        if Version(comp.version) >= Version(str(layout["mpi_flag_from"])):
            flags.append(f"--mpi=openmpi{dict(comp.params).get(openmpi.NAME, '4')}")
        if base_kind in data["ngc"]["base_kinds"] and ngc_mode(comp.version):
            flags += list(data["ngc"]["flags"])
        return flags

    def replaced(self, comp: Component, v: Variant) -> List[Tuple[str, str]]:
        """(package, prefix) of each copy this installer bundles that the variant builds itself.

        One plugin per image: with two, NCCL loads whichever the loader finds first. No installer flag leaves
        the bundled aws-ofi-nccl out (efa_installers.yaml), so the installer's RUN removes it; from 1.48 the
        NGC-mode package and place go too (`ngc`: the flags should keep them out, the purge makes sure)."""
        data = catalog.efa_installers()
        layout = data["layout"]
        out = []
        for other in v.components:
            since = layout.get(f"{other.name}_bundled_from")
            if since and other.method in ("source", "wheel") and Version(comp.version) >= Version(str(since)):
                out.append((layout[f"{other.name}_package"], layout[f"{other.name}_prefix"]))
                if other.name == data["ngc"]["plugin_component"] and ngc_mode(comp.version):
                    out += [(pkg, data["ngc"]["plugin_prefix"]) for pkg in data["ngc"]["plugin_packages"]]
        return out

    def cudart_link(self, v: Variant) -> Optional[str]:
        """The unversioned `libcudart.so` the installer's plugin dlopen()s, where the image's stage lacks it:
        a CUDA -runtime image under the installer's plugin (efa_installers.yaml `cudart_link`). None
        elsewhere (a -devel image has the link; a source plugin links cudart itself)."""
        link = catalog.efa_installers()["cudart_link"]
        ofi = next((c for c in v.components if c.name == link["component"]), None)
        if ofi is None or ofi.bundled_by != NAME or v.base.kind != "cuda" or not v.base.split:
            return None
        cuda_home = blocks.homes(v.components, v.platform)["CUDA_HOME"]
        return f"{cuda_home}/{link['libdir']}/{link['name']}"

    def macro_args(self, comp: Component, v: Variant) -> Tuple[Any, ...]:
        return (
            self.flags(comp, v.base.kind),
            self.replaced(comp, v),
            self.keeps(comp, v),
            self.cudart_link(v),
        )

    def built(self, comp: Component) -> bool:
        return False

    def stage(self, comp: Component) -> Optional[Tuple[str, str, str]]:
        if comp.method == "base":
            return None  # the base's own installer ran: nothing to render
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
            self.ngc_check(lock, efa),
        ]

    def ngc_check(self, lock: Mapping[str, Any], efa: Mapping[str, Any]) -> Expectation:
        """From 1.48 the installer may have gone NGC mode in spite of its flags: no NGC plugin package, nor
        its place (efa_installers.yaml `ngc`), may be in the image."""
        ngc = catalog.efa_installers()["ngc"]
        pkgs = [shlex.quote(p) for p in ngc["plugin_packages"]]
        parts = [f"! test -e {shlex.quote(ngc['plugin_prefix'])}"] + [
            f"! {{ dpkg-query -W -f='${{Status}}' {p} 2>/dev/null | grep -q 'ok installed'; }} "
            f"&& ! rpm -q {p} >/dev/null 2>&1"
            for p in pkgs
        ]
        version = efa.get("version")
        here = efa.get("method") == "installer" and bool(version) and ngc_mode(str(version))
        return self.check(
            lock,
            "efa-installer-not-ngc",
            "command",
            f"the installer's standard install, not its NGC mode (from {ngc['flags_from']}): no "
            f"{', '.join(ngc['plugin_packages'])}, nothing under {ngc['plugin_prefix']}",
            {"command": " && ".join(parts), "expect_rc": 0},
            present=here,
            unless=f"no NGC mode: an installer before {ngc['flags_from']}, or the base's own",
        )


BLOCK = EfaInstaller()
