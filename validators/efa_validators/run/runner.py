"""Runs a launch command (mpirun, srun, torchrun or anything) under a watchdog, keeps every line, and
hands the lines to the log parser behind the command.

The command's output goes straight to a spool file (an unlinked temp file): the kernel writes it, so
the job never waits for the runner, however slow the parser. The runner reads the spool behind it; the
watchdog, in its own thread, judges output arriving (the spool growing), never how far the reading or
parsing has got. The command runs in its own session, and this process is a child subreaper
(efa_validators/run/reaper.py): on silence or timeout every process of the run is ended, including those that
left the group (setsid, double fork), and after a normal exit anything the command left behind.
"""

import collections
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import IO, Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

from efa_validators.report.contract import REPLAY_MARK  # the stand-in's first line: the output is a recording
from efa_validators.run import launchers, reaper
from efa_validators.run.cgroup import RunCgroup
from efa_validators.run.watchdog import Watchdog, end_all
from efa_validators.scan.redact import Redactor, redact_text, secret_values

MAX_LINE = 64 * 1024  # a longer line keeps its first MAX_LINE bytes (marked cut); the rest is counted
MAX_OUTPUT = 512 * 1024 * 1024  # bytes of output read: past it the run is ended (a 1024-node init is 64 MB)
TAIL = 8  # last lines kept per rank, for the hang report
LAUNCHER_KEEP = 200  # launcher messages kept for naming failed ranks
DRAIN_AFTER_EXIT = 2.0  # seconds a finished launcher's children may take to end by themselves
TICK = 0.05  # the watchdog's poll of the spool, and the reader's wait for more
CHUNK = 256 * 1024  # bytes read from the spool at a time
CENSUS_EVERY = 0.25  # seconds between lists of the run's processes (pids its log may claim)
MAX_CLAIM_HOSTS = 16384  # hosts remembered from the log's NCCL line heads
MAX_PIDS_PER_HOST = 256
MAX_HEADS = 1 << 17
WATCHDOG_ABORT = "abort"
OUTPUT_LIMIT = "output-limit"  # RunResult.killed when the output passed its cap
_NCCL_HEAD = re.compile(r"([^\s:\[\]]+):(\d+):\d+ \[\d+\] NCCL (?:INFO|WARN)")
_END = object()


class NotStarted(Exception):
    """The launcher could not be started at all (not found, not executable): a usage error, exit 2."""


class RankState:
    """What the runner remembers per rank: bounded, so memory grows with ranks, never with lines."""

    __slots__ = ("lines", "last", "last_time", "host")

    def __init__(self) -> None:
        self.lines = 0
        self.last = collections.deque(maxlen=TAIL)  # type: Deque[Tuple[int, str]]
        self.last_time = 0.0  # when its last line had arrived (seconds from the start)
        self.host = None  # type: Optional[str]  # as its NCCL lines name it


class RunResult:
    """Facts about one run of the command, independent of what its output says about NCCL."""

    def __init__(self, argv: List[str], kind: str) -> None:
        self.argv = argv
        self.kind = kind
        self.pid = None  # type: Optional[int]  # the launcher the run started: the root of its processes
        self.notes = []  # type: List[str]
        self.returncode = None  # type: Optional[int]
        self.killed = None  # type: Optional[str]  # watchdog.IDLE / watchdog.TIMEOUT / OUTPUT_LIMIT
        self.kill_signal = None  # type: Optional[str]
        self.duration_s = 0.0
        self.silent_s = 0.0
        self.lines = 0
        self.partial_line = False
        self.cut_lines = 0
        self.long_lines = 0  # lines longer than max_line: their first max_line bytes kept
        self.dropped_bytes = 0  # bytes of output not kept: long lines' tails, output past max_output
        self.output_bytes = 0  # bytes the command printed (as far as the runner saw)
        self.max_output = MAX_OUTPUT
        self.max_line = MAX_LINE
        self.ranks = {}  # type: Dict[Optional[int], RankState]
        self.launcher_lines = collections.deque(maxlen=LAUNCHER_KEEP)  # type: Deque[str]
        self.leftovers = []  # type: List[int]
        self.escaped = []  # type: List[int]  # leftovers that had left the launcher's process group
        self.ended = []  # type: List[int]  # processes the runner signalled, the launcher left out (capped)
        self.ended_count = 0
        self.subreaper = False
        self.cgroup = None  # type: Optional[str]  # the run's cgroup v2, where one could be made
        self.seen_pids = set()  # type: Set[int]  # local processes of the run, as the census saw them
        self.commands = set()  # type: Set[str]  # their command names
        self.claims = {}  # type: Dict[str, Set[int]]  # host -> pids, from the NCCL line heads
        self.claims_cut = False
        self.replay = False
        self.log = None  # type: Optional[str]
        self.timeout = None  # type: Optional[float]
        self.idle_timeout = None  # type: Optional[float]
        self.redactor = Redactor()  # the run's secrets: every line and report field passes through it

    def failed_ranks(self) -> List[launchers.RankExit]:
        return launchers.failed_ranks(list(self.launcher_lines))

    def claim(self, state: RankState, body: str) -> None:
        """Remember the host and pid an NCCL line says it came from (`host:pid:tid [dev] NCCL ...`)."""
        m = _NCCL_HEAD.search(body, 0, 512)  # the head is near the start: never scan a long line
        if m is None:
            return
        host = m.group(1)
        if state.host is None:
            state.host = host
        pids = self.claims.get(host)
        if pids is None:
            if len(self.claims) >= MAX_CLAIM_HOSTS:
                self.claims_cut = True
                return
            pids = self.claims[host] = set()
        if len(pids) < MAX_PIDS_PER_HOST:
            pids.add(int(m.group(2)))


