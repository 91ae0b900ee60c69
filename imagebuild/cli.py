"""The `efa-image-build` command line (also `python build.py` in a checkout): one module per verb under
imagebuild/commands/, dispatched here.

Each command module exposes `register(subparsers)` which adds its parser and sets `func` to a callable
taking the parsed `argparse.Namespace` and returning an exit code. UserError becomes exit 2 with its
message; ChecksFailed exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import List, Optional

from efa_validators.cli import flushed, quiet_broken_pipe
from imagebuild import errors
from imagebuild.errors import ChecksFailed, UserError, did_you_mean, for_terminal
from imagebuild.settings.logs import LEVELS, detail, setup

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
    (
        "completion",
        "imagebuild.commands.completion",
        "print a shell completion script (bash, zsh, fish, tcsh, powershell)",
    ),
]
COMMAND_NAMES = [name for name, _module, _help in COMMANDS]
# The name in every usage line, --help and hint, whichever way the CLI was started: the console script is
# what a team installs and types; `python build.py` in this checkout is the same program (docs/build.md).
PROG = errors.PROG
# The top-level --help's description: what the tool does, for a user (the module docstring above is for
# whoever edits this file, and its first line alone is half a sentence).
DESCRIPTION = (
    "Build, check, release and validate GPU training images for AWS (EFA, NCCL) from a matrix: "
    "one verb per stage, from `init` to `preflight`."
)
DIST = "efa-image-build"  # the distribution whose metadata --version reads (pyproject.toml [project].name)
COMMAND_MODULES = list(dict.fromkeys(module for _name, module, _help in COMMANDS))


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors already; keep its message short and on stderr."""


def version() -> str:
    """The installed distribution's version (its metadata, as pip sees it); a bare checkout has none."""
    from importlib import metadata

    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return "unknown (not installed: pip install the project)"


def add_global_args(p: argparse.ArgumentParser, top: bool) -> None:
    """-v/-q/--log-level, before the verb or after it. A verb's copies default to SUPPRESS, so a level given
    before the verb is not reset by the verb's parser."""
    keep = {} if top else {"default": argparse.SUPPRESS}
    g = p.add_argument_group("output")
    how = g.add_mutually_exclusive_group()
    how.add_argument("-v", "--verbose", action="store_const", const="debug", dest="log_level", **keep,
                     help="say more on stderr (where each setting came from)")  # fmt: skip
    how.add_argument("-q", "--quiet", action="store_const", const="warning", dest="log_level", **keep,
                     help="only warnings and errors on stderr (results on stdout are unchanged)")  # fmt: skip
    how.add_argument("--log-level", choices=LEVELS, dest="log_level", **keep,
                     help="stderr's level: debug, info (default), warning, error")  # fmt: skip


def make_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """Every command's parser; with `command`, only the module of that command is imported and the other
    commands are listed by their help line (enough for --help and for argparse's choice check)."""
    parser = _Parser(prog=PROG, description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    add_global_args(parser, top=True)
    parser.set_defaults(log_level="info")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = {module for name, module, _help in COMMANDS if command is None or name == command}
    for module in COMMAND_MODULES:
        if module in modules:
            importlib.import_module(module).register(sub)
        else:
            for name, _module, help in (c for c in COMMANDS if c[1] == module):
                sub.add_parser(name, help=help, add_help=False)
    for name in COMMAND_NAMES:
        if name in sub.choices and sub.choices[name].add_help:  # a registered verb, not a help-line stub
            add_global_args(sub.choices[name], top=False)
    return parser


def _command_of(argv: List[str]) -> Optional[str]:
    """The command word: the first argument that is not an option or the value of --log-level."""
    skip = False
    for a in argv:
        if a == "--":
            return None
        if skip:
            skip = False
        elif a == "--log-level":
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def apply_config(parser: argparse.ArgumentParser, command: str) -> List[str]:
    """Flags over the project config over defaults: the config's values become the verb's defaults for
    the options it has (--matrix, --registry, --cache, --out). Returns the keys it set."""
    from imagebuild.settings import project as projectconfig

    path, values = projectconfig.settings(Path.cwd(), dict(os.environ))
    verb = _subparsers(parser).choices[command]
    used = []
    for action in verb._actions:  # noqa: SLF001 - argparse has no public list of a parser's options
        if action.dest in values and action.option_strings:
            action.default = values[action.dest]
            used.append(action.dest)
    detail(projectconfig.describe(path, values, used))
    return used


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001


def _unknown_command(word: str) -> int:
    print(f"usage: {PROG} [-h] [--version] [-v | -q | --log-level LEVEL] COMMAND ...", file=sys.stderr)
    hint = did_you_mean(word, COMMAND_NAMES) or "commands: " + ", ".join(COMMAND_NAMES)
    print(f"{PROG}: error: unknown command '{word}'; {hint}", file=sys.stderr)
    return 2


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_of(argv)
    if command is not None and command not in COMMAND_NAMES:
        return _unknown_command(command)
    parser = make_parser(command or "")
    try:
        # completion takes no setting, and a shell runs it on TAB: a bad pyproject.toml is not its to report
        if command not in (None, "completion") and not {"-h", "--help", "--version"} & set(argv):
            setup(_level_of(argv))  # before the config, so -v shows where each setting came from
            used = apply_config(parser, command)
        else:
            used = []
    except UserError as err:
        print(f"error: {for_terminal(str(err))}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    setup(args.log_level)
    if "registry" in used and getattr(args, "ecr", False):
        args.registry = None  # --ecr given: the config's registry (a default) steps aside
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"error: {for_terminal(str(err))}", file=sys.stderr)
        return 2
    except ChecksFailed as err:
        if str(err):
            print(f"checks failed: {for_terminal(str(err))}", file=sys.stderr)
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


def _level_of(argv: List[str]) -> str:
    """The level asked for on the command line, read before argparse runs (the last one given wins)."""
    level = "info"
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a in ("-v", "--verbose"):
            level = "debug"
        elif a in ("-q", "--quiet"):
            level = "warning"
        elif a == "--log-level" and i + 1 < len(argv) and argv[i + 1] in LEVELS:
            level = argv[i + 1]
        elif a.startswith("--log-level=") and a.split("=", 1)[1] in LEVELS:
            level = a.split("=", 1)[1]
    return level


def entry() -> int:
    """`build.py` itself: main, then the final flush, where `| head` shows up as a broken pipe."""
    return flushed(main)
