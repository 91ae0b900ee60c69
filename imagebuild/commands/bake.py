"""`build.py bake`: write a docker-bake JSON file of the rendered variants, for `docker buildx bake`.

Each target is a variant's staged context (artifacts fetched and verified, as `build` does) with its
Dockerfile, the same content-hash tags and labels `build` gives, platforms, build args and cache settings.
Hand the file to `docker buildx bake -f FILE` on a remote builder; run it from this directory (contexts are
relative to it). The file is checked against bake's schema, and with `docker buildx bake --print` where
buildx is installed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from imagebuild.artifacts import DEFAULT_CACHE, ArtifactCache
from imagebuild.errors import UserError


def register(sub) -> None:
    from imagebuild.builder import DEFAULT_CA
    from imagebuild.cli import add_matrix_args

    p = sub.add_parser(
        "bake",
        help="write a docker-bake JSON file of the rendered variants (for buildx bake on remote builders)",
        description=__doc__.splitlines()[0] + " Contexts are staged and hashed as `build` does, so the "
        "tags and labels are the ones `build` would give.",
    )
    add_matrix_args(p)
    p.add_argument("--out", default="build", help="rendered variants folder (default: build)")
    p.add_argument("--no-render", action="store_true", help="use what is already rendered in --out")
    p.add_argument("--file", metavar="PATH", help="bake file to write (default: <out>/docker-bake.json)")
    p.add_argument("--shard", metavar="I/N", help="only shard I of N (stable by variant name)")
    p.add_argument(
        "--platform",
        action="append",
        default=[],
        help="target platform (repeatable; default: the variant's `platform`, linux/amd64 unless set)",
    )
    p.add_argument("--cache-from", action="append", default=[], metavar="REF", help="cache source")
    p.add_argument(
        "--cache-to", action="append", default=[], metavar="REF", help="cache export (default: inline)"
    )
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"artifact cache (default: {DEFAULT_CACHE})")
    p.add_argument("--offline", action="store_true", help="use the artifact cache only; name what is missing")
    p.add_argument("--mirror", metavar="BASE_URL", help="fetch url/git artifacts from BASE_URL/<host>/<path>")
    p.add_argument("--build-ca", nargs="?", const=DEFAULT_CA, metavar="PATH", help="CA for builder stages")
    p.add_argument("--build-arg", action="append", default=[], metavar="K=V", help="build arg (repeatable)")
    p.set_defaults(func=run)


def _buildx_print(path: Path) -> None:
    """Where buildx exists, let bake itself read the file (`--print` builds nothing)."""
    from imagebuild.buildkit import detect

    choice = detect("auto")
    if choice.kind != "buildx":
        print(f"bake: checked against bake's schema (no buildx here: {choice.reason})")
        return
    proc = subprocess.run(
        [choice.cli, "buildx", "bake", "-f", str(path), "--print"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise UserError(f"docker buildx bake --print refused the file: {proc.stderr.strip()}", file=str(path))
    print(f"bake: docker buildx bake --print accepted {path}")


def run(args: argparse.Namespace) -> int:
    from imagebuild import bake, builder, platforms
    from imagebuild.commands.build import rendered
    from imagebuild.registry import write_json_atomic
    from imagebuild.shard import parse_shard

    parse_shard(args.shard)
    build_args = builder.parse_build_args(args.build_arg)
    out = Path(args.out)
    dirs = rendered(args, out)
    if isinstance(dirs, int):
        return dirs
    if not dirs:
        raise UserError(f"no variant falls in shard {args.shard}", key="--shard")
    cache = ArtifactCache(Path(args.cache), mirror=args.mirror, offline=args.offline)
    builder.check_offline(cache, dirs)
    opts = builder.BuildOptions(cache=cache, build_ca=builder.resolve_ca(args.build_ca), out=out)
    targets = {}
    for vdir in dirs:
        lock, chash, tags = builder.stage_variant(vdir, opts, lambda _line: None)
        targets[bake.target_name(vdir.name)] = bake.bake_target(
            os.path.relpath(vdir / "context"),
            tags,
            builder.build_labels(vdir, lock, chash),
            build_args,
            args.platform or [lock.get("platform") or platforms.DEFAULT],
            args.cache_from,
            args.cache_to,
            description=vdir.name,
        )
    doc = bake.bake_file(targets)
    problems = bake.validate(doc)
    if problems:  # a bug here, not the user's input: say what bake would refuse
        raise UserError("the bake file breaks bake's schema: " + "; ".join(problems), key="bake")
    path = Path(args.file) if args.file else out / "docker-bake.json"
    write_json_atomic(path, doc)
    print(f"bake: {len(targets)} target(s) -> {path}")
    _buildx_print(path)
    print(f"build them: docker buildx bake -f {path} --load  (or --push; from this directory)")
    return 0
