"""The report's `nccl_tests` object, as both readers fill it (nccltests.py from the text,
nccltests_json.py from the `-J` file), and what is summed up from its rows: wrong values, non-finite cells,
the plateau.

Plateau rule (why not the average): nccl-tests' `Avg bus bandwidth` is the mean over every row, 8-byte
messages included, so it measures latency as much as bandwidth (one AWS p5 run: avg 52.98 GB/s, peak
437.79). The plateau is judged at a stated size instead: `plateau_busbw` is the highest busbw (out-of-place
or in-place) among rows of at least `PLATEAU_MIN_BYTES` (1 GiB, the smallest size at which the published
AWS figures are given); when the run never reached 1 GiB, it is the best busbw of the largest size run,
and `plateau_rule` says so, because such a curve may not have flattened yet.
"""

import re
from typing import Any, Dict, List, Optional, Tuple

PLATEAU_MIN_BYTES = 1 << 30

# Collectives whose binaries nccl-tests builds (`<name>_perf`, `<name>_perf_mpi`).
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "alltoallv",
    "alltoall",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "sendrecv",
    "scatter",
    "gather",
    "hypercube",
)
_BINARY_RE = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(COLLECTIVES) + r")_perf(?:_mpi)?(?![A-Za-z0-9_])")

_PLACEMENTS = ("out_of_place", "in_place")
_MAX_FAILURES = 20


def collective_from_binary(text: str) -> Optional[str]:
    """`/opt/nccl-tests/build/all_reduce_perf -b 8` -> "all_reduce"; None when no test binary is named."""
    m = _BINARY_RE.search(text)
    return m.group(1) if m else None


_INT_RE = re.compile(r"^-?\d+$")


def _int(tok: str) -> Optional[int]:
    if not _INT_RE.match(tok):
        return None
    return int(tok)


_PARAM_KEYS = (
    "nthread",
    "ngpus",
    "min_bytes",
    "max_bytes",
    "step",
    "step_kind",
    "warmup_iters",
    "iters",
    "agg_iters",
    "check",
    "graph",
)


def _empty_object() -> Dict[str, Any]:
    obj: Dict[str, Any] = {k: None for k in _PARAM_KEYS}
    obj.update(
        {
            "source": None,
            "nccl_version": None,
            "collective": None,
            "collective_source": None,
            "nccl_tests_version": None,
            "ranks": [],
            "hosts": [],
            "devices": [],
            "columns": [],
            "units": None,
            "old_error_column": False,
            "rows": [],
            "skipped_lines": 0,
            "avg_busbw": None,
            "avg_busbw_check": None,
            "out_of_bounds": None,
            "out_of_bounds_ok": None,
            "wrong": None,
            "wrong_unseen_rows": 0,
            "nonfinite": 0,
            "plateau_busbw": None,
            "plateau_size": None,
            "plateau_placement": None,
            "plateau_rule": None,
            "plateau_min_size": PLATEAU_MIN_BYTES,
            "truncated": False,
            "tables_dropped": 0,
            "failures": [],
            "evidence": {},
        }
    )
    return obj


def _unique(items) -> List[Any]:
    seen: List[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def summarize(obj: Dict[str, Any]) -> None:
    """Fill `wrong`, `nonfinite` and the plateau fields from `rows` (shared by the text and JSON readers)."""
    rows = obj["rows"]
    wrong_sum: Optional[int] = None
    unseen = 0
    nonfinite = 0
    for row in rows:
        nonfinite += row.get("nonfinite", 0)
        for placement in _PLACEMENTS:
            cell = row.get(placement)
            if cell is None:
                continue
            if cell.get("wrong") is None:
                unseen += 1
            else:
                wrong_sum = (wrong_sum or 0) + cell["wrong"]
    obj["wrong"] = wrong_sum
    obj["wrong_unseen_rows"] = unseen if rows else 0
    obj["nonfinite"] = nonfinite
    best, size, placement, rule = plateau(rows)
    obj["plateau_busbw"], obj["plateau_size"], obj["plateau_placement"] = best, size, placement
    obj["plateau_rule"] = rule
    if obj.get("collective") is None and _ratio_says_all_reduce(rows):
        obj["collective"], obj["collective_source"] = "all_reduce", "busbw/algbw ratio"


def _ratio_says_all_reduce(rows: List[Dict[str, Any]]) -> bool:
    """busbw = algbw x factor, and only all_reduce has a factor above 1 (2(n-1)/n: 1.33 at 3 ranks, up to 2).

    Read on rows with algbw >= 1 GB/s, where two printed decimals keep the ratio within 0.5%. Two ranks
    (factor 1.0) cannot be told from broadcast/reduce/sendrecv and stay unknown.
    """
    ratios = [
        cell["busbw"] / cell["algbw"]
        for row in rows
        for cell in (row.get("out_of_place"), row.get("in_place"))
        if cell and cell.get("algbw") and cell.get("busbw") is not None and cell["algbw"] >= 1.0
    ]
    return bool(ratios) and all(1.2 < r < 2.01 for r in ratios)


def plateau(
    rows: List[Dict[str, Any]],
) -> Tuple[Optional[float], Optional[int], Optional[str], Optional[str]]:
    """(busbw, size, placement, rule): see the module docstring for why this and not the average."""
    candidates = [
        (cell["busbw"], row["size"], placement)
        for row in rows
        for placement in _PLACEMENTS
        for cell in [row.get(placement)]
        if cell is not None and cell.get("busbw") is not None and row.get("size") is not None
    ]
    if not candidates:
        return None, None, None, None
    big = [c for c in candidates if c[1] >= PLATEAU_MIN_BYTES]
    if big:
        rule = "max busbw over rows of size >= 1 GiB"
    else:
        largest = max(c[1] for c in candidates)
        big = [c for c in candidates if c[1] == largest]
        rule = "max busbw at the largest size run (below 1 GiB: the curve may not have reached its plateau)"
    bw, size, placement = max(big, key=lambda c: (c[0], c[1]))
    return bw, size, placement, rule


def _nccl_version_string(code: int) -> str:
    """NCCL_VERSION_CODE: 22703 -> "2.27.3" (from 2.9: major*10000 + minor*100 + patch), 2804 -> "2.8.4"."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
