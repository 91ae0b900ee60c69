"""release: the built variants promoted to their release tags and channels, with records."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from imagebuild.errors import UserError
from imagebuild.release.destinations import Registries, RegistryTarget, log


@dataclass(frozen=True)
class ReleaseRequest:
    target: RegistryTarget
    tags: Sequence[str]  # release tags; {variant} and {date} expand; never overwritten
    channels: Sequence[str] = ()  # channels moved to the promoted digest, beside the matrix's own
    summaries: Sequence[str] = ("build/summary.json",)
    variants: Sequence[str] = ()
    checks: Sequence[str] = ("build/test-report.json",)
    require_preflight: Sequence[str] = ()  # pre-flight reports that must pass for the same digest
    records: Optional[str] = None  # None/"registry": beside the images; a folder; or s3://BUCKET/PREFIX
    s3: Optional[str] = None  # s3://BUCKET/PREFIX: records there (beside the folder --records names)
    previous: Optional[str] = None  # previous release record (default: the latest)
    dry_run: bool = False
    require_signed: Optional[str] = None  # a public key: every digest's SBOM and provenance must verify
    notes: Optional[str] = None  # a folder for each variant's release notes too (<variant>.md)
    adopt_channels: Sequence[str] = ()  # CHANNEL@DIGEST: a channel no record knows, adopted at that digest


def release(req: ReleaseRequest) -> None:
    """Promote the checked digests to the release tags and write the records: all or nothing
    (ChecksFailed, nothing promoted, when any variant or tag is refused)."""
    from imagebuild.building.summary import load_summary
    from imagebuild.release import channels, promote
    from imagebuild.release import record as rel

    policy = req.target.policy()
    adopted = channels.parse_adopted(req.adopt_channels)
    signed_by = None
    if req.require_signed:
        from imagebuild.release.attest import load_public_key

        signed_by = load_public_key(req.require_signed, "--require-signed")
    summaries = [(p, load_summary(Path(p))) for p in req.summaries]
    all_entries = rel.gather_summaries([(str(p), doc) for p, doc in summaries])
    where = ", ".join(str(p) for p, _ in summaries)
    known = {e.get("variant") for e in all_entries}
    for name in req.variants:
        if name not in known:
            raise UserError(f"variant {name!r} not in the build summaries", file=where, key="--variant")
    entries = [e for e in all_entries if not req.variants or e.get("variant") in req.variants]
    if not entries:
        raise UserError("no variant to release", file=where)
    checks = rel.gather_check_reports([Path(p) for p in req.checks])
    preflights = [(p, rel.read_json(Path(p), "pre-flight report")) for p in req.require_preflight]
    when = rel.now_utc()
    if not req.tags and not req.channels and not any(channels.entry_channels(e) for e in entries):
        raise UserError(
            "nothing to promote to: no release tag and no channel",
            key="--tag",
            hint="give --tag (never moves) or --channel (moves on each promotion), or declare channels: "
            "in the matrix",
        )
    registries = Registries(req.target, policy)
    if signed_by is not None:
        from imagebuild.release.attestations import require_signed

        require_signed(registries.api, entries, signed_by, req.require_signed)
    store = _record_store(req, registries, entries)
    previous_of = _previous_records(req, store)

    with ExitStack() as held:
        if not req.dry_run:
            from imagebuild.building import lifeline

            # a cancelled CI job (SIGTERM) or a dead parent unwinds like Ctrl-C: the locks are given back
            held.enter_context(lifeline.held())
            names = sorted({n for e in entries for n in rel.unique_repositories(e)})
            for path in rel.lock_paths(names):
                held.enter_context(rel.hold_lock(path))
            if store.s3 is not None:  # runners that share the record store share this lock
                from imagebuild.release import s3records

                bucket = str(store.bucket)
                for key in store.lock_keys(names):
                    held.enter_context(s3records.hold_lock(store.s3, bucket, key, rel.LOCK_WAIT_S, log))
        plans = promote.plan(
            entries, checks, preflights, req.tags, when, registries, req.channels, previous_of, all_entries,
            store.pending,
            store.all_records(),
            adopted,
        )  # fmt: skip
        store.check_reachable()
        if req.dry_run:
            from imagebuild.release.transaction import plan_lines

            for line in plan_lines(plans, store.where()):
                print(line)
        promote.refuse_conflicts(plans)  # the dry run refuses where the real run would (exit 1)
        if req.dry_run:
            return
        notes = Path(req.notes) if req.notes else None
        promote.carry_out(plans, registries, store, when, previous_of, notes)


def _record_store(req: ReleaseRequest, registries: Registries, entries: List[Dict[str, Any]]) -> Any:
    """Where the records are read and written: the registry beside the images (the default: every runner
    that can push sees them), `--s3 s3://BUCKET/PREFIX` or `--records s3://...` (S3 alone), or `--records DIR`
    (a folder on this machine only; `--s3` beside it writes both)."""
    from imagebuild.release import record as rel
    from imagebuild.release.registryrecords import REGISTRY, RegistryRecordStore

    records = str(req.records) if req.records is not None else None
    if (records is None and not req.s3) or records == REGISTRY:
        if req.s3:
            raise UserError(
                "give one record store: --records registry or --s3", key="--s3",
                hint="records go to the registry by default; --s3 alone keeps them in S3 instead",
            )  # fmt: skip
        return RegistryRecordStore(registries, [n for e in entries for n in rel.unique_repositories(e)])
    s3 = req.s3
    if records is None:  # --s3 alone: the team keeps its records in S3
        records, s3 = str(req.s3), None
    if records.startswith("s3://"):
        if s3:
            raise UserError("give the S3 record store once: --records s3://... or --s3", key="--s3")
        rel.parse_s3_uri(records, key="--records" if req.records is not None else "--s3")
        return rel.RecordStore(
            None, _s3_client(records, "--records" if req.records else "--s3", req), records
        )
    return rel.RecordStore(Path(records), _s3_client(s3, "--s3", req), s3)


def _previous_records(req: ReleaseRequest, store: Any) -> Any:
    """variant -> its previous release record (`--previous`, else the store's latest), read once each:
    the channels are checked against it before anything moves and carried forward from it after."""
    from imagebuild.release import record as rel

    seen: Dict[str, Any] = {}

    def previous_of(variant: str) -> Any:
        if variant not in seen:
            given = rel.read_json(Path(req.previous), "previous release record") if req.previous else None
            seen[variant] = given if given is not None else store.latest(variant)
        return seen[variant]

    return previous_of


def _s3_client(uri: Optional[str], key: str, req: ReleaseRequest) -> Any:
    if not uri:
        return None
    from imagebuild.adapters.aws import aws_client
    from imagebuild.release import record as rel

    rel.parse_s3_uri(uri, key=key)
    return aws_client("s3", req.target.region, req.target.endpoint_url)
