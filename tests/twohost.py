"""What the tests that run a printed recipe in this project's own image share (test_twohost_docker.py,
test_torchrun_twohost_docker.py, test_sbatch_image_docker.py): the docker CLI, the image they all run
(matrix.local.yaml's local-dlc-layout-extend, built once per session, reused by its content tag) and the
lock its label carries, which each test edits by name before `--print` (the fixture that builds it once
is in twohost_fixtures.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict

import cli
from localbuild import build_variant
from paths import ROOT

VARIANT = "local-dlc-layout-extend"


def docker(*argv: str, check: bool = True, timeout: int = 120, **kw: Any) -> subprocess.CompletedProcess:
    """`docker argv` (bounded); with check, fails the test with its stderr's tail when it exits non-zero."""
    proc = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout, **kw)
    assert not check or proc.returncode == 0, (argv, proc.stderr[-2000:])
    return proc


def build_image(out: Path) -> str:
    """The variant's image: its DLC-layout base made first (`build.py base --layout dlc`: nothing to do
    when the engine has it), then the variant built into `out` as test_dlc_extend.py builds it."""
    assert cli.build_py("base", "--layout", "dlc").rc == 0
    return build_variant(ROOT / "matrix.local.yaml", VARIANT, out)


def image_lock(image: str) -> Dict[str, Any]:
    """The lock the image's label carries (what `--print` takes as --lock)."""
    labels = json.loads(docker("inspect", "--format", "{{json .Config.Labels}}", image).stdout)
    return json.loads(labels["org.efa-image-build.lock"])


def print_recipe(target: str, folder: Path, lock: Dict[str, Any], cluster: str, image: str) -> str:
    """`build.py preflight --print target` for the (edited) `lock` and the `cluster` file's text, both written
    into `folder`, the image bound by `image`: the recipe as printed, after it exits 0."""
    (folder / "lock.json").write_text(json.dumps(lock))
    (folder / "cluster.yaml").write_text(cluster)
    proc = subprocess.run(
        [*cli.BUILD_PY, "preflight", "--print", target, "--cluster", str(folder / "cluster.yaml")]
        + ["--lock", str(folder / "lock.json"), "--image", image],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
