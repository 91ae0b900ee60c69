"""The build summary (`build/summary.json`): its schema id, writer (`build.py build`, merged per variant;
`push` adds digests) and reader. docs/architecture.md shows it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, Sequence

from imagebuild.building.documents import BuildSummary
from imagebuild.errors import UserError
from imagebuild.jsonfile import check_model, read_json, write_json_atomic

SUMMARY_SCHEMA = "efa-image-build/build-summary/v1"


def load_summary(path: Path) -> Dict[str, Any]:
    doc = read_json(path, "build summary", missing_hint="run `efa-image-build build` first")
    if doc.get("schema") != SUMMARY_SCHEMA or not isinstance(doc.get("variants"), list):
        raise UserError(f"not a build summary (schema {SUMMARY_SCHEMA})", file=str(path), key="schema")
    check_model(doc, BuildSummary, "build summary", str(path))  # each entry's fields, typed
    return doc


def write_summary(path: Path, results: Sequence[Any]) -> dict:
    """Merge these results (dataclasses, one per variant) into the summary file; other variants' entries
    are kept (a build of some variants must not forget the others)."""
    try:
        old = json.loads(path.read_text())
        entries = {e["variant"]: e for e in old.get("variants", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        entries = {}
    for r in results:
        entries[r.variant] = asdict(r)
    data = {"schema": SUMMARY_SCHEMA, "variants": [entries[k] for k in sorted(entries)]}
    write_json_atomic(path, data)
    return data
