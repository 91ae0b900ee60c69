"""`build.py inspect-base IMAGE [--json]`: what a base image holds, and the matrix lines that declare it."""

from __future__ import annotations

import argparse
import json

from imagebuild.commands import add_verb


def register(sub) -> None:
    p = add_verb(
        sub,
        "inspect-base",
        "Run a probe in a throwaway, network-less container of IMAGE and report what the base "
        "already holds (python, each NCCL via ncclGetVersion, libfabric, the aws-ofi-nccl plugin, Open MPI, "
        "CUDA, torch), then print the matrix lines that extend it. Nothing is pulled.",
    )
    p.add_argument("image", metavar="IMAGE", help="an image on the docker engine (repo:tag or id)")
    p.add_argument("--json", action="store_true", help="the facts as JSON, with the matrix lines as `matrix`")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.adapters.docker_engine import connect
    from imagebuild.building.inspect_base import inspect, matrix_lines, text_report

    found = inspect(connect(), args.image)
    if args.json:
        print(json.dumps({**found, "matrix": matrix_lines(found)}, indent=1, sort_keys=True))
    else:
        print(text_report(found), end="")
    return 0
