"""The watchdog: deadlines on a clock the test controls, and the end of real process groups."""

from __future__ import annotations

import os
import subprocess
import time

from fakeclock import Clock
from preflight_util import assert_none_left, unique_sleep

from efa_validators.run.watchdog import IDLE, TIMEOUT, Watchdog, end_group, group_alive, group_members


def test_idle_deadline_moves_with_output():
    clock = Clock()
    dog = Watchdog(timeout=None, idle_timeout=5, clock=clock)
    clock.now += 4
    assert dog.expired() is None
    dog.output()
    clock.now += 4.9
    assert dog.expired() is None
    assert abs(dog.seconds_left() - 0.1) < 1e-9
    clock.now += 0.1
    assert dog.expired() == IDLE


def test_total_timeout_wins_over_idle():
    clock = Clock()
    dog = Watchdog(timeout=10, idle_timeout=10, clock=clock)
    clock.now += 10
    assert dog.expired() == TIMEOUT


def test_total_timeout_despite_steady_output():
    clock = Clock()
    dog = Watchdog(timeout=3, idle_timeout=1, clock=clock)
    for _ in range(7):
        clock.now += 0.5
        dog.output()
    assert dog.expired() == TIMEOUT


def test_no_deadline_never_expires():
    clock = Clock()
    dog = Watchdog(timeout=None, idle_timeout=None, clock=clock)
    clock.now += 1e9
    assert dog.expired() is None and dog.seconds_left() is None


def _group(script: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def test_end_group_ends_every_member():
    nap = unique_sleep(300)
    proc = _group("sleep %s & sleep %s & wait" % (nap, nap))
    deadline = time.monotonic() + 5
    while len(group_members(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(proc.pid)) == 3  # sh and two sleeps
    start = time.monotonic()
    assert end_group(proc.pid, grace=2, reap=proc.poll) == "term"
    assert time.monotonic() - start < 2
    proc.wait(timeout=5)
    assert not group_alive(proc.pid)
    assert_none_left(nap)


def test_end_group_escalates_when_term_is_ignored():
    nap = unique_sleep(300)
    proc = _group("trap '' TERM; sleep %s & trap '' TERM; wait; wait" % nap)
    time.sleep(0.3)
    start = time.monotonic()
    assert end_group(proc.pid, grace=0.5, reap=proc.poll) == "kill"
    assert 0.5 <= time.monotonic() - start < 4
    proc.wait(timeout=5)
    assert_none_left(nap)


def test_finished_group_is_none():
    proc = _group("true")
    proc.wait(timeout=5)
    assert end_group(proc.pid, grace=1, reap=proc.poll) == "none"


def test_zombie_leader_does_not_count_as_alive():
    proc = _group("exit 0")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the leader is a zombie until we reap it
        with open("/proc/%d/stat" % proc.pid, "rb") as fh:
            if b") Z " in fh.read():
                break
        time.sleep(0.02)
    assert group_members(proc.pid) == []
    proc.wait(timeout=5)
    assert os.getpgid(os.getpid()) != proc.pid
