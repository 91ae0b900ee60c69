"""What the pre-flight verbs share: the flags' value types, the usage exit code, the JSON writer."""

import argparse
import math
from typing import Any, Dict, Optional

from efa_validators.report import jsonout, outfile
from efa_validators.run import imagebind

EXIT_USAGE = 2


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if not math.isfinite(value) or value <= 0:  # nan passed `<= 0` (every comparison with NaN is false)
        raise argparse.ArgumentTypeError("must be a finite number > 0: %r" % text)
    return value


def size(text: str) -> int:
    """A byte count: `65536`, `64K`, `512M`, `1G` (powers of 1024), at least 1024."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError("not a size: %r (bytes, or a number and K, M or G)" % text) from None
    if value < 1024:
        raise argparse.ArgumentTypeError("must be at least 1K: %r" % text)
    return value


def image_ref(text: str) -> str:
    """`REF@sha256:<64 hex>`: a digest, because `build.py release --require-preflight` matches on it."""
    try:
        return imagebind.parse_image_ref(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1: %r" % text)
    return value


def write_json(report: Dict[str, Any], dest: Optional[str]) -> None:
    """Streamed (efa_validators.report.jsonout), not built as one string first: at 8192 ranks the text is
    megabytes."""
    if dest:
        outfile.write(dest, jsonout.document(report))
