"""A release as one transaction: the whole plan of writes, checked as a whole, journalled before it is done.

Why: a release of several variants (twins, or variants that share a repository) writes many tags. Checked
one variant at a time, two variants could each plan `:dev` on their own digest (the second write then
overwrites the first, or stops the run half-done), and a run cut between a tag write and the record left a
tag that no record names, which the rerun then refused. So:
- every write of every selected variant (release tags, channels, records) is planned first, and the plan is
  refused as a whole when two writes name one `repository:tag` with two digests, or one name in two roles;
- before the first registry write, each variant's intent (what it will write) goes to the record store as
  `<variant>/pending.json`: from then on every tag this run writes is named by a record or an intent;
- a rerun of the same command reads the intent: a channel the interrupted run moved to this digest counts as
  done (the intent knows where it came from), and the rerun completes and writes the record, which clears
  the intent. While one of its writes is in the registry, an intent for another digest, or naming tags this
  run would not write, refuses the release until that interrupted release is completed (rerun its
  command); one none of whose writes landed binds nothing.

Pure functions; the store's reads and writes are in imagebuild/release/record.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

INTENT_SCHEMA = "efa-image-build/release-intent/v1"

Write = Dict[str, Any]  # repository, tag, digest, role ("tag" | "channel"), variant, from (channels)


def planned_writes(plans: Sequence[Tuple[Any, ...]]) -> List[Write]:
    """Every registry write of the plan (release tags and channels), in order, with the variant it is for."""
    writes: List[Write] = []
    for _entry, gate, repos, _lock, _src in plans:
        for r in repos:
            for tag in r["tags"]:
                writes.append({"variant": gate.variant, "repository": r["repository"], "tag": tag,
                               "digest": r["digest"], "role": "tag", "from": None,
                               "todo": tag not in r["already"]})  # fmt: skip
            for m in r["channels"]:
                writes.append({"variant": gate.variant, "repository": r["repository"], "tag": m["tag"],
                               "digest": r["digest"], "role": "channel", "from": m["from"],
                               "todo": m["from"] != r["digest"]})  # fmt: skip
    return writes


def conflicts(writes: Sequence[Write]) -> List[str]:
    """Why the plan as a whole cannot be carried out: one `repository:tag` written with two digests (two
    variants of one repository both promoting `:dev`, or one release tag), or as a release tag and a channel.
    Twins writing the same index digest under one tag are one write, not a conflict."""
    seen: Dict[Tuple[str, str], List[Write]] = {}
    for w in writes:
        seen.setdefault((w["repository"], w["tag"]), []).append(w)
    out = []
    for (repo, tag), ws in seen.items():
        digests = list(dict.fromkeys(w["digest"] for w in ws))
        roles = list(dict.fromkeys(w["role"] for w in ws))
        if len(digests) > 1:
            who = ", ".join(f"{w['digest']} ({w['variant']})" for w in ws)
            out.append(f"{repo}:{tag} would be written with {len(digests)} different digests: {who}")
        if len(roles) > 1:
            who = ", ".join(f"{w['role']} of {w['variant']}" for w in ws)
            out.append(f"{repo}:{tag} would be both a release tag and a channel: {who}")
    return out


def plan_lines(plans: Sequence[Tuple[Any, ...]], store_where: str) -> List[str]:
    """The plan as the dry run prints it: each tag write, each channel move, each record, in the order the
    real run does them."""
    lines = []
    for _entry, gate, repos, _lock, _src in plans:
        for r in repos:
            todo = ", ".join(r["todo"]) or "(all present)"
            if r["tags"]:
                lines.append(f"would tag {r['repository']}@{r['digest']} as {todo}")
            for m in r["channels"]:
                where = f"{r['repository']}:{m['tag']}"
                lines.append(f"would move channel {where} from {m['from'] or '(nothing)'} to {r['digest']}")
        lines.append(f"would record {gate.variant} {gate.digest} in {store_where}")
    return lines


def intent(variant: str, digest: str, writes: Sequence[Write], when: datetime) -> Dict[str, Any]:
    """What one variant's release will write, kept until its record is written (the record store's
    `<variant>/pending.json`)."""
    mine = [
        {k: w[k] for k in ("repository", "tag", "digest", "role", "from")}
        for w in writes
        if w["variant"] == variant
    ]
    return {"schema": INTENT_SCHEMA, "variant": variant, "digest": digest,
            "started_at": when.isoformat(timespec="seconds"), "writes": mine}  # fmt: skip


def landed(pending: Optional[Dict[str, Any]], now_of: Callable[[str, str], Optional[str]]) -> bool:
    """Did any write of an interrupted run's intent land (its tag names its digest in the registry now, read
    by `now_of(repository, tag)`)? An intent none of whose writes landed left nothing unrecorded: it no
    longer binds (the run was cut before its first write, or another variant's write stopped it)."""
    for w in (pending or {}).get("writes") or []:
        if not isinstance(w, dict) or w.get("from") == w.get("digest"):
            continue  # a channel already there before that run: not its write
        if now_of(str(w.get("repository")), str(w.get("tag"))) == w.get("digest"):
            return True
    return False


def intent_refusal(pending: Optional[Dict[str, Any]], digest: str, writes: Sequence[Write]) -> Optional[str]:
    """Why an interrupted release's intent stops this one, or None. The same command again completes it;
    anything else would leave the interrupted run's tags with no record."""
    if not pending:
        return None
    if pending.get("schema") != INTENT_SCHEMA or not isinstance(pending.get("writes"), list):
        return "the pending release intent is not one this tool wrote (pending.json): read it, then remove it"
    started = pending.get("started_at")
    if pending.get("digest") != digest:
        return (
            f"an interrupted release of {pending.get('digest')} (started {started}) is pending: rerun that "
            "release to complete it first (its tags have no record yet)"
        )
    ours = {(w["repository"], w["tag"], w["role"]) for w in writes}
    left = [
        f"{w.get('repository')}:{w.get('tag')}"
        for w in pending["writes"]
        if isinstance(w, dict) and (w.get("repository"), w.get("tag"), w.get("role")) not in ours
    ]
    if left:
        return (
            f"an interrupted release (started {started}) also wrote or meant to write {', '.join(left)}: "
            "rerun the same command (the same --tag and --channel) to complete it"
        )
    return None


def pending_move(
    pending: Optional[Dict[str, Any]], variant_digest: str, repository: str, tag: str, now: Optional[str],
    digest: str,
) -> Optional[Dict[str, Any]]:  # fmt: skip
    """The interrupted run's move of channel `repository:tag` to `digest` (the variant's, or its index's),
    when the registry shows it done (`now` == `digest`): the rerun takes its `from` and records the move;
    None otherwise."""
    if not pending or pending.get("digest") != variant_digest or now != digest:
        return None
    for w in pending.get("writes") or []:
        if (
            isinstance(w, dict)
            and w.get("role") == "channel"
            and w.get("repository") == repository
            and w.get("tag") == tag
            and w.get("digest") == digest
        ):
            return w
    return None