def resolve(argv: Sequence[str]) -> str:
    """The launcher's path, or NotStarted naming it (checked before anything runs or is written)."""
    if not argv:
        raise NotStarted("no command given after --")
    prog = argv[0]
    found = shutil.which(prog)
    if found is None:
        if os.sep in prog and os.path.exists(prog):
            raise NotStarted(redact_text("launcher %r is not executable" % prog))
        raise NotStarted(redact_text("launcher %r not found on PATH" % prog))
    return found


_OPEN_MPI = {}  # type: Dict[str, bool]  # mpirun path -> is Open MPI (a sweep asks once, not per pair)


def is_open_mpi(mpirun: str) -> bool:
    """Only Open MPI takes `-x NAME`; MPICH/Intel (hydra) would reject it."""
    if mpirun not in _OPEN_MPI:
        _OPEN_MPI[mpirun] = _ask_open_mpi(mpirun)
    return _OPEN_MPI[mpirun]


def _ask_open_mpi(mpirun: str) -> bool:
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


def _spool(folder: Optional[str]) -> Tuple[int, int]:
    """(write fd for the command, read fd for the runner) of an unlinked file: nothing is left on disk
    if the runner dies, and the command's writes (O_APPEND) never wait for the runner's reads."""
    fd, path = tempfile.mkstemp(prefix=".validators-spool-", dir=folder)
    try:
        wfd = os.open(path, os.O_WRONLY | os.O_APPEND)
    finally:
        os.unlink(path)
    return wfd, fd


