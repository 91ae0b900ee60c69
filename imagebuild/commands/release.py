"""`build.py release`: promote pushed digests to release tags, only if their checks passed for that image.

All or nothing: every selected variant must clear the gate (imagebuild/release.py) and every release tag
must be free (or already name that digest) before any tag is written. Release tags are never overwritten:
there is no --force here. Exit 0 released, 1 refused (gate or tag), 2 bad input or unreachable service.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from imagebuild import release as rel
from imagebuild.commands.push import add_registry_args, log, policy_from, read_password
from imagebuild.errors import ChecksFailed, UserError


def register(sub) -> None:
    p = sub.add_parser(
        "release",
        help="promote checked digests to release tags; write the release record and notes",
        description=__doc__,
    )
    p.add_argument(
        "--summary",
        action="append",
        default=[],
        help="build summary (repeatable: one per CI job of a fanned-out matrix; default build/summary.json)",
    )
    p.add_argument(
        "--variant", action="append", default=[], metavar="NAME", help="only this variant (repeatable)"
    )
    add_registry_args(p)
    p.add_argument(
        "--checks",
        action="append",
        default=[],
        help="static check report of build.py test (repeatable; default build/test-report.json)",
    )
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        required=True,
        help="release tag (repeatable; {variant} and {date} expand); never overwritten",
    )
    p.add_argument(
        "--require-preflight",
        action="append",
        default=[],
        metavar="REPORT.json",
        help="also require a pre-flight report with verdict pass for the same digest (repeatable)",
    )
    p.add_argument("--records", default="build/releases", help="local folder for release records")
    p.add_argument("--s3", metavar="s3://BUCKET/PREFIX", help="also write records and notes to S3")
    p.add_argument("--previous", metavar="RECORD.json", help="previous release record (default: the latest)")
    p.add_argument("--dry-run", action="store_true", help="check everything, promote and write nothing")
    p.set_defaults(func=run)


def _tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("efa-image-build")
    except Exception:  # noqa: BLE001 - not installed as a package: the source tree's version
        return "0.1.0"


class Registries:
    """One manifest reader/writer per registry host: ECR's API for the ECR host, the v2 API for others."""

    def __init__(self, args: argparse.Namespace, policy) -> None:
        self.args, self.policy = args, policy
        self.password = read_password(args)
        self._apis: Dict[str, Any] = {}
        self.ecr_host: Optional[str] = None
        self.ecr_client = None
        if args.ecr:
            from imagebuild import ecr

            self.ecr_client = ecr.make_client("ecr", args.region, args.endpoint_url)
            self.ecr_host = ecr.registry_host(self.ecr_client, policy)

    def manifest(self, host: str, repository: str, reference: str):
        from imagebuild import ecr
        from imagebuild.registry import ImageRef

        if host == self.ecr_host:
            is_digest = reference.startswith("sha256:")
            ref = ImageRef(
                host, repository, None if is_digest else reference, reference if is_digest else None
            )
            return ecr.existing_image(self.ecr_client, self.policy)(ref)
        return self._api(host).manifest(repository, reference)

    def put(self, host: str, repository: str, tag: str, manifest) -> str:
        from imagebuild import ecr
        from imagebuild.registry import ImageRef

        if host == self.ecr_host:
            return ecr.put_tag(self.ecr_client, ImageRef(host, repository, tag), manifest, self.policy)
        return self._api(host).put_manifest(repository, tag, manifest)

    def config_labels(self, host: str, repository: str, config_digest: str) -> Optional[Dict[str, str]]:
        """The labels of the image config stored in the registry (OCI registries; None for ECR)."""
        if host == self.ecr_host:
            return None
        body = self._api(host).blob(repository, config_digest)
        if body is None:
            return None
        return (json.loads(body).get("config") or {}).get("Labels") or {}

    def _api(self, host: str):
        from imagebuild.registry import RegistryAPI, resolve_credentials

        if host not in self._apis:
            a = self.args
            creds = resolve_credentials(host, a.username, self.password, docker_config=a.docker_config)
            self._apis[host] = RegistryAPI(
                host, creds, plain_http=True if a.plain_http else None, policy=self.policy, log=log
            )
        return self._apis[host]


