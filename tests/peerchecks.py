"""The image checks teams already run, run against this project's images as such a team runs them: AWS's
DLC sanity scripts (../shared/peer-checks/dlc-sanity, aws/deep-learning-containers test/sanity/scripts at
commit e0ecedea6a), by path, mounted read-only into a container of the image. Never copied into the project.

Which apply (docs/peer-checks.md says why the third applies only in part): check_credentials.sh and
check_filesystem.sh to every image."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, Tuple

from conftest import in_ci
from paths import ROOT

APPLY_TO_EVERY_IMAGE = ("check_credentials.sh", "check_filesystem.sh")


def peer_checks_dir() -> Path:
    return Path(os.environ.get("PEER_CHECKS_DIR", ROOT.parent / "shared" / "peer-checks")) / "dlc-sanity"


def available() -> Tuple[bool, str]:
    """(True, "") where the scripts are here; else why not (a clone without ../shared). CI must have them."""
    folder = peer_checks_dir()
    missing = [s for s in APPLY_TO_EVERY_IMAGE if not (folder / s).is_file()]
    if not missing:
        return True, ""
    why = f"AWS's DLC sanity scripts not found in {folder} (../shared/peer-checks): {', '.join(missing)}"
    assert not in_ci(), f"{why}: required in CI"
    return False, why


def run_peer_checks(image: str) -> Dict[str, Tuple[int, str]]:
    """{script: (exit code, output)} of each script that applies to every image, run in a container of
    `image` with no network, the scripts mounted read-only, with the image's own user and environment."""
    results = {}
    for script in APPLY_TO_EVERY_IMAGE:
        argv = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "bash"]
        argv += ["-v", f"{peer_checks_dir()}:/peer-checks:ro", image, f"/peer-checks/{script}"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        results[script] = (proc.returncode, proc.stdout + proc.stderr)
    return results
