"""`build.py base`: make the local debootstrap base image every local variant builds FROM."""

from __future__ import annotations

import argparse

from imagebuild.build.al2023base import DEFAULT_NAME as AL2023_NAME
from imagebuild.build.dlcbase import DEFAULT_NAME as DLC_NAME
from imagebuild.build.localbase import DEFAULT_NAME, default_name, make_base
from imagebuild.catalog import platforms
from imagebuild.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "base",
        help="make the local base image (debootstrap minbase + docker import); skipped if it exists",
        description="Make the Debian bookworm base image the local variants build FROM, with no registry: "
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.adapters.docker_engine import connect

    client, say = connect(), lambda line: print(line, flush=True)
    if args.layout in ("dlc", "al2023-standin"):
        if args.platform != platforms.DEFAULT:
            raise UserError(f"--layout {args.layout} is made for linux/amd64 only", key="--platform")
        from imagebuild.build import al2023base
        from imagebuild.build.dlcbase import make_dlc_base

        make_base(client, DEFAULT_NAME, say=say)  # what it starts FROM; nothing to do when it exists
        if args.layout == "dlc":
            make_dlc_base(client, args.name or DLC_NAME, DEFAULT_NAME, say=say)
        else:
            make_dlc_base(
                client,
                args.name or AL2023_NAME,
                DEFAULT_NAME,
                say=say,
                layout=al2023base.dockerfile,
                wheel=al2023base.nccl_wheel(),
            )
        return 0
    make_base(client, args.name or default_name(args.platform), say=say, platform=args.platform)
    return 0
