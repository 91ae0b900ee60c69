"""Finds every local process a run started, also those that left its process group, so none outlives it.

A launcher's children can leave the process group the runner kills (`setsid`, a shell's `set -m`) and
hide by a double fork (their parent exits, so the kernel gives them a new one). Where a cgroup v2 can be
made, the run's own holds them all (efa_validators/run/cgroup.py: an exact list, and `cgroup.kill`). Besides
it, and where none can be made, three nets catch them:
- this process becomes a child subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`, kernel >= 3.4): an
  orphan below it is re-parented to it, never to init, so it stays a descendant;
- the launcher's process group and every descendant of the launcher;
- a marker variable in the environment the run starts with (inherited across setsid and re-parenting;
  only a process that scrubs its environment AND escapes the subreaper is missed).
Linux /proc only; elsewhere the process group is all that is known.
"""

import ctypes
import os
import signal
import sys
import time
import uuid
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from efa_validators.run.cgroup import RunCgroup

MARK_VAR = "VALIDATORS_RUN_ID"
CONFIRM_WALKS = 3  # empty tree walks in a row before the run counts as ended (then the marker scan too)
MAX_ENDED = 4096  # pids remembered as ended by the runner (the rest are counted)
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

Entry = Tuple[int, int, bytes, str]  # (ppid, pgrp, state, command name)


def libc_prctl() -> Optional[Callable[..., int]]:
    """libc's prctl, or None off Linux (the build side's lifeline uses it too)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def is_subreaper() -> bool:
    prctl = libc_prctl()
    if prctl is None:
        return False
    flag = ctypes.c_int(0)
    return prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value != 0


def set_subreaper(on: bool) -> bool:
    """Adopt (or stop adopting) orphaned descendants; False where the kernel or platform cannot."""
    prctl = libc_prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def new_mark() -> str:
    return uuid.uuid4().hex


def process_table() -> Dict[int, Entry]:
    """pid -> (ppid, pgrp, state, comm) of every process /proc shows (empty without /proc)."""
    table = {}  # type: Dict[int, Entry]
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ')'
        close = stat.rfind(b")")
        fields = stat[close + 2 :].split()
        if len(fields) > 2:
            comm = stat[stat.find(b"(") + 1 : close].decode("utf-8", "replace")
            table[int(name)] = (int(fields[1]), int(fields[2]), fields[0], comm)
    return table


def _stat(pid: int) -> Optional[Entry]:
    """(ppid, pgrp, state, comm) of one process, None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    close = stat.rfind(b")")
    fields = stat[close + 2 :].split()
    if len(fields) < 3:
        return None
    comm = stat[stat.find(b"(") + 1 : close].decode("utf-8", "replace")
    return (int(fields[1]), int(fields[2]), fields[0], comm)


_CHILDREN_FILES = []  # type: List[bool]


def children_files() -> bool:
    """Whether the kernel has /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN, Linux >= 3.5)."""
    if not _CHILDREN_FILES:
        me = os.getpid()
        _CHILDREN_FILES.append(os.path.exists("/proc/%d/task/%d/children" % (me, me)))
    return _CHILDREN_FILES[0]


