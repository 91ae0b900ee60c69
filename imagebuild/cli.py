"""The `build.py` command line: one module per verb under imagebuild/commands/, dispatched here.

Each command module exposes `register(subparsers)` which adds its parser and sets `func` to a callable
taking the parsed `argparse.Namespace` and returning an exit code. UserError becomes exit 2 with its
message; ChecksFailed exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import List, Optional

from imagebuild.errors import ChecksFailed, UserError, redact

# Order is the order shown in --help; it follows the pipeline.
COMMAND_MODULES = [
    "imagebuild.commands.listing",  # list
    "imagebuild.commands.render",  # render, explain-env, schema
    "imagebuild.commands.base",  # base (make the local base image)
    "imagebuild.commands.inspect_base",  # inspect-base (what a base image holds, as matrix lines)
    "imagebuild.commands.build",  # build
    "imagebuild.commands.bake",  # bake (a docker-bake file for buildx on remote builders)
    "imagebuild.commands.test",  # test
    "imagebuild.commands.push",  # push
    "imagebuild.commands.release",  # release
    "imagebuild.commands.preflight",  # preflight
    "imagebuild.commands.report",  # report (plots and summaries from validator JSON)
    "imagebuild.commands.demo",  # demo (the main job on the embedded default)
]


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors already; keep its message short and on stderr."""


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="build.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def add_matrix_args(p: argparse.ArgumentParser) -> None:
    """The options every verb that reads a matrix takes."""
    p.add_argument("--matrix", default="matrix.yaml", help="build matrix file (default: matrix.yaml)")
    add_variant_arg(p)


def add_variant_arg(
    p: argparse.ArgumentParser, help: str = "only this variant (repeatable; default: all)"
) -> None:
    p.add_argument("--variant", action="append", default=[], metavar="NAME", help=help)


def main(argv: Optional[List[str]] = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ChecksFailed as err:
        if str(err):
            print(f"checks failed: {redact(str(err))}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return quiet_broken_pipe()
    except OSError as err:
        # A path the tool writes (--out, --records, a report) that cannot be written: read-only, full, a
        # file where a folder must be. The user's environment, not a bug: exit 2 with the path.
        if err.filename is None:
            raise
        where = str(err.filename) + (f" -> {err.filename2}" if err.filename2 else "")
        print(f"error: {where}: {err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def entry() -> int:
    """`build.py` itself: main, then the final flush, where `| head` shows up as a broken pipe."""
    try:
        rc = main()
        sys.stdout.flush()
    except BrokenPipeError:
        return quiet_broken_pipe()
    return rc


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (`| head`): end quietly, as `cat` does, with 141 (128 + SIGPIPE).

    stdout is pointed at /dev/null so the interpreter's final flush cannot raise a second time.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141
