"""PyTorch probe: an all-reduce sweep through torch.distributed, under torchrun.

Why: a training job uses the NCCL that its PyTorch wheel loads, often not the system NCCL that
nccl-tests was built against (pytorch#122571: 2.19.3 vs 2.15.5). The probe exercises that one. Backend
nccl when CUDA is available (run it with NCCL_DEBUG=INFO and the log parser sees the real init lines),
gloo otherwise, so the launcher, timeouts and reports run for real on a CPU machine.

    torchrun --nproc-per-node 2 -m efa_validators.probe_torch [--min-bytes 8] [--max-bytes 64M] [--json FILE]

Rank 0 prints the sweep as an nccl-tests style table (so `python -m efa_validators parse` reads it) and,
with --json, the rows in the report's `nccl_tests.rows` shape. torch is imported here only: the rest of
validators/ stays standard library.
"""

import argparse
import datetime
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def sizes(lo: int, hi: int, factor: int = 2) -> List[int]:
    out = []
    s = max(lo, 4)
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def row(size: int, seconds: float, world: int, wrong: int) -> Dict[str, Any]:
    """One row as nccl-tests reports it: algbw = bytes / time; all_reduce busbw = algbw x 2(n-1)/n."""
    algbw = size / seconds / 1e9 if seconds > 0 else 0.0
    busbw = algbw * (2.0 * (world - 1) / world) if world > 1 else 0.0
    return {
        "size": size,
        "count": size // 4,
        "type": "float",
        "redop": "sum",
        "root": -1,
        "time_us": round(seconds * 1e6, 2),
        "algbw": round(algbw, 3),
        "busbw": round(busbw, 3),
        "wrong": wrong,
        "placement": "out_of_place",
    }


def table(rows: List[Dict[str, Any]], world: int, backend: str) -> List[str]:
    lines = [
        "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: 2(factor) warmup iters: %d iters: %d validation: 1"
        % (rows[0]["size"] if rows else 0, rows[-1]["size"] if rows else 0, _WARMUP, _ITERS),
        "# efa_validators.probe_torch all_reduce via torch.distributed backend %s, %d ranks"
        % (backend, world),
        "#",
        "#                                                              out-of-place                       in-place",  # noqa: E501 - the format as printed
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",  # noqa: E501 - the format as printed
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",  # noqa: E501 - the format as printed
    ]
    for r in rows:
        lines.append(
            "%12d  %12d  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6d  %7.2f  %6.2f  %6.2f  %6d"
            % (
                r["size"],
                r["count"],
                r["type"],
                r["redop"],
                r["root"],
                r["time_us"],
                r["algbw"],
                r["busbw"],
                r["wrong"],
                r["time_us"],
                r["algbw"],
                r["busbw"],
                r["wrong"],
            )
        )
    lines.append("# Out of bounds values : %d %s" % (0, "OK"))
    avg = sum(r["busbw"] for r in rows) / len(rows) if rows else 0.0
    lines.append("# Avg bus bandwidth    : %.4f" % avg)
    return lines


_WARMUP = 2
_ITERS = 5


# What each launcher tells a rank about itself, as torch.distributed's env:// wants it. [Open MPI mpirun(1)
# "Exported Environment Variables": OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK; Slurm srun(1) "OUTPUT ENVIRONMENT
# VARIABLES": SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID]
_LAUNCHER_ENV = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


def from_launcher(env) -> Optional[Dict[str, str]]:
    """RANK, WORLD_SIZE and LOCAL_RANK: torchrun's as they are, else mpirun's or srun's; None without any."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return {}
    for rank, size, local in _LAUNCHER_ENV:
        if rank in env and size in env:
            return {"RANK": env[rank], "WORLD_SIZE": env[size], "LOCAL_RANK": env.get(local, "0")}
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m efa_validators.probe_torch", description=__doc__.splitlines()[0]
    )
    p.add_argument("--min-bytes", type=_size, default=8)
    p.add_argument("--max-bytes", type=_size, default=1 << 24)
    p.add_argument("--iters", type=int, default=_ITERS)
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout in seconds")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the rows here")
    args = p.parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as err:
        print("probe_torch: torch is not installed: %s" % err, file=sys.stderr)
        return 2
    launcher = from_launcher(os.environ)
    if launcher is None:
        print(
            "probe_torch: run under torchrun, mpirun or srun (RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_* "
            "not set)",
            file=sys.stderr,
        )
        return 2
    os.environ.update(launcher)
    if "MASTER_ADDR" not in os.environ:
        print("probe_torch: MASTER_ADDR is not set (rank 0's host; the recipes pass it)", file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_PORT", "29500")
    cuda = torch.cuda.is_available()
    backend = args.backend if args.backend != "auto" else ("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    # the timeout turns a hung collective into an error (watchdog) instead of waiting forever
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    import socket

    print("# probe rank %d of %d on %s, device %s" % (rank, world, socket.gethostname(), device), flush=True)
    if rank == 0:
        print("# torch %s, backend %s, world %d" % (torch.__version__, backend, world), flush=True)
        if cuda:
            v = torch.cuda.nccl.version()
            print("# torch NCCL version %s" % ".".join(str(x) for x in v), flush=True)
    rows = []
    for size in sizes(args.min_bytes, args.max_bytes):
        n = max(size // 4, 1)
        buf = torch.ones(n, dtype=torch.float32, device=device)
        for _ in range(_WARMUP):
            dist.all_reduce(buf)
        buf.fill_(1.0)
        if cuda and backend == "nccl":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
            buf.div_(world)  # keeps the value 1.0 so the result can be checked
        if cuda and backend == "nccl":
            torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / args.iters
        wrong = int((buf != 1.0).sum().item())
        t = torch.tensor([elapsed, float(wrong)], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank and any wrong value decide
        rows.append(row(size, float(t[0].item()), world, int(t[1].item())))
    if rank == 0:
        for line in table(rows, world, backend):
            print(line, flush=True)
        if args.json:
            doc = {
                "collective": "all_reduce",
                "backend": backend,
                "world": world,
                "rows": rows,
                "torch": torch.__version__,
                "nccl_version": ".".join(str(x) for x in torch.cuda.nccl.version()) if cuda else None,
            }
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2, sort_keys=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
