"""`efa-image-build completion bash|zsh|fish|tcsh|powershell`: the shell completion script, made by shtab
from the parser."""

from __future__ import annotations

import argparse

# what shtab writes: SUPPORTED_SHELLS in shtab/__init__.py (iterative/shtab, release 1.13.0, the pin)
SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")


def register(sub) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish, tcsh, powershell)",
        description="Print the completion script for SHELL on stdout: every verb, option and choice of "
        "this version. bash: `efa-image-build completion bash > ~/.local/share/bash-completion/completions/"
        "efa-image-build`; zsh: write it as `_efa-image-build` into a folder on $fpath.",
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help=", ".join(SHELLS))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shtab

    from imagebuild.cli import make_parser

    print(shtab.complete(make_parser(), shell=args.shell), end="")
    return 0
