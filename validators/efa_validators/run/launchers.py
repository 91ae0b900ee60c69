"""What the runner knows about launchers: which one a command uses, how it tags each rank's lines, how
to make it pass NCCL_DEBUG to every rank, and how it names a rank that exited non-zero.

Pure functions over argv and text, so the formats are tested on their own and the runner stays small.
Formats, as printed by each launcher:
  Open MPI  `mpirun --tag-output`        `[1,3]<stdout>:text` (jobid,rank)
  Slurm     `srun -l` / `--label`        `3: text` (right-aligned, may be space padded)
  torchrun  `--tee 3` (older), or `--log-line-prefix-template '[rank${rank}]:'`
                                         `[default3]:text` / `[rank3]:text`
"""

import os
import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

MPIRUN_NAMES = ("mpirun", "mpiexec", "orterun", "prterun")
SRUN_NAMES = ("srun",)
TORCHRUN_NAMES = ("torchrun",)

_MPI_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")
_SRUN_TAG = re.compile(r"^\s{0,6}(\d{1,6}): ")
_TORCH_TAG = re.compile(r"^\[(?:rank|default|[A-Za-z_]+?)(\d+)\]:")


class Tagged(NamedTuple):
    rank: Optional[int]  # None: the launcher's own line, or an untagged one
    text: str  # the line without the launcher's prefix


_MPI_TAG_ANYWHERE = re.compile(r"\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:")


class Reassembler:
    """Gives back the lines ranks printed from Open MPI's `--tag-output` stream.

    Open MPI tags every chunk it reads from a rank, not every line: when ranks print fast, one physical
    line can hold pieces of several ranks' lines, e.g. `[1,0]<stdout>:...via NET/Libfab[1,1]<stdout>:INFO x`
    and later `[1,1]<stdout>:ip-10:45[1,0]<stdout>:ric/0/GDRDMA`. A newline ends the piece it is in, so a
    piece that is followed by another tag on the same physical line is an unfinished line of its rank;
    pieces are kept per tag and joined. Memory: one unfinished piece per rank stream."""

    def __init__(self) -> None:
        self.pending = {}  # type: Dict[str, str]
        self.repaired = 0

    def feed(self, line: str) -> List[str]:
        """One physical line -> the complete logical lines it finishes (tag kept in front)."""
        tags = list(_MPI_TAG_ANYWHERE.finditer(line))
        if not tags or (len(tags) == 1 and tags[0].start() == 0 and not self.pending):
            return [line]
        out = []  # type: List[str]
        pieces = []  # type: List[Tuple[str, str]]
        if tags[0].start() > 0:
            pieces.append(("", line[: tags[0].start()]))
        for i, m in enumerate(tags):
            stop = tags[i + 1].start() if i + 1 < len(tags) else len(line)
            pieces.append((m.group(0), line[m.end() : stop]))
        for i, (tag, text) in enumerate(pieces):
            if i < len(pieces) - 1:
                self.pending[tag] = self.pending.get(tag, "") + text
                continue
            head = self.pending.pop(tag, None)
            if head is not None:
                self.repaired += 1
                text = head + text
            out.append(tag + text)
        return out

    def flush(self) -> List[str]:
        """Unfinished pieces at the end of the output (the stream stopped mid-line)."""
        out = [tag + text for tag, text in self.pending.items()]
        self.pending.clear()
        return out


def launcher_kind(argv: Sequence[str]) -> str:
    """'mpirun', 'srun', 'torchrun' or 'plain', from the program name (through `env`, `timeout` etc.)."""
    for word in _program_words(argv):
        base = os.path.basename(word)
        if base in MPIRUN_NAMES:
            return "mpirun"
        if base in SRUN_NAMES:
            return "srun"
        if base in TORCHRUN_NAMES:
            return "torchrun"
        if base.startswith("python") and "torch.distributed.run" in argv:
            return "torchrun"
    return "plain"


def _program_words(argv: Sequence[str]) -> List[str]:
    """The command's program, looking through wrappers that only set env or limits (last is the program)."""
    return [argv[i] for i in _program_positions(argv)]


_VALUE_OPTS = {"env": ("-u", "--unset", "-C", "--chdir", "-S"), "nice": ("-n",), "numactl": (), "stdbuf": ()}


def _program_positions(argv: Sequence[str]) -> List[int]:
    positions = []  # type: List[int]
    i = 0
    while i < len(argv):
        positions.append(i)
        base = os.path.basename(argv[i])
        if base not in ("env", "nice", "nohup", "stdbuf", "numactl"):
            break
        i += 1
        while i < len(argv) and (argv[i].startswith("-") or (base == "env" and "=" in argv[i])):
            i += 2 if argv[i] in _VALUE_OPTS.get(base, ()) else 1
    return positions


def tagger(kind: str):
    """A function line -> Tagged for a launcher kind; 'auto' tries each known prefix."""
    patterns = {
        "mpirun": (_MPI_TAG, 2),
        "srun": (_SRUN_TAG, 1),
        "torchrun": (_TORCH_TAG, 1),
    }
    chosen = list(patterns.values()) if kind in ("auto", "plain") else [patterns[kind]]

    def tag(line: str) -> Tagged:
        for regex, group in chosen:
            m = regex.match(line)
            if m:
                return Tagged(int(m.group(group)), line[m.end() :])
        return Tagged(None, line)

    return tag


