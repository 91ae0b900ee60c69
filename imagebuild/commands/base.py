"""`build.py base`: make the local debootstrap base image every local variant builds FROM."""

from __future__ import annotations

import argparse

from imagebuild.localbase import DEFAULT_NAME, make_base


def register(sub) -> None:
    p = sub.add_parser(
        "base",
        help="make the local base image (debootstrap minbase + docker import); skipped if it exists",
        description="Make the Debian bookworm base image the local variants build FROM, with no registry: "
        "debootstrap --variant=minbase into a folder, then docker import. Skipped if the image exists.",
    )
    p.add_argument("--name", default=DEFAULT_NAME, help=f"image name (default: {DEFAULT_NAME})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.builder import docker_client

    make_base(docker_client(), args.name, say=lambda line: print(line, flush=True))
    return 0
