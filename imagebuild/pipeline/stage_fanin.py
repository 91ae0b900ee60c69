"""fan-in: the outputs of separate CI jobs gated as one, before any shared tag is written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from imagebuild.errors import ChecksFailed
from imagebuild.pipeline.shared import print_fields
from imagebuild.release.destinations import Destination, RegistryTarget, log


@dataclass(frozen=True)
class FanInRequest:
    target: RegistryTarget
    jobs: Sequence[str]  # each CI job's output folder (summary.json, test-report.json, preflight/*.json)
    out: str = "build/fan-in"  # the merged summary and reports, for `build.py release`
    repository_prefix: str = ""
    require_preflight: bool = False  # every variant needs a passing pre-flight among the jobs' reports


def fan_in(req: FanInRequest) -> Path:
    """Gate every variant of every job, then write the shared tags (an index for twins pushed by different
    jobs); the merged summary's path. ChecksFailed (nothing written) when a variant does not pass."""
    from imagebuild.adapters.registry import Refused
    from imagebuild.building.summary import load_summary
    from imagebuild.release import fanin
    from imagebuild.release import record as rel
    from imagebuild.release.index import push_index, read_entry

    jobs = fanin.job_outputs(req.jobs)
    out = Path(req.out)
    fanin.check_fan_in_outputs_do_not_overlap(out, jobs)
    entries = rel.gather_summaries([(str(j.summary), load_summary(j.summary)) for j in jobs])
    checks = rel.gather_check_reports([j.checks for j in jobs if j.checks is not None])
    preflights = [(str(p), rel.read_json(p, "pre-flight report")) for j in jobs for p in j.preflights]
    refusals = fanin.gate_all(entries, checks, preflights, req.require_preflight)
    if refusals:
        log("fan-in: REFUSED (every variant of every job must pass before a shared tag is written)")
        for line in refusals:
            log(f"  - {line}")
        raise ChecksFailed(f"fan-in refused: {len(refusals)} problem(s); no shared tag written")
    policy = req.target.policy()
    dest = Destination(req.target, policy)
    by_name = {e["variant"]: e for e in entries}
    targets = [
        (dest.ref(dest.prepare(repo_t), tag_t), tag_t, names)
        for (repo_t, tag_t), names in fanin.shared_targets(entries, req.repository_prefix).items()
    ]
    missing = fanin.not_pushed_there(targets, by_name)
    if missing:
        raise ChecksFailed("fan-in refused: " + "; ".join(missing))
    api = dest.oci_api()
    for ref, tag_t, names in targets:
        if len(names) > 1:
            members = [read_entry(api, ref.repository, by_name[n]["digest"], by_name[n]["image_id"])
                       for n in names]  # fmt: skip
            try:
                digest, _same = push_index(api, ref, members, log=log)
            except Refused as err:
                raise Refused(f"{err} (did each job push with --fan-out?)") from None
            for n in names:
                by_name[n]["index"] = f"{ref}@{digest}"
            print_fields("index", ref, digest, ",".join(names))
        else:
            entry = by_name[names[0]]
            fanin.single_tag(api, ref.repository, tag_t, entry["digest"], entry["image_id"], log)
            pushed = f"{ref}@{entry['digest']}"
            entry["pushed"] = [p for p in entry.get("pushed") or [] if p != pushed] + [pushed]
            print_fields("tag", ref, entry["digest"], names[0])
    fanin.write_outputs(out, entries, checks, jobs)
    log(f"fan-in: {len(entries)} variant(s) of {len(jobs)} job(s); release --summary {out / 'summary.json'}")
    return out / "summary.json"