def _lock_of(entry: Dict[str, Any], labels: Optional[Dict[str, str]], reasons: List[str]) -> Tuple[Any, str]:
    """The lock as it rides in the image at this digest; the summary's lock file must agree with it."""
    from_label = rel.lock_from_labels(labels) if labels is not None else None
    from_file = None
    if entry.get("lock") and Path(entry["lock"]).exists():
        try:
            from_file = json.loads(Path(entry["lock"]).read_text())
        except ValueError:
            reasons.append(f"lock file {entry['lock']} is not JSON")
    if from_label is not None and from_file is not None and from_label != from_file:
        reasons.append(f"lock file {entry['lock']} differs from the lock label of the pushed image")
    if from_label is not None:
        return from_label, "image label (from the registry, at this digest)"
    if from_file is not None:
        return from_file, f"file {entry['lock']}"
    reasons.append("no variant lock found (neither the image's label nor the summary's lock file)")
    return None, "none"


def run(args: argparse.Namespace) -> int:
    from imagebuild.registry import load_summary

    policy = policy_from(args)
    summaries = [(p, load_summary(Path(p))) for p in args.summary or ["build/summary.json"]]
    all_entries = rel.gather_summaries([(str(p), doc) for p, doc in summaries])
    where = ", ".join(str(p) for p, _ in summaries)
    known = {e.get("variant") for e in all_entries}
    for name in args.variant:
        if name not in known:
            raise UserError(f"variant {name!r} not in the build summaries", file=where, key="--variant")
    entries = [e for e in all_entries if not args.variant or e.get("variant") in args.variant]
    if not entries:
        raise UserError("no variant to release", file=where)
    checks = rel.gather_check_reports([Path(p) for p in args.checks or ["build/test-report.json"]])
    preflights = [(p, rel.read_json(Path(p), "pre-flight report")) for p in args.require_preflight]
    when = rel.now_utc()
    registries = Registries(args, policy)
    store = rel.RecordStore(Path(args.records), _s3(args), args.s3)

    with ExitStack() as held:
        if not args.dry_run:
            names = {n for e in entries for n in rel.unique_repositories(e)}
            for path in rel.lock_paths(sorted(names)):
                held.enter_context(rel.hold_lock(path))
        return _release(args, entries, checks, preflights, when, registries, store)


def _release(
    args: argparse.Namespace,
    entries: List[Dict[str, Any]],
    checks: Dict[str, Any],
    preflights: List[Tuple[str, Dict[str, Any]]],
    when: datetime,
    registries: Registries,
    store: rel.RecordStore,
) -> int:
    """Check every tag, promote, verify, record: under the per-repository release locks (see run)."""
    from imagebuild.registry import check_tag, split_ref

    plans = []
    refused = 0
    for entry in entries:
        gate = rel.gate_variant(entry, checks, preflights, bool(args.require_preflight))
        tags = [check_tag(rel.expand_tag(t, gate.variant, when), key="--tag") for t in args.tag]
        repos: List[Dict[str, Any]] = []
        lock, lock_source, manifest = None, "none", None
        if gate.ok:
            for name in rel.unique_repositories(entry):
                ref = split_ref(name, key="pushed")
                manifest = registries.manifest(ref.registry, ref.repository, gate.digest)
                if manifest is None:
                    gate.reasons.append(f"{name}: the registry has no manifest {gate.digest}")
                    continue
                if manifest.config_digest != gate.image_id:
                    gate.reasons.append(
                        f"{name}@{gate.digest} is image {manifest.config_digest}, not {gate.image_id}"
                    )
                    continue
                todo, already = [], []
                for tag in tags:
                    current = registries.manifest(ref.registry, ref.repository, tag)
                    if current is None:
                        todo.append(tag)
                    elif current.digest == gate.digest:
                        already.append(tag)
                    else:
                        gate.reasons.append(
                            f"release tag {name}:{tag} already names {current.digest}; release tags are "
                            "never overwritten (choose a new tag)"
                        )
                if lock is None:
                    labels = registries.config_labels(ref.registry, ref.repository, gate.image_id)
                    if labels is None:
                        labels = _local_labels(gate.image_id)
                    lock, lock_source = _lock_of(entry, labels, gate.reasons)
                repos.append({"repository": name, "ref": f"{name}@{gate.digest}", "tags": tags,
                              "todo": todo, "already": already, "manifest": manifest})  # fmt: skip
        if gate.ok:
            log(f"release {gate.variant}: {gate.digest} clears the gate")
        else:
            refused += 1
            log(f"release {gate.variant}: REFUSED")
            for why in gate.reasons:
                log(f"  - {why}")
        plans.append((entry, gate, repos, lock, lock_source))
    if refused:
        raise ChecksFailed(
            f"release refused for {refused} of {len(entries)} variant(s); nothing was promoted"
        )

    store.check_reachable()
    if args.dry_run:
        for _entry, gate, repos, _lock, _src in plans:
            for r in repos:
                print(
                    f"would tag {r['repository']}@{gate.digest} as {', '.join(r['todo']) or '(all present)'}"
                )
        return 0
    for entry, gate, repos, lock, lock_source in plans:
        _promote(registries, gate, repos)
        previous = rel.read_json(Path(args.previous), "previous release record") if args.previous else None
        if previous is None:
            previous = store.latest(gate.variant)
        repositories = [
            {"repository": r["repository"], "ref": r["ref"], "tags": r["tags"], "moved": r["moved"],
             "already": r["already"]}
            for r in repos
        ]  # fmt: skip
        record = rel.make_record(
            gate, lock, lock_source, repositories, previous, when,
            _tool_version(), base_digest=entry.get("base_digest"),
        )  # fmt: skip
        notes = rel.release_notes(record, previous)
        for where in store.write(record, notes):
            log(f"  wrote {where}")
        print(f"{gate.variant}\t{gate.digest}\t{','.join(repositories[0]['tags']) if repositories else ''}")
    return 0


