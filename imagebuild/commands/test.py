"""`build.py test`: static checks of built images (testinfra in a container), JSON + JUnit reports."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from imagebuild.errors import UserError


def register(sub) -> None:
    from imagebuild.cli import add_variant_arg

    p = sub.add_parser(
        "test",
        help="check built images against their variant lock (testinfra); exit 1 if a check fails",
        description="Check the images of the built variants (from <out>/summary.json), or any image "
        "this tool built (--image REF: the lock is read from its label). "
        "Writes <out>/test-report.json and JUnit XML.",
    )
    # no --matrix: what was built (and with which lock) is in the summary, not in a matrix file
    add_variant_arg(p, help="only this built variant (repeatable; default: all in the summary)")
    p.add_argument(
        "--image", action="append", default=[], metavar="REF", help="check this image (repeatable)"
    )
    p.add_argument("--out", default="build", help="rendered/built variants folder (default: build)")
    p.add_argument("--json", metavar="FILE", help="JSON report (default: <out>/test-report.json)")
    p.add_argument("--junit", metavar="FILE", help="JUnit XML (default: <out>/test-report.xml)")
    p.set_defaults(func=run)


def targets_from_summary(
    out: Path, names: List[str]
) -> List[Tuple[str, str, Optional[dict], str, List[str]]]:
    """(variant, image id, lock, lock file, pushed refs) per built variant in the summary (named, or all)."""
    path = out / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except OSError:
        raise UserError("no build summary", file=str(path), hint="run `build.py build` first") from None
    except ValueError as err:
        raise UserError(f"not JSON: {err}", file=str(path)) from None
    entries = {e.get("variant"): e for e in summary.get("variants") or []}
    for n in names:
        if n not in entries:
            raise UserError(f"variant {n!r} is not in the build summary", file=str(path), key="--variant")
    chosen = [entries[n] for n in names] if names else [entries[k] for k in sorted(entries)]
    out_list = []
    for e in chosen:
        if e.get("status") not in ("built", "skipped") or not e.get("image_id"):
            out_list.append((e["variant"], "", None, e.get("lock") or "", []))
            continue
        lock_file = e.get("lock") or str(out / e["variant"] / "variant.lock.json")
        try:
            lock = json.loads(Path(lock_file).read_text())
        except (OSError, ValueError) as err:
            raise UserError(f"cannot read the variant lock: {err}", file=lock_file) from None
        out_list.append((e["variant"], e["image_id"], lock, lock_file, e.get("pushed") or []))
    return out_list


def ensure_local(client, image_id: str, pushed: List[str]) -> None:
    """A variant another runner built (here: skipped, found in the registry) is pulled by digest."""
    import docker

    try:
        client.images.get(image_id)
        return
    except docker.errors.ImageNotFound:
        pass
    for ref in pushed:
        print(f"pull {ref} (built by another runner)")
        try:
            image = client.images.pull(ref)
        except docker.errors.APIError as err:
            raise UserError(f"cannot pull {ref}: {err.explanation or err}", key="pushed") from None
        if image.id == image_id:
            return
        raise UserError(f"{ref} is image {image.id}, the summary says {image_id}", key="pushed")


def run(args: argparse.Namespace) -> int:
    from imagebuild.builder import docker_client
    from imagebuild.checks.runner import ImageReport, check_image, merge_junit, write_report

    out = Path(args.out)
    json_path = Path(args.json) if args.json else out / "test-report.json"
    junit_path = Path(args.junit) if args.junit else out / "test-report.xml"
    client = docker_client()
    if args.image:
        targets = [(None, ref, None, None, []) for ref in args.image]
    else:
        targets = targets_from_summary(out, args.variant)
    reports: List[ImageReport] = []
    with tempfile.TemporaryDirectory(prefix="efa-junit-") as tmp:
        parts = []
        for i, (variant, ref, lock, lock_file, pushed) in enumerate(targets):
            if not ref:
                rep = ImageReport(
                    variant,
                    "",
                    "",
                    [
                        {
                            "name": "image-built",
                            "status": "fail",
                            "detail": "the variant has no image (its build failed)",
                        }
                    ],
                )
                reports.append(rep)
                print(f"FAIL {variant}: no image (build failed)")
                continue
            if pushed:
                ensure_local(client, ref, pushed)
            part = Path(tmp) / f"{i}.xml"
            rep = check_image(client, ref, lock=lock, lock_file=lock_file, variant=variant, junit=part)
            parts.append(part)
            reports.append(rep)
            counts = {
                s: sum(1 for c in rep.checks if c["status"] == s) for s in ("pass", "fail", "unknown", "skip")
            }
            verdict = "PASS" if rep.passed else "FAIL"
            print(
                f"{verdict} {rep.variant or ref} ({rep.image_id[:19]}): "
                + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                + f" in {rep.duration_s} s"
            )
            for c in rep.checks:
                if c["status"] in ("fail", "unknown"):
                    print(f"  {c['status']:7} {c['name']}: {c['detail']}")
        merge_junit(parts, junit_path)
    write_report(reports, json_path)
    print(f"report {json_path}; junit {junit_path}")
    return 0 if reports and all(r.passed for r in reports) else 1
