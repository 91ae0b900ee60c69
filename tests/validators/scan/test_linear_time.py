"""No input makes the parser slow (issue #10 item 6): every pattern runs in linear time.

Lines of 1 MB built to hurt each pattern (a long run before ` NCCL INFO`, thousands of heads in one
line, long runs of `host:1:1 [`, digits, brackets, table-like and prefix-like text) go through the file
scan and the streaming entry; the time is bounded by a ratio to a plain read of the same file, measured
in the same test. Before the fix one 65 KB line took 24 s.
"""

import time

from efa_validators.analyze import analyze, analyze_paths
from efa_validators.parse.nccllog import parse_text

MB = 1 << 20
PATTERNS = (
    "x",
    "a:1:1 [",
    "h:1:1 [0] NCCL INFO x ",
    " NCCL INFO",
    " NCCL WARN [0]",
    "1:",
    "[0]",
    " ",
    "Channel 00/0 : 0[0] -> 1[0] via NET/",
    "via NET/a/0(1)",
    "NET/OFI Selected provider is ",
    "NET/Plugin : dlerror=",
    "[1,0]<stdout>:",
    "2024-01-01 10:00:00 ",
    "| 2024-06-17T16:23:09.123Z ",
    "h: Test NCCL failure ",
    "1 ",
    "# size count busbw ",
    "comm 0x1 rank 1 nranks 2 ",
    "AAAA set by environment to ",
    "srun: error: a: task 1: ",
    "process rank 1 with PID 1 on node ",
    "Using network ",
)


H = "h:1:1 [0] NCCL INFO "
# a fact line, then a long run of blanks: a lazy group before `\s*$` retried from every blank (quadratic)
BLANK_TAILS = (
    H + "Using network x",
    H + "AAA_B set by environment to x",
    H + "Initialized NET plugin x",
    H + "Assigned NET plugin x",
    "#  Rank  0 Group  0 Pid  1 on h device  0 [0] x",
    "srun: error: a: task 1: x",
    "FI_EFA_USE_DEVICE_RDMA=1 was set" * 1000,
)


def _lines():
    for p in PATTERNS:
        body = (p * (MB // len(p) + 1))[:MB]
        yield body
        yield H + body
        yield body + " NCCL INFO x"
    for head in BLANK_TAILS:
        yield head + " " * MB + "y"


def _plain_read(path) -> float:
    t = time.perf_counter()
    with open(path, "rb") as fh:
        for line in fh:
            line.decode("utf-8", "replace")
    return time.perf_counter() - t


def test_one_mb_lines_parse_in_time_linear_to_a_plain_read(tmp_path):
    path = tmp_path / "long-lines.log"
    with open(path, "w") as fh:
        for line in _lines():
            fh.write(line + "\n")
    base = min(_plain_read(path) for _ in range(3))
    t = time.perf_counter()
    report = analyze_paths([str(path)], workers=1)
    scan = time.perf_counter() - t
    t = time.perf_counter()
    analyze(_lines())
    stream = time.perf_counter() - t
    assert report["inputs"][0]["lines"] == 3 * len(PATTERNS) + len(BLANK_TAILS)
    # measured here: scan ~8 x, stream ~2 x a plain read; the quadratic head regex was > 400 x
    assert scan < 30 * base + 0.5, (scan, base)
    assert stream < 30 * base + 0.5, (stream, base)


def test_a_line_full_of_heads_is_parsed_without_recursion():
    """Thousands of `host:pid:tid [dev] NCCL INFO` in one line: read up to SPLICES_MAX, no RecursionError."""
    events = parse_text("h:1:1 [0] NCCL INFO Using network Socket " * 5000, 1, None, None)
    assert 1 <= len(events) <= 64 and all(e.host == "h" for e in events)


def test_the_wrapped_line_joiner_looks_for_a_message_only_near_the_break(monkeypatch):
    """Attack on issue 41's joiner: two 60 KB lines of `ProcessGroupProcessGroup...` (each holds a needle and
    is under the scanner's cut) made the search for `ProcessGroup\\w*'s watchdog` run to the end of the pair
    from every `ProcessGroup`: quadratic, 0.85 s of CPU a pair, 70 s for a 5 MB log. Asserted without a
    clock: every search the joiner makes is confined to a window around the break, whatever the lines."""
    from efa_validators.scan import wrapped

    windows = []

    class Recorded:
        def __init__(self, pattern):
            self.pattern = pattern

        def search(self, text, pos=0, endpos=None):
            end = len(text) if endpos is None else min(endpos, len(text))
            windows.append(end - pos)
            return self.pattern.search(text, pos, end)

    monkeypatch.setattr(wrapped, "PATTERNS", tuple(Recorded(p) for p in wrapped.PATTERNS))
    first, second = "ProcessGroupNCCL" + "ProcessGroup" * 5000, "ProcessGroup" * 5000
    assert wrapped.rejoin(first, second) is None
    assert windows and max(windows) <= 2 * wrapped.SPAN, max(windows)
    # and a real wrapped message is still joined, wherever the break falls in it
    message = "[rank3]:[E1206 10:00:00.000 ProcessGroupNCCL.cpp:1583] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
    message += "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress"
    for cut in range(len(message) - len("ProcessGroupNCCL's watchdog got stuck for 480 seconds") + 1,
                     len(message) - len(" without making progress")):  # fmt: skip
        assert wrapped.rejoin(message[:cut], message[cut:]) == message, cut
