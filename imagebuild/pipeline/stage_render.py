"""render: the matrix loaded, checked and rendered; the variant folders a build or bake works on."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from imagebuild.errors import ChecksFailed, UserError


@dataclass(frozen=True)
class RenderOptions:
    matrix: str = "matrix.yaml"
    variants: Sequence[str] = ()  # only these (default: all)
    out: Path = Path("build")
    platform: Optional[str] = None  # every variant for this platform instead of its own


def rendered(opts: RenderOptions) -> Tuple[List[Any], Dict[str, Dict[str, bytes]]]:
    """Load and check the matrix, refuse env-linter errors, render every variant in memory: the variants and
    their files. Every refusal of `render` happens here, before anything is written, so `list` (which
    calls this and writes nothing) refuses exactly what `render` refuses."""
    from imagebuild.matrix.load import load
    from imagebuild.render.folders import render_all

    variants = load(opts.matrix, list(opts.variants), platform=opts.platform)
    errors = []
    for v in variants:
        for sev, _name, msg in v.lint:
            if sev in ("warning", "info"):
                print(f"env {sev}: {v.name}: {msg}", file=sys.stderr)
            elif sev == "error":
                errors.append(f"{v.name}: {msg}")
    if errors:
        raise ChecksFailed(
            "the env linter found settings the field advises against "
            "(accept one with lint_ignore: [NAME]):\n  " + "\n  ".join(errors)
        )
    return variants, render_all(variants, os.path.dirname(os.path.abspath(opts.matrix)))


def render(opts: RenderOptions) -> List[Path]:
    """`rendered`, then each variant's folder written (only those that changed); the folders."""
    from imagebuild.render.folders import write

    variants, files = rendered(opts)
    written = write(str(opts.out), files)
    for w in written:
        print(f"{'rendered' if w.changed else 'unchanged'} {w.path}")
    return sorted(Path(opts.out) / v.name for v in variants)


def rendered_dirs(out: Path, names: Sequence[str]) -> List[Path]:
    """Variant folders already rendered in `out`: those named, or those of the last render (every one with a
    lock where no render left its index)."""
    if names:
        dirs = [out / n for n in names]
        for d in dirs:
            if not (d / "variant.lock.json").is_file():
                raise UserError(f"variant {d.name!r} is not rendered in {out}", key="--variant")
        return dirs
    from imagebuild.render.folders import rendered_names

    last = rendered_names(str(out))  # the last render's variants: an older matrix's folders are not built
    found = sorted(p.parent for p in out.glob("*/variant.lock.json") if last is None or p.parent.name in last)
    if not found:
        raise UserError(
            f"no rendered variants in {out}", file=str(out), hint="run `efa-image-build render` first"
        )
    return found


@dataclass(frozen=True)
class Selection:
    """The variant folders a build or bake works on."""

    render: Optional[RenderOptions]  # render first and take what it wrote; None: what is rendered in `out`
    out: Path = Path("build")
    variants: Sequence[str] = ()  # with render None: only these rendered ones
    shard: Optional[str] = None  # I/N

    def dirs(self) -> List[Path]:
        """What `render` just wrote (or what is rendered in `out`), then only this shard's."""
        from imagebuild.building.shard import parse_shard, select

        dirs = (
            render(self.render) if self.render is not None else rendered_dirs(Path(self.out), self.variants)
        )
        return select(dirs, [d.name for d in dirs], parse_shard(self.shard))
