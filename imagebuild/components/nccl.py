"""nccl: NVIDIA's collective communications library.

Parameters:
  version   e.g. `2.27.7`
  method    source (default when the catalog pins a commit: `make src.build` for options.cuda_arch),
            wheel (the catalog's NVIDIA wheel for the variant's CUDA major), apt, packages, base
  prefix    default /opt/nvidia/nccl; `source: {base: true}` on a DLC: torch's (catalog `base_prefix`)
  On a base that ships its own NCCL packages (nvidia/cuda: libnccl2, libnccl-dev), a wheel or source NCCL
  purges them in the system stage: one NCCL per image.
  A base NCCL (`source: {base: true}`) adds no directory to LD_LIBRARY_PATH or ld.so.conf.d: the base already
  made it loadable where it is meant to be. A DLC holds two (aws/deep-learning-containers, commit e17a13ce:
  its base's scripts/install_cuda.sh builds one into /usr/local/cuda/lib64, which its LD_LIBRARY_PATH names;
  torch's wheel NCCL sits in site-packages, which torch finds itself): putting torch's directory on the
  loader's path too would give every other program two NCCLs to pick from (single-libnccl). The checks say
  which one torch loads (nccl-torch-loads) and which one the loader and nccl-tests load.

Examples (matrix):
  nccl: {version: "2.27.7", method: source}
  nccl: {version: "2.27.7", method: wheel}
  nccl: {version: "2.26.2", source: {base: true}}
  nccl: {version: "2.27.7", method: wheel}   # on a cuda base
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping, Optional, Tuple

from imagebuild import catalog
from imagebuild.components import Block, Homes, lock_component
from imagebuild.components.expectation import Expectation
from imagebuild.variant import Component, Variant

NAME = "nccl"


class Nccl(Block):
    name = NAME
    tag = (0, "nccl")
    layer = 50
    methods = ("wheel", "source", "apt", "packages", "base")
    tools = ("make", "g++")
    default_homes = {"NCCL_HOME": "/usr"}

    def base_packages(self, comp: Component, v: Variant) -> List[str]:
        """The base's own NCCL packages this variant replaces (none when NCCL is the base's or apt's)."""
        if comp.method not in ("source", "wheel"):
            return []
        return list((catalog.component(NAME).get("base_packages") or {}).get(v.base.kind) or [])

    def system_step(self, comp: Component, v: Variant) -> Optional[Tuple[str, str, Tuple[Any, ...]]]:
        packages = self.base_packages(comp, v)
        return ("partials/nccl.j2", "purge_base", (packages,)) if packages else None

    def libdirs(self, comp: Component) -> List[str]:
        if comp.method == "base":
            return []  # the base's NCCL stays where the base's loader path (or its framework) finds it
        return super().libdirs(comp)

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
            self.pkgconfig_check(lock, nccl),
            self.check(
                lock,
                "single-libnccl",
                "single_library",
                "exactly one libnccl.so.2 on the library search path (LD_LIBRARY_PATH, ld.so.conf.d, the "
                "loader's own dirs): a second directory holding one means the wrong one can win",
                {"soname": "libnccl.so.2", "python": python, "prefix": nccl.get("prefix")},
            ),
            self.check(
                lock,
                "nccl-torch-loads",
                "framework_nccl",
                "the NCCL torch loads is the lock's (under its prefix): a DLC holds two NCCLs, and jobs run "
                "torch's (without torch in the image: what torch's wheel would open, site-packages "
                "nvidia/nccl/lib)",
                {
                    "python": python,
                    "prefix": nccl.get("prefix"),
                    "version": nccl.get("version"),
                    "import": framework(lock),
                },
                present=bool(nccl) and (framework(lock) or is_wheel_home(nccl.get("prefix"))),
                unless="no framework NCCL: no torch in the variant and NCCL is not a site-packages wheel",
            ),
        ]

    def pkgconfig_check(self, lock: Mapping[str, Any], nccl: Mapping[str, Any]) -> Expectation:
        """A source build installs lib/pkgconfig/nccl.pc, which must name the prefix it was installed to
        (NCCL's src.build writes $(PREFIX), default /usr/local, into it; partials/nccl.j2 passes the
        prefix)."""
        prefix = str(nccl.get("prefix") or "")
        exp = self.check(
            lock,
            "nccl-pkgconfig-prefix",
            "pkgconfig_prefix",
            "a source-built NCCL's nccl.pc names the prefix it is installed in: a build that asks "
            "`pkg-config nccl` (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig) must find this NCCL, not /usr/local",
            {"file": f"{prefix}/lib/pkgconfig/nccl.pc", "prefix": prefix},
        )
        if exp.skip is None and nccl.get("method") != "source":
            method = nccl.get("method")
            return replace(
                exp, skip=f"nccl is installed by method {method}: only a source build makes nccl.pc"
            )
        return exp


def framework(lock: Mapping[str, Any]) -> bool:
    """torch is in the image (a DLC's): its import shows which NCCL it loads."""
    from imagebuild import components  # the registry, complete by the time checks are derived

    return any(b.framework and lock_component(lock, b.name) is not None for b in components.REGISTRY)


def is_wheel_home(prefix: Optional[str]) -> bool:
    """An NCCL in a Python's site-packages (torch's nvidia-nccl-cuNN dependency)."""
    return bool(prefix) and "/site-packages/nvidia/nccl" in str(prefix)


BLOCK = Nccl()
