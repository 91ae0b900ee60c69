"""Runs a launch command (mpirun, srun, torchrun or anything) under a watchdog, keeps every line, and
hands the lines to the log parser as they arrive.

The command runs in its own session, so its process group holds the launcher and every local rank: the
watchdog ends all of them at once when output stops or the total timeout passes (a hung collective never
ends by itself), and after a normal exit it ends any process the command left behind. The output pipe is
read without blocking, so a rank that stops mid-line cannot stall the watchdog.
"""

import collections
import os
import queue
import selectors
import shutil
import subprocess
import threading
import time
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from validators import launchers
from validators.watchdog import Watchdog, end_group, group_members

MAX_LINE = 64 * 1024  # a longer line without a newline is cut here (kept, marked)
TAIL = 8  # last lines kept per rank, for the hang report
LAUNCHER_KEEP = 200  # launcher messages kept for naming failed ranks
DRAIN_AFTER_EXIT = 2.0  # seconds a finished launcher's children may keep the pipe open
_END = object()


class NotStarted(Exception):
    """The launcher could not be started at all (not found, not executable): a usage error, exit 2."""


class RankState:
    """What the runner remembers per rank: bounded, so memory grows with ranks, never with lines."""

    __slots__ = ("lines", "last", "last_time")

    def __init__(self) -> None:
        self.lines = 0
        self.last = collections.deque(maxlen=TAIL)  # type: Deque[Tuple[int, str]]
        self.last_time = 0.0


class RunResult:
    """Facts about one run of the command, independent of what its output says about NCCL."""

    def __init__(self, argv: List[str], kind: str) -> None:
        self.argv = argv
        self.kind = kind
        self.notes = []  # type: List[str]
        self.returncode = None  # type: Optional[int]
        self.killed = None  # type: Optional[str]  # watchdog.IDLE / watchdog.TIMEOUT
        self.kill_signal = None  # type: Optional[str]
        self.duration_s = 0.0
        self.silent_s = 0.0
        self.lines = 0
        self.partial_line = False
        self.cut_lines = 0
        self.ranks = {}  # type: Dict[Optional[int], RankState]
        self.launcher_lines = collections.deque(maxlen=LAUNCHER_KEEP)  # type: Deque[str]
        self.leftovers = []  # type: List[int]
        self.log = None  # type: Optional[str]
        self.timeout = None  # type: Optional[float]
        self.idle_timeout = None  # type: Optional[float]

    def failed_ranks(self) -> List[launchers.RankExit]:
        return launchers.failed_ranks(list(self.launcher_lines))


def resolve(argv: Sequence[str]) -> str:
    """The launcher's path, or NotStarted naming it (checked before anything runs or is written)."""
    if not argv:
        raise NotStarted("no command given after --")
    prog = argv[0]
    found = shutil.which(prog)
    if found is None:
        if os.sep in prog and os.path.exists(prog):
            raise NotStarted("launcher %r is not executable" % prog)
        raise NotStarted("launcher %r not found on PATH" % prog)
    return found


