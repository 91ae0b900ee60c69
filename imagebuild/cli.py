"""The `build.py` command line: one module per verb under imagebuild/commands/, dispatched here.

Each command module exposes `register(subparsers)` which adds its parser and sets `func` to a callable
taking the parsed `argparse.Namespace` and returning an exit code. UserError becomes exit 2 with its
message; ChecksFailed exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from efa_validators.cli import flushed, quiet_broken_pipe
from imagebuild.errors import ChecksFailed, UserError, redact

# (command, module, help line), in the order shown in --help; it follows the pipeline. --help lists every
# command from this table; a command's module (and what it imports: pydantic, jinja2, docker, boto3) is
# imported only when that command runs. tests/imagebuild/test_cli_help.py pins each line to its module's own
# help.
COMMANDS = [
    (
        "init",
        "imagebuild.commands.init",
        "write a starter matrix, checks file and CI workflow into a repository",
    ),
    ("list", "imagebuild.commands.listing", "list the variants of the matrix (after all checks)"),
    ("render", "imagebuild.commands.render", "render Dockerfile, context and lock of each variant"),
    ("explain-env", "imagebuild.commands.render", "each env var of a variant and why it is (not) set"),
    ("schema", "imagebuild.commands.render", "print the JSON Schema of matrix.yaml (for editors)"),
    (
        "base",
        "imagebuild.commands.base",
        "make the local base image (debootstrap minbase + docker import); skipped if it exists",
    ),
    (
        "inspect-base",
        "imagebuild.commands.inspect_base",
        "probe an image (python, NCCL, libfabric, plugin, Open MPI, CUDA, torch) and print matrix lines",
    ),
    (
        "build",
        "imagebuild.commands.build",
        "build the variants' images (content-hash tags; unchanged variants are skipped)",
    ),
    (
        "bake",
        "imagebuild.commands.bake",
        "write a docker-bake JSON file of the rendered variants (for buildx bake on remote builders)",
    ),
    (
        "test",
        "imagebuild.commands.test",
        "check built images against their variant lock (testinfra); exit 1 if a check fails",
    ),
    ("push", "imagebuild.commands.push", "push built images by digest to a registry or ECR"),
    (
        "fan-in",
        "imagebuild.commands.fanin",
        "gate the outputs of separate CI jobs as one; write shared tags and twins' image indexes",
    ),
    ("attest", "imagebuild.commands.attest", "attach an SBOM and a signed provenance to every pushed digest"),
    (
        "verify",
        "imagebuild.commands.verify",
        "check an image's signed provenance and SBOM against the team's public key",
    ),
    (
        "release",
        "imagebuild.commands.release",
        "promote checked digests to release tags; write the release record and notes",
    ),
    (
        "prune",
        "imagebuild.commands.prune",
        "remove the tool's content-tagged images no channel, release or latest build names",
    ),
    (
        "preflight",
        "imagebuild.commands.preflight",
        "print launch recipes for the pre-flight, or run it on SageMaker",
    ),
    (
        "report",
        "imagebuild.commands.report",
        "plot and summarise a validator report (python -m efa_validators parse --json)",
    ),
    (
        "demo",
        "imagebuild.commands.demo",
        "the main job on the embedded default: base, render, build, check, validate (replayed)",
    ),
]
COMMAND_MODULES = list(dict.fromkeys(module for _name, module, _help in COMMANDS))


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors already; keep its message short and on stderr."""


def make_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """Every command's parser; with `command`, only the module of that command is imported and the other
    commands are listed by their help line (enough for --help and for argparse's choice check)."""
    parser = _Parser(prog="build.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = {module for name, module, _help in COMMANDS if command is None or name == command}
    for module in COMMAND_MODULES:
        if module in modules:
            importlib.import_module(module).register(sub)
        else:
            for name, _module, help in (c for c in COMMANDS if c[1] == module):
                sub.add_parser(name, help=help, add_help=False)
    return parser


def _command_of(argv: List[str]) -> Optional[str]:
    """The command word: the first argument that is not an option (the top level has only -h)."""
    return next((a for a in argv if not a.startswith("-")), None)


def add_matrix_args(p: argparse.ArgumentParser) -> None:
    """The options every verb that reads a matrix takes."""
    p.add_argument("--matrix", default="matrix.yaml", help="build matrix file (default: matrix.yaml)")
    add_variant_arg(p)


def add_variant_arg(
    p: argparse.ArgumentParser, help: str = "only this variant (repeatable; default: all)"
) -> None:
    p.add_argument("--variant", action="append", default=[], metavar="NAME", help=help)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser(_command_of(argv) or "")
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
    return flushed(main)
