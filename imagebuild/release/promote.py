"""The release's promotion loop: check every tag, promote, verify, record (all or nothing).

Every selected variant must clear the gate (imagebuild/release/record.py)
and every release tag must be free (or
already name that digest) before any tag is written. A registry has no compare-and-set, so each tag is
checked just before it is written and read back after; the callers hold the per-repository release locks.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from imagebuild.adapters.docker_engine import image_labels
from imagebuild.adapters.registry import ImageRef, check_tag, split_ref
from imagebuild.errors import ChecksFailed, UserError
from imagebuild.release import channels, transaction
from imagebuild.release import record as rel
from imagebuild.release.destinations import Registries, log
from imagebuild.release.index import (
    ReleasedIndex,
    assembly_refusals,
    index_refusals,
    read_entry,
    released_index,
)
from imagebuild.release.names import role_refusals

Plan = Tuple[Dict[str, Any], rel.Gate, List[Dict[str, Any]], Any, str]


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("efa-image-build")
    except Exception:  # noqa: BLE001 - not installed as a package: the source tree's version
        return "0.1.0"


def lock_of(entry: Dict[str, Any], labels: Optional[Dict[str, str]], reasons: List[str]) -> Tuple[Any, str]:
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


def plan(
    entries: List[Dict[str, Any]],
    checks: Dict[str, Any],
    preflights: List[Tuple[str, Dict[str, Any]]],
    tag_templates: Sequence[str],
    when: datetime,
    registries: Registries,
    channel_names: Sequence[str] = (),
    previous_of: Callable[[str], Optional[Dict[str, Any]]] = lambda _v: None,
    all_entries: Sequence[Dict[str, Any]] = (),
    pending_of: Callable[[str], Optional[Dict[str, Any]]] = lambda _v: None,
    records: Sequence[Dict[str, Any]] = (),
    adopted: Optional[Dict[str, str]] = None,
) -> List[Plan]:
    """Gate each variant and look at every release tag and channel (`channel_names` and the variant's
    own); ChecksFailed (nothing promoted) if any is refused. A variant pushed into an image index is
    gated with every entry of that index (its twins found by digest in `all_entries`), and in the index's
    repository its tags and channels go to the index digest (a twin released after it finds them there).
    `records`: every release record of the store; a name keeps the role (release tag or channel) they
    give it."""
    plans: List[Plan] = []
    refused = 0
    for entry in entries:
        gate = rel.gate_variant(entry, checks, preflights, bool(preflights))
        gate.reasons += index_refusals(
            entry,
            list(all_entries) or entries,
            lambda ref: registries.manifest(ref.registry, ref.repository, ref.digest or ""),
            lambda twin: rel.gate_variant(twin, checks, preflights, bool(preflights)).reasons,
        )
        gate.reasons += _assembly_refusals(entry, list(all_entries) or entries, registries)
        tags = [check_tag(rel.expand_tag(t, gate.variant, when), key="--tag") for t in tag_templates]
        given = [rel.expand_tag(c, gate.variant, when) for c in channel_names]  # `dev-{variant}`
        chans = variant_channels(entry, given, tags)
        roles = [
            why
            for name in rel.unique_repositories(entry)
            for why in role_refusals(name, tags, chans, records)
        ]
        repos: List[Dict[str, Any]] = []
        lock, lock_source, manifest, index = None, "none", None, None
        if gate.ok:
            index = _released_index(entry, registries, gate.reasons)
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
                target = gate.digest
                if index is not None and index.repository == name:
                    target, manifest = index.manifest.digest, index.manifest
                todo, already = [], []
                for tag in tags:
                    current = registries.manifest(ref.registry, ref.repository, tag)
                    if current is None:
                        todo.append(tag)
                    elif current.digest == target:
                        already.append(tag)
                    else:
                        gate.reasons.append(
                            f"release tag {name}:{tag} already names {current.digest}; release tags are "
                            "never overwritten (choose a new tag)"
                        )
                moves = []
                for tag in chans:
                    current = registries.manifest(ref.registry, ref.repository, tag)
                    now = current.digest if current is not None else None
                    why = channels.move_refusal(
                        name, tag, now, target, previous_of(gate.variant), (adopted or {}).get(tag)
                    )
                    if why and index is not None and target == index.manifest.digest:
                        twins = _twin_variants(index, list(all_entries) or entries, gate.variant)
                        why = _twin_channel(name, tag, now, target, why, [previous_of(v) for v in twins])
                    done = transaction.pending_move(
                        pending_of(gate.variant), gate.digest or "", name, tag, now, target
                    )
                    if why and done is None:
                        gate.reasons.append(why)
                    was = done["from"] if done is not None else now  # an interrupted run moved it
                    moves.append({"repository": name, "tag": tag, "from": was, "to": target,
                                  "moved": False})  # fmt: skip
                if lock is None:
                    labels = registries.config_labels(ref.registry, ref.repository, gate.image_id)
                    if labels is None:
                        labels = image_labels(gate.image_id)
                    lock, lock_source = lock_of(entry, labels, gate.reasons)
                    why = (
                        rel.preflight_lock_refusal(gate.preflight["report"], lock) if gate.preflight else None
                    )
                    if why:
                        gate.reasons.append(f"pre-flight {gate.preflight['path']}: {why}")
                repos.append({"repository": name, "ref": f"{name}@{target}", "digest": target,
                              "tags": tags, "todo": todo, "already": already, "manifest": manifest,
                              "index": index.record() if target != gate.digest and index else None,
                              "channels": moves})  # fmt: skip
        pending = pending_of(gate.variant)
        if gate.ok and pending and transaction.landed(pending, lambda repo, tag: _now(registries, repo, tag)):
            mine = transaction.planned_writes([(entry, gate, repos, lock, lock_source)])
            why = transaction.intent_refusal(pending, gate.digest or "", mine)
            if why:
                gate.reasons.append(why)
        gate.reasons += roles  # after the registry's look, so that both say what they found
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
    return plans


def _now(registries: Registries, repository: str, tag: str) -> Optional[str]:
    """The digest `repository:tag` names now, or None."""
    ref = split_ref(repository, key="pending.json")
    found = registries.manifest(ref.registry, ref.repository, tag)
    return found.digest if found is not None else None


def refuse_conflicts(plans: List[Plan]) -> None:
    """The plan as a whole: ChecksFailed (nothing written) when two of its writes disagree on one tag."""
    why = transaction.conflicts(transaction.planned_writes(plans))
    if why:
        log("release: REFUSED (the plan writes one tag twice)")
        for line in why:
            log(f"  - {line}")
        raise ChecksFailed(
            "release refused: its plan writes one tag two ways; nothing was promoted"
            "\n  hint: variants whose tags share a repository need channels and release tags of their own "
            "there: `channels: [dev-{name}]` in the matrix, `--channel dev-{variant}` and `--tag "
            "{variant}-...` on release (docs/in-your-repository.md, 'Repository layouts')"
        )


def _assembly_refusals(
    entry: Dict[str, Any], entries: Sequence[Dict[str, Any]], registries: Registries
) -> List[str]:
    """index.assembly_refusals with the registry's readers: each entry's manifest and config by digest, and
    the platform of the lock its image carries."""

    def lock_platform(ref: ImageRef, image_id: str) -> Optional[str]:
        lock = rel.lock_from_labels(registries.config_labels(ref.registry, ref.repository, image_id) or {})
        found = (lock or {}).get("platform")
        return found if isinstance(found, str) else None

    return assembly_refusals(
        entry,
        entries,
        lambda ref: registries.manifest(ref.registry, ref.repository, ref.digest or ""),
        lambda ref, digest, img: read_entry(registries.api(ref.registry), ref.repository, digest, img),
        lock_platform,
    )


def _released_index(
    entry: Dict[str, Any], registries: Registries, reasons: List[str]
) -> Optional[ReleasedIndex]:
    try:
        return released_index(
            entry, lambda ref: registries.manifest(ref.registry, ref.repository, ref.digest or "")
        )
    except (UserError, ChecksFailed) as err:
        reasons.append(getattr(err, "message", None) or str(err))
        return None


def _twin_variants(index: ReleasedIndex, entries: Sequence[Dict[str, Any]], variant: str) -> List[str]:
    """The other variants whose digests are entries of `index` (the gate found each one)."""
    digests = {d for d, _ in index.entries}
    return [str(e["variant"]) for e in entries if e.get("digest") in digests and e.get("variant") != variant]


def _twin_channel(
    name: str, tag: str, now: Optional[str], target: str, why: str, twin_records: List[Any]
) -> Optional[str]:
    """A channel on an index is shared by its twins (the records are per variant): it may move when a
    twin's last record allows it (that twin's release put it there), never when a record calls it a
    release tag."""
    if any(tag in channels.released_tags(r, name) for r in twin_records):
        return why
    if any(channels.move_refusal(name, tag, now, target, r) is None for r in twin_records):
        return None
    return why


def variant_channels(entry: Dict[str, Any], given: Sequence[str], tags: Sequence[str]) -> List[str]:
    """The channels a release of this variant moves: the matrix's (through the summary) and `given`. A
    name that is also a release tag of this run is bad input: a tag either moves or never does."""
    names = list(dict.fromkeys([*channels.entry_channels(entry), *given]))
    for name in names:
        check_tag(name, key="--channel")
        if name in tags:
            raise UserError(
                f"{name!r} is both a release tag and a channel of {entry.get('variant')}",
                key="--tag",
                hint="release tags never move, channels move on each promotion: give it one role",
            )
    return names


def carry_out(
    plans: List[Plan],
    registries: Registries,
    store: rel.RecordStore,
    when: datetime,
    previous_of: Callable[[str], Optional[Dict[str, Any]]],
    notes_dir: Optional[Path] = None,
) -> None:
    """Promote each planned variant, then write its release record and notes to the store (the registry,
    S3 or a folder), and the notes to `notes_dir/<variant>.md` too when given (for a CI job's summary).

    Every variant's intent is journalled first (imagebuild/release/transaction.py): from the first tag
    write on, each tag this run writes is named by a record or an intent, and a rerun completes it."""
    writes = transaction.planned_writes(plans)
    for _entry, gate, _repos, _lock, _src in plans:
        store.write_pending(gate.variant, transaction.intent(gate.variant, gate.digest or "", writes, when))
    for entry, gate, repos, lock, lock_source in plans:
        promote(registries, gate, repos)
        previous = previous_of(gate.variant)
        repositories = [
            {"repository": r["repository"], "ref": r["ref"], "tags": r["tags"], "moved": r["moved"],
             "already": r["already"]}
            for r in repos
        ]  # fmt: skip
        record = rel.make_record(
            gate, lock, lock_source, repositories, previous, when,
            tool_version(), base_digest=entry.get("base_digest"),
        )  # fmt: skip
        record["record_id"] = rel.new_record_id()
        index = next((r["index"] for r in repos if r.get("index")), None)
        if index is not None:
            record["index"] = index
        record["channels"] = channels.carry_forward(
            previous, [m for r in repos for m in r["channels"]], record["released_at"]
        )
        notes = rel.release_notes(record, previous)
        for where in store.write(record, notes):
            log(f"  wrote {where}")
        if notes_dir is not None:
            write_notes(notes_dir / f"{gate.variant}.md", notes)
        store.clear_pending(gate.variant)
        print(f"{gate.variant}\t{gate.digest}\t{','.join(repositories[0]['tags']) if repositories else ''}")


def write_notes(path: Path, notes: str) -> None:
    """The release notes as a file of their own; one that cannot be written is exit 2 naming it (the tags
    and the record are in place: a rerun finds them)."""
    from imagebuild.safefile import atomic_file

    try:
        with atomic_file(path, published=True) as tmp:
            tmp.write_text(notes)
    except OSError as err:
        raise UserError(
            f"cannot write the release notes: {err.strerror}", file=str(path), key="--notes"
        ) from None
    log(f"  wrote {path}")


def promote(registries: Registries, gate: rel.Gate, repos: List[Dict[str, Any]]) -> None:
    """Write each missing tag and read it back; then read every tag again before the record is written.

    If another digest won a tag (a release elsewhere, not holding our lock), this release is refused
    (exit 1). A failure part-way says which tags this run moved and then what every release tag names in
    the registry now (a write whose answer was lost may have landed); a rerun finds those on this digest
    and completes.
    """
    for r in repos:
        r["moved"] = []
    try:
        for r in repos:
            ref = split_ref(r["repository"], key="pushed")
            for tag in r["todo"]:
                current = registries.manifest(ref.registry, ref.repository, tag)
                if current is not None and current.digest == r["digest"]:
                    r["already"].append(tag)  # a twin of this run wrote the index there: not written twice
                    continue
                if current is not None:
                    raise ChecksFailed(f"{r['repository']}:{tag} was taken by {current.digest} meanwhile")
                got = registries.put(ref.registry, ref.repository, tag, r["manifest"])
                if got != r["digest"]:
                    raise ChecksFailed(f"{r['repository']}:{tag} was stored as {got}, not {r['digest']}")
                r["moved"].append(tag)
                log(f"  tagged {r['repository']}:{tag} -> {r['digest']}")
                _verify(registries, ref, tag, r["digest"])
            for move in r["channels"]:
                _move_channel(registries, ref, move, r["manifest"], r["digest"])
        for r in repos:
            ref = split_ref(r["repository"], key="pushed")
            for tag in [*r["tags"], *(m["tag"] for m in r["channels"])]:
                _verify(registries, ref, tag, r["digest"])
    except (UserError, ChecksFailed):
        moved = [f"{r['repository']}:{t}" for r in repos for t in r["moved"]]
        moved += [
            f"{r['repository']}:{m['tag']} (channel)" for r in repos for m in r["channels"] if m["moved"]
        ]
        left = [
            f"{r['repository']}:{t}"
            for r in repos
            for t in r["todo"]
            if t not in r["moved"] and t not in r["already"]
        ]
        left += [
            f"{r['repository']}:{m['tag']} (channel)"
            for r in repos
            for m in r["channels"]
            if not m["moved"] and m["from"] != r["digest"]
        ]
        log(f"release {gate.variant}: stopped part-way; no record written (its intent is kept: pending.json)")
        log(f"  tags moved to {_digests(repos, gate.digest)} by this run: {', '.join(moved) or 'none'}")
        log(f"  tags not promoted: {', '.join(left) or 'none'}")
        for line in tags_now(registries, repos, _digests(repos, gate.digest)):
            log(line)
        log("  rerun the same command to complete (tags already on this digest are kept)")
        raise


def _move_channel(
    registries: Registries, ref: ImageRef, move: Dict[str, Any], manifest: Any, digest: str
) -> None:
    """Move one channel tag to `digest`, if it still names what the plan saw (`from`) or already `digest`."""
    current = registries.manifest(ref.registry, ref.repository, move["tag"])
    now = current.digest if current is not None else None
    if now == digest:
        return
    if now != move["from"]:
        raise ChecksFailed(f"channel {ref.name}:{move['tag']} was moved to {now} meanwhile")
    got = registries.put(ref.registry, ref.repository, move["tag"], manifest)
    if got != digest:
        raise ChecksFailed(f"{ref.name}:{move['tag']} was stored as {got}, not {digest}")
    move["moved"] = True
    log(f"  moved channel {ref.name}:{move['tag']} {move['from'] or '(new)'} -> {digest}")
    _verify(registries, ref, move["tag"], digest)


def _verify(registries: Registries, ref: ImageRef, tag: str, digest: str) -> None:
    now = registries.manifest(ref.registry, ref.repository, tag)
    if now is None or now.digest != digest:
        other = now.digest if now is not None else "nothing"
        raise ChecksFailed(
            f"{ref.name}:{tag} names {other} after it was written as {digest}: another release won the tag"
        )


def _digests(repos: List[Dict[str, Any]], default: str) -> str:
    """The digest(s) this release writes (the index's in its repository, else the variant's)."""
    return ", ".join(dict.fromkeys(r["digest"] for r in repos)) or default


def tags_now(registries: Registries, repos: List[Dict[str, Any]], digests: str) -> List[str]:
    """What each release tag names in the registry now, read after a failure: the exact state a rerun or a
    person starts from (a tag is listed as unread, never guessed, when the registry cannot say)."""
    on, absent, other, unread = [], [], [], []
    why = ""
    for r in repos:
        ref = split_ref(r["repository"], key="pushed")
        for tag in r["tags"]:
            name = f"{r['repository']}:{tag}"
            try:
                now = registries.manifest(ref.registry, ref.repository, tag)
            except (UserError, ChecksFailed) as err:
                unread.append(name)
                why = getattr(err, "message", None) or str(err)
                continue
            if now is None:
                absent.append(name)
            elif now.digest == r["digest"]:
                on.append(name)
            else:
                other.append(f"{name} ({now.digest})")
    lines = [
        f"  in the registry now: tags on {digests}: {', '.join(on) or 'none'}",
        f"  in the registry now: tags absent: {', '.join(absent) or 'none'}",
    ]
    if other:
        lines.append(f"  in the registry now: tags on another digest: {', '.join(other)}")
    if unread:
        lines.append(f"  could not read what these tags name now: {', '.join(unread)} ({why})")
    return lines
