"""Reports as JSON text: the bytes `json.dumps(obj, indent=2, sort_keys=True, default=str)` gives, in pieces.

Why not `json.dump`: with `indent` the standard library leaves its C encoder for a generator that yields
every token (a million for an 8192-rank report: 0.3 s and more to write than to build it). Here a plain
recursion appends to a buffer handed to `write` every few thousand pieces, so the text never exists whole
and strings still go through the C escaper. tests/validators/report/test_jsonout.py compares the two on real
reports and on random documents.
"""

from json.encoder import INFINITY, encode_basestring_ascii
from typing import Any, Callable

FLUSH_EVERY = 4096  # pieces in the buffer before it is written


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == INFINITY:
        return "Infinity"
    if o == -INFINITY:
        return "-Infinity"
    return float.__repr__(o)


def _key(k: Any) -> str:
    """A dict key as json turns it into a string (after sorting, as json sorts the original keys)."""
    if isinstance(k, str):
        return k
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return int.__repr__(k)
    if isinstance(k, float):
        return _float(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def dump(obj: Any, write: Callable[[str], Any], default: Callable[[Any], Any] = str) -> None:
    """Write `obj` as indented, key-sorted JSON (no trailing newline) through `write`."""
    parts = []  # type: List[str]
    add = parts.append
    esc = encode_basestring_ascii

    def flush() -> None:
        write("".join(parts))
        parts.clear()

    def enc(o: Any, pad: str) -> None:
        t = type(o)
        if t is str:
            add(esc(o))
        elif o is None:
            add("null")
        elif o is True:
            add("true")
        elif o is False:
            add("false")
        elif t is int:
            add(int.__repr__(o))
        elif t is float:
            add(_float(o))
        elif t is dict or t is list or t is tuple:
            if not o:
                add("{}" if t is dict else "[]")
                return
            inner = pad + "  "
            if t is dict:
                sep = "{" + inner
                for k, v in sorted(o.items()):
                    add(sep)
                    add(esc(_key(k)))
                    add(": ")
                    enc(v, inner)
                    sep = "," + inner
                add(pad)
                add("}")
            else:
                sep = "[" + inner
                for v in o:
                    add(sep)
                    enc(v, inner)
                    sep = "," + inner
                add(pad)
                add("]")
            if len(parts) > FLUSH_EVERY:
                flush()
        elif isinstance(o, str):
            add(esc(o))
        elif isinstance(o, int):  # an int subclass (bool is handled above), as json prints it
            add(int.__repr__(o))
        elif isinstance(o, float):
            add(_float(o))
        elif isinstance(o, dict):
            enc(dict(o), pad)
        elif isinstance(o, (list, tuple)):
            enc(list(o), pad)
        else:
            enc(default(o), pad)

    enc(obj, "\n")
    flush()


def document(obj: Any) -> Callable[[Callable[[str], Any]], None]:
    """`obj` as a JSON document (the text and a newline), for efa_validators.report.outfile to write."""

    def write_to(write: Callable[[str], Any]) -> None:
        dump(obj, write)
        write("\n")

    return write_to
