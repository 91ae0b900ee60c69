"""Does `validators run` slow the job it watches? A producer (`cat`) writes a generated 1024-node
(8192-rank) NCCL init log, alone and under `python -m efa_validators run --timeout 5`; the producer's own
wall time is compared (goal, issue 15: under the runner <= 2x alone + 1 s, no false hang) and the
runner's peak RSS is read from its /proc status after its end (goal < 150 MiB).

The log is generated from the line shapes of the real logs in ../shared/nccl-logs (NCCL 2.2x with
aws-ofi-nccl 1.1x on p5: `57-eks-g6e-...` and `59-eks-p4d-...` for plugin/channel/comm lines), as Open
MPI's `--tag-output` prints them, ranks interleaved phase by phase as a real init interleaves them.

Then one hang: every rank but the last goes quiet, the job hangs, `--idle-timeout 3` ends it: the size
of the hang finding and of the report at this scale.

    python bench/bench_runner_scale.py [--nodes 1024] [--repeat 3] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPUS = 8
CHANNELS = 16


def _rank_phases(rank: int, node: int, d: int, nranks: int, nnodes: int) -> list:
    """The lines one rank prints during a communicator init, in phases (list of lists of bodies)."""
    pid = 4100 + d
    host = "p5-st-gpu-%d" % (node + 1)
    head = "[1,%d]<stdout>:%s:%d:%d [%d] NCCL INFO " % (rank, host, pid, pid, d)
    thread = "[1,%d]<stdout>:%s:%d:%d [%d] NCCL INFO " % (rank, host, pid, pid + 481, d)
    comm = "0x5592%08x" % (0xAC18960 + node)
    nxt, prv = (rank + GPUS) % nranks, (rank - GPUS) % nranks
    start = [
        head + "cudaDriverVersion 12080",
        head + "Bootstrap: Using enp71s0:10.1.%d.%d<0>" % (node // 250, node % 250),
        head + "NCCL version 2.26.2+cuda12.2",
        head + "NET/Plugin: Loaded net plugin Libfabric (v10)",
        head + "NET/OFI Initializing aws-ofi-nccl 1.16.2",
        head + "NET/OFI Using Libfabric version 2.1",
        head + "NET/OFI Using CUDA driver version 12080 with runtime 12020",
        head + "NET/OFI Setting provider_filter to efa",
        head + "NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
        head + "NET/OFI Support for global registrations: true",
        head + "NET/OFI Support for DMA-BUF registrations: true",
        head + "Using network Libfabric",
        head + "DMA-BUF is available on GPU device %d" % d,
    ]
    init = [
        thread + "ncclCommInitRankConfig comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x000 "
        "commId 0x7dcff2626d08b830 - Init START" % (comm, rank, nranks, d, d, 0x53 + d),
        thread
        + "comm %s rank %d nRanks %d nNodes %d localRanks 8 localRank %d MNNVL 0"
        % (comm, rank, nranks, nnodes, d),
        thread + "Setting affinity for GPU %d to ffffffff,00000000,ffffffff" % d,
        thread + "Trees [0] %d/-1/-1->%d->%d [1] %d/-1/-1->%d->%d" % (nxt, rank, prv, nxt, rank, prv),
        thread + "P2P Chunksize set to 524288",
    ]
    chans = []
    for c in range(CHANNELS):
        peer = rank - d + (d + 1) % GPUS
        chans.append(thread + "Channel %02d/0 : %d[%d] -> %d[%d] via P2P/CUMEM/read"
                     % (c, rank, d, peer, (d + 1) % GPUS))  # fmt: skip
    net = []
    for c in range(CHANNELS):
        net.append(thread + "Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/Libfabric/%d/GDRDMA"
                   % (c, rank, d, nxt, d, c % 4))  # fmt: skip
        net.append(thread + "Channel %02d/0 : %d[%d] -> %d[%d] [receive] via NET/Libfabric/%d/GDRDMA"
                   % (c, prv, d, rank, d, c % 4))  # fmt: skip
    done = [
        thread + "Connected all rings, use ring PXN 0 GDR 1",
        thread + "Connected all trees",
        thread + "threadThresholds 8/8/64 | 65536/8/64 | 512 | 512",
        thread + "32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, "
        "32 p2p channels per peer",
        thread + "ncclCommInitRankConfig comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x000 "
        "commId 0x7dcff2626d08b830 - Init COMPLETE" % (comm, rank, nranks, d, d, 0x53 + d),
    ]
    return [start, init, chans, net, done]


def generate(path: str, nodes: int) -> dict:
    """Write the init log of `nodes` x 8 ranks; returns its size in bytes and lines."""
    nranks = nodes * GPUS
    lines = nbytes = 0
    with open(path, "w", encoding="utf-8") as fh:
        for phase in range(5):
            for rank in range(nranks):
                body = _rank_phases(rank, rank // GPUS, rank % GPUS, nranks, nodes)[phase]
                text = "\n".join(body) + "\n"
                fh.write(text)
                lines += len(body)
                nbytes += len(text)
    return {"bytes": nbytes, "lines": lines, "ranks": nranks, "nodes": nodes}


def _producer_alone(log: str, sink_path: str = os.devnull) -> float:
    with open(sink_path, "wb") as sink:
        start = time.perf_counter()
        subprocess.run(["cat", log], stdout=sink, check=True)
        return time.perf_counter() - start


TIMED = (
    'import subprocess,sys,time;t=time.perf_counter();subprocess.run(["cat",sys.argv[1]],check=True);'
    'sys.stderr.write("producer_s=%.4f\\n" % (time.perf_counter()-t))'
)


def _under_runner(log: str, work: str, timeout: float) -> dict:
    """The producer times itself (its wall time lands on stderr, kept in the runner's log)."""
    out = os.path.join(work, "report.json")
    runlog = os.path.join(work, "run.log")
    argv = [sys.executable, "-m", "efa_validators", "run", "--quiet", "--timeout", str(timeout),
            "--no-inject", "--log", runlog, "--json", out,
            "--", sys.executable, "-c", TIMED, log]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + str(ROOT / "validators"))
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # max over children so far
    producer = None
    with open(runlog, "rb") as fh:
        fh.seek(max(0, os.path.getsize(runlog) - 4096))
        for raw in fh.read().splitlines():
            if raw.startswith(b"producer_s="):
                producer = float(raw.split(b"=")[1])
    report = json.loads(Path(out).read_text())
    hang = [f for f in report["findings"] if f["id"] == "hang"]
    return {
        "producer_s": producer,
        "runner_wall_s": round(wall, 3),
        "runner_exit": proc.returncode,
        "killed": report["run"]["killed"],
        "hang_finding_chars": len(hang[0]["message"]) if hang else 0,
        "report_json_bytes": os.path.getsize(out),
        "ranks_seen": report.get("ranks_seen"),
        "rss_children_max_mib": round(rss_kib / 1024, 1),
    }


