"""The NET-run fast path (analyze.prepare + Facts.add_net_run, issue 15) folds exactly as one event per line:
random logs of channel lines that qualify and lines that almost do give the same report both ways."""

from __future__ import annotations

import io
import json
import random

from paths import ROOT, TESTS

from efa_validators.analyze import Analysis, analyze_stream
from efa_validators.analyze.needles import _scan_needles, _table_region
from efa_validators.analyze.prep import prepare
from efa_validators.parse.ranks import NetRun, is_libfabric_net
from efa_validators.scan.linescan import scan
from efa_validators.scan.wrapped import joined

TAILS = [
    "NET/Libfabric/0/GDRDMA",
    "NET/AWS Libfabric/1/GDRDMA(PCI)/Shared",
    "NET/Libfabric/2(0)/GDRDMA",
    "NET/Libfabric/3",
    "NET/Socket/0",
    "NET/IB/0/GDRDMA",
    "NET/Libfabric/0/GDRDMA extra words",
    "NET/Libfabric/",
    "NET/AWS Libfabric/0/GDRDMA NCCL error",  # an error line: never a run
    "NET/Libfabric NCCL error/0/GDRDMA",  # the same inside the network name
    "NET/No eligible providers/0",  # a signature in the network name
    "NET/Lib NCCL INFO x/0",  # a second head's text in the network name
    "P2P/CUMEM/read",
]
HOSTS = ["gpu-a", "gpu-b", "10.0.0.7", "rdma-read-host", "Upper"]  # a digit, a signature needle, a capital


def _line(rng: random.Random) -> str:
    host = rng.choice(HOSTS)
    pid = rng.choice((100, 101))
    dev = rng.choice(("0", "1", "2", "3", "fi_getinfo"))  # a needle in the device
    prefix = rng.choice(("", "[1,%d]<stdout>:" % rng.randrange(8), "[1,3]<stderr>:", "  ", "| 1718638989 | "))
    head = "%s:%d:%d [%s] NCCL %s " % (host, pid, pid + 5, dev, rng.choice(("INFO", "INFO", "INFO", "WARN")))
    c = rng.randrange(32)
    body = "Channel %02d/0 : %d[%s] -> %d[%s] [%s] via %s" % (
        c, c, dev, c + 1, dev, rng.choice(("send", "receive")), rng.choice(TAILS),
    )  # fmt: skip
    if rng.random() < 0.1:
        comm = "comm 0x1 rank %d nranks 8 cudaDev %s busId 1000 - Init COMPLETE" % (c % 8, dev)
        body = rng.choice(
            ("NET/OFI Selected Provider is efa (found 4 nics)", "Using network Libfabric", comm)
        )
    end = rng.choice(("", "", "", "\r", " "))
    if rng.random() < 0.03:  # two ranks' lines spliced
        return prefix + head + body[:20] + head + body + end
    return prefix + head + body + end


def _both(data: bytes) -> tuple:
    fast = Analysis()
    analyze_stream(fast, io.BytesIO(data), "t.log")
    slow = Analysis()
    slow.begin("t.log")
    st = {}  # type: dict
    # one line at a time: no runs (a message wrapped over two lines read as one, as `prepare` reads it)
    for lineno, text, cut, flags in joined(
        scan(io.BytesIO(data), _scan_needles(), stats=st, region=_table_region())
    ):
        slow.line(lineno, text, cut, flags)
    slow.end(st["lines"], st["bytes"])
    return json.dumps(fast.report(), sort_keys=True), json.dumps(slow.report(), sort_keys=True)


def test_runs_fold_as_lines_do_on_random_logs():
    runs = 0
    for seed in range(40):
        rng = random.Random(seed)
        lines = []
        for _ in range(rng.randrange(1, 60)):
            one = _line(rng)
            lines.extend([one] * rng.randrange(1, 4) if rng.random() < 0.3 else [one])
        data = ("\n".join(lines) + rng.choice(("\n", ""))).encode()
        runs += sum(1 for item in prepare(scan(io.BytesIO(data), _scan_needles(), region=_table_region()))
                    if len(item) == 2)  # fmt: skip
        fast, slow = _both(data)
        assert fast == slow, seed
    assert runs > 100  # the fast path was taken, not only the slow one


def test_the_catalog_lets_a_net_line_skip_the_signature_search():
    """Every signature needle can only lie in a NET line's host, device or network name (_FIELDS_DECIDE):
    else every NET line would take the general path, and a fast path that is never taken tests nothing."""
    from efa_validators.analyze import prep

    assert prep._FIELDS_DECIDE
    assert prep._holds_needle("gpu-a", "0", "rdma-read-x") and not prep._holds_needle("gpu-a", "0")
    # and no needle can lie across a headed line's head and message (_SPLIT_DECIDES): else every such line
    # would run the signature search (prep_line), and that skip would be tested by nothing
    assert prep._SPLIT_DECIDES


def test_runs_fold_as_lines_do_on_the_real_logs(nccl_logs_dir):
    logs = sorted(nccl_logs_dir.glob("*.log"))
    assert len(logs) >= 10  # the real corpus (../shared/nccl-logs) must be there: no silent pass without it
    logs += sorted((TESTS / "fixtures" / "logs").glob("*.log"))
    assert len(logs) >= 25
    for path in logs:
        fast, slow = _both(path.read_bytes())
        assert fast == slow, path


