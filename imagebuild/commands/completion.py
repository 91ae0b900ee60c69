"""`efa-image-build completion bash|zsh|fish|tcsh|powershell`: the shell completion script, made by shtab
from the parser. `--variant` completes the variant names of the matrix the project config names (or
./matrix.yaml): the script asks `efa-image-build completion --variants` each time, so a matrix edited after
the script was installed completes its new names."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import List

from imagebuild.commands import add_verb

# what shtab writes: SUPPORTED_SHELLS in shtab/__init__.py (iterative/shtab, release 1.13.0, the pin)
SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")
ZSH_FUNCTION = "_efa_image_build_variants"
MAX_NAMES = 1000  # the matrix loader's own bound (MAX_VARIANTS): a completion never lists more


def register(sub) -> None:
    p = add_verb(
        sub,
        "completion",
        "Print the completion script for SHELL on stdout: every verb, option and choice of "
        "this version, and the variant names of the matrix the project config names after --variant. bash: "
        "`efa-image-build completion bash > ~/.local/share/bash-completion/completions/efa-image-build`; "
        "zsh: write it as `_efa-image-build` into a folder on $fpath.",
    )
    p.add_argument("shell", nargs="?", choices=SHELLS, metavar="SHELL", help=", ".join(SHELLS))
    p.add_argument(
        "--variants",
        action="store_true",
        help="print the variant names of the project's matrix, one a line (what the script asks; "
        "nothing when the matrix cannot be read: `efa-image-build list` says why)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.variants:
        print("\n".join(variant_names(Path.cwd(), dict(os.environ))))
        return 0
    if args.shell is None:
        from imagebuild.errors import UserError

        raise UserError("give the shell", key="SHELL", hint="one of: " + ", ".join(SHELLS))
    import shtab

    from imagebuild.cli import PROG, make_parser

    parser = make_parser()
    ask = f"{PROG} completion --variants"
    names = dict(shtab.cmd(ask))
    # zsh expands shtab's `($(cmd))` when the script loads, once per verb with --variant: a function runs
    # only on TAB
    names["zsh"] = ZSH_FUNCTION
    names["preamble"] = dict(names.get("preamble") or {}, zsh=_zsh_function(ask))
    for action in _variant_actions(parser):
        action.complete = names  # type: ignore[attr-defined]  # shtab reads this attribute
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0


def _variant_actions(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    """Every verb's `--variant` option."""
    found = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of a parser's options
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for verb in action.choices.values():
                found += [a for a in verb._actions if "--variant" in a.option_strings]  # noqa: SLF001
    return found


def variant_names(start: Path, environ: dict) -> List[str]:
    """The variant names of the matrix the project config names (else ./matrix.yaml), at most MAX_NAMES.
    A shell calls this on TAB: whatever is wrong (no matrix, bad TOML or YAML, a refused variant) yields no
    names and no output on either stream, never a traceback in the user's prompt; the matrix loader bounds the
    work (file size, YAML nodes, variant count)."""
    try:
        from imagebuild.matrix.load import expand
        from imagebuild.settings import project

        _path, values = project.settings(start, environ)
        matrix = values.get("matrix") or str(start / "matrix.yaml")
        if not Path(matrix).is_file():
            return []
        return list(dict.fromkeys(r.name for r in expand(matrix)))[:MAX_NAMES]
    except Exception:  # noqa: BLE001 - a completion prints names or nothing; `list` reports the cause
        return []


def _zsh_function(ask: str) -> str:
    """The zsh completer of variant names: runs `ask` on TAB, one name a line."""
    body = "  local -a names\n" + '  names=(${(f)"$(' + ask + ')"})\n' + "  compadd -a names\n"
    return f"{ZSH_FUNCTION}() {{\n{body}}}\n"
