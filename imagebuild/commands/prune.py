"""`efa-image-build prune`: remove the tool's own content-tagged images that nothing names, older than an age.

Only content tags (`repo:<versions>-<hash12>` on an image carrying the tool's hash label) in the repositories
the build summary and the release records name are considered, in the local engine and in the registries the
summary's pushed refs name, and each `--repository` given. One is kept when the latest build, a release
record, a channel or any other tag names its image. `--dry-run` lists them and removes nothing. `--registry
HOST` limits the registries asked to that one; ECR is not pruned here (its lifecycle policies do that).
Release tags are never removed; the `sha256-<hex>.sbom`/`.att` tags of a removed manifest are removed with it.
The release records are read from the registry beside the images (what `release` writes by default), or
from `--records DIR`, which must be a readable folder (a missing one is exit 2, before anything is removed:
it would hide what the releases name); the records' own tags (`_efa.*`) are never removed.
Exit 0 done, 1 a local tag could not be removed (a container uses it), 2 bad input or an
unreachable or refusing registry (`--engine-only`, or `--registry HOST` for one registry, leaves the others
alone). A repository the matrix no longer names (a variant renamed, a registry moved) is not looked at by
itself: the engine may hold other projects' images of this tool. prune names each repository of the tool's
local images (its hash label, the digests it was pushed as) that the summary and records do not name, on
stderr; `--repository REPO --dry-run` lists what would go there, and `--repository REPO` removes it by the
same rules.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.commands import add_registry_args, add_verb, registry_target
from imagebuild.errors import UserError


def register(sub) -> None:
    p = add_verb(sub, "prune", __doc__)
    p.add_argument(
        "--summary", default="build/summary.json", help="the latest build (default build/summary.json)"
    )
    p.add_argument(
        "--records",
        metavar="DIR",
        help="the folder `release --records DIR` wrote (default: the records release keeps in the registry, "
        "beside the images the summary names)",
    )
    p.add_argument(
        "--older-than",
        default="7d",
        metavar="AGE",
        help="only images created longer ago than this (7d, 12h, 30m, 2w, 0s; default 7d)",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    p.add_argument(
        "--engine-only", action="store_true", help="the local engine only; do not ask the registries"
    )
    p.add_argument(
        "--repository",
        action="append",
        default=[],
        metavar="[HOST/]REPO",
        help="also prune this repository, which the build summary and the release records no longer name "
        "(prune names each one that holds the tool's images; repeatable; --dry-run first)",
    )
    add_registry_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild.adapters.docker_engine import connect
    from imagebuild.release.destinations import log
    from imagebuild.release.prune import PruneRequest, parse_age, run_prune
    from imagebuild.release.record import now_utc

    age = parse_age(args.older_than)
    if args.ecr:
        raise UserError(
            "prune does not remove images from ECR",
            key="--ecr",
            hint="an ECR lifecycle policy expires old images there; --engine-only prunes this engine",
        )
    target = registry_target(args)
    policy = target.policy()
    only = args.registry.strip("/").split("/", 1)[0] if args.registry else None

    def registry_api(host: str):
        return None if only and host != only else target.api(host, policy)

    request = PruneRequest(
        summary=Path(args.summary),
        records=Path(args.records) if args.records else None,
        older_than=age,
        dry_run=args.dry_run,
        registry_api=None if args.engine_only else registry_api,
        repositories=tuple(args.repository),
    )
    found = run_prune(request, connect, log, now_utc())
    log(f"{'would remove' if args.dry_run else 'removed'} {len(found)} content tag(s)")
    return 0