def _hang_case(log: str, work: str) -> dict:
    """Every rank but the last stops 1.5 s before the end, then the job hangs: how readable is the
    hang finding at this scale, how big the report? (the last 5 lines are the last rank's final phase)"""
    out = os.path.join(work, "hang.json")
    script = "head -n -5 %s; sleep 1.5; tail -n 5 %s; exec sleep 3600" % (log, log)
    argv = [sys.executable, "-m", "efa_validators", "run", "--quiet", "--idle-timeout", "3",
            "--timeout", "600", "--log", os.path.join(work, "hang.log"), "--json", out,
            "--", "sh", "-c", script]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + str(ROOT / "validators"))
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
    report = json.loads(Path(out).read_text())
    hang = [f for f in report["findings"] if f["id"] == "hang"][0]
    return {
        "message": hang["message"],
        "message_chars": len(hang["message"]),
        "finding_json_bytes": len(json.dumps(hang)),
        "run_json_bytes": len(json.dumps(report["run"])),
        "report_json_bytes": os.path.getsize(out),
        "ranks_count": hang.get("ranks_count"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=5.0, help="the runner's --timeout (default 5)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", help="generate into this folder and keep it (default: a temp folder)")
    args = ap.parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="bench-runner-scale-")
    log = os.path.join(work, "init-%dnodes.log" % args.nodes)
    shape = generate(log, args.nodes)
    print("log: %(nodes)d nodes, %(ranks)d ranks, %(lines)d lines, %(bytes)d bytes" % shape, flush=True)
    alone = [_producer_alone(log) for _ in range(args.repeat)]
    # the same write into a file next to the log, as the runner's spool takes it (page cache, not /dev/null)
    to_file = statistics.median(
        _producer_alone(log, os.path.join(work, "alone.out")) for _ in range(args.repeat)
    )
    os.unlink(os.path.join(work, "alone.out"))
    under = [_under_runner(log, work, args.timeout) for _ in range(args.repeat)]
    a = statistics.median(alone)
    # a producer the runner killed never printed its time: it did not finish
    u = statistics.median(r["producer_s"] if r["producer_s"] is not None else float("inf") for r in under)
    limit = 2 * a + 1.0
    rss = max(r["rss_children_max_mib"] for r in under)
    hang = _hang_case(log, work)
    ok = u <= limit and all(r["killed"] is None for r in under) and rss < 150
    result = {"log": shape, "producer_alone_s": round(a, 4), "producer_alone_to_file_s": round(to_file, 4),
              "producer_under_runner_s": round(u, 4),
              "limit_s": round(limit, 4), "runs": under, "runner_peak_rss_mib": rss, "hang": hang,
              "ok": ok}  # fmt: skip
    print(json.dumps(result, indent=2))
    verdict = "OK" if ok else "NOT MET"
    print(
        "producer alone %.3f s (%.3f s into a file), under runner %.3f s (limit %.3f s); "
        "peak RSS %.1f MiB; hang finding %d chars: %s"
        % (a, to_file, u, limit, rss, hang["message_chars"], verdict)
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
