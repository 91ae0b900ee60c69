"""Strip what launchers and log shippers put in front of a log line.

Why: the same NCCL line reaches us as `host:pid:tid [0] NCCL INFO ...`, as
`[1,3]<stdout>:host:...` (mpirun --tag-output), `3: host:...` (srun -l),
`| 2024-06-17T16:23:09.123Z | host:...` (CloudWatch export), behind timestamps or
indentation, or several of these at once. Parsers downstream must see the line as
the program printed it, and keep who emitted it (the source tag) as a fallback
identity for lines that carry no NCCL head (old NCCL prints its version with printf).
"""

import re
from typing import Optional, Tuple

# mpirun --tag-output / --output-filename style: [jobid,rank]<stdout>:
_MPI = re.compile(r"\[(\d+),(\d+)\]<(?:stdout|stderr)>:")
# srun -l / --label: task id, colon, space (srun pads wide ids with spaces)
_SRUN = re.compile(r"(\d{1,6}): ")
# torchrun --tee / log_line_prefix_template: [default0]:, [rank3]:
_TORCHRUN = re.compile(r"\[(default|rank)(\d+)\]:\s?")
# CloudWatch console/CLI table export: | <timestamp> | message [|]
_CLOUDWATCH = re.compile(r"\|\s*(\d{10,13}|\d{4}-\d\d-\d\d[T ][\d:.,]+Z?(?:[+-]\d\d:?\d\d)?)\s*\|\s?")
# timestamps: [2026-01-02 10:24:27], 2024-06-17T16:23:09.123456Z, 2025-06-17 16:23:09,123
_TS_BRACKET = re.compile(r"\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]\s?")
_TS_ISO = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s")
# syslog style: Jun 17 16:23:09
_TS_SYSLOG = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d\s")
# epoch seconds with fraction, as some shippers write: 1718638989.123456
_TS_EPOCH = re.compile(r"\d{10}\.\d{3,9}\s")

# Ray's log de-duplication (docs.ray.io, configure-logging, "Log deduplication") prints a line once with the
# count of its repeats after it, `... [repeated 15x across cluster]`, the first time followed by its note
# `(Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 ... for more options.)`: the collector's, not
# the program's text
COLLECTOR_ENDS = (" across cluster]", " for more options.)")  # str.endswith takes the tuple: one C call
_REPEATED = re.compile(
    r" *\[repeated \d+x across cluster\](?: \(Ray deduplicates logs by default\.[^()]*\))?\Z"
)

_MAX_ROUNDS = 6
# first characters that start no prefix and no indentation: such a text is returned as is
# (the common case, e.g. an NCCL head `host:pid:tid`, checked before any regex)
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz!\"$%&'()*+,-./:;<=>?@\\]^_`{}~#")


def strip_prefix(line: str) -> Tuple[Optional[str], str]:
    """Return (source tag or None, the line without launcher/shipper prefixes).

    The tag names the emitter as the launcher saw it: `mpi:<rank>`, `srun:<task>`,
    `torchrun:<rank>`; None when no launcher prefix was present. Trailing CR/LF and
    a CloudWatch closing `|` are removed; the text is otherwise left as printed.
    """
    text = line.rstrip("\r\n")
    if text.endswith(COLLECTOR_ENDS):
        text = strip_collector_suffix(text)
    first = text[:1]
    if first in _PLAIN:
        return None, text
    if first == "[":  # fast path for the usual mpirun tag in front of a plain line
        m = _MPI.match(text)
        if m is not None:
            rest = text[m.end() :]
            if rest[:1] in _PLAIN:
                return "mpi:" + m.group(2), rest
            return _strip_rounds(rest, "mpi:" + m.group(2), _MAX_ROUNDS - 1)
    return _strip_rounds(text, None, _MAX_ROUNDS)


def strip_collector_suffix(text: str) -> str:
    """`text` without a log collector's trailing de-duplication count, if it ends with one."""
    at = text.rfind(" [repeated ")
    m = _REPEATED.match(text, at) if at >= 0 else None
    return text[:at].rstrip() if m else text


def _strip_rounds(text: str, source: Optional[str], rounds: int) -> Tuple[Optional[str], str]:
    for _ in range(rounds):
        if text[:1] in _PLAIN:
            return source, text
        stripped = text.lstrip()
        if not stripped:
            return source, ""
        head = stripped[0]
        m = None
        if head == "[":
            m = _MPI.match(stripped)
            if m:
                source = source or f"mpi:{m.group(2)}"
            else:
                m = _TORCHRUN.match(stripped)
                if m:
                    source = source or f"torchrun:{m.group(2)}"
                else:
                    m = _TS_BRACKET.match(stripped)
        elif head == "|":
            m = _CLOUDWATCH.match(stripped)
            if m:
                stripped = stripped.rstrip()
                if stripped.endswith("|") and len(stripped) > m.end():
                    stripped = stripped[:-1].rstrip()
        elif head.isdigit():
            m = _TS_ISO.match(stripped) or _TS_EPOCH.match(stripped)
            if not m:
                m = _SRUN.match(stripped)
                if m:
                    source = source or f"srun:{m.group(1)}"
        elif head.isupper():
            m = _TS_SYSLOG.match(stripped)
        if m is None:
            # indentation alone is a prefix too, but table rows keep their spacing
            # meaningfully only relative to each other, so return the stripped text
            return source, stripped if _looks_indented_log(text) else text
        text = stripped[m.end() :]
    return source, text


def _looks_indented_log(text: str) -> bool:
    """Indentation before an NCCL head or a `#` header is noise; before numbers it is a table."""
    body = text.lstrip()
    if body is text:
        return False
    return not body[:1].isdigit()
