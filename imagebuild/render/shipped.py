"""Where the files the tool ships beside its code are, in a checkout and in an installed wheel.

A checkout keeps them at its top (Dockerfile.templates/, validators/, examples/ci/); the wheel carries the
same files inside the `imagebuild` package (pyproject's package-dir maps imagebuild/templates onto
Dockerfile.templates/ and imagebuild/ci onto examples/ci/), and the validators as the installed
`efa_validators` package. Every reader asks here, never `__file__/../..`, so the console script works from
any folder on the user's own matrix, with no checkout of the tool.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Tuple

from imagebuild.errors import UserError

PACKAGE = Path(__file__).resolve().parents[1]  # the imagebuild package folder
CHECKOUT = PACKAGE.parent  # a checkout's top; site-packages where the wheel is installed


def _first(what: str, candidates: Tuple[Path, ...]) -> Path:
    """The first of `candidates` that is a folder; a broken install (none is) says which were tried."""
    for path in candidates:
        if path.is_dir():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise UserError(
        f"the tool's {what} are missing (looked in {tried})",
        hint="reinstall efa-image-build (pip install --force-reinstall efa-image-build)",
    )


def templates() -> Path:
    """Dockerfile.templates/: the wheel's copy inside the package, else the checkout's."""
    return _first("Dockerfile templates", (PACKAGE / "templates", CHECKOUT / "Dockerfile.templates"))


def ci_examples() -> Path:
    """examples/ci/: the CI files `init` copies (the wheel's copy inside the package, else the checkout's)."""
    return _first("CI examples", (PACKAGE / "ci", CHECKOUT / "examples" / "ci"))


def validators() -> Path:
    """The folder of the importable `efa_validators` package (a checkout's link resolves to validators/):
    what render copies into every image, found without importing it."""
    spec = importlib.util.find_spec("efa_validators")
    if spec is None or not spec.origin:
        raise UserError(
            "the efa_validators package is not importable",
            hint="reinstall efa-image-build (pip install --force-reinstall efa-image-build)",
        )
    return Path(spec.origin).resolve().parent
