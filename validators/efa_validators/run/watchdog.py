"""Turns a hang into an error in bounded time: deadlines for silence and for the whole run, and the end of
the whole process group (SIGTERM, a grace period for launchers to tear down their remote daemons, then
SIGKILL), because a collective that hangs never ends by itself and killing only the launcher leaves ranks.
"""

import os
import signal
import time
from typing import Callable, List, Optional

from efa_validators.run.reaper import group_exists, process_table

IDLE = "idle"
TIMEOUT = "timeout"


class Watchdog:
    """Deadlines over a monotonic clock; the runner calls `output()` per chunk and `expired()` per tick."""

    def __init__(
        self,
        timeout: Optional[float],
        idle_timeout: Optional[float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.clock = clock
        self.started = clock()
        self.last_output = self.started

    def output(self) -> None:
        self.last_output = self.clock()

    def expired(self) -> Optional[str]:
        """IDLE or TIMEOUT once a deadline has passed, else None (total timeout wins when both have)."""
        now = self.clock()
        if self.timeout is not None and now - self.started >= self.timeout:
            return TIMEOUT
        if self.idle_timeout is not None and now - self.last_output >= self.idle_timeout:
            return IDLE
        return None

    def seconds_left(self) -> Optional[float]:
        """Time until the nearest deadline (for select's timeout); None when there is none."""
        now = self.clock()
        left = []
        if self.timeout is not None:
            left.append(self.started + self.timeout - now)
        if self.idle_timeout is not None:
            left.append(self.last_output + self.idle_timeout - now)
        return max(0.0, min(left)) if left else None

    def silent_for(self) -> float:
        return self.clock() - self.last_output

    def elapsed(self) -> float:
        return self.clock() - self.started


def group_members(pgid: int) -> List[int]:
    """PIDs of the live (not zombie) processes in a process group, from /proc.

    Zombies are left out: where PID 1 does not reap orphans (a container running `sleep`), they would
    otherwise look alive forever. Without /proc, falls back to kill(0), which counts zombies too."""
    table = process_table()
    if not table:
        return [pgid] if group_exists(pgid) else []
    return sorted(pid for pid, (_ppid, pgrp, state, _comm) in table.items() if pgrp == pgid and state != b"Z")


def group_alive(pgid: int) -> bool:
    """True while any live process is still in the group."""
    return bool(group_members(pgid))


def end_group(pgid: int, grace: float, reap: Callable[[], None] = lambda: None) -> str:
    """SIGTERM the group, wait up to `grace` seconds, then SIGKILL what is left (see end_all)."""
    return end_all(lambda: group_members(pgid), grace, reap, lambda _pids, sig: _signal_group(pgid, sig))


def end_all(
    members: Callable[[], List[int]],
    grace: float,
    reap: Callable[[], None] = lambda: None,
    send: Optional[Callable[[List[int], int], None]] = None,
) -> str:
    """SIGTERM every member, wait up to `grace` seconds, then SIGKILL until none is left (each round lists
    them again: one may have forked; a round follows the last at once, so a fork-and-exit chain is caught).

    `reap` is called while waiting so the caller can collect its own children (a zombie leader keeps
    a group alive). Returns 'none' (nothing was alive), 'term' or 'kill': the strongest signal it took."""
    send = send or _signal_pids
    alive = members()
    if not alive:
        return "none"
    send(alive, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap()
        if not members():
            return "term"
        time.sleep(0.05)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        reap()
        alive = members()
        if not alive:
            break
        send(alive, signal.SIGKILL)
        time.sleep(0.002)
    return "kill"


def _signal_pids(pids: List[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