def is_open_mpi(mpirun: str) -> bool:
    """Only Open MPI takes `-x NAME`; MPICH/Intel (hydra) would reject it."""
    try:
        out = subprocess.run(
            [mpirun, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"Open MPI" in out or b"open-mpi" in out


def prepare(argv: Sequence[str], inject: bool = True) -> Tuple[List[str], str, List[str]]:
    """(argv to run, launcher kind, notes): the launcher flags that tag ranks and pass NCCL_DEBUG."""
    resolve(argv)
    kind = launchers.launcher_kind(argv)
    if not inject:
        return list(argv), kind, []
    open_mpi = False
    if kind == "mpirun":
        prog = launchers._program_words(argv)[-1]
        path = shutil.which(prog)
        open_mpi = bool(path) and is_open_mpi(path)
    new_argv, notes = launchers.inject(argv, kind, open_mpi, ["NCCL_DEBUG"])
    return new_argv, kind, notes


def nccl_env(base: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, str], List[str]]:
    """The environment with NCCL_DEBUG=INFO: the parser needs INFO lines; TRACE is kept (it has them)."""
    env = dict(os.environ if base is None else base)
    notes = []
    current = env.get("NCCL_DEBUG", "")
    if current.upper() not in ("INFO", "TRACE"):
        if current:
            notes.append("NCCL_DEBUG=%s replaced by INFO (the validator reads INFO lines)" % current)
        env["NCCL_DEBUG"] = "INFO"
    return env, notes


def run_command(
    argv: Sequence[str],
    kind: str = "plain",
    timeout: Optional[float] = None,
    idle_timeout: Optional[float] = None,
    grace: float = 3.0,
    env: Optional[Dict[str, str]] = None,
    log: Optional[IO[str]] = None,
    on_line: Optional[Callable[[str], None]] = None,
    echo: Optional[IO[str]] = None,
    rank_logs: Optional[str] = None,
) -> RunResult:
    """Run argv to its end or until the watchdog ends it; every line goes to log, echo and on_line."""
    result = RunResult(list(argv), kind)
    result.timeout, result.idle_timeout = timeout, idle_timeout
    tag = launchers.tagger(kind)
    rank_files = {}  # type: Dict[Optional[int], IO[str]]
    dog = Watchdog(timeout, idle_timeout)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError as err:
        raise NotStarted("launcher %r could not start: %s" % (argv[0], err.strerror or err)) from None
    pgid = proc.pid
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    pending = b""

    # a wrapper script may run mpirun --tag-output too: only Open MPI's tags are touched
    reassembler = launchers.Reassembler() if kind in ("mpirun", "plain") else None

    def emit(raw: bytes, cut: bool = False) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if reassembler is None:
            line(text, cut)
            return
        for logical in reassembler.feed(text):
            line(logical, cut)

    def line(text: str, cut: bool) -> None:
        """One line as the rank printed it: counted, kept in the log, tailed per rank, parsed."""
        result.lines += 1
        if cut:
            result.cut_lines += 1
        rank, body = tag(text)
        state = result.ranks.get(rank)
        if state is None:
            state = result.ranks[rank] = RankState()
        state.lines += 1
        state.last.append((result.lines, text))
        state.last_time = dog.elapsed()
        if (rank is None or kind == "torchrun") and launchers.looks_like_launcher_message(kind, body):
            result.launcher_lines.append(body)
        if log is not None:
            log.write(text + "\n")
        if echo is not None:
            echo.write(text + "\n")
        if rank_logs is not None:
            fh = rank_files.get(rank)
            if fh is None:
                name = "launcher.log" if rank is None else "rank-%d.log" % rank
                fh = rank_files[rank] = open(os.path.join(rank_logs, name), "a", encoding="utf-8")
            fh.write(body + "\n")
        if on_line is not None:
            on_line(text)

    def take(chunk: bytes) -> None:
        nonlocal pending
        data = pending + chunk
        parts = data.split(b"\n")
        pending = parts.pop()
        for part in parts:
            emit(part)
        while len(pending) > MAX_LINE:
            emit(pending[:MAX_LINE], cut=True)
            pending = pending[MAX_LINE:]
        for fh in (log, echo):
            if fh is not None:
                fh.flush()

    def read_ready(wait: Optional[float]) -> bool:
        """Read what is there; False at end of file."""
        for _key, _ev in sel.select(wait):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            dog.output()
            take(chunk)
        return True

    exited_at = None  # type: Optional[float]
    open_pipe = True
    try:
        while True:
            left = dog.seconds_left()
            wait = 0.2 if left is None else min(0.2, left)
            if open_pipe:
                open_pipe = read_ready(wait)
            else:
                time.sleep(wait)
            if proc.poll() is not None:
                if not open_pipe:
                    break
                if exited_at is None:
                    exited_at = time.monotonic()
                elif time.monotonic() - exited_at > DRAIN_AFTER_EXIT:
                    break  # children of a finished launcher still hold the pipe: ended below
            reason = dog.expired()
            if reason is not None:
                result.killed = reason
                result.silent_s = dog.silent_for()
                result.kill_signal = end_group(pgid, grace, reap=proc.poll)
                # keep what the ranks printed while dying (mpirun's teardown messages too)
                stop = time.monotonic() + 1.0
                while open_pipe and time.monotonic() < stop:
                    open_pipe = read_ready(0.1)
                break
    finally:
        if pending:
            result.partial_line = True
            emit(pending, cut=True)
        if reassembler is not None:
            leftover = reassembler.flush()
            result.partial_line = result.partial_line or bool(leftover)
            for text in leftover:
                line(text, True)
            if reassembler.repaired:
                result.notes.append(
                    "%d line(s) rejoined from Open MPI's per-chunk tags" % reassembler.repaired
                )
        left_behind = group_members(pgid)
        if left_behind:
            result.leftovers = left_behind
            end_group(pgid, grace, reap=proc.poll)
        proc.wait()
        sel.close()
        proc.stdout.close()
        for fh in rank_files.values():
            fh.close()
        for fh in (log, echo):
            if fh is not None:
                fh.flush()
    result.returncode = proc.returncode
    result.duration_s = round(dog.elapsed(), 3)
    if result.killed is None:
        result.silent_s = dog.silent_for()
    return result


class StreamingParser:
    """Feeds lines to the parser in a thread as they arrive; `finish()` returns its report dict.

    The parser is a fold over lines (validators.analyze.analyze), so it sees each line once and keeps
    no log in memory; a bounded queue applies back-pressure if it ever falls behind."""

    def __init__(self, analyze: Callable[..., Dict[str, Any]], **kwargs: Any) -> None:
        self._queue = queue.Queue(maxsize=10000)  # type: queue.Queue
        self._report = None  # type: Optional[Dict[str, Any]]
        self._error = None  # type: Optional[BaseException]
        self._ended = False
        self._thread = threading.Thread(target=self._work, args=(analyze, kwargs), daemon=True)
        self._thread.start()

    def _lines(self) -> Iterator[str]:
        while True:
            item = self._queue.get()
            if item is _END:
                self._ended = True
                return
            yield item

    def _work(self, analyze: Callable[..., Dict[str, Any]], kwargs: Dict[str, Any]) -> None:
        try:
            self._report = analyze(self._lines(), **kwargs)
        except BaseException as err:  # noqa: BLE001 - reported as an unknown verdict, never a crash
            self._error = err
        # a parser that stopped early must not block the producer: drain to the end marker
        while not self._ended:
            if self._queue.get() is _END:
                self._ended = True

    def feed(self, line: str) -> None:
        if self._report is None and self._error is None:
            self._queue.put(line)

    def finish(self) -> Tuple[Optional[Dict[str, Any]], Optional[BaseException]]:
        self._queue.put(_END)
        self._thread.join()
        return self._report, self._error
