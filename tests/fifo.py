"""A call that must not block opening a FIFO, run so that a test fails instead of hanging when it does."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable


def returns_without_blocking(call: Callable[[], Any], fifo: Any, what: str) -> Any:
    """`call()`'s result. Why a thread: open() of a FIFO with no writer blocks for ever; where the call is
    still blocked after 30 s, a writer is opened so the thread ends, and the test fails saying `what`."""
    done = {}
    worker = threading.Thread(target=lambda: done.update(got=call()), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # blocked in open(): give it a writer so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY))
        worker.join(30)
        raise AssertionError(what)
    return done["got"]
