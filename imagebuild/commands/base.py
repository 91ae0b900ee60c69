"""`efa-image-build base`: make the local debootstrap base image every local variant builds FROM; with a
matrix (`--matrix`, or the one the project config names), every local base its variants name."""

from __future__ import annotations

import argparse
from typing import Optional

from imagebuild.building.al2023base import DEFAULT_NAME as AL2023_NAME
from imagebuild.building.dlcbase import DEFAULT_NAME as DLC_NAME
from imagebuild.building.localbase import DEFAULT_NAME, default_name, make_base, matrix_bases
from imagebuild.catalog import platforms
from imagebuild.commands import add_variant_arg, add_verb
from imagebuild.errors import UserError


def register(sub) -> None:
    p = add_verb(
        sub,
        "base",
        "Make the Debian bookworm base image the local variants build FROM, with no registry: "
        "debootstrap --variant=minbase into a folder, then docker import. Skipped if the image exists.",
    )
    p.add_argument(
        "--name",
        default=None,
        help=f"image name (default: {DEFAULT_NAME}; dlc: {DLC_NAME}; al2023-standin: {AL2023_NAME})",
    )
    p.add_argument(
        "--layout",
        choices=("debian", "dlc", "al2023-standin"),
        default="debian",
        help="dlc: also the DLC-layout base on top; al2023-standin: a Debian base with the AL2023 PyTorch "
        "DLC's paths (/opt/venv, lib64), a stand-in, not Amazon Linux",
    )
    p.add_argument(
        "--platform",
        choices=sorted(platforms.PLATFORMS),
        default=platforms.DEFAULT,
        help="the base for this platform (another than the host's runs under qemu-user-static emulation; "
        f"default name then {default_name('linux/arm64')} for arm64)",
    )
    p.add_argument(
        "--matrix",
        default=None,
        help="make every local base this matrix's variants build FROM, by the names it gives them (the "
        "project config's matrix is the default; without either: the one base --layout names)",
    )
    p.add_argument(
        "--from-matrix",
        action="store_true",
        help="make the local bases of the matrix (the config's, else matrix.yaml) even where none is given",
    )
    add_variant_arg(
        p,
        help="only the bases of this matrix variant (repeatable; the matrix: --matrix, the config's, "
        "else matrix.yaml)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.adapters.docker_engine import connect

    if args.matrix is None and (args.variant or args.from_matrix):
        args.matrix = "matrix.yaml"  # a variant is a matrix's: the default matrix, as the other verbs read
    if args.matrix is not None:
        wanted = matrix_bases(args.matrix, args.variant)  # the matrix is read before the engine is asked
        client, say = connect(), lambda line: print(line, flush=True)
        if not wanted:
            say(f"{args.matrix}: no variant builds FROM a local base; nothing to make")
        for name, layout, platform in wanted:
            _make(client, say, name, layout, platform)
        return 0
    _make(connect(), lambda line: print(line, flush=True), args.name, args.layout, args.platform)
    return 0


def _make(client, say, name: Optional[str], layout: str, platform: str) -> None:
    """One base: `name` (None: the layout's default) in `layout` for `platform`; nothing when it exists."""
    if layout in ("dlc", "al2023-standin"):
        if platform != platforms.DEFAULT:
            raise UserError(f"--layout {layout} is made for linux/amd64 only", key="--platform")
        from imagebuild.building import al2023base
        from imagebuild.building.dlcbase import make_dlc_base

        make_base(client, DEFAULT_NAME, say=say)  # what it starts FROM; nothing to do when it exists
        if layout == "dlc":
            make_dlc_base(client, name or DLC_NAME, DEFAULT_NAME, say=say)
        else:
            make_dlc_base(
                client,
                name or AL2023_NAME,
                DEFAULT_NAME,
                say=say,
                layout=al2023base.dockerfile,
                wheel=al2023base.nccl_wheel(),
            )
        return
    make_base(client, name or default_name(platform), say=say, platform=platform)
