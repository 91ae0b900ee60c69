"""Random NCCL-shaped logs and a whole-process runner, shared by the scan, fold and progress tests: the split
scan needs a fresh interpreter (fork, no threads), and every such test a bound on a hang."""

from __future__ import annotations

import json
import random
import subprocess
import sys

from paths import ROOT

from efa_validators.scan.linescan import MAX_LINE

HEAD = b"[1,%d]<stdout>:node-%d:41%02d:42%02d [%d] NCCL INFO "
PIECES = [
    b"Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
    b"Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    b"NET/OFI Selected Provider is efa (found 4 nics)",
    b"Using network Libfabric",
    b"comm 0x55 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
    b"NCCL WARN NET/OFI something odd",
]
TABLE = [
    b"#       size         count      type   redop    root     time   algbw   busbw #wrong     time",
    b"           8             2     float     sum      -1    12.90    0.00    0.00      0    12.87",
    b"        1024           256     float     sum      -1    13.10    0.08    0.15      0    13.00",
    b"Batch 7 Loss: 11.6, Speed: 4.88 samples/sec",  # a same-emitter text line: ends a footerless table
    b"# Out of bounds values : 0 OK",
    b"# Avg bus bandwidth    : 0.15 ",
]


def random_log(rng: random.Random, lines: int, tables: bool = True) -> bytes:
    """NCCL lines, chatter, nccl-tests tables (some without footers), CRLF, over-long lines."""
    out = []
    for _ in range(lines):
        r = rng.random()
        if not tables and 0.35 <= r < 0.6:
            r = 0.9
        rank = rng.randrange(4)
        if r < 0.35:
            out.append(HEAD % (rank, rank, rank, rank, rank) + rng.choice(PIECES))
        elif r < 0.55:
            out.append(b"[1,%d]<stdout>:" % rank + rng.choice(TABLE))
        elif r < 0.6:
            out.append(rng.choice(TABLE))
        elif r < 0.63:  # around MAX_LINE, with a needle just inside or just outside the head
            pad = MAX_LINE + rng.randrange(-8, 8) - 3
            out.append(b"x" * pad + b"NET" + b"y" * rng.randrange(0, 40))
        elif r < 0.66:
            out.append(b"step %d loss 1.25 error-free\r" % rng.randrange(1000))
        elif r < 0.67:
            out.append(b"\xff\xfe garbage NET \x00")
        else:
            out.append(b"[1,0]<stdout>:Batch %d Loss: 11.61653, lr: 0.0001" % rng.randrange(10**6))
    data = b"\n".join(out)
    return data if rng.random() < 0.3 else data + b"\n"  # sometimes a cut last line


def run_json(script: str, *args: str, timeout: float = 300):
    """What `script` prints as JSON, run as a whole process (`python -c`; its argv[1] is the folder
    efa_validators imports from): the split needs a fresh interpreter (fork, no threads) and the tests a bound
    on a hang."""
    res = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "validators"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)
