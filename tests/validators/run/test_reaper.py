"""Processes that leave the run's process group (setsid, `set -m`, a double fork, a scrubbed environment)
are still the run's: `validators run` ends them and names them in `leftover_pids` (issue 13.5)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import cli
import pytest
from preflight_util import assert_none_left, finding, load, pids_with, run_cli, unique_sleep

from efa_validators.run import reaper

# each escape holds a sleep of its own length, so the test can tell which got away
ESCAPES = {
    "setsid": "setsid sleep {n} &",
    "set -m": "(set -m; sleep {n} &)",
    "double fork": "(sh -c 'sleep {n} &' &)",
    "setsid, double fork, no environment": "env -i /bin/sh -c 'setsid /bin/sleep {n} &' &",
}


def _script(naps):
    return "\n".join(ESCAPES[k].format(n=naps[k]) for k in ESCAPES) + "\nsleep 0.5; echo started"


def _run_escapes(tmp_path, limits, tail=""):
    """`validators run LIMITS -- sh -c <every escape>TAIL` -> (report, exit code, wall s, the sleeps)."""
    naps = {k: unique_sleep(120) for k in ESCAPES}
    out = tmp_path / "r.json"
    args = ["run", "--quiet", "--grace", "1", "--json", str(out)] + limits
    proc, wall = run_cli(args + ["--", "sh", "-c", _script(naps) + tail], timeout=60)
    return load(out), proc.returncode, wall, list(naps.values())


def test_escaped_children_are_ended_and_reported(tmp_path):
    report, code, wall, naps = _run_escapes(tmp_path, ["--timeout", "60"])
    for nap in naps:
        assert_none_left(nap)
    run = report["run"]
    assert run["subreaper"] is True
    assert len(run["leftover_pids"]) == len(ESCAPES), run["leftover_pids"]
    assert set(run["escaped_pids"]) <= set(run["leftover_pids"])
    assert len(run["escaped_pids"]) >= 2  # the setsid ones
    left = finding(report, "leftover-processes")
    assert left and "had left its process group" in left["message"]
    assert wall < 30 and code in (1, 3)


def test_watchdog_ends_escaped_children_of_a_hung_run(tmp_path):
    hang = unique_sleep(300)
    report, code, wall, naps = _run_escapes(tmp_path, ["--idle-timeout", "2"], "; sleep " + hang)
    assert report["run"]["killed"] == "idle" and finding(report, "hang")
    for nap in naps + [hang]:
        assert_none_left(nap)
    assert code == 1 and wall < 30


def _execed(pids, comm: str) -> bool:
    """True when every pid already runs `comm` (not the shell that forked it)."""

    def name(pid: int) -> str:
        try:
            with open("/proc/%d/comm" % pid) as fh:
                return fh.read().strip()
        except OSError:
            return ""

    return bool(pids) and all(name(pid) == comm for pid in pids)


def test_tracker_finds_an_orphan_by_its_marker_without_the_subreaper():
    """Without the subreaper an orphan goes to init; the run's marker in its environment still names it."""
    mark = reaper.new_mark()
    nap = unique_sleep(60)
    env = dict(os.environ, **{reaper.MARK_VAR: mark})
    before = reaper.Tracker.children_now()
    launcher = subprocess.Popen(
        ["sh", "-c", "setsid sleep %s & exit 0" % nap], env=env, start_new_session=True
    )
    launcher.wait(timeout=10)
    deadline = time.monotonic() + 5
    # wait for `sleep` itself: until it execs, the forked shell (still in the launcher's group) holds `nap`
    while not _execed(pids_with(nap), "sleep") and time.monotonic() < deadline:
        time.sleep(0.05)
    tracker = reaper.Tracker(launcher.pid, mark, before)
    found = tracker.members()
    assert found == pids_with(nap) and len(found) == 1
    assert found[0] in tracker.escaped and "sleep" in tracker.commands
    os.kill(found[0], 9)
    assert_none_left(nap)


def test_subreaper_flag_round_trips():
    was = reaper.is_subreaper()
    try:
        assert reaper.set_subreaper(True) and reaper.is_subreaper()
        assert reaper.set_subreaper(False) and not reaper.is_subreaper()
    finally:
        reaper.set_subreaper(was)


