"""Load matrix.yaml in one forward pass: read -> expand -> select -> resolve, each stage handing the next a
finished value and never calling back.

    read     yamlsrc (lines kept), the schema's top level (`validate`), the file name's guard  -> Source
    expand   templates, axes, includes, checks_file, tags and channels, each body checked     -> [Expanded]
    select   the variants asked for (`--variant`)                                              -> [Expanded]
    resolve  catalog pins, components, compat rules, env policy                                -> [Variant]

The Variants are what render, build and check consume. Every error is a UserError with file, line and key;
nothing here writes anything.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from imagebuild.errors import UserError, did_you_mean
from imagebuild.matrix import expand as expansion
from imagebuild.matrix import schema
from imagebuild.matrix.expand import Expanded, Source
from imagebuild.matrix.guards import check_file_name
from imagebuild.matrix.resolve import resolve
from imagebuild.matrix.validate import validate
from imagebuild.matrix.yamlsrc import MDict, load_file
from imagebuild.variant import Variant


def read(path: str, display: Optional[str] = None) -> Source:
    """The matrix file parsed with its lines and checked against the schema's top level."""
    file = display or path
    root = load_file(path, file)
    if not isinstance(root, MDict):
        raise UserError(
            "the matrix must be a mapping with a `variants:` list", file=file, line=getattr(root, "line", 1)
        )
    validate(schema.MatrixFile, root, root, file)
    check_file_name(file)
    return Source(root, path, file)


def expand(path: str, display: Optional[str] = None, platform: Optional[str] = None) -> List[Expanded]:
    """Read and expand a matrix file into merged variant bodies (not yet resolved): the names, bases and
    platforms a caller needs without the catalog (completion, the local bases)."""
    return expansion.expand(read(path, display), platform)


def select(expanded: Sequence[Expanded], only: Sequence[str], file: str) -> List[Expanded]:
    """Those named in `only` (all without it), in matrix order; a name the matrix lacks is an error."""
    known = [m.name for m in expanded]
    for want in only:
        if want not in known:
            raise UserError(
                f"no variant named '{want}' in {file}",
                key="--variant",
                hint=did_you_mean(want, known) or f"variants: {', '.join(known)}",
            )
    return [m for m in expanded if not only or m.name in only]


def load(
    path: str, only: Sequence[str] = (), display: Optional[str] = None, platform: Optional[str] = None
) -> List[Variant]:
    """The variants of a matrix file, resolved and checked (compat rules, env policy); `only` filters;
    `platform` renders every variant for that platform instead of its own."""
    source = read(path, display)
    return [resolve(m) for m in select(expansion.expand(source, platform), only, source.file)]
