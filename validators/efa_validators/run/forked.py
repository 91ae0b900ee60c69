"""Run jobs at once, each in a forked process of its own: the tests of one sweep round.

Each job is a function the child calls (a whole `validators run` of one pair: its own watchdog, log,
subreaper and process tracking, never shared with the other tests of the round); what it returns (JSON)
comes back through a file. A fork costs milliseconds where a new interpreter costs a tenth of a second
of CPU, which at 128 tests a round is most of a round on a small head node. The parent must have no
other threads when it forks (the CLI does not start any before a sweep).

The child notes when its job started and ended (CLOCK_MONOTONIC, one clock for every process of the
host), so the report can show the tests of a round overlapping. Interrupted (Ctrl-C, SIGTERM, SIGHUP),
the parent sends SIGTERM to every running child, whose runner ends its command's processes, and waits.
"""

import json
import os
import signal
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

STOP_WAIT = 20.0  # seconds the children of an interrupted round get to end their runs before SIGKILL


def run_all(
    jobs: List[Callable[[], Any]],
    parallel: Optional[int] = None,
    on_end: Optional[Callable[[int, Dict[str, Any]], None]] = None,
) -> List[Dict[str, Any]]:
    """Run every job, at most `parallel` at once (None: all). Returns per job, in order,
    {'value', 'error', 'started', 'ended', 'exit_status', 'pid'}; times are time.monotonic()."""
    limit = len(jobs) if not parallel else max(1, parallel)
    out = [None] * len(jobs)  # type: List[Optional[Dict[str, Any]]]
    workdir = tempfile.mkdtemp(prefix="validators-round-")
    running = {}  # type: Dict[int, int]  # pid -> job index
    handlers = _interrupt_on_termination()
    waiting = list(range(len(jobs)))
    try:
        while waiting or running:
            while waiting and len(running) < limit:
                i = waiting.pop(0)
                running[_start(jobs[i], os.path.join(workdir, "%d.json" % i))] = i
            pid, status = os.waitpid(-1, 0)  # interrupted by a signal: the handler raises
            i = running.pop(pid, -1)
            if i < 0:
                continue  # not one of ours (an orphan adopted by an outer subreaper)
            out[i] = _collect(os.path.join(workdir, "%d.json" % i), pid, status)
            if on_end is not None:
                on_end(i, out[i])  # type: ignore[arg-type]
    except BaseException:
        _stop(running)
        raise
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for name in os.listdir(workdir):
            os.unlink(os.path.join(workdir, name))
        os.rmdir(workdir)
    return out  # type: ignore[return-value]


def _start(job: Callable[[], Any], result_path: str) -> int:
    for stream in (sys.stdout, sys.stderr):  # else the child would print the parent's buffer again
        stream.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    record = {"started": time.monotonic()}  # type: Dict[str, Any]
    try:
        try:
            record["value"] = job()
            code = 0
        except BaseException as err:  # noqa: BLE001 - reported by the parent as the test's error
            record["error"] = "%s: %s" % (type(err).__name__, err)
        record["ended"] = time.monotonic()
        with open(result_path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.rename(result_path + ".tmp", result_path)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)  # never the parent's atexit handlers or buffers


def _collect(path: str, pid: int, status: int) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        record = {"error": "the test's process ended without a result (exit status %d)" % status}
    record["pid"] = pid
    record["exit_status"] = (
        os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    )
    return record


def _stop(running: Dict[int, int]) -> None:
    for pid in running:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    while running and time.monotonic() < deadline:
        for pid in list(running):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                running.pop(pid)
        time.sleep(0.05)
    for pid in list(running):
        _kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _interrupt_on_termination() -> Dict[int, Any]:
    """SIGTERM/SIGHUP raise KeyboardInterrupt (as in the runner), so the round's children are ended."""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    return {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