def run_command(
    argv: Sequence[str],
    kind: str = "plain",
    timeout: Optional[float] = None,
    idle_timeout: Optional[float] = None,
    grace: float = 3.0,
    env: Optional[Dict[str, str]] = None,
    log: Optional[IO[str]] = None,
    on_lines: Optional[Callable[[List[str]], None]] = None,
    echo: Optional[IO[str]] = None,
    rank_logs: Optional[str] = None,
    spool_dir: Optional[str] = None,
    nice: int = 0,
    max_output: int = MAX_OUTPUT,
    max_line: int = MAX_LINE,
    use_cgroup: bool = True,
) -> RunResult:
    """Run argv to its end or until the watchdog ends it; every line goes to log, echo and on_lines
    (a batch per chunk read), behind the command, which writes to a spool file at its own speed.

    `nice` > 0 lowers the CPU priority of the reader's thread (not the watchdog's): on a busy node the
    job's ranks come first. Output past `max_output` bytes ends the run (OUTPUT_LIMIT) and is not read;
    a line keeps its first `max_line` bytes: the log, the disk and the time to read are bounded."""
    result = RunResult(list(argv), kind)
    result.timeout, result.idle_timeout = timeout, idle_timeout
    result.max_output, result.max_line = max_output, max_line
    dog = Watchdog(timeout, idle_timeout)
    mark = reaper.new_mark()
    env = dict(os.environ if env is None else env)
    env[reaper.MARK_VAR] = mark
    result.redactor = Redactor(secret_values(env))
    was_subreaper = reaper.is_subreaper()
    result.subreaper = was_subreaper or reaper.set_subreaper(True)
    before = reaper.Tracker.children_now()
    group = RunCgroup.make("validators-run-" + mark) if use_cgroup else None
    result.cgroup = group.path if group is not None else None
    wfd, rfd = _spool(spool_dir)
    try:
        proc = subprocess.Popen(
            list(argv), stdout=wfd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True, preexec_fn=group.join if group is not None else None,
        )  # fmt: skip
    except OSError as err:
        os.close(rfd)
        if group is not None:
            group.remove()
        if not was_subreaper:
            reaper.set_subreaper(False)
        raise NotStarted(
            redact_text("launcher %r could not start: %s" % (argv[0], err.strerror or err))
        ) from None
    finally:
        os.close(wfd)
    result.pid = proc.pid
    tracker = reaper.Tracker(proc.pid, mark, before, group)
    handlers = _interrupt_on_termination()
    arrivals = collections.deque()  # type: Deque[Tuple[int, float]]  # (spool size, when it was seen)
    done, abort = threading.Event(), threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(proc, rfd, dog, tracker, arrivals, done, abort, grace, result), daemon=True
    )
    watcher.start()
    reader = _Reader(result, kind, log, echo, rank_logs, on_lines)
    failed = []  # type: List[BaseException]
    reading = threading.Thread(
        target=_read, args=(rfd, arrivals, done, abort, reader, nice, failed), daemon=True
    )
    reading.start()
    try:
        while reading.is_alive():  # the main thread only waits: signals (Ctrl-C, SIGTERM) land here
            reading.join(TICK * 4)
        if failed:
            raise failed[0]
    except BaseException:
        abort.set()  # the runner itself failed or was interrupted: the command must not outlive it
        raise
    finally:
        watcher.join()
        reading.join()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if group is not None:
            group.kill()  # nothing is left by now; were anything, it ends here, before the cgroup goes
            group.remove()
        if not was_subreaper:
            reaper.set_subreaper(False)
        os.close(rfd)
        reader.close()
    result.returncode = proc.returncode
    result.dropped_bytes += max(0, result.output_bytes - result.max_output)  # never read
    result.duration_s = round(dog.elapsed(), 3)
    if result.killed is None:
        result.silent_s = dog.silent_for()
    return result


def _read(
    rfd: int,
    arrivals: "Deque[Tuple[int, float]]",
    done: threading.Event,
    abort: threading.Event,
    reader: "_Reader",
    nice: int,
    failed: List[BaseException],
) -> None:
    """The reader's thread: the spool's bytes that the watchdog has seen arrive, in order, until the
    run is over and all is read. At a lower CPU priority than the job (nice is per thread on Linux)."""
    lower_priority(nice)
    offset = 0
    try:
        while not abort.is_set():  # interrupted: the rest is not read
            finished = done.is_set()  # read first: the watcher's last sample is then in `arrivals`
            while arrivals and arrivals[0][0] <= offset:
                arrivals.popleft()
            if arrivals:
                end, when = arrivals[0]
                end = min(end, reader.result.max_output)  # past the cap nothing is read
                if end <= offset:
                    arrivals.popleft()
                    continue
                chunk = os.pread(rfd, min(end - offset, CHUNK), offset)
                if not chunk:  # the file shrank under us: nothing more can be read
                    return
                offset += len(chunk)
                reader.take(chunk, when)
                continue
            if finished:
                return
            done.wait(TICK)
    except BaseException as err:  # noqa: BLE001 - handed to the main thread, which ends the run
        failed.append(err)


def lower_priority(step: int) -> None:
    """Raise this thread's nice value by `step` (never fails: a limit just leaves it as it is)."""
    if step > 0:
        try:
            os.nice(step)
        except OSError:
            pass


def _interrupt_on_termination() -> Dict[int, Any]:
    """SIGTERM/SIGHUP to the runner raise KeyboardInterrupt, so it ends the run's processes before it
    goes (the command writes to a file, not a pipe: no SIGPIPE would end it). Returns the old handlers."""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}


