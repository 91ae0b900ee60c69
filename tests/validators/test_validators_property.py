"""Property tests (bounded): junk, truncation at any byte, shuffled rank order.

Never a crash, and never a `true` efa/gdr that the text itself does not support.
"""

import io
import os
import random
import re
from pathlib import Path

import pytest
from conftest import corpus_missing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import ROOT

from efa_validators.analyze import Analysis, analyze, analyze_stream

FIX = ROOT / "tests" / "fixtures" / "logs"
CORPUS = Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))
BOUNDED = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_PROVIDER_EFA = re.compile(r"Selected [Pp]rovider is efa")
_NET_CHANNEL = re.compile(r"via NET/[^/\n]+/\d+")


def report_of(data: bytes) -> dict:
    a = Analysis()
    analyze_stream(a, io.BytesIO(data), "t.log")
    return a.report()


def assert_supported(report: dict, data: bytes) -> None:
    """A `true` must be backed by the text: provider efa + NET channels; /GDRDMA on NET channels."""
    text = data.decode("utf-8", "replace")
    if report["efa"] is True:
        assert _PROVIDER_EFA.search(text) and _NET_CHANNEL.search(text), "efa=true without support"
    if report["gdr"] is True:
        assert "/GDRDMA" in text and _NET_CHANNEL.search(text), "gdr=true without support"
        for m in re.finditer(r"via NET/[^/\n]+/\d+(?:\(\d+\))?(\S*)\s*$", text, re.M):
            assert m.group(1).startswith("/GDRDMA"), "gdr=true despite a clean NET channel without GDRDMA"
    assert report["verdict"] in ("pass", "fail", "unknown")
    if report["verdict"] == "pass":
        assert report["efa"] is True and report["gdr"] is True


_FRAGMENTS = [
    "h:1:2 [0] NCCL INFO ",
    "NET/OFI Selected Provider is ",
    "efa",
    "tcp",
    " (found 4 nics)",
    "Using network ",
    "Libfabric",
    "Socket",
    "Channel 00/0 : 0[0] -> 1[0] [send] via NET/",
    "Libfabric/0",
    "/GDRDMA",
    "(PCI)",
    "(1)",
    "[1,0]<stdout>:",
    "0: ",
    "| 2024-06-17T16:23:09Z | ",
    "\r",
    "\n",
    "# ",
    "NCCL WARN ",
    "comm 0x1 rank 0 nranks 2 cudaDev 0 - Init COMPLETE",
]


@BOUNDED
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=20)), max_size=60))
def test_fragment_soup_never_lies(parts):
    data = "".join(parts).encode("utf-8", "surrogatepass")
    assert_supported(report_of(data), data)


@BOUNDED
@given(st.binary(max_size=4000))
def test_random_bytes_never_crash_nor_claim(data):
    r = report_of(data)
    assert r["efa"] is not True and r["gdr"] is not True


@BOUNDED
@given(st.lists(st.text(max_size=200), max_size=50))
def test_live_line_api_on_junk(lines):
    r = analyze(lines)
    assert r["efa"] is not True and r["gdr"] is not True


def _logs():
    out = [FIX / "p5-2node-efa-gdr-mpirun.log", FIX / "interleaved-cut.log", FIX / "cloudwatch-p4d-crlf.log"]
    for name in (
        "01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log",
        "57-eks-g6e-48xlarge-4pod-1gpu-ofi1.16.2-efa-4nics-gdr-disabled-training.log",
    ):
        if (CORPUS / name).exists():
            out.append(CORPUS / name)
    return out


@pytest.mark.parametrize("path", _logs(), ids=lambda p: p.name)
def test_truncation_at_sampled_bytes(path):
    """Every byte of small logs; for larger ones 120 evenly spread offsets plus the last 200 bytes."""
    data = path.read_bytes()
    if len(data) <= 6000:
        offsets = range(len(data) + 1)
    else:
        step = max(1, len(data) // 120)
        offsets = sorted(set(range(0, len(data), step)) | set(range(len(data) - 200, len(data) + 1)))
    for off in offsets:
        cut = data[:off]
        assert_supported(report_of(cut), cut)


@BOUNDED
@given(st.randoms(use_true_random=False))
def test_shuffled_rank_order_gives_the_same_facts(rnd):
    data = (FIX / "p5-2node-efa-gdr-mpirun.log").read_text().splitlines()
    nccl = [line for line in data if "NCCL INFO" in line]
    rest = [line for line in data if "NCCL INFO" not in line]
    shuffled = list(nccl)
    rnd.shuffle(shuffled)
    base, got = analyze(nccl + rest), analyze(shuffled + rest)
    keys = ("efa", "gdr", "network", "provider", "nics", "nccl_version", "nranks", "ranks_seen", "plugin")
    assert {k: got[k] for k in keys} == {k: base[k] for k in keys}
    assert [(r["host"], r["rank"], r["net_channels"]) for r in got["ranks"]] == [
        (r["host"], r["rank"], r["net_channels"]) for r in base["ranks"]
    ]


def test_shuffled_real_log_ranks():
    path = CORPUS / "01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log"
    if not path.exists():
        corpus_missing("corpus absent")
    lines = path.read_text().splitlines()
    base = analyze(lines)
    for seed in range(5):
        rnd = random.Random(seed)
        nccl = [ln for ln in lines if "NCCL INFO" in ln]
        rnd.shuffle(nccl)
        got = analyze(nccl + [ln for ln in lines if "NCCL INFO" not in ln])
        assert (got["efa"], got["gdr"], got["nranks"], got["ranks_seen"]) == (True, True, 16, 16)
        assert got["network"] == base["network"] and got["provider"] == base["provider"]
