"""Where things are, for every test: tests/ is split by package (tests/imagebuild/, tests/validators/), so a
test's own __file__ no longer says where the project is; fixtures/ and golden/ stay shared in tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
GOLDEN = TESTS / "golden"
# what a child process needs on PYTHONPATH to import this checkout: imagebuild at the root, efa_validators in
# validators/ (its src folder)
IMPORT_PATH = str(ROOT) + ":" + str(ROOT / "validators")


def assert_golden(text: str, path: Path) -> None:
    """`text` must equal the golden file `path`; UPDATE_GOLDEN=1 rewrites it after a deliberate change."""
    import os

    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from {path} (UPDATE_GOLDEN=1 to accept)"