def _reference(lines: list, cut: bool) -> dict:
    """The per-line NET fold as Facts._net did it before runs (round 4), written out as the oracle."""
    out = {"counts": dict.fromkeys(("net", "net_unnamed", "net_proxied", "net_gdr", "net_pci", "net_nogdr",
                                    "net_unclear"), 0), "names": [], "firsts": {}, "keeps": {}}  # fmt: skip
    for lineno, text, (net, gdr, proxy, pci) in lines:
        c = out["counts"]
        gdr = None if cut and gdr is False else gdr
        c["net"] += 1
        if net:
            out["names"] += [] if net in out["names"] else [net]
        else:
            c["net_unnamed"] += 1
        c["net_proxied"] += proxy is not None
        kind = {True: "gdr", False: "nogdr"}.get(gdr, "unclear")
        c["net_" + kind] += 1
        c["net_pci"] += bool(gdr is True and pci)
        out["firsts"].setdefault("ev_" + kind, (lineno, text))
        kinds = ["channel_" + kind] + ([] if is_libfabric_net(net) else ["channel_other_net"])
        for k in kinds:
            n, ev = out["keeps"].get(k, (0, []))
            out["keeps"][k] = (n + 1, ev + [(lineno, text, k == "channel_unclear")][: 5 - len(ev)])
    return out


def test_a_run_sums_up_what_one_fold_per_line_did():
    rng = random.Random(5)
    for _ in range(300):
        lines = []
        for i in range(rng.randrange(1, 40)):
            net = rng.choice(("Libfabric", "AWS Libfabric", "IB", "", None))
            gdr, proxy, pci = rng.choice((True, False, None)), rng.choice((None, 0, 1)), rng.random() < 0.5
            lines.append((i + 1, "line %d" % i, (net, gdr, proxy, pci)))
        cut = rng.random() < 0.2
        run, want = NetRun.of(lines, cut), _reference(lines, cut)
        assert run.counts == want["counts"] and run.names == want["names"] and run.firsts == want["firsts"]
        assert [(k, n, ev) for k, n, ev in run.keeps] == [(k, n, ev) for k, (n, ev) in want["keeps"].items()]


def test_split_parse_gives_one_report_whatever_the_workers(tmp_path):
    """Above the split size each worker folds its ranges, the parent merges them: one report, 1-3 workers."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_runner_scale import generate

    from efa_validators.analyze import analyze_paths
    from efa_validators.scan import parscan

    log = tmp_path / "ranks.log"
    generate(str(log), 136)  # 1088 ranks, ~8.7 MiB: three ranges
    assert log.stat().st_size >= 2 * parscan.RANGE
    reports = [json.dumps(analyze_paths([str(log)], workers=w), sort_keys=True) for w in (1, 2, 3)]
    assert reports[0] == reports[1] == reports[2]
    assert json.loads(reports[0])["nranks"] == 1088


def _any_line(rng: random.Random) -> str:
    """A line of a shape prep_line's one-head path reads (most), or one near it that it must leave alone."""
    near = rng.random() < 0.3  # one field off: a host, tid, device, level, prefix or end it must not take
    off = rng.randrange(6) if near else -1
    host = rng.choice(
        ["h|x", "é-host", "a" * 205, "Upper"] if off == 0 else ["gpu-a", "gpu-b", "rdma-read-host"]
    )
    tid = "x" if off == 1 else rng.choice(("7", "12"))
    dev = rng.choice(("a b", "[1]")) if off == 2 else rng.choice(("0", "1", ""))
    level = rng.choice(("WARN", "INFOX")) if off == 3 else "INFO"
    prefix = (
        rng.choice(("3: ", " ", "[default0]:"))
        if off == 4
        else rng.choice(("", "[1,2]<stderr>:", "[1,5]<stdout>:"))
    )
    end = rng.choice(("\r", " gpu-b:1:2 [0] NCCL INFO Using network Socket")) if off == 5 else ""
    msg = rng.choice((
        "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
        "NCCL version 2.26.2+cuda12.2", "cudaDriverVersion 12080", "Using network Libfabric",
        "comm 0x1 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
        "ncclCommInitRankConfig comm 0x2 rank 1 nranks 8 cudaDev 1 busId 53000 commId 0x7 - Init START",
        "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0/GDRDMA", "NET/OFI No eligible providers",
        "misc/socket.cc:50 NCCL error: unhandled system error", "NET/IB : Using [0]mlx5_0:1/IB",
        "NCCL_PROTO set by environment to simple", "NET/Plugin: Loaded net plugin Libfabric (v10)",
    ))  # fmt: skip
    return "%s%s:%d:%s [%s] NCCL %s %s%s" % (prefix, host, rng.choice((100, 101)), tid, dev, level, msg, end)


def test_one_head_lines_read_as_the_general_path_reads_them():
    """analyze.prep_line's one-head path (a regex, the last head kept) gives what strip_prefix and parse_text
    give, line by line, on runs of lines that share heads and on lines that almost take the path."""
    from efa_validators.analyze.needles import NCCL, SIGNATURE, TESTS
    from efa_validators.analyze.prep import _headed, _prep_general, prep_line

    rng = random.Random(7)
    taken = left = 0
    for _ in range(3000):
        one = _any_line(rng)
        for raw in [one] * rng.randrange(1, 3):
            flags = rng.choice((NCCL, NCCL | SIGNATURE, NCCL | TESTS, TESTS))
            cut = rng.random() < 0.1
            assert prep_line(5, raw, cut, flags) == _prep_general(5, raw, cut, flags), raw
            fast = _headed(raw) is not None
            taken, left = taken + fast, left + (not fast)
    assert taken > 2000 and left > 500  # both paths were taken
