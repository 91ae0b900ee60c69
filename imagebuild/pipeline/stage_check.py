"""check: the static checks of each built image (or of images named), with their report."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from efa_validators.report.printable import printable
from imagebuild.errors import UserError


@dataclass(frozen=True)
class CheckRequest:
    out: Path = Path("build")
    variants: Sequence[str] = ()  # built variants of <out>/summary.json (default: all)
    images: Sequence[str] = ()  # or these images (the lock is read from their label)
    json_path: Optional[Path] = None  # default <out>/test-report.json
    junit_path: Optional[Path] = None  # default <out>/test-report.xml
    trust_image_checks: bool = False  # run the team checks an --image's own label names (else unknown)


Target = Tuple[Optional[str], str, Optional[dict], Optional[str], List[str]]


def check_targets(out: Path, names: Sequence[str]) -> List[Target]:
    """(variant, image id, lock, lock file, pushed refs) per built variant in the summary (named, or all)."""
    from imagebuild.building.documents import VariantLock
    from imagebuild.building.summary import load_summary
    from imagebuild.jsonfile import read_json

    path = out / "summary.json"
    summary = load_summary(path)  # bounded, typed: `[]` or a FIFO is exit 2 naming the file
    entries = {e.get("variant"): e for e in summary.get("variants") or []}
    for n in names:
        if n not in entries:
            raise UserError(f"variant {n!r} is not in the build summary", file=str(path), key="--variant")
    chosen = [entries[n] for n in names] if names else [entries[k] for k in sorted(entries)]
    targets: List[Target] = []
    for e in chosen:
        if e.get("status") not in ("built", "skipped") or not e.get("image_id"):
            targets.append((e["variant"], "", None, e.get("lock") or "", []))
            continue
        lock_file = e.get("lock") or str(out / e["variant"] / "variant.lock.json")
        lock = read_json(Path(lock_file), "the variant lock", model=VariantLock)
        targets.append((e["variant"], e["image_id"], lock, lock_file, e.get("pushed") or []))
    return targets


def check_lines(rep: Any, ref: str) -> List[str]:
    """What `test` prints for one image: its counts, then each failed or unknown check with its detail. A
    detail quotes the image (a path from its label's checks, a command's stderr, a file's contents): every
    value from outside goes through `printable`, so no ESC sequence or newline reaches the terminal."""
    statuses = [c["status"] for c in rep.checks]
    counts = {s: statuses.count(s) for s in ("pass", "fail", "unknown", "skip")}
    head = (
        f"{'PASS' if rep.passed else 'FAIL'} {printable(rep.variant or ref)} ({printable(rep.image_id[:19])})"
    )
    lines = [head + ": " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" in {rep.duration_s} s"]
    for c in rep.checks:
        if c["status"] in ("fail", "unknown"):
            lines.append(f"  {c['status']:7} {printable(c['name'])}: {printable(c['detail'])}")
    return lines


def check(req: CheckRequest) -> List[Any]:
    """Static checks of each image in a container of it; the reports (`checks.runner.ImageReport`), also
    written as JSON and JUnit. A variant whose build failed is a failed report, not skipped."""
    from imagebuild.adapters.docker_engine import connect, ensure_local, image_labels
    from imagebuild.check import software
    from imagebuild.check.runner import ImageReport, check_image, merge_junit, write_report
    from imagebuild.variant import lock_from_labels

    out = Path(req.out)
    json_path = Path(req.json_path) if req.json_path else out / "test-report.json"
    junit_path = Path(req.junit_path) if req.junit_path else out / "test-report.xml"
    if req.images:
        targets: List[Target] = [(None, ref, None, None, []) for ref in req.images]
    else:
        targets = check_targets(out, req.variants)  # every input read and checked before the engine is asked
    client = connect()
    reports: List[ImageReport] = []
    with tempfile.TemporaryDirectory(prefix="efa-junit-") as tmp:
        parts = []
        for i, (variant, ref, lock, lock_file, pushed) in enumerate(targets):
            if not ref:
                why = "the variant has no image (its build failed)"
                reports.append(
                    ImageReport(variant, "", "", [{"name": "image-built", "status": "fail", "detail": why}])
                )
                print(f"FAIL {printable(variant)}: no image (build failed)")
                continue
            if pushed:
                ensure_local(client, ref, pushed)
            part = Path(tmp) / f"{i}.xml"
            rep = check_image(client, ref, lock=lock, lock_file=lock_file, variant=variant, junit=part,
                              trust_image_checks=req.trust_image_checks)  # fmt: skip
            rep.software = software.describe(client, ref, lock or lock_from_labels(image_labels(ref)))
            parts.append(part)
            reports.append(rep)
            for line in check_lines(rep, ref):
                print(line)
        merge_junit(parts, junit_path)
    write_report(reports, json_path)
    print(f"report {json_path}; junit {junit_path}")
    return reports
