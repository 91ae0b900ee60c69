"""What a build tells the person watching: a live table on a terminal, one line per step elsewhere."""

from __future__ import annotations

import sys
import threading
import time
from typing import Dict, Optional, Sequence, Tuple


class Reporter:
    """What a build tells the person watching; the rich and plain displays implement it."""

    def event(self, variant: str, status: str, text: str = "", step: Tuple[int, int] = (0, 0)) -> None:
        raise NotImplementedError


class PlainReporter(Reporter):
    """One line per step and per outcome: what CI logs and pipes want."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()
        self.last: Dict[str, Tuple[str, Tuple[int, int]]] = {}

    def event(self, variant: str, status: str, text: str = "", step: Tuple[int, int] = (0, 0)) -> None:
        key = (status, step)
        if status == "building" and self.last.get(variant) == key:
            return  # output lines inside a step go to the log file only
        self.last[variant] = key
        where = f" {step[0]}/{step[1]}" if step[1] else ""
        with self.lock:
            print(f"[{variant}] {status}{where} {text[:160]}".rstrip(), file=self.stream, flush=True)


class RichReporter(Reporter):
    """A live table, one row per variant: status, step, elapsed, last line."""

    def __init__(self, names: Sequence[str]):
        from rich.console import Console
        from rich.live import Live

        self.rows: Dict[str, list] = {n: ["queued", (0, 0), "", None] for n in names}
        self.lock = threading.Lock()
        self.console = Console()
        self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)

    def _table(self):
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", expand=True)
        for col, kw in (("variant", {}), ("status", {}), ("step", {}), ("time", {}), ("last", {"ratio": 1})):
            table.add_column(col, no_wrap=True, overflow="ellipsis", **kw)
        style = {"built": "green", "skipped": "cyan", "failed": "bold red"}
        now = time.monotonic()
        for name, (status, step, text, t0) in self.rows.items():
            elapsed = f"{now - t0:.0f}s" if t0 else ""
            table.add_row(
                name,
                f"[{style.get(status, 'yellow')}]{status}[/]",
                f"{step[0]}/{step[1]}" if step[1] else "",
                elapsed,
                text,
            )
        return table

    def event(self, variant: str, status: str, text: str = "", step: Tuple[int, int] = (0, 0)) -> None:
        with self.lock:
            row = self.rows.setdefault(variant, ["queued", (0, 0), "", None])
            if row[3] is None:
                row[3] = time.monotonic()
            row[0], row[2] = status, text[:200]
            if step[1]:
                row[1] = step
            self.live.update(self._table())

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)


def make_reporter(names: Sequence[str], plain: Optional[bool] = None):
    """rich on a terminal, plain lines elsewhere (CI, pipes, files)."""
    if plain is None:
        plain = not sys.stdout.isatty()
    return PlainReporter() if plain else RichReporter(names)
