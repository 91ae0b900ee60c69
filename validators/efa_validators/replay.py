"""Replay stand-in: prints a recorded nccl-tests / NCCL_DEBUG log the way the GPU program would.

THE ONLY STAND-IN this project allows. Where no GPU exists it takes the place of the GPU binary
(all_reduce_perf, a training script) under a real launcher (mpirun, srun, torchrun), so the launcher,
the runner, its watchdog and the parser are exercised for real. It does nothing else: it never computes
bandwidth and never decides a verdict.

  python -m efa_validators.replay LOG [--rank-filter] [--speed LPS] [--hang-after N] [--exit-code C] ...

With --rank-filter each process prints only the recorded lines of "its" ranks (recorded rank r goes to
process r mod world size), with the recorded launcher tag removed so the real launcher adds its own; the
process's rank and world size come from the launcher's environment (Open MPI, PMIx, Slurm, torchrun).
Faults for tests: --hang-after N (stop after N lines and sleep), --mid-line (stop inside a line),
--exit-code C, --only-rank R (apply the fault to one rank), --ignore-term (make SIGTERM useless).

The process of rank 0 first prints MARK, so the output says it is a recording: `validators run` then
marks its report REPLAY (`run.replay`), which no release gate accepts as a pre-flight of an image.
"""

import argparse
import os
import re
import signal
import sys
import time
from typing import Iterator, Optional, Tuple

from efa_validators.report.contract import REPLAY_MARK

_TAGS = (
    re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr|stddiag)>:"),  # mpirun --tag-output
    re.compile(r"^\s{0,6}(\d{1,6}): "),  # srun -l
    re.compile(r"^\[(?:rank|default)(\d+)\]:"),  # torchrun
)
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK", "PMI_RANK")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE", "PMI_SIZE")
MARK = REPLAY_MARK + " of a recorded log by the stand-in, not output of this cluster"


def my_rank_and_size(env: Optional[dict] = None) -> Tuple[int, int]:
    """(rank, world size) as the launcher set them; (0, 1) when run alone."""
    env = os.environ if env is None else env
    rank = next((int(env[v]) for v in _RANK_VARS if env.get(v, "").isdigit()), 0)
    size = next((int(env[v]) for v in _SIZE_VARS if env.get(v, "").isdigit()), 1)
    return rank, max(size, 1)


def split_tag(line: str) -> Tuple[Optional[int], str]:
    """(recorded rank or None, line without the recorded launcher tag)."""
    for regex in _TAGS:
        m = regex.match(line)
        if m:
            return int(m.group(1)), line[m.end() :]
    return None, line


def lines_for(path: str, rank: int, size: int, rank_filter: bool) -> Iterator[str]:
    """The recorded lines this process prints, in order (untagged lines belong to rank 0)."""
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not rank_filter:
                yield line
                continue
            recorded, text = split_tag(line)
            owner = 0 if recorded is None else recorded % size
            if owner == rank:
                yield text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m efa_validators.replay", description=__doc__.splitlines()[0])
    p.add_argument("log", help="recorded log to print")
    p.add_argument("--rank-filter", action="store_true", help="print only this process's ranks' lines")
    p.add_argument("--speed", type=float, default=0.0, metavar="LPS", help="lines per second (0: no delay)")
    p.add_argument("--start-delay", type=float, default=0.0, metavar="S", help="sleep before the first line")
    p.add_argument("--hang-after", type=int, default=None, metavar="N", help="after N lines, hang forever")
    p.add_argument(
        "--mid-line", action="store_true", help="with --hang-after/--exit-after: stop inside a line"
    )
    p.add_argument("--exit-after", type=int, default=None, metavar="N", help="after N lines, exit")
    p.add_argument("--exit-code", type=int, default=0, metavar="C", help="exit status at the end (default 0)")
    p.add_argument("--only-rank", type=int, default=None, metavar="R", help="faults apply to rank R only")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (the watchdog must SIGKILL)")
    args = p.parse_args(argv)

    rank, size = my_rank_and_size()
    faulty = args.only_rank is None or args.only_rank == rank
    if args.ignore_term and faulty:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if not os.path.isfile(args.log):
        print("replay: no such log: %s" % args.log, file=sys.stderr)
        return 2
    if args.start_delay:
        time.sleep(args.start_delay)
    delay = 1.0 / args.speed if args.speed > 0 else 0.0
    stop_at = args.hang_after if args.hang_after is not None else args.exit_after
    out = sys.stdout
    if rank == 0:
        out.write(MARK + "\n")
    count = 0
    for line in lines_for(args.log, rank, size, args.rank_filter):
        if faulty and stop_at is not None and count >= stop_at:
            if args.mid_line:
                out.write(line[: max(1, len(line) // 2)])
            break
        out.write(line + "\n")
        out.flush()  # one write per line, as NCCL's logger does: launchers tag whole lines
        count += 1
        if delay:
            time.sleep(delay)
    out.flush()
    if faulty and args.hang_after is not None and count >= args.hang_after:
        while True:  # a collective that never completes
            time.sleep(3600)
    return args.exit_code if faulty else 0


if __name__ == "__main__":
    sys.exit(main())
