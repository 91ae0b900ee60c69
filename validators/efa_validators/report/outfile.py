"""Report files written whole or not at all: the text goes to a temp file beside the target, renamed over
it once complete, so a reader (CI, the release gate) never sees half a report, and a failure leaves none.

`text` is a string or a function that writes its pieces (efa_validators.report.jsonout.document: a report
of 16k
ranks is never one string).
"""

import os
import stat
import sys
import tempfile
from typing import Any, Callable, Union

Text = Union[str, Callable[[Callable[[str], Any]], None]]


def _emitter(text: Text) -> Callable[[Callable[[str], Any]], None]:
    return text if callable(text) else (lambda write: write(text))


def _no_regular_file(target: str) -> bool:
    """`target` exists and is not a regular file once links are followed: a device, a FIFO, /dev/stdout."""
    try:
        return not stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        return False


def write_whole(target: str, text: Text) -> None:
    """Write `text` to the file `target`, all of it or nothing (an error removes the temp file). A target
    that is no regular file (`--json /dev/null`, /dev/stdout, a FIFO) is written through, as a shell's `>`
    does: the rename replaced /dev/null itself with a regular file (as root, for the whole machine)."""
    if _no_regular_file(target):
        with open(target, "w", encoding="utf-8") as fh:
            _emitter(text)(fh.write)
        return
    parent = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".report-", dir=parent)
    try:
        # mkstemp makes the file 0600; a report is published (CI artifacts, the release gate read it, often
        # as another user): the mode a plain open() gives, 0644 under the usual umask; the same text goes to
        # stdout with `-`. The raw spool (run/runner.py) stays 0600: it is the launcher's output before
        # redaction.
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            _emitter(text)(fh.write)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def to_stdout(text: Text) -> None:
    _emitter(text)(sys.stdout.write)
    sys.stdout.flush()


def write(target: str, text: Text) -> None:
    """`text` to `target`: '-' is stdout, anything else a file written whole (`write_whole`)."""
    if target == "-":
        to_stdout(text)
    else:
        write_whole(target, text)
