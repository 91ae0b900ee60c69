"""The static check report (`build/test-report.json`): its schema id, writer (`build.py test`) and readers
(`build.py release`, which promotes only an image a passing report names). docs/architecture.md shows it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Protocol, Sequence

from imagebuild.errors import UserError
from imagebuild.jsonfile import read_json, write_json_atomic

CHECK_SCHEMA = "efa-image-build/check-report/v1"


class ImageEntry(Protocol):
    def to_json(self) -> dict: ...


def write_report(reports: Sequence[ImageEntry], dest: Path) -> dict:
    """Write one entry per checked image; returns what was written."""
    data = {"schema": CHECK_SCHEMA, "images": [r.to_json() for r in reports]}
    write_json_atomic(dest, data)
    return data


def load_check_report(path: Path) -> Dict[str, Any]:
    doc = read_json(path, "static check report")
    if doc.get("schema") != CHECK_SCHEMA or not isinstance(doc.get("images"), list):
        raise UserError(f"not a static check report (schema {CHECK_SCHEMA})", file=str(path), key="schema")
    return doc


def gather_check_reports(paths: List[Path]) -> Dict[str, Any]:
    """One check report from several (one per CI job of a fanned-out matrix); each image entry remembers
    the file it came from (`report_path`), so the record can name and hash the evidence."""
    images = []
    for path in paths:
        for item in load_check_report(path)["images"]:
            if isinstance(item, dict):
                images.append(dict(item, report_path=str(path)))
    return {"schema": CHECK_SCHEMA, "images": images}
