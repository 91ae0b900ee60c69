"""`build.py list`: the variants of a matrix, resolved and checked (like `docker buildx bake --print`).

A CI plan job fans out over what `list` prints, so `list` refuses exactly what `render` refuses (it renders
in memory through the same `pipeline.rendered` and writes nothing): a plan never passes a matrix every build
job then fails on."""

from __future__ import annotations

import argparse
import json
import sys

from imagebuild.commands import add_matrix_args, add_verb


def register(sub) -> None:
    p = add_verb(
        sub,
        "list",
        "Load and check the matrix and render it in memory (refusing what `render` refuses), "
        "then print its variants: a table, or each variant's lock "
        "as JSON (what a CI plan job fans out over). --shard I/N lists the variants `build --shard I/N` "
        "builds.",
    )
    add_matrix_args(p)
    p.add_argument("--shard", metavar="I/N", help="only shard I of N (stable by variant name)")
    p.add_argument("--json", action="store_true", help="print each variant's lock as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.building.shard import parse_shard, select
    from imagebuild.pipeline import RenderOptions, rendered

    shard = parse_shard(args.shard)
    variants, _files = rendered(RenderOptions(args.matrix, tuple(args.variant)))
    variants = select(variants, [v.name for v in variants], shard)
    if args.json:
        json.dump([v.to_lock() for v in variants], sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    width = max([len(v.name) for v in variants] + [7])
    print(f"{'VARIANT':<{width}}  {'BASE':<10} COMPONENTS")
    for v in variants:
        comps = " ".join(f"{c.name}={c.version}({c.method})" for c in v.components)
        print(f"{v.name:<{width}}  {v.base.kind:<10} {comps}")
    return 0
