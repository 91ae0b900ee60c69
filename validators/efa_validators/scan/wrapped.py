"""Messages hard-wrapped at a fixed column: two physical lines that are one message.

Why: a log pasted from a console or an issue, or shipped by a collector with a line width, breaks long
lines at a fixed column, inside any word (`... ProcessGroupNCCL'` / `s watchdog got stuck for 480
seconds ...`). A pattern then matches neither half, and the failure the message states is lost.

The rule (decided for issue 41): a line that holds one of `NEEDLES` is held back one line; it is joined to
the next line when that line
  - is the next physical line (its number is one more),
  - starts no message of its own (no bracketed head such as c10d's `[E1206 ...]`, `[rank3]:`, `[PG ID`, no
    NCCL `host:pid:tid [dev]` head) and carries no launcher prefix other than the held line's,
  - and one of `PATTERNS` matches the two joined across the break (it starts before the end of the first
    line and ends after it): a hard wrap drops no character, so the halves join with nothing between them
    (or with one space, where the wrapper trimmed the space it broke at).
Otherwise both lines are read as they are. Only two lines are ever joined and only one is held: memory
stays one line, whatever the log (DESIGN principle 4). A message broken twice is read from the half that
holds its pattern (each pattern's distinctive words also match alone, see judge/signatures.py).
A parse split across workers never starts a range right after a line that holds a needle
(`ends_no_range`, scan/parscan.boundaries): the two halves are always read by one `prepare`.
"""

import re
from typing import Iterable, Iterator, Optional

from efa_validators.scan.prefix import strip_prefix

# a line holding one of these may be a half of a wrapped message of PATTERNS (the scan passes each of them):
# c10d's prefix for the first half, each message's last words for the second (a break inside those leaves
# the message whole in the first half); few, as each is one more pass of the scan over the log
NEEDLES = (
    "ProcessGroupNCCL",  # c10d's log prefix (`ProcessGroupNCCL.cpp:1583]`): the first half of each
    "atchdog",
    "enqueued coll",  # the watchdog-stuck message's tail
    "dumping debug info",  # the heartbeat message's tail
    "before timing out",  # the collective-timeout message's tail
)

# PyTorch c10d's watchdog and heartbeat monitor messages (pytorch/pytorch
# torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp at cf1380df): what a wrap must not hide
PATTERNS = (
    re.compile(r"ProcessGroup\w*'s watchdog got stuck for \d+ seconds"),
    re.compile(r"Heartbeat monitor timed out"),
    re.compile(r"[Ww]atchdog caught collective operation timeout: WorkNCCL\([^)]*\)"),
)

# a text that starts a message of its own: a bracketed head ([E1206 ..., [rank3]:, [PG ID ...) or an NCCL
# head (host:pid:tid [dev])
_OWN_HEAD = re.compile(r"\[|[^\s:\[\]|]+:\d+:\d+ \[")


def holds_needle(raw: str) -> bool:
    """Whether `raw` may be a half of a wrapped message (a plain loop of substring tests)."""
    for needle in NEEDLES:
        if needle in raw:
            return True
    return False


def joined(lines: Iterable[tuple]) -> Iterator[tuple]:
    """The scanned lines (line number, raw, cut, flags) in order, each wrapped message's two lines as one
    (the first's number, both flags): at most one line held."""
    held = None  # type: Optional[tuple]
    for line in lines:
        if held is not None:
            first, held = held, None
            if not line[2] and line[0] == first[0] + 1:
                both = rejoin(first[1], line[1])
                if both is not None:
                    yield first[0], both, False, first[3] | line[3]
                    continue
            yield first
        if not line[2] and holds_needle(line[1]):
            held = line
        else:
            yield line
    if held is not None:
        yield held


def ends_no_range(line: bytes) -> bool:
    """A raw line after which no scan range may start (it may be the first half of a wrapped message)."""
    for needle in _NEEDLE_BYTES:
        if needle in line:
            return True
    return False


_NEEDLE_BYTES = tuple(n.encode() for n in NEEDLES)


def rejoin(first: str, second: str) -> Optional[str]:
    """The raw line `first` + the text of `second` when the two are one wrapped message (the rule above),
    else None. `first` keeps its prefixes, so the joined line is read as `first` would be."""
    src_a, text_a = strip_prefix(first)
    src_b, text_b = strip_prefix(second)
    if not text_a or not text_b or (src_b is not None and src_b != src_a):
        return None
    if _OWN_HEAD.match(text_b):
        return None
    for sep in ("", " "):
        joined = text_a + sep + text_b
        if _spans(joined, len(text_a)):
            return first + sep + text_b
    return None


# how far from the break a message of PATTERNS may start or end (each is at most ~300 characters)
SPAN = 400


def _spans(text: str, at: int) -> bool:
    """One of PATTERNS matches `text` across position `at` (the break), looked for within SPAN of it: a
    search to the end of a 64 KiB line of `ProcessGroupProcessGroup...` retried `\\w*` from every
    `ProcessGroup` (quadratic: 0.85 s a line pair, 70 s for a 5 MB log of them)."""
    for pattern in PATTERNS:
        m = pattern.search(text, max(0, at - SPAN), at + SPAN)
        if m is not None and m.start() < at < m.end():
            return True
    return False
