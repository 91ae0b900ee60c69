"""Build one variant of a matrix with `build.py build` and run `build.py test` on the image: what the tests
that extend a local stand-in base (test_dlc_extend.py, test_al2023_standin.py) share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

from cli import build_py
from paths import ROOT


def build_variant(matrix: Path, variant: str, out: Path) -> str:
    """The image tag of `variant`, built into `out` (artifact cache: the checkout's); fails the test naming
    the log when the build fails."""
    argv = ["build", "--matrix", str(matrix), "--variant", variant, "--out", str(out)]
    rc = build_py(*argv, "--cache", ROOT / ".cache" / "artifacts", "--plain").rc
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = [e for e in summary["variants"] if e["variant"] == variant]
    assert rc == 0, f"building {variant} failed: {entry.get('error')} (log {entry['log']})"
    return entry["tags"][0]


def static_checks(image: str, report_path: Path) -> Tuple[int, Dict[str, Any], Dict[str, Tuple[str, str]]]:
    """(rc of `build.py test`, the image's report, {check: (status, detail)})."""
    # an image the tests built: its own label's custom checks are trusted (build.py test --trust-image-checks)
    rc = build_py("test", "--image", image, "--trust-image-checks", "--json", report_path).rc
    (report,) = json.loads(report_path.read_text())["images"]
    return rc, report, {c["name"]: (c["status"], c["detail"]) for c in report["checks"]}


def passing_checks(image: str, report_path: Path, names: Sequence[str]) -> Dict[str, Tuple[str, str]]:
    """The static checks of `image`, after asserting that all passed and that each of `names` ran and passed:
    {check: (status, detail)}, for the caller's assertions on the details."""
    rc, report, st = static_checks(image, report_path)
    assert rc == 0 and report["passed"], {k: v for k, v in st.items() if v[0] not in ("pass", "skip")}
    for name in names:
        assert st[name][0] == "pass", (name, st[name])
    return st