def children_of(pid: int) -> List[int]:
    """The children of every thread of `pid` (an orphan is given to any live thread of its reaper)."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return []
    out = []  # type: List[int]
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue  # the thread ended
    return out


def _has_mark(pid: int, needle: bytes) -> bool:
    try:
        with open("/proc/%d/environ" % pid, "rb") as fh:
            return needle in fh.read()
    except OSError:
        return False


class Tracker:
    """The live processes of one run: the launcher's group, its descendants, orphans this process
    adopted after the run began, and processes that carry the run's marker."""

    def __init__(
        self,
        launcher: int,
        mark: str,
        adopted_before: Iterable[int] = (),
        group: Optional[RunCgroup] = None,
    ) -> None:
        self.launcher = launcher
        self.group = group  # the run's cgroup v2, where one could be made: its list is exact
        self.me = os.getpid()
        self.before = set(adopted_before)  # children of this process that are not the run's
        self.needle = ("%s=%s\0" % (MARK_VAR, mark)).encode()
        self.seen = set()  # type: Set[int]  # every pid found in the run, for claims about pids
        self.commands = set()  # type: Set[str]  # their command names (comm)
        self.escaped = set()  # type: Set[int]  # found outside the launcher's process group
        self.ended = set()  # type: Set[int]  # pids the runner signalled (at most MAX_ENDED)
        self.ended_count = 0

    @staticmethod
    def children_now() -> Set[int]:
        me = os.getpid()
        return {pid for pid, entry in process_table().items() if entry[0] == me}

    def members(self, with_launcher: bool = True, marked: bool = True) -> List[int]:
        """Live (not zombie) pids of the run; adopted zombies are reaped on the way. `marked=False`
        skips reading every process's environment (the census while the run goes on)."""
        table = process_table()
        if not table:  # no /proc: the launcher's process group is all that can be known
            return [self.launcher] if group_exists(self.launcher) else []
        kids = {}  # type: Dict[int, List[int]]
        for pid, entry in table.items():
            kids.setdefault(entry[0], []).append(pid)
        roots = [self.launcher] + [
            p for p in kids.get(self.me, []) if p != self.launcher and p not in self.before
        ]
        found = set()  # type: Set[int]
        stack = list(roots)
        while stack:
            pid = stack.pop()
            if pid in found or pid not in table:
                continue
            found.add(pid)
            stack.extend(kids.get(pid, []))
        for pid, entry in table.items():
            if entry[1] == self.launcher:
                found.add(pid)
        for pid in table if marked else ():
            if pid not in found and pid != self.me and _has_mark(pid, self.needle):
                found.add(pid)
        return self._live({pid: table[pid] for pid in found}, with_launcher)

    def live(self, with_launcher: bool = True) -> List[int]:
        """The run's live pids, empty only when CONFIRM_WALKS tree walks in a row and then the marker scan
        found none. A chain whose generations fork, start a new session and exit lives a millisecond per
        pid: a scan of the whole /proc table reads its pid after it is gone and never sees the next one, so
        it ran on after the runner (issue 23). As this process is their subreaper, each generation is a
        child of it or of the one before: a walk of the run's tree (a few small files) sees it, and SIGKILL
        landing during its fork ends the chain."""
        if self.group is not None:
            found = self._in_group(with_launcher)
            if found:
                return found
        for _ in range(CONFIRM_WALKS):
            found = self.census(with_launcher)
            if found:
                return found
            time.sleep(0.002)
        return self.members(with_launcher)

    def _in_group(self, with_launcher: bool) -> List[int]:
        found = {}  # type: Dict[int, Entry]
        for pid in self.group.pids() if self.group is not None else ():
            entry = _stat(pid)
            if entry is not None:
                found[pid] = entry
        return self._live(found, with_launcher)

    def census(self, with_launcher: bool = True) -> List[int]:
        """members(marked=False) found by walking the run's own process tree (/proc/PID/task/*/children):
        the cost grows with the run's processes, not the host's. With 128 runs at once (a sweep round),
        each listing every process of the host 4 times a second took both cores of a small head node.
        Only while this process is a subreaper: then nothing of the run's leaves its tree (an orphan comes
        back to it). Elsewhere, or without the children files, the whole table as members() reads it."""
        if not (is_subreaper() and children_files()):
            return self.members(with_launcher, marked=False)
        roots = [self.launcher] + [
            p for p in children_of(self.me) if p != self.launcher and p not in self.before
        ]
        found = {}  # type: Dict[int, Entry]
        stack = list(roots)
        while stack:
            pid = stack.pop()
            if pid in found:
                continue
            entry = _stat(pid)
            if entry is None:
                continue
            found[pid] = entry
            stack.extend(children_of(pid))
        return self._live(found, with_launcher)

    def _live(self, found: Dict[int, Entry], with_launcher: bool) -> List[int]:
        """The live pids among `found`, recorded (seen, commands, escaped); adopted zombies reaped."""
        live = []
        for pid in sorted(found):
            ppid, pgrp, state, comm = found[pid]
            if state == b"Z":
                if ppid == self.me and pid != self.launcher:
                    _reap(pid)  # an adopted orphan that died: ours to reap
                continue
            if pid == self.me or (pid == self.launcher and not with_launcher):
                continue
            live.append(pid)
            self.seen.add(pid)
            self.commands.add(comm)
            if pgrp != self.launcher:
                self.escaped.add(pid)
        return live

    def signal(self, pids: List[int], sig: int) -> None:
        """Signal each member, and the launcher's whole group (what /proc may not show); each is recorded."""
        for pid in pids:
            if pid not in self.ended:
                self.ended_count += 1
                if len(self.ended) < MAX_ENDED:
                    self.ended.add(pid)
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.launcher, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGKILL and self.group is not None:
            self.group.kill(wait=0)  # and what forked since the list was made

    def reap_adopted(self) -> None:
        """Collect adopted orphans that have exited (never the launcher: subprocess waits for it)."""
        for pid, (ppid, _g, state, _c) in process_table().items():
            if ppid == self.me and state == b"Z" and pid != self.launcher and pid not in self.before:
                _reap(pid)


def group_exists(pgid: int) -> bool:
    """kill(0) on the group: True while any member exists (zombies too; a member of another user too)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
