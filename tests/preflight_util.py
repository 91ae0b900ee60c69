"""Helpers for the pre-flight tests (runner, watchdog, launchers, probe): run the real CLI, find leftover
processes by a marker in their command line, locate the replay fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from cli import validators_process
from paths import ROOT

REPLAY_DIR = ROOT / "tests" / "fixtures" / "replay"
GOOD_EFA = REPLAY_DIR / "good-efa-p5-2node.log"
SOCKET_FALLBACK = REPLAY_DIR / "socket-fallback-p5-2node.log"
SLOW_EFA = REPLAY_DIR / "slow-efa-p5-2node.log"  # EFA and GDR, busbw about a third of the expected
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def marker() -> str:
    """A unique word to put in a command line, so the test can find its own processes afterwards."""
    return "h5mark" + uuid.uuid4().hex[:12]


def unique_sleep(seconds: int = 60) -> str:
    """`sleep` argument unique to this test (sleep takes fractions): finds our sleeps, not others'."""
    return "%d.%06d" % (seconds, uuid.uuid4().int % 1000000)


SESSION_VAR = "EFA_TEST_SESSION"  # set by tests/conftest.py; every process a test starts inherits it


def _other_session(pid: str) -> bool:
    """The process carries another test session's mark: a concurrent pytest (a second checkout on one
    machine) started it, not this one. A process without any mark still counts as this session's."""
    try:
        with open("/proc/%s/environ" % pid, "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return False
    ours = ("%s=%s" % (SESSION_VAR, os.environ.get(SESSION_VAR, ""))).encode()
    marks = [e for e in env if e.startswith(SESSION_VAR.encode() + b"=")]
    return bool(marks) and ours not in marks


def pids_with(word: str) -> List[int]:
    """PIDs of live (non-zombie) processes of this test session whose command line contains `word` (not
    this process)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open("/proc/%s/stat" % name, "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        state = stat[stat.rfind(b")") + 2 :].split()[0]
        if word in cmd and state != b"Z" and not _other_session(name):
            found.append(int(name))
    return found


def assert_none_left(word: str, wait: float = 3.0) -> None:
    """No process with `word` in its command line survives (a short wait lets the kernel reap)."""
    deadline = time.monotonic() + wait
    left = pids_with(word)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = pids_with(word)
    assert not left, "processes left behind: %s" % [(p, _cmd(p)) for p in left]


def _cmd(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode()
    except OSError:
        return "?"


_RUNS_DIR = None  # type: Optional[str]


def _runs_dir() -> str:
    """One temp dir per test process for the runner's default logs ($TMPDIR), removed at exit."""
    global _RUNS_DIR
    if _RUNS_DIR is None:
        import atexit
        import shutil
        import tempfile

        _RUNS_DIR = tempfile.mkdtemp(prefix="preflight-tests-")
        atexit.register(shutil.rmtree, _RUNS_DIR, True)
    return _RUNS_DIR


def run_cli(
    args: List[str], timeout: float = 60, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None
) -> Tuple[subprocess.CompletedProcess, float]:
    """`python -m efa_validators ARGS` as a user runs it; (completed process, wall seconds)."""
    full_env = {**os.environ, "TMPDIR": _runs_dir(), **(env or {})}
    start = time.monotonic()
    proc = validators_process(*args, timeout=timeout, env=full_env, cwd=str(cwd or ROOT))
    return proc, time.monotonic() - start


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def finding(report: dict, fid: str) -> Optional[dict]:
    return next((f for f in report["findings"] if f["id"] == fid), None)


def replay(*args: str) -> List[str]:
    return [sys.executable, "-m", "efa_validators.replay"] + list(args)


def fake_tools(bindir: Path, scripts: Dict[str, str], path: Optional[str] = None) -> Dict[str, str]:
    """Executable shell scripts named like the node's tools (nvidia-smi, dcgmi, dmesg...) in `bindir`, and the
    environment that finds them first on PATH (then `path`, default this process's PATH; "" for nothing
    else: a tool not faked is then not found). A script that starts with its own `#!` line is written as
    it is (a recorded tool in Python)."""
    bindir.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        tool = bindir / name
        tool.write_text(body if body.startswith("#!") else "#!/bin/sh\n" + body + "\n")
        tool.chmod(0o755)
    rest = os.environ["PATH"] if path is None else path
    return dict(os.environ, PATH=str(bindir) + (os.pathsep + rest if rest else ""))