def _watch(
    proc: subprocess.Popen,
    rfd: int,
    dog: Watchdog,
    tracker: reaper.Tracker,
    arrivals: "Deque[Tuple[int, float]]",
    done: threading.Event,
    abort: threading.Event,
    grace: float,
    result: RunResult,
) -> None:
    """The watchdog's thread: output is the spool growing; ends the run on a deadline, then whatever
    the command left behind. Never waits for the reader or the parser."""
    seen = 0

    def sample() -> None:
        nonlocal seen
        size = os.fstat(rfd).st_size
        if size > seen:
            dog.output()
            arrivals.append((size, dog.elapsed()))
            seen = size
            result.output_bytes = size

    def reap() -> None:
        proc.poll()
        tracker.reap_adopted()

    try:
        next_census = 0.0
        while proc.poll() is None:
            sample()
            reason = WATCHDOG_ABORT if abort.is_set() else dog.expired()
            if reason is None and seen > result.max_output:
                reason = OUTPUT_LIMIT
            if reason is not None:
                if reason != WATCHDOG_ABORT:
                    result.killed = reason
                    result.silent_s = dog.silent_for()
                result.kill_signal = end_all(tracker.live, grace, reap, tracker.signal)
                break
            if dog.elapsed() >= next_census:  # which pids are the run's: the claims in its log are checked
                tracker.census()
                next_census = dog.elapsed() + CENSUS_EVERY
            time.sleep(TICK)
        stop = time.monotonic() + DRAIN_AFTER_EXIT  # a finished launcher's children may still be ending
        while not abort.is_set() and time.monotonic() < stop and tracker.live(with_launcher=False):
            sample()
            time.sleep(TICK)
        left = tracker.live(with_launcher=False)
        if left:
            result.leftovers = left
            result.escaped = sorted(set(left) & tracker.escaped)
            end_all(tracker.live, grace, reap, tracker.signal)
        proc.wait()
        tracker.reap_adopted()
        sample()
    finally:
        result.seen_pids = set(tracker.seen) | {proc.pid}
        result.commands = set(tracker.commands)
        result.ended = sorted(tracker.ended - {proc.pid})
        result.ended_count = tracker.ended_count - (proc.pid in tracker.ended)
        done.set()