def _promote(registries: Registries, gate: rel.Gate, repos: List[Dict[str, Any]]) -> None:
    """Write each missing tag and read it back; then read every tag again before the record is written.

    A registry has no compare-and-set, so a tag is checked just before it is written and verified after:
    if another digest won (a release elsewhere, not holding our lock), this release is refused (exit 1).
    A failure part-way says exactly which tags moved; a rerun finds those on this digest and completes.
    """
    from imagebuild.registry import split_ref

    for r in repos:
        r["moved"] = []
    try:
        for r in repos:
            ref = split_ref(r["repository"], key="pushed")
            for tag in r["todo"]:
                current = registries.manifest(ref.registry, ref.repository, tag)
                if current is not None and current.digest != gate.digest:
                    raise ChecksFailed(f"{r['repository']}:{tag} was taken by {current.digest} meanwhile")
                got = registries.put(ref.registry, ref.repository, tag, r["manifest"])
                if got != gate.digest:
                    raise ChecksFailed(f"{r['repository']}:{tag} was stored as {got}, not {gate.digest}")
                r["moved"].append(tag)
                log(f"  tagged {r['repository']}:{tag} -> {gate.digest}")
                _verify(registries, ref, tag, gate.digest)
        for r in repos:
            ref = split_ref(r["repository"], key="pushed")
            for tag in r["tags"]:
                _verify(registries, ref, tag, gate.digest)
    except (UserError, ChecksFailed):
        moved = [f"{r['repository']}:{t}" for r in repos for t in r["moved"]]
        left = [f"{r['repository']}:{t}" for r in repos for t in r["todo"] if t not in r["moved"]]
        log(f"release {gate.variant}: stopped part-way; no record written")
        log(f"  tags moved to {gate.digest} by this run: {', '.join(moved) or 'none'}")
        log(f"  tags not promoted: {', '.join(left) or 'none'}")
        log("  rerun the same command to complete (tags already on this digest are kept)")
        raise


def _verify(registries: Registries, ref, tag: str, digest: str) -> None:
    now = registries.manifest(ref.registry, ref.repository, tag)
    if now is None or now.digest != digest:
        other = now.digest if now is not None else "nothing"
        raise ChecksFailed(
            f"{ref.name}:{tag} names {other} after it was written as {digest}: another release won the tag"
        )


def _local_labels(image_id: str) -> Optional[Dict[str, str]]:
    """Labels from the local engine, when it has the image (ECR gives no config blob to read)."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        return client.images.get(image_id).labels or {}
    except Exception:  # noqa: BLE001 - no engine or no such image: the lock file is the fallback
        return None


def _s3(args: argparse.Namespace):
    if not args.s3:
        return None
    from imagebuild.ecr import make_client

    rel.parse_s3_uri(args.s3)
    return make_client("s3", args.region, args.endpoint_url)
