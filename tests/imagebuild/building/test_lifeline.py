"""imagebuild/building/lifeline.py: what a build holds ends with `build.py build` (issue 23, item 4). Real
processes and signals, no docker (test_builder.py ends a real docker build the same ways)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

from paths import IMPORT_PATH, ROOT

# stands for build.py: holds the lifeline, starts a docker CLI stand-in (`sleep`) as dockerbuild.py does
HOLDER = textwrap.dedent(
    """
    import subprocess, sys, time
    from imagebuild.building import lifeline
    try:
        with lifeline.held():
            child = subprocess.Popen(["sleep", sys.argv[1]], preexec_fn=lifeline.die_with_parent)
            print(child.pid, flush=True)
            time.sleep(60)
    except KeyboardInterrupt:
        child.terminate()
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _gone(pid: int, wait: float = 10.0) -> bool:
    deadline = time.monotonic() + wait
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _nap() -> str:
    return "300.%06d" % (uuid.uuid4().int % 1000000)


def _start(argv, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=IMPORT_PATH)
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, **kw)


def test_sigterm_takes_the_ctrl_c_path():
    holder = _start([sys.executable, "-c", HOLDER, _nap()])
    child = int(holder.stdout.readline())
    holder.send_signal(signal.SIGTERM)
    out, _ = holder.communicate(timeout=30)
    assert holder.returncode == 130 and "interrupted" in out  # not killed by the signal: it cleaned up
    assert _gone(child)


def test_a_child_dies_with_a_holder_killed_without_a_word():
    holder = _start([sys.executable, "-c", HOLDER, _nap()])
    child = int(holder.stdout.readline())
    holder.kill()
    holder.wait(timeout=30)
    assert _gone(child), "the docker CLI stand-in outlived the killed build.py"


def test_the_parents_death_ends_the_holder():
    """build.py under a shell that is killed -9: build.py notices and takes the Ctrl-C path."""
    shell = _start(["bash", "-c", '"$@"; true', "sh", sys.executable, "-c", HOLDER, _nap()])
    child = int(shell.stdout.readline())
    with open("/proc/%d/task/%d/children" % (shell.pid, shell.pid)) as fh:
        holder = int(fh.read().split()[0])
    shell.kill()
    shell.wait(timeout=30)
    assert _gone(holder), "build.py went on after its parent died"
    assert _gone(child)


def test_under_nohup_the_holder_outlives_its_parent():
    nap = _nap()
    shell = _start(["bash", "-c", 'nohup "$@" 2>/dev/null; true', "sh", sys.executable, "-c", HOLDER, nap])
    child = int(shell.stdout.readline())
    with open("/proc/%d/task/%d/children" % (shell.pid, shell.pid)) as fh:
        holder = int(fh.read().split()[0])
    try:
        shell.kill()
        shell.wait(timeout=30)
        time.sleep(1.0)  # four polls of the parent
        assert _alive(holder) and _alive(child)
    finally:
        for pid in (holder, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert _gone(child)