def test_sigterm_to_the_runner_ends_the_run_first(tmp_path):
    """The command writes to a file, so no SIGPIPE would end it if the runner went: SIGTERM to the runner
    ends every process of the run (escaped ones too) before the runner exits (cli: 130, interrupted)."""
    import signal

    from paths import IMPORT_PATH

    naps = {k: unique_sleep(120) for k in ESCAPES}
    hang = unique_sleep(300)
    env = dict(os.environ, PYTHONPATH=IMPORT_PATH)
    runner = subprocess.Popen(
        [*cli.VALIDATORS, "run", "--quiet", "--grace", "1", "--log",
         str(tmp_path / "r.log"), "--", "sh", "-c", _script(naps) + "; sleep " + hang],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    log = tmp_path / "r.log"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (log.exists() and "started" in log.read_text()):
        time.sleep(0.1)  # the runner has read the command's output: it is in its loop
    assert all(pids_with(n) for n in naps.values())
    runner.send_signal(signal.SIGTERM)
    _out, err = runner.communicate(timeout=30)
    assert runner.returncode == 130 and "interrupted" in err and "Traceback" not in err
    for nap in list(naps.values()) + [hang]:
        assert_none_left(nap)


def test_without_proc_the_launchers_group_is_still_ended(monkeypatch):
    """Where /proc is missing (not Linux) only the process group is known: it is signalled whole.

    The group lives on while its orphaned `sleep` is a zombie, and this machine's PID 1 reaps orphans
    about once a second (a loaded CI host: more than the 2 s grace, which made this test flaky). So this
    process adopts its orphans for the test and reaps the sleep itself, as `validators run` does."""
    from efa_validators.run.watchdog import end_all

    nap = unique_sleep(60)
    was = reaper.is_subreaper()
    reaper.set_subreaper(True)
    try:
        launcher = subprocess.Popen(["sh", "-c", "sleep %s & wait" % nap], start_new_session=True)
        # the launcher's own command line holds the nap too: wait for the forked sleep itself, or a slow
        # fork leaves it out of `sleeps`, unreaped, and its zombie keeps the group alive past the grace
        deadline = time.monotonic() + 5
        sleeps = []  # type: list
        while not sleeps and time.monotonic() < deadline:
            time.sleep(0.05)
            sleeps = [pid for pid in pids_with(nap) if pid != launcher.pid]
        assert sleeps, "the launcher's sleep did not start"

        def reap() -> None:
            launcher.poll()
            for pid in sleeps:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not adopted yet, or reaped already
                    pass

        monkeypatch.setattr(reaper, "process_table", dict)
        tracker = reaper.Tracker(launcher.pid, reaper.new_mark())
        assert tracker.members() == [launcher.pid]
        assert end_all(tracker.members, 2, reap, tracker.signal) == "term"
        launcher.wait(timeout=5)
        assert_none_left(nap)
    finally:
        reaper.set_subreaper(was)


CHAIN = """
import os, signal, sys, time
record, mark, stop = sys.argv[1], sys.argv[2], time.time() + 20  # the chain ends by itself after 20 s
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", flush=True)
while time.time() < stop:
    if os.fork():
        os._exit(0)  # each generation forks, and exits: its child is an orphan
    os.setsid()  # in a session and process group of its own
    fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, b"%d\\n" % os.getpid())
    os.close(fd)
    time.sleep(0.005)
"""


def _chain_alive(pids, mark: str):
    """The recorded pids that are still the chain's (its marker in their argv: a reused pid is not)."""
    alive = []
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as fh:
                if mark.encode() in fh.read():
                    alive.append(pid)
        except OSError:
            pass
    return alive


def _assert_chain_ended(record, mark: str) -> list:
    """The chain wrote no pid after the run returned, and none of its pids is alive: its pids."""
    after = record.read_text().split()
    time.sleep(1.0)  # a live generation would have written a new pid by now (one each ~5 ms)
    recorded = [int(p) for p in record.read_text().split()]
    assert len(recorded) == len(after) > 1, "the chain outlived the run"
    assert _chain_alive(recorded, mark) == []
    return recorded


def _chain_mark() -> str:
    return "chain" + unique_sleep(1).replace(".", "")


def test_a_chain_that_forks_and_exits_in_new_sessions_ends_with_the_run(tmp_path):
    """Each generation lives a few ms in a session of its own: a scan of /proc read its pid after it was
    gone and never saw the next, so the chain ran on after `validators run` returned, unreported (issue 23,
    item 4). Ended with the run (by its cgroup where one can be made), every generation named, none alive."""
    record, out, mark = tmp_path / "pids", tmp_path / "r.json", _chain_mark()
    proc, _ = run_cli(
        ["run", "--quiet", "--grace", "1", "--timeout", "60", "--json", str(out), "--"]
        + [sys.executable, "-c", CHAIN, str(record), mark],
        timeout=60,
    )
    recorded = _assert_chain_ended(record, mark)
    report = load(out)
    run = report["run"]
    assert run["ended_count"] >= 1 and set(run["ended_pids"]) & set(recorded), run
    assert run["leftover_pids"] and run["escaped_pids"]
    assert run["tracking"].endswith("subreaper tree walk and marker scan")
    if run["cgroup"]:  # made, used, and removed
        assert run["tracking"].startswith("cgroup v2 ") and not os.path.exists(run["cgroup"])
    left = finding(report, "leftover-processes")
    assert left and "had left its process group" in left["message"] and left["ended_pids"]
    assert "the runner ended %d process(es)" % run["ended_count"] in left["message"]
    assert proc.returncode in (1, 3)


def test_without_a_cgroup_the_tree_walk_ends_the_chain(tmp_path):
    """Where no cgroup can be made (a container's read-only cgroup fs): kill-until-empty over the tree this
    process adopts orphans into, and the marker scan."""
    from efa_validators.run.runner import run_command

    record, mark = tmp_path / "pids", _chain_mark()
    argv = [sys.executable, "-c", CHAIN, str(record), mark]
    result = run_command(argv, timeout=60, grace=1, use_cgroup=False)
    recorded = _assert_chain_ended(record, mark)
    assert result.cgroup is None and result.leftovers and result.escaped
    assert result.ended_count >= 1 and set(result.ended) & set(recorded)


def test_the_run_has_a_cgroup_of_its_own_where_one_can_be_made(tmp_path):
    from efa_validators.run.cgroup import RunCgroup

    probe = RunCgroup.make("validators-test-" + unique_sleep(1).replace(".", ""))
    if probe is None:
        pytest.skip("no cgroup v2 can be made here (read-only cgroup fs, no delegation, or Linux < 5.14)")
    probe.remove()
    out, log = tmp_path / "r.json", tmp_path / "run.log"
    run_cli(["run", "--quiet", "--json", str(out), "--log", str(log), "--", "cat", "/proc/self/cgroup"])
    run = load(out)["run"]
    inside = [line[3:] for line in log.read_text().splitlines() if line.startswith("0::")]
    assert run["cgroup"] and inside and run["cgroup"].endswith(inside[0])
    assert not os.path.exists(run["cgroup"])  # removed with the run
