"""Where things are, for every test: tests/ is split by package (tests/imagebuild/, tests/validators/), so a
test's own __file__ no longer says where the project is; fixtures/ and golden/ stay shared in tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
