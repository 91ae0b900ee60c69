"""`build.py build`: render the matrix (unless told not to), then build each variant not already built."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

from imagebuild.artifacts import DEFAULT_CACHE, ArtifactCache
from imagebuild.errors import UserError

EXIT_FAILED = 1


def register(sub) -> None:
    from imagebuild.builder import DEFAULT_CA
    from imagebuild.buildkit import BUILDERS
    from imagebuild.cli import add_matrix_args
    from imagebuild.commands.push import add_registry_args

    p = sub.add_parser(
        "build",
        help="build the variants' images (content-hash tags; unchanged variants are skipped)",
        description="Render (unless --no-render), fetch and verify artifacts, then build each variant "
        "whose content tag (component versions + context hash) is neither in the engine nor, with "
        "--registry/--ecr, in the target registry. BuildKit where the machine has it, else the classic "
        "builder. Writes <out>/summary.json; exit 1 if a variant failed.",
    )
    add_matrix_args(p)
    p.add_argument(
        "--builder",
        choices=BUILDERS,
        default="auto",
        help="auto (default): buildx, else the engine's BuildKit via a docker CLI < 23, else classic",
    )
    p.add_argument(
        "--cache-from",
        action="append",
        default=[],
        metavar="REF",
        help="BuildKit/classic cache source: an image ref (registry cache with buildx) or a buildx spec",
    )
    p.add_argument(
        "--cache-to",
        action="append",
        default=[],
        metavar="REF",
        help="buildx only: export the cache (an image ref means type=registry,mode=max); "
        "without it the cache is written inline into the image",
    )
    p.add_argument("--shard", metavar="I/N", help="build only shard I of N (stable by variant name)")
    add_registry_args(p)  # --registry/--ecr here: where to look for images other runners built
    p.add_argument(
        "--repository-prefix", default="", help="prefix of repository names in the registry (as push)"
    )
    p.add_argument("--out", default="build", help="rendered variants folder (default: build)")
    p.add_argument("--no-render", action="store_true", help="build what is already rendered in --out")
    p.add_argument("--jobs", "-j", type=int, default=1, help="variants built in parallel (default: 1)")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"artifact cache (default: {DEFAULT_CACHE})")
    p.add_argument("--offline", action="store_true", help="use the artifact cache only; name what is missing")
    p.add_argument("--mirror", metavar="BASE_URL", help="fetch url/git artifacts from BASE_URL/<host>/<path>")
    p.add_argument(
        "--build-ca",
        nargs="?",
        const=DEFAULT_CA,
        metavar="PATH",
        help=f"give builder stages this CA bundle (default {DEFAULT_CA}); never in the final image",
    )
    p.add_argument(
        "--build-arg", action="append", default=[], metavar="K=V", help="docker build-arg (repeatable)"
    )
    p.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    p.add_argument("--force", action="store_true", help="build even when an image of this content exists")
    p.add_argument("--no-cache", action="store_true", help="with --force: do not use docker's layer cache")
    p.set_defaults(func=run)


def variant_dirs(out: Path, names: List[str], only: Optional[List[str]] = None) -> List[Path]:
    """Rendered variant folders in `out` (those named, or all; with `only`, those the last render wrote:
    a render leaves an unchanged folder untouched, so its mtime says nothing)."""
    if names:
        dirs = [out / n for n in names]
        for d in dirs:
            if not (d / "variant.lock.json").is_file():
                raise UserError(f"variant {d.name!r} is not rendered in {out}", key="--variant")
        return dirs
    found = sorted(p.parent for p in out.glob("*/variant.lock.json") if only is None or p.parent.name in only)
    if not found:
        raise UserError(f"no rendered variants in {out}", file=str(out), hint="run `build.py render` first")
    return found


def rendered(args: argparse.Namespace, out: Path):
    """Render the matrix into `out` (unless --no-render) and the variant folders of this shard; or an rc."""
    from imagebuild.shard import parse_shard, select

    only = None
    if not args.no_render:
        from imagebuild.cli import main as cli_main
        from imagebuild.render import rendered_names

        render_argv = ["render", "--matrix", args.matrix, "--out", str(out)]
        for v in args.variant:
            render_argv += ["--variant", v]
        rc = cli_main(render_argv)
        if rc != 0:
            return rc
        only = rendered_names(str(out)) or []
    dirs = variant_dirs(out, args.variant, only)
    return select(dirs, [d.name for d in dirs], parse_shard(args.shard))


def remote_lookup(args: argparse.Namespace):
    """The registry look-up of content tags, when a target registry is given (--registry or --ecr)."""
    if not (args.registry or args.ecr):
        return None
    from imagebuild.commands.push import Destination, log, policy_from
    from imagebuild.registry import content_lookup

    dest = Destination(args, policy_from(args))
    api = getattr(dest, "api", None)
    return content_lookup(
        dest.host,
        lambda repo: dest.namespace + args.repository_prefix + repo,
        dest.existing,
        config_of=api.blob if api is not None else None,
        log=log,
    )


def run(args: argparse.Namespace) -> int:
    from imagebuild import builder
    from imagebuild.buildkit import cache_args, detect
    from imagebuild.shard import parse_shard

    if args.jobs < 1:
        raise UserError("--jobs must be at least 1", key="--jobs")
    build_args = builder.parse_build_args(args.build_arg)
    ca = builder.resolve_ca(args.build_ca)
    out = Path(args.out)
    parse_shard(args.shard)  # bad usage: exit 2 before anything runs
    chosen = detect(args.builder)
    cache_args(chosen, args.cache_from, args.cache_to)
    client = builder.docker_client()  # exit 2 with how to start it, before anything is written
    dirs = rendered(args, out)
    if isinstance(dirs, int):
        return dirs
    if not dirs:
        print(f"shard {args.shard}: no variant falls in this shard; nothing to build")
        builder.write_summary(out / "summary.json", [])
        return 0
    cache = ArtifactCache(Path(args.cache), mirror=args.mirror, offline=args.offline)
    opts = builder.BuildOptions(
        cache=cache,
        build_ca=ca,
        build_args=build_args,
        out=out,
        force=args.force,
        nocache=args.no_cache,
        builder=chosen,
        cache_from=list(args.cache_from),
        cache_to=list(args.cache_to),
        remote_lookup=remote_lookup(args),
    )
    print(f"builder: {chosen.reason}")
    reporter = builder.make_reporter([d.name for d in dirs], plain=True if args.plain else None)
    cache.say = lambda line: reporter.event("artifacts", "info", line)
    if isinstance(reporter, builder.RichReporter):
        with reporter:
            results = builder.build_all(client, dirs, opts, reporter, jobs=args.jobs)
    else:
        results = builder.build_all(client, dirs, opts, reporter, jobs=args.jobs)
    builder.write_summary(out / "summary.json", results)
    counts = builder.summary_counts(results)
    print(
        f"{len(results)} variant(s): "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        + f"; summary {out / 'summary.json'}"
    )
    for r in results:
        if r.status == "failed":
            first = (r.error or "").splitlines()[0] if r.error else "failed"
            print(f"FAILED {r.variant}: {first}" + ("" if r.log in first else f" (log {r.log})"))
    return EXIT_FAILED if counts.get("failed") else 0