def inject(
    argv: Sequence[str], kind: str, open_mpi: bool, env_names: Sequence[str]
) -> Tuple[List[str], List[str]]:
    """The command with the flags that make ranks tagged and the NCCL env reach every rank.

    Open MPI passes only the env named with `-x`; srun exports the whole env by default and `-l` labels
    lines; torchrun's children inherit the env. Returns (argv, notes saying what was added)."""
    argv = list(argv)
    notes = []  # type: List[str]
    idx = _program_index(argv)
    if idx is None:
        return argv, notes
    added = []  # type: List[str]
    if kind == "mpirun" and open_mpi:
        if "--tag-output" not in argv and "-tag-output" not in argv:
            added.append("--tag-output")
        for name in env_names:
            if not _mpirun_exports(argv, name):
                added += ["-x", name]
    elif kind == "srun":
        if not any(a in ("-l", "--label") for a in argv[idx + 1 :]):
            added.append("-l")
    elif kind == "torchrun" and os.path.basename(argv[idx]) == "torchrun":
        if not any(a.split("=")[0] in ("--tee", "-t", "--log-line-prefix-template") for a in argv[idx + 1 :]):
            added += ["--tee", "3"]  # prefixes each worker's lines with [default<rank>]:
    if added:
        argv[idx + 1 : idx + 1] = added
        notes.append("added %s after %s" % (" ".join(added), argv[idx]))
    return argv, notes


def _program_index(argv: Sequence[str]) -> Optional[int]:
    positions = _program_positions(argv)
    return positions[-1] if positions else None


def _mpirun_exports(argv: Sequence[str], name: str) -> bool:
    for i, word in enumerate(argv):
        if word in ("-x", "--x") and i + 1 < len(argv) and argv[i + 1].split("=", 1)[0] == name:
            return True
    return False


# How each launcher names the rank that failed (text printed on its own stderr/stdout).
_EXIT_PATTERNS = [
    # Open MPI 4: "Process name: [[41545,1],1]" then "Exit code:    7"
    ("mpirun", re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]")),
    # Slurm: "srun: error: node1: task 1: Exited with exit code 7" / "task 0: Killed"
    ("srun", re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (Exited with exit code (\d+)|[A-Za-z ]+)")),
    # torchrun error summary: "  rank      : 1 (local_rank: 1)" then "  exitcode  : 7 (pid: 123)"
    ("torchrun", re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank")),
]
_MPI_EXIT_CODE = re.compile(r"Exit code:\s*(-?\d+)")
_MPI_HOST = re.compile(r"^\s*(?:Local host|Hostname|host):\s*(\S+)")
_TORCH_EXIT_CODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_TORCH_HOST = re.compile(r"^\s*host\s*:\s*(\S+)")


class RankExit(NamedTuple):
    rank: Optional[int]
    host: Optional[str]
    code: Optional[int]
    text: str  # the launcher's own words


def failed_ranks(lines: Sequence[str]) -> List[RankExit]:
    """Ranks the launcher says exited non-zero or were killed, in the order it said so.

    Reads the launcher's messages (a few lines, kept by the runner), never the ranks' own output."""
    found = []  # type: List[RankExit]
    for i, line in enumerate(lines):
        m = _EXIT_PATTERNS[0][1].search(line)
        if m:
            code, host = _code_and_host(lines[i + 1 : i + 6], _MPI_EXIT_CODE, _MPI_HOST)
            found.append(RankExit(int(m.group(1)), host, code, line.strip()))
            continue
        m = _EXIT_PATTERNS[1][1].search(line)
        if m:
            code = int(m.group(4)) if m.group(4) else None
            for rank in _expand_ranks(m.group(2)):
                found.append(RankExit(rank, m.group(1), code, line.strip()))
            continue
        m = _EXIT_PATTERNS[2][1].search(line)
        if m:
            near = list(lines[max(0, i - 3) : i]) + list(lines[i + 1 : i + 4])
            code, host = _code_and_host(near, _TORCH_EXIT_CODE, _TORCH_HOST)
            found.append(RankExit(int(m.group(1)), host, code, line.strip()))
    return _dedupe(found)


def _code_and_host(
    near: Sequence[str], code_rx: "re.Pattern[str]", host_rx: "re.Pattern[str]"
) -> Tuple[Optional[int], Optional[str]]:
    """The exit code and host the launcher's lines around a rank's exit say (the last of each wins), or None:
    Open MPI and torchrun print them on lines of their own beside the exit line."""
    code, host = None, None  # type: Optional[int], Optional[str]
    for text in near:
        cm = code_rx.search(text)
        if cm:
            code = int(cm.group(1))
        hm = host_rx.search(text)
        if hm:
            host = hm.group(1)
    return code, host


def _expand_ranks(spec: str) -> List[int]:
    out = []  # type: List[int]
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            if lo.isdigit() and hi.isdigit():
                out.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out


def _dedupe(items: List[RankExit]) -> List[RankExit]:
    seen = set()
    out = []
    for item in items:
        key = (item.rank, item.code)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def looks_like_launcher_message(kind: str, line: str) -> bool:
    """Lines worth keeping for failed_ranks(): cheap prefilter so the runner keeps few lines."""
    if kind == "srun":
        return line.startswith("srun:")
    return (
        "Process name:" in line
        or "Exit code:" in line
        or "exited on signal" in line
        or "rank " in line
        or "exitcode" in line
        or line.lstrip().startswith(("host", "Local host", "Hostname", "rank"))
        or line.startswith("srun:")
    )
