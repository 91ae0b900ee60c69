"""The tool as a team installs it: a wheel built from this tree's tracked files (a clean copy, so no stale
build/lib or egg-info of the worktree gets in), installed with its dependencies into a fresh virtual
environment. Tests that use it run the console script `efa-image-build` from a folder that holds no
checkout, with no PYTHONPATH: the code under test is what the wheel carries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib
from paths import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PIP_TIMEOUT = 600  # dependencies come from pip's cache after the first run: seconds, not minutes


@dataclass(frozen=True)
class Venv:
    root: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def script(self) -> Path:
        return self.bin / "efa-image-build"

    def env(self, **extra: str) -> dict:
        """The environment a user's shell has after activating the venv: its bin first, no PYTHONPATH
        (nothing of this checkout is importable), no AWS or registry login of the test run."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("AWS_")}
        env["PATH"] = f"{self.bin}{os.pathsep}{env['PATH']}"
        env["VIRTUAL_ENV"] = str(self.root)
        env.update(extra)
        return env

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / "python"), "-m", "pip", "--disable-pip-version-check", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT, env=self.env())
        assert proc.returncode == 0, f"pip {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc


def tracked_copy(dest: Path) -> Path:
    """The project's tracked (and not ignored) files, as a fresh clone has them, links kept as links."""
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in names:
        src, out = ROOT / name, dest / name
        if not os.path.lexists(src):
            continue  # deleted in the worktree, not yet in the index
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), out)
        elif src.is_file():
            shutil.copy2(src, out)
    return dest


def build_wheel(work: Path) -> Path:
    """`pip wheel . --no-deps` on a clean copy of the tree: the one wheel it makes."""
    src = tracked_copy(work / "src")
    dist = work / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-w", str(dist)]
    proc = subprocess.run([*cmd, str(src)], capture_output=True, text=True, timeout=PIP_TIMEOUT)
    assert proc.returncode == 0, f"pip wheel:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    (wheel,) = dist.glob("efa_image_build-*.whl")
    return wheel


def install(work: Path, extras: str = "attest") -> Venv:
    """A fresh venv (no system site-packages) with the wheel and its dependencies (and `extras`)."""
    wheel = build_wheel(work)
    root = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    venv = Venv(root, wheel)
    venv.pip("install", "--quiet", f"{wheel}[{extras}]" if extras else str(wheel))
    return venv
