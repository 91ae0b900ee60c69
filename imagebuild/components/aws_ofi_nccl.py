"""aws_ofi_nccl: the NCCL net plugin that carries NCCL traffic over libfabric (EFA).

Parameters:
  version   e.g. `1.21.1`; bundled by the EFA installer it may be left out (the catalog says which)
  method    source (the catalog's pinned commit; `./configure --with-libfabric --with-cuda --with-mpi`),
            installer, base
  params.platform_aws  "yes" (default, from 1.6: --enable-platform-aws, needs libfabric >= 1.22) or "no"
  prefix    default /opt/aws-ofi-nccl; the installer's /opt/amazon/ofi-nccl

Examples (matrix):
  aws_ofi_nccl: {version: "1.21.1", method: source}
  aws_ofi_nccl: {version: "1.17.3", params: {platform_aws: "no"}}
  aws_ofi_nccl: {source: {installer: efa_installer}}
"""

from __future__ import annotations

from typing import Any, List, Mapping

from imagebuild import catalog
from imagebuild.components import Block, Needs, libfabric, lock_component, nccl
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component

NAME = "aws_ofi_nccl"


class AwsOfiNccl(Block):
    name = NAME
    tag = (1, "ofi")
    layer = 60
    methods = ("source", "installer", "base")
    params = {"platform_aws": ("yes", "no")}
    tools = ("autoconf", "automake", "libtool", "make", "g++", "libhwloc-dev")
    bundled = True
    needs = (
        Needs(
            nccl.NAME,
            "needs-nccl",
            f"{NAME} needs {nccl.NAME} in the same variant",
            "aws-ofi-nccl INSTALL.md",
        ),
        Needs(
            libfabric.NAME,
            "needs-libfabric",
            f"{NAME} needs {libfabric.NAME} in the same variant (next to an EFA installer: "
            f"`{libfabric.NAME}: {{source: {{installer: efa_installer}}}}`)",
            "aws-ofi-nccl INSTALL.md",
        ),
    )

    def libdirs(self, comp: Component) -> List[str]:
        layout = catalog.efa_installers()["layout"]
        if comp.bundled_by or comp.prefix == layout[f"{NAME}_prefix"]:
            # lib/, lib64/ or lib/<arch>-linux-gnu/ by installer version and OS: every candidate is listed
            # (also for a base's plugin in the installer's place, as in a DLC)
            dirs = layout["ofi_nccl_libdirs"]
            return [f"{comp.prefix}/{d}" for d in dirs]
        return [f"{comp.prefix}/lib"]

    def checks(self, lock: Mapping[str, Any]) -> List[Expectation]:
        ofi = lock_component(lock, NAME) or {}
        params = {
            "version": ofi.get("version"),
            "prefix": ofi.get("prefix"),
            "python": lock.get("python") or "python3",
        }
        return [
            self.check(lock, name, probe, why, params)
            for name, probe, why in (
                (
                    "plugin-present",
                    "plugin_present",
                    "the aws-ofi-nccl library (libnccl-net*.so) is in the image",
                ),
                (
                    "plugin-ldd",
                    "plugin_ldd",
                    "every library the plugin needs resolves (`ldd`: no 'not found')",
                ),
                (
                    "plugin-discoverable",
                    "plugin_discoverable",
                    "NCCL's search (NCCL_NET_PLUGIN, else libnccl-net.so on LD_LIBRARY_PATH/ldconfig) finds "
                    "it",
                ),
                (
                    "plugin-version",
                    "plugin_version",
                    "the plugin's embedded version string is the locked version",
                ),
                (
                    "single-plugin",
                    "single_plugin",
                    "one plugin build in the image (one directory of libnccl-net*.so): with two, the one "
                    "NCCL loads depends on the ld cache (an EFA installer >= 1.38.0 bundles its own)",
                ),
            )
        ] + [self.cudart_check(lock, ofi)]

    def cudart_check(self, lock: Mapping[str, Any], ofi: Mapping[str, Any]) -> Expectation:
        """The installer's plugin dlopen()s the unversioned `libcudart.so` (ldd cannot see a dlopen): the
        check dlopens it by that name, through the loader's own search, as the plugin will."""
        link = catalog.efa_installers()["cudart_link"]["name"]
        python = lock.get("python") or "python3"
        return self.check(
            lock,
            "plugin-cudart-dlopen",
            "command",
            f"the installer's plugin dlopen()s `{link}` (unversioned), which a CUDA -runtime image lacks "
            "unless linked (as the DLC does): the loader finds it",
            {"command": f"{python} -c 'import ctypes; ctypes.CDLL(\"{link}\")'", "expect_rc": 0},
            present=ofi.get("method") == "installer",
            unless="a plugin built here links cudart itself (statically, or its versioned name)",
        )


BLOCK = AwsOfiNccl()
