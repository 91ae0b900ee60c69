"""A cgroup v2 of the run's own, where one can be made: every process the run starts is in it, whatever
it does (setsid, double fork, a scrubbed environment), and `cgroup.kill` ends them all at once, a
fork-and-exit chain included (the kernel kills what forks while it kills).

It is made under this process's own cgroup (/proc/self/cgroup `0::PATH`, on the cgroup2 mount from
/proc/self/mountinfo) and needs `cgroup.kill` (Linux 5.14) and write access there: root on a host, or a
delegated subtree. In most containers the cgroup file system is read-only; then None, and the runner
finds the run's processes by its subreaper tree and marker (efa_validators/run/reaper.py).
"""

import os
import time
from typing import List, Optional


def _v2_mount() -> Optional[str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    except OSError:
        pass
    return None


def _own_path() -> Optional[str]:
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


class RunCgroup:
    """One run's cgroup: `join` (in the launcher's child, before exec), `pids`, `kill`, `remove`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._procs = os.path.join(path, "cgroup.procs")  # joined here: join() runs in a forked child

    @classmethod
    def make(cls, name: str) -> Optional["RunCgroup"]:
        """A new cgroup `name` under this process's own, or None where none can be made (then nothing is
        left behind)."""
        mount, own = _v2_mount(), _own_path()
        if mount is None or own is None:
            return None
        path = os.path.join(mount, own.lstrip("/"), name)
        try:
            os.mkdir(path)
        except OSError:
            return None
        group = cls(path)
        if not (os.access(group._procs, os.W_OK) and os.path.exists(group._kill_file)):
            group.remove()
            return None
        return group

    @property
    def _kill_file(self) -> str:
        return os.path.join(self.path, "cgroup.kill")

    def join(self) -> None:
        """Move the calling process into the cgroup (`preexec_fn` of the launcher: its children follow).
        A failure leaves it where it was: the subreaper and the marker still find it."""
        try:
            fd = os.open(self._procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            pass

    def pids(self) -> List[int]:
        try:
            with open(self._procs, "rb") as fh:
                return [int(p) for p in fh.read().split()]
        except (OSError, ValueError):
            return []

    def kill(self, wait: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup at once; True when it is empty within `wait` seconds
        (`wait` 0: only ask)."""
        try:
            with open(self._kill_file, "w") as fh:
                fh.write("1")
        except OSError:
            return False
        deadline = time.monotonic() + wait
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.pids()

    def remove(self) -> None:
        """The cgroup removed (an empty one; a cgroup with processes left stays, and is named in notes)."""
        try:
            os.rmdir(self.path)
        except OSError:
            pass
