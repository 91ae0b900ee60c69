"""Text quoted from a log, made safe for a terminal or a CI summary.

A log line is the job's output: it can hold ESC sequences (clear the screen, retitle the window, move the
cursor over the verdict), other C0/C1 controls and Unicode direction overrides that reorder what is shown.
Every field a verdict summary quotes passes through `printable`, which writes each such character as a
visible `\\xNN` / `\\uNNNN` escape; the JSON report keeps the text as it was (json escapes it).
"""

import re

# C0 (but tab), DEL, C1, and the bidirectional embedding/override/isolate characters (Unicode TR9)
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: "re.Match") -> str:
    code = ord(m.group(0))
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code


def printable(value: object) -> str:
    """`str(value)` with every control character shown as an escape (None is the empty string)."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(_escape, text)
