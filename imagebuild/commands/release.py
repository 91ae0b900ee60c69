"""`efa-image-build release`: promote pushed digests to release tags, only if their checks passed for that
image.

All or nothing: every selected variant must clear the gate
(imagebuild/release/record.py) and every release tag
must be free (or already name that digest) before any tag is written (imagebuild/release/promote.py). Release
tags are never overwritten: there is no --force here. Exit 0 released, 1 refused (gate or tag), 2 bad
input or unreachable service.

Records live in the registry beside the images by default (imagebuild/release/registryrecords.py), so a
release on a fresh CI runner sees every earlier one; `--s3` keeps them in S3 instead; `--records DIR` is a
folder on this machine only (a later release elsewhere sees none of them).
"""

from __future__ import annotations

import argparse

from imagebuild.commands import add_registry_args, add_variant_arg, add_verb, registry_target


def register(sub) -> None:
    p = add_verb(sub, "release", __doc__)
    p.add_argument(
        "--summary",
        action="append",
        default=[],
        help="build summary (repeatable: one per CI job of a fanned-out matrix; default build/summary.json)",
    )
    add_variant_arg(p, help="only this variant (repeatable)")
    add_registry_args(p)
    p.add_argument(
        "--checks",
        action="append",
        default=[],
        help="static check report of efa-image-build test (repeatable; default build/test-report.json)",
    )
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        help="release tag (repeatable; {variant} and {date} expand); never overwritten",
    )
    p.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar="NAME",
        help="channel to move to the promoted digest (repeatable; beside the matrix's channels:); {variant} "
        "is the variant's name: dev-{variant} gives variants that share a repository a channel each",
    )
    p.add_argument(
        "--adopt-channel",
        action="append",
        default=[],
        metavar="CHANNEL@DIGEST",
        help="a channel that exists in the registry but that no release record knows (records kept "
        "elsewhere): moved from DIGEST only if it names DIGEST now, and recorded from then on (repeatable)",
    )
    p.add_argument(
        "--require-preflight",
        action="append",
        default=[],
        metavar="REPORT.json",
        help="also require a pre-flight report with verdict pass for the same digest (repeatable)",
    )
    p.add_argument(
        "--require-signed",
        metavar="PUB.pem",
        help="also require every digest's SBOM and signed provenance to verify with this public key",
    )
    p.add_argument(
        "--records",
        metavar="registry|DIR|s3://BUCKET/PREFIX",
        help="where release records are read and written: `registry` (the default) keeps each as an OCI "
        "artifact beside the images, under a tag starting `_efa.record.`, read by every runner with the same "
        "login; s3://... keeps them in S3 (written conditionally; runners share the release lock there too); "
        "a DIR is this machine's only: a later release on another runner does not see it",
    )
    p.add_argument(
        "--s3",
        metavar="s3://BUCKET/PREFIX",
        help="keep the records in S3 instead of the registry (beside --records DIR: in both)",
    )
    p.add_argument(
        "--notes",
        metavar="DIR",
        help="also write each variant's release notes to DIR/<variant>.md (a CI job summary); records are "
        "never read from there",
    )
    p.add_argument("--previous", metavar="RECORD.json", help="previous release record (default: the latest)")
    p.add_argument("--dry-run", action="store_true", help="check everything, promote and write nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from imagebuild import pipeline

    request = pipeline.ReleaseRequest(
        target=registry_target(args),
        tags=tuple(args.tag),
        channels=tuple(args.channel),
        summaries=tuple(args.summary or ["build/summary.json"]),
        variants=tuple(args.variant),
        checks=tuple(args.checks or ["build/test-report.json"]),
        require_preflight=tuple(args.require_preflight),
        records=args.records,
        s3=args.s3,
        previous=args.previous,
        notes=args.notes,
        dry_run=args.dry_run,
        require_signed=args.require_signed,
        adopt_channels=tuple(args.adopt_channel),
    )
    pipeline.release(request)  # refused: ChecksFailed, exit 1
    return 0
