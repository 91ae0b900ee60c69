"""The pre-flight verbs of `python -m efa_validators`, one module each: node-check, drain and run (whose
sweeps, --pairwise and --bisect, are sweep.py, and whose runs become one report in series.py).

Exit codes as `parse`: 0 pass, 1 fail (a hang is a fail), 2 usage (a launcher that cannot start), 3 unknown.
"""

from typing import Any

from efa_validators.cmd_preflight import drain, node_check, run
from efa_validators.cmd_preflight.run import _image_default, summary_text
from efa_validators.cmd_preflight.series import run_once, series_report

__all__ = ["register", "run_once", "series_report", "summary_text", "_image_default"]


def register(sub: Any) -> None:
    """The three verbs, in the order `--help` has always listed them."""
    node_check.register(sub)
    drain.register(sub)
    run.register(sub)
