"""A docker build lives no longer than the `build.py build` that asked for it.

Why: SIGTERM (a CI job cancelled, `timeout`, a pod deleted) ended the interpreter at once, skipping the
Ctrl-C path that cancels builds; a `build.py` whose parent died (the CI runner killed, an ssh session
dropped) went on building to the end, and a docker CLI child (BuildKit) of a `build.py` killed with -9 did
too (issue 23). So, while builds run:
- SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, as Ctrl-C does: builder.build_all cancels,
  terminates its docker CLI children, and the process exits (130), closing the classic builder's API
  stream, which the engine takes as the end of that build;
- a thread watches the parent: when it is gone (getppid() changes), this process sends itself SIGTERM. Not
  under `nohup` (SIGHUP ignored at start): that asks to outlive the parent;
- each docker CLI child is started with PR_SET_PDEATHSIG (Linux): if this process dies without a word
  (SIGKILL), the kernel sends the CLI SIGTERM, and the CLI cancels its build.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Dict, Iterator

from efa_validators.run.reaper import libc_prctl

PR_SET_PDEATHSIG = 1
PARENT_POLL_S = 0.25


_PRCTL = libc_prctl()  # looked up here, not in the forked child (no loader locks taken after fork)


def die_with_parent() -> None:
    """`preexec_fn` for a child that must end when this process does: SIGTERM on its parent's death."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _watch_parent(parent: int, stop: threading.Event) -> None:
    while not stop.wait(PARENT_POLL_S):
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)  # the main thread's handler: the Ctrl-C path
            return


@contextlib.contextmanager
def held() -> Iterator[None]:
    """While inside: SIGTERM/SIGHUP interrupt like Ctrl-C, and the parent's death sends SIGTERM. Only from
    the main thread (signal handlers live there); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    nohup = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    old: Dict[int, Any] = {}
    for sig in (signal.SIGTERM,) if nohup else (signal.SIGTERM, signal.SIGHUP):
        old[sig] = signal.signal(sig, _interrupt)
    stop = threading.Event()
    parent = os.getppid()
    if not nohup and parent != 1:  # re-parented to init already: no parent left to watch
        threading.Thread(target=_watch_parent, args=(parent, stop), name="parent-watch", daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        for sig, handler in old.items():
            signal.signal(sig, handler)
