"""Fan-in: the outputs of separate CI jobs (one variant each, on its own runner) made one, then gated whole.

Why: CUDA arm64 images are built on native arm64 runners, so an x86 variant and its arm64 twin are built and
pushed by two jobs that never see each other. Each job pushes with `push --fan-out` (its shared tags under
`TAG-ARCH`, so neither takes the shared tag); this step reads every job's folder (`summary.json`, the check
report `test-report.json`, pre-flight reports `preflight/*.json`), gates every variant with the evidence of
all jobs (a twin whose job failed or whose checks did not pass stops it: nothing is written), then writes
each shared tag: an image index of the twins (each entry read back from the registry by digest, its
platform from its own image config), or the one image where a tag has no twin. The merged summary and check
report it writes are what `build.py release` reads.

The registry I/O reuses imagebuild/release/index.py (read_entry, push_index) and the push destination.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from imagebuild.errors import ChecksFailed, UserError


def is_content_tag(entry: Dict[str, Any], tag: Optional[str]) -> bool:
    """Is `tag` the variant's content tag (`<versions>-<hash12>`: its own, never shared with a twin)?"""
    chash = str(entry.get("context_hash") or "")
    return bool(chash) and bool(tag) and str(tag).endswith("-" + chash[:12])


@dataclass(frozen=True)
class JobOutput:
    """What one CI job hands on: its build summary, its check report (if it ran `build.py test`), and its
    pre-flight reports."""

    folder: Path
    summary: Path
    checks: Optional[Path]
    preflights: Tuple[Path, ...]


def job_outputs(folders: Sequence[str]) -> List[JobOutput]:
    """Each `--from` folder as a JobOutput; a folder without summary.json is bad input (exit 2)."""
    if not folders:
        raise UserError("no job output folder given", key="--from", hint="--from DIR, once per CI job")
    out = []
    for name in folders:
        folder = Path(name)
        if not (folder / "summary.json").is_file():
            raise UserError(
                "not a job's output folder: no summary.json in it", file=str(folder), key="--from",
                hint="give each CI job's build folder (efa-image-build build --out, with test-report.json)",
            )  # fmt: skip
        checks = folder / "test-report.json"
        pre = tuple(sorted((folder / "preflight").glob("*.json"))) if (folder / "preflight").is_dir() else ()
        out.append(JobOutput(folder, folder / "summary.json", checks if checks.is_file() else None, pre))
    return out


def shared_targets(entries: Sequence[Dict[str, Any]], prefix: str = "") -> Dict[Tuple[str, str], List[str]]:
    """(repository, tag) -> the variants that name it: every summary tag but content tags and channels,
    the tags `push --fan-out` left to this step. Pure."""
    from imagebuild.adapters.registry import split_ref
    from imagebuild.release.channels import entry_channels

    targets: Dict[Tuple[str, str], List[str]] = {}
    for e in entries:
        for t in e.get("tags") or []:
            ref = split_ref(str(t), key="tags")
            tag = ref.tag or "latest"
            if is_content_tag(e, tag) or tag in entry_channels(e):
                continue
            names = targets.setdefault((prefix + ref.repository, tag), [])
            if e["variant"] not in names:
                names.append(e["variant"])
    return targets


def gate_all(
    entries: Sequence[Dict[str, Any]], checks: Dict[str, Any], preflights: List[Any], require_preflight: bool
) -> List[str]:
    """Gates 1-3 of release (built, pushed, checks passed, a passing pre-flight when required) for every
    variant of every job: the lines that refuse the fan-in, empty when all pass."""
    from imagebuild.release import record as rel

    out = []
    for e in entries:
        gate = rel.gate_variant(e, checks, preflights, require_preflight)
        out += [f"{gate.variant}: {why}" for why in gate.reasons]
    return out


def write_outputs(
    out: Path, entries: List[Dict[str, Any]], checks: Dict[str, Any], jobs: List[JobOutput]
) -> None:
    """The merged summary, check report and pre-flight reports in `out`, for `build.py release`."""
    from imagebuild.building.summary import SUMMARY_SCHEMA
    from imagebuild.jsonfile import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "summary.json", {"schema": SUMMARY_SCHEMA, "variants": entries})
    images = [{k: v for k, v in i.items() if k != "report_path"} for i in checks["images"]]
    write_json_atomic(out / "test-report.json", dict(checks, images=images))
    seen = set()
    for job in jobs:
        for path in job.preflights:
            if path.name in seen:
                raise UserError(f"two jobs hand on a pre-flight report named {path.name}", file=str(path))
            seen.add(path.name)
            (out / "preflight").mkdir(exist_ok=True)
            shutil.copyfile(path, out / "preflight" / path.name)


def check_fan_in_outputs_do_not_overlap(out: Path, jobs: List[JobOutput]) -> None:
    """`--out` must not be one of the jobs' folders: their evidence is read, never rewritten."""
    for job in jobs:
        if job.folder.resolve() == out.resolve():
            raise UserError("--out is one of the --from folders", file=str(out), key="--out")


def not_pushed_there(targets: Sequence[Tuple[Any, str, List[str]]], by_name: Dict[str, Any]) -> List[str]:
    """Each variant whose digest its job did not push to the repository a shared tag is written in (an
    index names its entries by digest in its own repository)."""
    from imagebuild.release.push import pushed_refs

    out = []
    for ref, _tag, names in targets:
        for n in names:
            entry = by_name[n]
            if not any(r.name == ref.name and r.digest == entry["digest"] for r in pushed_refs(entry)):
                out.append(f"{n} was not pushed to {ref.name} (its job's summary names no {ref.name}@...)")
    return list(dict.fromkeys(out))


def single_tag(api: Any, repository: str, tag: str, digest: str, image_id: str, log: Any) -> bool:
    """Put the one image `digest` under `tag` (no twin shares it); True when the tag held it already. A tag
    holding anything else is refused, as push refuses it."""
    from imagebuild.adapters.registry import Refused

    manifest = api.manifest(repository, digest)
    if manifest is None or manifest.config_digest != image_id:
        raise ChecksFailed(f"{api.registry}/{repository}@{digest} is not the built image {image_id}")
    current = api.manifest(repository, tag)
    if current is not None:
        if current.digest == digest:
            return True
        raise Refused(
            f"{api.registry}/{repository}:{tag} already exists as {current.digest}; not overwriting"
        )
    got = api.put_manifest(repository, tag, manifest)
    if got != digest:
        raise ChecksFailed(f"{api.registry}/{repository}:{tag} was stored as {got}, not {digest}")
    log(f"  {api.registry}/{repository}:{tag} -> {digest}")
    return False