class _Reader:
    """Turns the spool's bytes into the lines ranks printed: rejoined, counted, tailed per rank, written
    to the log, echoed, split per rank and handed on in batches. Memory grows with ranks, not lines."""

    def __init__(
        self,
        result: RunResult,
        kind: str,
        log: Optional[IO[str]],
        echo: Optional[IO[str]],
        rank_logs: Optional[str],
        on_lines: Optional[Callable[[List[str]], None]],
    ) -> None:
        self.result, self.kind, self.log, self.echo = result, kind, log, echo
        self.rank_logs, self.on_lines = rank_logs, on_lines
        self.tag = launchers.tagger(kind)
        # a wrapper script may run mpirun --tag-output too: only Open MPI's tags are touched
        self.reassembler = launchers.Reassembler() if kind in ("mpirun", "plain") else None
        self.rank_files = {}  # type: Dict[Optional[int], IO[str]]
        self.pending = b""
        self.skipping = False  # in the dropped tail of a line longer than max_line
        self.batch = []  # type: List[str]
        self.when = 0.0
        self.heads = set()  # type: Set[str]  # `host:pid:tid` heads already claimed (bounded)

    def take(self, chunk: bytes, when: float) -> None:
        """A chunk of output that had arrived by `when` (seconds since the start). A line longer than
        max_line keeps its head; its tail is skipped by one search for the newline, never split into lines."""
        self.when = when
        result = self.result
        if self.skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                result.dropped_bytes += len(chunk)
                self._flush()
                return
            result.dropped_bytes += newline
            chunk = chunk[newline + 1 :]
            self.skipping = False
        limit = result.max_line
        parts = (self.pending + chunk).split(b"\n")
        self.pending = parts.pop()
        for part in parts:
            if len(part) > limit:
                self._long(part)
            else:
                self.emit(part)
        if len(self.pending) > limit:
            self._long(self.pending)
            self.pending = b""
            self.skipping = True
        self._flush()

    def _long(self, part: bytes) -> None:
        """A line past max_line: its head, marked cut; the rest counted as dropped."""
        result = self.result
        result.long_lines += 1
        result.dropped_bytes += len(part) - result.max_line
        self.emit(part[: result.max_line], cut=True)

    def emit(self, raw: bytes, cut: bool = False) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if self.reassembler is None:
            self.line(text, cut)
            return
        for logical in self.reassembler.feed(text):
            self.line(logical, cut)

    def line(self, text: str, cut: bool) -> None:
        """One line as the rank printed it, its secrets masked: counted, kept in the log, tailed per rank,
        parsed (nothing after this sees the secret)."""
        result = self.result
        result.lines += 1
        if cut:
            result.cut_lines += 1
        rank, body = self.tag(text)
        masked = result.redactor.line(text, rank)
        if masked != text:
            text = masked
            rank, body = self.tag(text)
        state = result.ranks.get(rank)
        if state is None:
            state = result.ranks[rank] = RankState()
        state.lines += 1
        state.last.append((result.lines, text))
        state.last_time = self.when
        if " NCCL " in body:
            head = body[: body.find(" ")]
            if head not in self.heads or state.host is None:  # one regex per process thread, not per line
                result.claim(state, body)
                if len(self.heads) < MAX_HEADS:
                    self.heads.add(head)
        elif not result.replay and REPLAY_MARK in body:
            result.replay = True
        launcher = rank is None or self.kind == "torchrun"
        if launcher and launchers.looks_like_launcher_message(self.kind, body):
            result.launcher_lines.append(body)
        if self.log is not None:
            self.log.write(text + "\n")
        if self.echo is not None:
            self.echo.write(text + "\n")
        if self.rank_logs is not None:
            fh = self.rank_files.get(rank)
            if fh is None:
                name = "launcher.log" if rank is None else "rank-%d.log" % rank
                fh = self.rank_files[rank] = open(os.path.join(self.rank_logs, name), "a", encoding="utf-8")
            fh.write(body + "\n")
        if self.on_lines is not None:
            self.batch.append(text)

    def _flush(self) -> None:
        if self.batch:
            batch, self.batch = self.batch, []
            self.on_lines(batch)  # type: ignore[misc]
        for fh in (self.log, self.echo):
            if fh is not None:
                fh.flush()

    def close(self) -> None:
        """The end of the output: a line cut short is kept (and marked), every file closed."""
        result = self.result
        result.partial_line = self.skipping  # the output ended in a long line's dropped tail
        if self.pending:
            result.partial_line = True
            self.emit(self.pending, cut=True)
            self.pending = b""
        if self.reassembler is not None:
            leftover = self.reassembler.flush()
            result.partial_line = result.partial_line or bool(leftover)
            for text in leftover:
                self.line(text, True)
            if self.reassembler.repaired:
                repaired = self.reassembler.repaired
                result.notes.append("%d line(s) rejoined from Open MPI's per-chunk tags" % repaired)
        self._flush()
        for fh in self.rank_files.values():
            fh.close()


class StreamingParser:
    """Feeds lines to the parser in a thread as they arrive; `finish()` returns its report dict.

    The parser is a fold over lines (efa_validators.analyze.analyze), so it sees each line once and keeps
    no log in memory. Lines come in batches; a bounded queue holds the reader back if the parser falls
    behind (the reader only: the command writes to its spool file, never to the runner)."""

    def __init__(self, analyze: Callable[..., Dict[str, Any]], nice: int = 0, **kwargs: Any) -> None:
        self._nice = nice  # the parser thread's CPU priority step (see run_command)
        self._queue = queue.Queue(maxsize=4)  # type: queue.Queue  # batches of up to a chunk's lines
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
            yield from item

    def _work(self, analyze: Callable[..., Dict[str, Any]], kwargs: Dict[str, Any]) -> None:
        lower_priority(self._nice)
        try:
            self._report = analyze(self._lines(), **kwargs)
        except BaseException as err:  # noqa: BLE001 - reported as an unknown verdict, never a crash
            self._error = err
        # a parser that stopped early must not block the producer: drain to the end marker
        while not self._ended:
            if self._queue.get() is _END:
                self._ended = True

    def feed(self, lines: List[str]) -> None:
        if self._report is None and self._error is None:
            self._queue.put(lines)

    def finish(self) -> Tuple[Optional[Dict[str, Any]], Optional[BaseException]]:
        self._queue.put(_END)
        self._thread.join()
        return self._report, self._error
