"""Compatibility rules, checked before anything renders: a combination the field knows to fail is bad input.

Each rule names its source. Versions are compared with imagebuild.versions (numerically), never as strings.
`check` is pure: it returns problems with the matrix key each one is about, and the caller adds file:line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from imagebuild import catalog
from imagebuild import components as blocks
from imagebuild.components import aws_ofi_nccl, cuda_runtime, efa_installer, libfabric, nccl, nccl_tests
from imagebuild.variant import Component, EnvVar
from imagebuild.versions import Version

OFI, FAB, NCCL, EFA, CUDART = (
    aws_ofi_nccl.NAME,
    libfabric.NAME,
    nccl.NAME,
    efa_installer.NAME,
    cuda_runtime.NAME,
)


@dataclass(frozen=True)
class Problem:
    rule: str
    message: str
    key: str  # dotted matrix key the problem is about
    source: str


# aws-ofi-nccl refuses, at run time, a libfabric older than this with the efa provider.
# [aws/aws-ofi-nccl src/nccl_ofi_net.c: v1.9.1-aws..v1.12.x require 1.18.0; v1.13.0-aws and later 1.22.0]
PLUGIN_MIN_LIBFABRIC = (("1.13", "1.22"), ("1.9", "1.18"))
# nvcc learned these GPU architectures in these CUDA releases [NVIDIA CUDA toolkit release notes]
ARCH_MIN_CUDA = {"70": "9.0", "80": "11.0", "90": "11.8", "100": "12.8", "120": "12.8"}


def _cuda_build_major(comp: Component) -> Optional[int]:
    """The CUDA major a binary NCCL/cudart was built for: wheel -cuNN suffix or apt +cudaX.Y, else None."""
    for art in comp.artifacts:
        if art.requirement:
            m = re.search(r"-cu(\d+)==", art.requirement)
            if m:
                return int(m.group(1))
    for pkg in comp.packages:
        m = re.search(r"\+cuda(\d+)\.", pkg)
        if m:
            return int(m.group(1))
    return None


def check(
    components: Dict[str, Component],
    cuda: Optional[str],
    env: Sequence[EnvVar],
    cuda_arch: Optional[str],
) -> List[Problem]:
    problems: List[Problem] = []
    env_map = {e.name: e.value for e in env}
    ofi = components.get(OFI)
    fab = components.get(FAB)
    nccl_c = components.get(NCCL)
    efa = components.get(EFA)

    if ofi and fab and ofi.param("platform_aws", "yes") == "yes":
        for plugin_from, need in PLUGIN_MIN_LIBFABRIC:
            if Version(ofi.version) >= Version(plugin_from):
                if Version(fab.version) < Version(need):
                    problems.append(
                        Problem(
                            "plugin-libfabric",
                            f"aws-ofi-nccl {ofi.version} with the AWS platform needs libfabric >= {need}, "
                            f"this variant has {fab.version} (it fails at run time: "
                            f'"EFA provider requires at '
                            f'least libfabric version {need}.0")',
                            f"components.{OFI}.version",
                            "aws/aws-ofi-nccl src/nccl_ofi_net.c",
                        )
                    )
                break

    bundled = (catalog.efa_installer(efa.version) or {}).get(OFI) if efa and ofi else None
    if ofi and ofi.method == "source" and bundled and Version(ofi.version) <= Version(str(bundled)):
        problems.append(
            Problem(
                "plugin-not-newer",
                f"EFA installer {efa.version} bundles aws-ofi-nccl {bundled}; building {ofi.version} from "
                "source gives an older or the same plugin and removes the installer's own (one plugin per "
                "image)",
                f"components.{OFI}.version",
                "imagebuild/catalog/efa_installers.yaml (what each installer bundles, cited there)",
            )
        )

    tested = (catalog.component(OFI).get("libfabric_tested") or {}).get(ofi.version) if ofi else None
    if (
        ofi
        and ofi.method == "source"
        and tested
        and fab
        and fab.bundled_by == EFA
        and fab.version
        and Version(fab.version) < Version(str(tested))
    ):
        newer = sorted(
            (v for v, e in catalog.efa_installers()["versions"].items() if e.get(FAB) == str(tested)),
            key=Version,
        )
        problems.append(
            Problem(
                "plugin-libfabric-era",
                f"aws-ofi-nccl {ofi.version} was released tested with libfabric {tested}; EFA installer "
                f"{efa.version if efa else '?'} brings libfabric {fab.version}, an older one: pair a source "
                "plugin with the installer of its era"
                + (f" (EFA installer {', '.join(newer)} brings libfabric {tested})" if newer else ""),
                f"components.{OFI}.version",
                f"aws/aws-ofi-nccl RELEASENOTES.md at v{ofi.version} (catalog components.yaml "
                "aws_ofi_nccl.libfabric_tested)",
            )
        )

    if (
        ofi
        and ofi.method == "source"
        and cuda
        and Version(cuda) >= Version("13")
        and Version(ofi.version) < Version("1.17")
    ):
        problems.append(
            Problem(
                "plugin-cuda13",
                f"aws-ofi-nccl {ofi.version} does not build against CUDA {cuda} "
                "(CUDA 13 support came in 1.17.0)",
                f"components.{OFI}.version",
                "aws/aws-ofi-nccl RELEASENOTES.md v1.17.0 (Updated CUDA APIs to work with CUDA 13.0)",
            )
        )

    if (
        nccl_c
        and efa
        and Version(nccl_c.version) >= Version("2.19")
        and Version(efa.version) < Version("1.29")
    ):
        if env_map.get("FI_EFA_SET_CUDA_SYNC_MEMOPS") != "0":
            problems.append(
                Problem(
                    "nccl219-efa129",
                    f"NCCL {nccl_c.version} with EFA installer {efa.version} (< 1.29) fails to register "
                    "memory unless FI_EFA_SET_CUDA_SYNC_MEMOPS=0",
                    "env.FI_EFA_SET_CUDA_SYNC_MEMOPS",
                    "aws/aws-ofi-nccl issue 584; libfabric PR 8661",
                )
            )

    if efa and fab and fab.bundled_by != EFA:
        problems.append(
            Problem(
                "two-libfabrics",
                f"libfabric {fab.version} from {fab.source} next to the EFA installer's libfabric: "
                "two libfabrics "
                'in one image fail with "version `EFA_1.2\' not found"',
                f"components.{FAB}",
                "FIELD-NOTES failure table (two libfabrics)",
            )
        )

    if cuda:
        major = Version(cuda).parts[0]
        for name in (NCCL, CUDART):
            comp = components.get(name)
            built = _cuda_build_major(comp) if comp else None
            if built is not None and built != major:
                problems.append(
                    Problem(
                        "cuda-build",
                        f"{name} {comp.version} is built for CUDA {built}, the variant's CUDA is {cuda}",
                        f"components.{name}",
                        "NVIDIA wheel/package naming (-cuNN, +cudaX.Y)",
                    )
                )
        rt = components.get(CUDART)
        if rt and Version(rt.version).parts[0] != major:
            problems.append(
                Problem(
                    "cuda-runtime",
                    f"cuda_runtime {rt.version} does not match the variant's CUDA {cuda}",
                    f"components.{CUDART}.version",
                    "CUDA versioning",
                )
            )
        for arch in (cuda_arch or "").split(";"):
            need = ARCH_MIN_CUDA.get(arch)
            if arch and need and Version(cuda) < Version(need):
                problems.append(
                    Problem(
                        "cuda-arch",
                        f"sm_{arch} needs CUDA >= {need}; the variant's CUDA is {cuda}",
                        "options.cuda_arch",
                        "NVIDIA CUDA toolkit release notes",
                    )
                )

    for block in blocks.REGISTRY:
        for need in block.needs if block.name in components else ():
            if need.component not in components:
                problems.append(Problem(need.rule, need.message, f"components.{block.name}", need.source))
    return problems


def targets(
    components: Dict[str, Component],
    instance_types: Sequence[str],
    profiles: Dict[str, Dict[str, Any]],
    cuda_arch: Optional[str],
    nccl_net: Optional[str],
) -> List[Problem]:
    """What the variant's instance types demand of it, refused at render rather than found on the cluster.

    An EFA instance type without aws-ofi-nccl renders, builds and checks green, and only node-check on the
    cluster says NCCL crosses nodes over TCP sockets; `options.nccl_net: socket` says a team wants that.
    Source builds of CUDA kernels (NCCL, nccl-tests) compile SASS for `cuda_arch` only
    (`-gencode=arch=compute_N,code=sm_N`, no PTX), so a GPU outside it has no kernels: NCCL fails at its
    first collective with "no kernel image is available".
    """
    problems: List[Problem] = []
    efa_types = [t for t in instance_types if profiles[t].get("efa_gbps")]
    if OFI not in components and efa_types and nccl_net != "socket":
        problems.append(
            Problem(
                "efa-without-plugin",
                f"instance types {', '.join(efa_types)} have EFA but the variant has no aws_ofi_nccl: NCCL "
                "would cross nodes over TCP sockets",
                "components",
                "aws/aws-ofi-nccl README.md (NCCL reaches libfabric and EFA only through the plugin)",
            )
        )
    if OFI in components and nccl_net == "socket":
        problems.append(
            Problem(
                "socket-with-plugin",
                "options.nccl_net is socket, but the variant installs aws_ofi_nccl, which NCCL would load",
                "options.nccl_net",
                "NVIDIA/nccl src/net.cc (ncclNets: the plugin's slot comes before IB and Socket)",
            )
        )
    kernels = [
        c.name for c in components.values() if c.method == "source" and c.name in (NCCL, nccl_tests.NAME)
    ]
    archs = set((cuda_arch or "").split(";")) - {""}
    for i, itype in enumerate(instance_types if kernels else ()):
        need = profiles[itype].get("cuda_arch")
        if cuda_arch is None:
            if need is None:
                problems.append(
                    Problem(
                        "cuda-arch-unknown",
                        f"the GPU architecture of {itype} is not known to the catalog, so source builds "
                        "cannot be targeted at it",
                        f"instance_types[{i}]",
                        "efa_validators/judge/profile_data.py (cuda_arch None: no public source read)",
                    )
                )
        elif need is not None and need not in archs:
            problems.append(
                Problem(
                    "cuda-arch-coverage",
                    f"options.cuda_arch {cuda_arch!r} has no sm_{need}, the GPUs of {itype} "
                    f"({profiles[itype].get('gpu')}): the source-built {' and '.join(kernels)} would have no "
                    "kernels for them",
                    "options.cuda_arch",
                    "NVIDIA CUDA compiler driver NVCC (-gencode code=sm_N is SASS for sm_N only)",
                )
            )
    return problems
