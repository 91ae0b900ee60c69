"""`build.py render`, `explain-env` and `schema`: matrix -> build/<variant>/, env and why, JSON Schema."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from imagebuild.catalog import platforms
from imagebuild.commands import add_matrix_args, add_verb
from imagebuild.errors import UserError
from imagebuild.matrix import envpolicy
from imagebuild.matrix.load import load
from imagebuild.matrix.schema import json_schema


def register(sub) -> None:
    p = add_verb(
        sub,
        "render",
        "Load and check the matrix, then write build/<variant>/{Dockerfile, variant.lock.json, "
        "context/} for each variant (jinja2 over Dockerfile.templates/). Nothing is built or fetched.",
    )
    add_matrix_args(p)
    p.add_argument("--out", default="build", help="output folder (default: build/)")
    p.add_argument(
        "--platform",
        choices=sorted(platforms.PLATFORMS),
        help="render every variant for this platform instead of its own `platform` (e.g. the local matrix "
        "for arm64: its wheels and /usr/lib/<multiarch> paths)",
    )
    p.set_defaults(func=run_render)

    e = add_verb(
        sub,
        "explain-env",
        "Each environment variable the variant's image sets, or refuses to set, with the "
        "reason and its source (the env policy by component version).",
    )
    add_matrix_args(e)
    e.add_argument("name", nargs="?", metavar="VARIANT", help="the variant (or use --variant)")
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.set_defaults(func=run_explain)

    s = add_verb(
        sub,
        "schema",
        "Print the JSON Schema the matrix file is checked against, for editor completion.",
    )
    s.set_defaults(func=run_schema)  # reads no matrix: a --matrix it ignored read as if it were checked


def run_render(args: argparse.Namespace) -> int:
    from imagebuild.pipeline import RenderOptions, render

    render(RenderOptions(args.matrix, tuple(args.variant), Path(args.out), args.platform))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    names = ([args.name] if args.name else []) + list(args.variant)
    if len(names) != 1:
        raise UserError(
            "explain-env needs exactly one variant",
            key="VARIANT",
            hint="efa-image-build explain-env NAME (see efa-image-build list)",
        )
    (v,) = load(args.matrix, names)
    facts = envpolicy.StackFacts(tuple((c.name, c.version) for c in v.components), v.instance_types)
    info = envpolicy.explain(facts, v.env, v.env_forbidden)
    if args.json:
        json.dump(
            {
                "variant": v.name,
                "set": [e.__dict__ for e in info["set"]],
                "unset": [d.__dict__ for d in info["unset"]],
                "forbidden": [f.__dict__ for f in info["forbidden"]],
                "lint": [{"severity": s, "name": n, "message": m} for s, n, m in v.lint],
            },
            sys.stdout,
            indent=2,
            sort_keys=True,
        )
        sys.stdout.write("\n")
        return 0
    stack = ", ".join(f"{c.name} {c.version}" for c in v.components)
    print(f"{v.name}: {stack}")
    print("\nSet in the image:")
    for e in info["set"]:
        print(f"  {e.name}={e.value}\n      why: {e.reason}\n      source: {e.source}")
    print("\nNot set (the policy considered them):")
    for d in info["unset"]:
        print(f"  {d.name}\n      why not: {d.reason}\n      source: {d.source}")
    if info["forbidden"]:
        print("\nMust stay unset (the image checks confirm):")
        for f in info["forbidden"]:
            print(f"  {f.name} ({f.severity}): {f.reason}\n      source: {f.source}")
    if v.lint:
        print("\nEnv linter on the matrix's env:")
        for sev, _n, msg in v.lint:
            print(f"  {sev}: {msg}")
    return 0


def run_schema(args: argparse.Namespace) -> int:
    json.dump(json_schema(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0
