"""SageMaker MetricDefinitions for the pre-flight job: regexes over the lines the job prints.

SageMaker scans the job's log lines with each regex and records the first group as a float, so the busbw
plateau shows as a job metric next to the instance's own. Two sources, both printed into the job log:
- the validator's summary lines (`efa_validators.report.formats.metric_lines`: `busbw_plateau=437.79 GB/s`,
...);
- nccl-tests' own footer (`# Avg bus bandwidth    : 52.98`, `# Out of bounds values : 0 OK`), which is
  there even when the validator is not.
Lines may carry a launcher prefix (`[1,0]<stdout>:`, `0: `): the regexes are not anchored.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional

# (name, regex, what it captures). Names follow SageMaker's `source:metric` habit; units in the name.
METRICS = (
    ("validator:busbw_plateau_GBps", r"busbw_plateau=([0-9]+(?:\.[0-9]+)?) GB/s", "validator: busbw plateau"),
    ("validator:busbw_avg_GBps", r"busbw_avg=([0-9]+(?:\.[0-9]+)?) GB/s", "validator: mean busbw over rows"),
    ("validator:wrong", r"(?:^|\s)wrong=([0-9]+)", "validator: rows with #wrong > 0 (0 is good)"),
    ("validator:nics", r"(?:^|\s)nics=([0-9]+)", "validator: EFA NICs the plugin found"),
    ("nccl_tests:avg_busbw_GBps", r"# Avg bus bandwidth\s*:\s*([0-9]+(?:\.[0-9]+)?)", "nccl-tests footer"),
    ("nccl_tests:out_of_bounds", r"# Out of bounds values\s*:\s*([0-9]+)", "nccl-tests footer"),
)


def metric_definitions() -> List[Dict[str, str]]:
    """The AlgorithmSpecification.MetricDefinitions list for CreateTrainingJob."""
    return [{"Name": name, "Regex": regex} for name, regex, _ in METRICS]


def scrape(lines: Iterable[str]) -> Dict[str, List[float]]:
    """What SageMaker would record from these lines: every value of every metric, in order.

    Used by the tests to prove the regexes capture what the validator and nccl-tests really print, and by
    the pre-flight to show the same numbers locally after reading the job's logs.
    """
    compiled = [(name, re.compile(regex)) for name, regex, _ in METRICS]
    found: Dict[str, List[float]] = {name: [] for name, _ in compiled}
    for line in lines:
        for name, rx in compiled:
            m = rx.search(line)
            if m:
                found[name].append(float(m.group(1)))
    return found


def last(found: Dict[str, List[float]], name: str) -> Optional[float]:
    values = found.get(name) or []
    return values[-1] if values else None
