"""Read nccl-tests output (the text table, or the `-J` JSON file) into the report's `nccl_tests` object.

The table is read BY ITS HEADER, never by column position: nccl-tests changed its columns over the years
(per-test headers without `redop` and/or `root` before 2022, the `error` column renamed `#wrong`, `cputime`
instead of `time`, per-iteration columns, a trailing timestamp), and a parser that counts columns from the
left reads the wrong number as bandwidth on a format it has not seen. A row is accepted only when every
column the header announced is there and parses as its kind; anything else is ignored, so junk, cut lines
and other ranks' interleaved output can never invent a row.

Streaming: `NcclTestsParser.feed()` takes one line at a time (already stripped of launcher prefixes) and
keeps only the facts (header values, ranks, rows; all small), never the lines.

Plateau rule (why not the average): nccl-tests' `Avg bus bandwidth` is the mean over every row, 8-byte
messages included, so it measures latency as much as bandwidth (one AWS p5 run: avg 52.98 GB/s, peak
437.79). The plateau is judged at a stated size instead: `plateau_busbw` is the highest busbw (out-of-place
or in-place) among rows of at least `PLATEAU_MIN_BYTES` (1 GiB, the smallest size at which the published
AWS figures are given); when the run never reached 1 GiB, it is the best busbw of the largest size run,
and `plateau_rule` says so, because such a curve may not have flattened yet.
"""

import json
import math
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

# `# nThread 1 nGpus 8 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20 ...`
_PARAM_RES = {
    "nthread": re.compile(r"\bnThread\s+(\d+)"),
    "ngpus": re.compile(r"\bnGpus\s+(\d+)"),
    "min_bytes": re.compile(r"\bminBytes\s+(\d+)"),
    "max_bytes": re.compile(r"\bmaxBytes\s+(\d+)"),
    "warmup_iters": re.compile(r"\bwarmup iters:\s*(\d+)"),
    "iters": re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)"),
    "agg_iters": re.compile(r"\bagg iters:\s*(\d+)"),
    "check": re.compile(r"\bvalidation:\s*(\d+)"),
    "graph": re.compile(r"\bgraph:\s*(\d+)"),
}
_STEP_RE = re.compile(r"\bstep:\s*(\d+)\s*\((factor|bytes)\)")
# nccl-tests src/util.cu: "# nccl-tests version %s nccl-headers=%d nccl-library=%d" (NCCL_VERSION_CODE and
# ncclGetVersion: the library the test actually ran with)
_VERSION_RE = re.compile(r"^#?\s*nccl-tests version\s+(\S+)")
_LIBRARY_RE = re.compile(r"\bnccl-library=(\d+)")
# `-J FILE`: nccl-tests says where the JSON goes before anything else (NVIDIA/nccl-tests
# a0b82b2260cf5152b9f8c061bbf7eaf0ba096432:src/util.cu jsonOutputInit, "# Writing JSON output to %s")
_JSON_OUT_RE = re.compile(r"^#\s*Writing JSON output to (\S.*)$")
_STARTING_RE = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(\S+)")
# `#  Rank  0 Group  0 Pid  4242 on  node-a device  0 [0000:53:00] NVIDIA H100 80GB HBM3` (new) and
# `#   Rank  0 Pid  4242 on node-a device  0 [0x53] Tesla V100-SXM2-32GB` (before groups).
_RANK_RE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)"
)
# footers, src/util.cu: PRINT("# %-20s : %d %s\n", "Out of bounds values", ...), "# %-20s : %g %s\n"; the '#'
# is optional here: tables and footers are often pasted without it
_OOB_RE = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG_RE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
# lines nccl-tests prints behind '#' that still say what they are without it
_PASTED_MARKS = ("busbw", "(B)", "Out of bounds values", "Avg bus bandwidth", "nccl-tests version")
_ERROR_RES = (
    re.compile(r"^#\s*error:\s*\S"),
    re.compile(r"\bTest (?:NCCL|CUDA) failure\b"),
    re.compile(r"\bTest failure\b"),
)
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ROWLIKE_RE = re.compile(r"^\d+\s")

_PREFIX_COLUMNS = ("size", "count", "type", "redop", "root")
_TIME_NAMES = ("time", "cputime")
# Per-placement columns and the row key they land in; unknown extra columns (per-iteration stats) are read
# as numbers and kept under their header name.
_BLOCK_KEYS = {"time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw", "#wrong": "wrong"}
_PLACEMENTS = ("out_of_place", "in_place")
# The columns a `-J` result carries, named as the text header names them.
_JSON_COLUMNS = ("size", "count", "type", "redop", "root") + ("time", "algbw", "busbw", "#wrong") * 2
# The JSON's units are fixed by its writer: time in microseconds, bandwidths in GB/s (NVIDIA/nccl-tests
# src/util.cu writeBenchmarkLineBody, the same values the table prints under "(us)" and "(GB/s)")
_JSON_UNITS = ("(B)", "(elements)") + ("(us)", "(GB/s)", "(GB/s)") * 2
_MAX_FAILURES = 20


def collective_from_binary(text: str) -> Optional[str]:
    """`/opt/nccl-tests/build/all_reduce_perf -b 8` -> "all_reduce"; None when no test binary is named."""
    m = _BINARY_RE.search(text)
    return m.group(1) if m else None


def _number(tok: str) -> Tuple[bool, Optional[float]]:
    """(ok, value): `N/A` is (True, None), a non-number (False, None); inf/nan are kept (caller decides)."""
    if tok == "N/A":
        return True, None
    try:
        return True, float(tok)
    except ValueError:
        return False, None


_INT_RE = re.compile(r"^-?\d+$")
_STAMP_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


def _int(tok: str) -> Optional[int]:
    if not _INT_RE.match(tok):
        return None
    return int(tok)


class _Layout:
    """The column plan read from one header line: prefix columns, then one block per placement."""

    def __init__(self, tokens: List[str]) -> None:
        self.columns = tokens
        self.prefix: List[str] = []
        self.blocks: List[List[str]] = []
        self.timestamp = False
        for tok in tokens:
            if tok in _TIME_NAMES:
                self.blocks.append([tok])
            elif self.blocks:
                if tok == "timestamp":
                    self.timestamp = True
                else:
                    self.blocks[-1].append(tok)
            else:
                self.prefix.append(tok)
        self.old_error = any("error" in b for b in self.blocks)
        self.width = len(self.prefix) + sum(len(b) for b in self.blocks) + (2 if self.timestamp else 0)

    @classmethod
    def from_header(cls, stripped: str) -> Optional["_Layout"]:
        tokens = (stripped[1:] if stripped.startswith("#") else stripped).split()
        if len(tokens) < 6 or tokens[:3] != ["size", "count", "type"]:
            return None
        layout = cls(tokens)
        # exactly out-of-place then in-place: a header cut short must not define a narrower table
        if len(layout.blocks) != 2 or any(p not in _PREFIX_COLUMNS for p in layout.prefix):
            return None
        if any("busbw" not in b or "algbw" not in b for b in layout.blocks):
            return None
        return layout


class _Table:
    """One result table: its layout, its rows, its footer."""

    def __init__(self, layout: _Layout, collective: Optional[str], where: Dict[str, Any]) -> None:
        self.layout = layout
        self.collective = collective
        self.header = where
        self.rows: List[Dict[str, Any]] = []
        self.out_of_bounds: Optional[int] = None
        self.out_of_bounds_ok: Optional[bool] = None
        self.avg_busbw: Optional[float] = None
        self.avg_check: Optional[str] = None
        self.footer: Dict[str, Dict[str, Any]] = {}
        self.skipped = 0
        self.units: Optional[List[str]] = None
        self.params: Dict[str, Any] = {}
        self.params_where: Optional[Dict[str, Any]] = None
        self.ranks: Dict[int, Dict[str, Any]] = {}

    @property
    def closed(self) -> bool:
        return self.out_of_bounds is not None or self.avg_busbw is not None

    def parse_row(self, stripped: str, where: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """A row only when every announced column is present and of its kind; None otherwise."""
        tokens = stripped.split()
        lay = self.layout
        if len(tokens) != lay.width:
            return None
        row: Dict[str, Any] = {"size": None, "count": None, "type": None, "redop": None, "root": None}
        pos = 0
        for name in lay.prefix:
            tok = tokens[pos]
            pos += 1
            if name in ("size", "count"):
                val = _int(tok)
                if val is None or val < 0:
                    return None
                row[name] = val
            elif name == "root":
                val = _int(tok)
                if val is None:
                    return None
                row[name] = val
            else:
                if not _NAME_RE.match(tok):
                    return None
                row[name] = tok
        nonfinite = 0
        isfinite = math.isfinite
        for placement, block in zip(_PLACEMENTS, lay.blocks):
            cell: Dict[str, Any] = {"time": None, "algbw": None, "busbw": None, "wrong": None}
            for name in block:
                tok = tokens[pos]  # a number or N/A (`_number`, read inline: 8 cells a row)
                pos += 1
                if tok == "N/A":
                    val = None
                else:
                    try:
                        val = float(tok)
                    except ValueError:
                        return None
                if val is not None and not isfinite(val):
                    nonfinite += 1
                    val = None
                if name == "error":
                    cell["error"] = val
                elif name == "#wrong":
                    if val is not None and (val < 0 or val != int(val)):
                        return None
                    cell["wrong"] = None if val is None else int(val)
                else:
                    cell[_BLOCK_KEYS.get(name, name)] = val
            row[placement] = cell
        if lay.timestamp:
            stamp = " ".join(tokens[pos : pos + 2])
            if not _STAMP_RE.match(stamp):
                return None
            row["timestamp"] = stamp
        row["nonfinite"] = nonfinite
        row.update(where)
        return row


class NcclTestsParser:
    """Streaming reader of nccl-tests text output: `feed()` line by line, then `result()`.

    Lines must already be free of launcher prefixes (mpirun `[1,0]<stdout>:`, `srun -l` `0: `, CloudWatch);
    leading/trailing whitespace and CR are tolerated. Memory holds the rows and ranks (small), never lines;
    at most MAX_TABLES tables are kept (a log looping over tests keeps the first ones and counts the rest).
    """

    MAX_TABLES = 64

    def __init__(self) -> None:
        # facts of the test being set up (parameter line, ranks); a table header takes them over
        self._params: Dict[str, Any] = {}
        self._params_where: Optional[Dict[str, Any]] = None
        self._ranks: Dict[int, Dict[str, Any]] = {}
        self._version: Optional[str] = None
        self._binary: Optional[str] = None
        self._current: Optional[_Table] = None
        self._tables: List[_Table] = []
        self._dropped_tables = 0
        self._failures: List[Dict[str, Any]] = []
        self._seen = False
        self._library: Optional[str] = None  # NCCL version from the header's nccl-library=
        self._footer_only: Optional[_Table] = None  # footer lines seen with no table open
        self._json_out: Optional[Dict[str, Any]] = None  # the `-J` file this run said it writes

    def _orphan(self) -> "_Table":
        """Where a footer with no open table goes: an empty table of its own (no columns, no rows)."""
        if self._footer_only is None:
            self._seen = True
            self._footer_only = _Table(_Layout([]), self._binary, {})
        return self._footer_only

    # -- input ---------------------------------------------------------------------------------
    def feed(self, text: str, lineno: int, source: Optional[str] = None) -> None:
        """Consume one line (prefix-stripped). `lineno`/`source` are kept on every fact for evidence."""
        stripped = text.strip()
        if not stripped:
            return
        where = {"file": source, "line": lineno}
        if stripped[0] == "#" or any(mark in stripped for mark in _PASTED_MARKS):
            self._feed_comment(stripped, where)
            return
        table = self._current
        if table is not None and not table.closed:
            row = table.parse_row(stripped, where)
            if row is not None:
                row["text"] = stripped
                table.rows.append(row)
                return
            if _ROWLIKE_RE.match(stripped):
                table.skipped += 1
        if "_perf" in stripped:
            name = collective_from_binary(stripped)
            if name is not None:
                self._binary = name
        self._note_failure(stripped, where)

    def _feed_comment(self, stripped: str, where: Dict[str, Any]) -> None:
        # cheap substring tests pick the one pattern worth trying: most '#' lines are none of these
        if "size" in stripped and "count" in stripped:
            layout = _Layout.from_header(stripped)
            if layout is not None:
                self._start_table(layout, where, stripped)
                return
        table = self._current
        if "(B)" in stripped and table is not None and table.units is None and not table.rows:
            # the units line under the header: kept so a future unit change cannot pass as GB/s
            table.units = stripped.lstrip("#").split()
            return
        if "Out of bounds" in stripped:
            m = _OOB_RE.match(stripped)
            if m:
                # a footer without its table (pasted alone, or after a header that was lost) is kept too:
                # the run ended, so it never reads as a hang, and a FAILED count still fails
                target = table if table is not None and not table.closed else self._orphan()
                target.out_of_bounds = int(m.group(1))
                target.out_of_bounds_ok = None if m.group(2) is None else m.group(2) == "OK"
                target.footer["out_of_bounds"] = dict(where, text=stripped)
                return
        if "Avg bus" in stripped:
            m = _AVG_RE.match(stripped)
            if m:
                target = table if table is not None and table.avg_busbw is None else self._orphan()
                ok, val = _number(m.group(1))
                target.avg_busbw = val if ok and val is not None and math.isfinite(val) else None
                target.avg_check = m.group(2)
                target.footer["avg_busbw"] = dict(where, text=stripped)
                return
        if "Rank" in stripped:
            m = _RANK_RE.match(stripped)
            if m:
                self._add_rank(m, where)
                return
        if "nThread" in stripped and "nGpus" in stripped:
            self._seen = True
            for key, rx in _PARAM_RES.items():
                pm = rx.search(stripped)
                if pm:
                    self._params[key] = int(pm.group(1))
            sm = _STEP_RE.search(stripped)
            if sm:
                self._params["step"] = int(sm.group(1))
                self._params["step_kind"] = sm.group(2)
            self._params_where = dict(where, text=stripped)
            return
        if "nccl-tests version" in stripped:
            m = _VERSION_RE.match(stripped)
            if m:
                self._seen = True
                self._version = m.group(1)
                lib = _LIBRARY_RE.search(stripped)
                if lib and int(lib.group(1)) > 0:
                    self._library = _nccl_version_string(int(lib.group(1)))
                return
        if "Writing JSON" in stripped:
            m = _JSON_OUT_RE.match(stripped)
            if m:
                self._json_out = dict(where, text=stripped, path=m.group(1).strip())
                return
        if "Collective test" in stripped:
            m = _STARTING_RE.match(stripped)
            if m:
                name = collective_from_binary(m.group(1))
                if name is not None:
                    self._binary = name
                    if table is not None and table.collective is None and not table.closed:
                        table.collective = name
                return
        self._note_failure(stripped, where)

    def _start_table(self, layout: "_Layout", where: Dict[str, Any], stripped: str) -> None:
        """A header: the table takes over the parameters and ranks printed before it."""
        self._seen = True
        table = _Table(layout, self._binary, dict(where, text=stripped))
        table.params, table.params_where, table.ranks = self._params, self._params_where, self._ranks
        self._params, self._params_where, self._ranks = {}, None, {}
        self._current = table
        if len(self._tables) < self.MAX_TABLES:
            self._tables.append(table)
        else:
            self._dropped_tables += 1

    def _add_rank(self, m: "re.Match", where: Dict[str, Any]) -> None:
        self._seen = True
        rank = int(m.group(1))
        if len(self._ranks) < 65536 or rank in self._ranks:
            self._ranks[rank] = {
                "rank": rank,
                "group": None if m.group(2) is None else int(m.group(2)),
                "pid": int(m.group(3)),
                "host": m.group(4),
                "device": int(m.group(5)),
                "pci": m.group(6),
                "name": m.group(7).strip() or None,
                "file": where["file"],
                "line": where["line"],
            }

    def _note_failure(self, stripped: str, where: Dict[str, Any]) -> None:
        if "rror" not in stripped and "failure" not in stripped:  # cheap test first: most lines are neither
            return
        if len(self._failures) < _MAX_FAILURES and any(rx.search(stripped) for rx in _ERROR_RES):
            self._failures.append(dict(where, text=stripped[:400]))

    # -- output --------------------------------------------------------------------------------
    def result(self) -> Optional[Dict[str, Any]]:
        """The report's `nccl_tests` object, or None when no nccl-tests output was seen.

        With several tables in one log (a script running several tests) the first is the main object and
        the others are listed, each in the same shape, under `additional_tables`. Parameters and ranks
        printed after the last table with no table of their own (a test that hung before its first row)
        make a table-less object of their own.
        """
        if not self._seen:
            return None
        objs = [self._table_object(t) for t in self._tables]
        if not objs or self._params or self._ranks or self._footer_only is not None:
            objs.append(self._table_object(None))
        main = objs[0]
        main["additional_tables"] = objs[1:]
        main["tables_dropped"] = self._dropped_tables
        if self._json_out is not None:
            main["evidence"]["json_output"] = self._json_out
        return main

    def _table_object(self, table: Optional[_Table]) -> Dict[str, Any]:
        params = table.params if table is not None else self._params
        rank_map = table.ranks if table is not None else self._ranks
        params_where = table.params_where if table is not None else self._params_where
        ranks = [rank_map[k] for k in sorted(rank_map)]
        obj = _empty_object()
        obj.update({k: params.get(k) for k in _PARAM_KEYS})
        obj["source"] = "text"
        obj["nccl_tests_version"] = self._version
        obj["nccl_version"] = self._library
        obj["ranks"] = ranks
        obj["hosts"] = _unique(r["host"] for r in ranks)
        obj["devices"] = _unique(r["name"] for r in ranks if r["name"])
        obj["failures"] = list(self._failures)
        if params_where:
            obj["evidence"]["parameters"] = params_where
        if table is None:
            obj["collective"] = self._binary
            obj["collective_source"] = "binary" if self._binary else None
            orphan = self._footer_only
            if orphan is not None:
                obj["out_of_bounds"], obj["out_of_bounds_ok"] = orphan.out_of_bounds, orphan.out_of_bounds_ok
                obj["avg_busbw"], obj["avg_busbw_check"] = orphan.avg_busbw, orphan.avg_check
                obj["evidence"].update(orphan.footer)
            return obj
        collective = table.collective or _infer_collective(table)
        obj["collective"] = collective
        obj["collective_source"] = (
            None if collective is None else ("binary" if table.collective else "columns")
        )
        obj["columns"] = list(table.layout.columns)
        obj["units"] = table.units
        obj["old_error_column"] = table.layout.old_error
        obj["rows"] = table.rows
        obj["skipped_lines"] = table.skipped
        obj["avg_busbw"] = table.avg_busbw
        obj["avg_busbw_check"] = table.avg_check
        obj["out_of_bounds"] = table.out_of_bounds
        obj["out_of_bounds_ok"] = table.out_of_bounds_ok
        obj["truncated"] = not table.closed
        obj["evidence"]["header"] = table.header
        obj["evidence"].update(table.footer)
        summarize(obj)
        return obj


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


def _infer_collective(table: _Table) -> Optional[str]:
    """Only the unambiguous case: a reduction with a root is `reduce` (every other column set is shared)."""
    lay = table.layout
    if lay.old_error:
        return "reduce" if "redop" in lay.prefix and "root" in lay.prefix else None
    if table.rows and all(r["redop"] not in (None, "none") and (r["root"] or -1) >= 0 for r in table.rows):
        return "reduce"
    return None


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


# -- the -J JSON output ---------------------------------------------------------------------------


class NcclTestsJsonError(ValueError):
    """A `-J` file that is not nccl-tests JSON; carries the file and the key for a clear message."""

    def __init__(
        self, message: str, file: str, key: Optional[str] = None, line: Optional[int] = None
    ) -> None:
        where = file + (f":{line}" if line else "") + (f": key '{key}'" if key else "")
        super().__init__(f"{where}: {message}")
        self.file, self.key, self.line = file, key, line


# nccl-tests writes doubles with printf("%lf"), so a non-finite value comes out as a bare `inf`/`-inf`/`nan`,
# which strict JSON rejects. Replace only bare words, never inside strings.
_BARE_RE = re.compile(r'"(?:[^"\\]|\\.)*"|(-?)\b(inf|nan|infinity)\b', re.IGNORECASE)


def _unbare(text: str) -> str:
    return _BARE_RE.sub(lambda m: m.group(0) if m.group(2) is None else "null", text)


def load_json_output(path: str) -> Dict[str, Any]:
    """Read an nccl-tests `-J FILE` (v2.17.3+, format version 1..3) into the same object `result()` gives.

    Raises NcclTestsJsonError (a ValueError) naming the file and key when it is not that format.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read().decode("utf-8", errors="replace")
    except OSError as err:
        raise NcclTestsJsonError(f"cannot read: {err.strerror}", path) from None
    try:
        doc = json.loads(raw)
    except ValueError:
        try:
            doc = json.loads(_unbare(raw))
        except ValueError as err:
            line = getattr(err, "lineno", None)
            raise NcclTestsJsonError(
                "not valid JSON ({})".format(getattr(err, "msg", err)), path, line=line
            ) from None
    return from_json_document(doc, path)


def _get(doc: Dict[str, Any], key: str, kind, path: str, where: str, required: bool = False):
    val = doc.get(key)
    if val is None:
        if required:
            raise NcclTestsJsonError("missing", path, key=where + key)
        return None
    if kind is float and isinstance(val, (int, float)) and not isinstance(val, bool):
        return float(val)
    if kind is float and isinstance(val, str) and val.lower() in ("nan", "inf", "-inf"):
        return None
    if kind is int and isinstance(val, float) and math.isfinite(val) and val == int(val):
        return int(val)
    if not isinstance(val, kind) or isinstance(val, bool) and kind is not bool:
        raise NcclTestsJsonError(f"expected {kind.__name__}, got {val!r}", path, key=where + key)
    return val


def _okay(val: Any) -> Optional[bool]:
    """nccl-tests writes its booleans as the strings "true"/"false" (and "unchecked")."""
    if isinstance(val, bool):
        return val
    if val in ("true", "false"):
        return val == "true"
    return None


def from_json_document(doc: Any, path: str = "<json>") -> Dict[str, Any]:
    """Map a parsed `-J` document to the `nccl_tests` object; see load_json_output."""
    if not isinstance(doc, dict) or "results" not in doc:
        raise NcclTestsJsonError("not an nccl-tests JSON report (no 'results')", path, key="results")
    obj = _empty_object()
    obj["source"] = "json"
    obj["json_version"] = doc.get("version")
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise NcclTestsJsonError("expected an object", path, key="config")
    for key, jkey in (
        ("nthread", "nthreads"),
        ("ngpus", "ngpus"),
        ("min_bytes", "minimum_bytes"),
        ("max_bytes", "maximum_bytes"),
        ("warmup_iters", "warmup_iters"),
        ("iters", "iterations"),
        ("agg_iters", "aggregated_iterations"),
        ("check", "validation"),
        ("graph", "graph"),
    ):
        obj[key] = _get(config, jkey, int, path, "config.")
    if config.get("step_factor") is not None:
        obj["step"], obj["step_kind"] = _get(config, "step_factor", int, path, "config."), "factor"
    elif config.get("step_bytes") is not None:
        obj["step"], obj["step_kind"] = _get(config, "step_bytes", int, path, "config."), "bytes"
    version = doc.get("nccl_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > 0:
        obj["nccl_version"] = _nccl_version_string(version)
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        obj["collective"] = collective_from_binary(args[0])
        obj["collective_source"] = "binary" if obj["collective"] else None
    ranks = []
    devices = config.get("devices") or doc.get("devices") or []
    if not isinstance(devices, list):
        raise NcclTestsJsonError("expected a list", path, key="config.devices")
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict):
            raise NcclTestsJsonError("expected an object", path, key=f"config.devices[{i}]")
        where = f"config.devices[{i}]."
        ranks.append(
            {
                "rank": _get(dev, "rank", int, path, where),
                "group": _get(dev, "group", int, path, where),
                "pid": _get(dev, "pid", int, path, where),
                "host": _get(dev, "hostname", str, path, where),
                "device": _get(dev, "device", int, path, where),
                "pci": _get(dev, "device_hex", str, path, where),
                "name": _get(dev, "device_info", str, path, where),
                "file": path,
                "line": None,
            }
        )
    obj["ranks"] = ranks
    obj["hosts"] = _unique(r["host"] for r in ranks if r["host"])
    obj["devices"] = _unique(r["name"] for r in ranks if r["name"])
    results = doc["results"]
    if not isinstance(results, list):
        raise NcclTestsJsonError("expected a list", path, key="results")
    obj["rows"] = [_json_row(res, i, path) for i, res in enumerate(results)]
    obj["columns"] = list(_JSON_COLUMNS)
    obj["units"] = list(_JSON_UNITS)
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict):
        obj["out_of_bounds"] = _get(oob, "count", int, path, "out_of_bounds.")
        obj["out_of_bounds_ok"] = _okay(oob.get("okay"))
        obj["evidence"]["out_of_bounds"] = {
            "file": path,
            "line": None,
            "text": f"out_of_bounds: {json.dumps(oob)}",
        }
    avg = doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith")  # early builds' spelling
    if isinstance(avg, dict):
        key = "bandwidth" if "bandwidth" in avg else "bandwidith"
        obj["avg_busbw"] = _get(avg, key, float, path, "average_bus_bandwidth.")
        check = _okay(avg.get("okay"))
        obj["avg_busbw_check"] = None if check is None else ("OK" if check else "FAILED")
        obj["evidence"]["avg_busbw"] = {
            "file": path,
            "line": None,
            "text": f"average_bus_bandwidth: {json.dumps(avg)}",
        }
    obj["truncated"] = oob is None and avg is None
    errors = doc.get("errors")
    if isinstance(errors, list):
        obj["failures"] = [
            {"file": path, "line": None, "text": f"# error: {e}"}
            for e in errors[:_MAX_FAILURES]
            if isinstance(e, str) and e
        ]
    obj["evidence"]["header"] = {"file": path, "line": None, "text": f"results ({len(obj['rows'])} rows)"}
    summarize(obj)
    obj["additional_tables"] = []
    return obj


def _nccl_version_string(code: int) -> str:
    """NCCL_VERSION_CODE: 22703 -> "2.27.3" (from 2.9: major*10000 + minor*100 + patch), 2804 -> "2.8.4"."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _json_row(res: Any, i: int, path: str) -> Dict[str, Any]:
    where = f"results[{i}]."
    if not isinstance(res, dict):
        raise NcclTestsJsonError("expected an object", path, key=f"results[{i}]")
    root_raw = res.get("root")
    root = None
    if isinstance(root_raw, str) and _int(root_raw.strip()) is not None:
        root = int(root_raw.strip())
    elif isinstance(root_raw, int) and not isinstance(root_raw, bool):
        root = root_raw
    row: Dict[str, Any] = {
        "size": _get(res, "size", int, path, where, required=True),
        "count": _get(res, "count", int, path, where),
        "type": _get(res, "type", str, path, where),
        "redop": _get(res, "redop", str, path, where),
        "root": root,
        "nonfinite": 0,
        "file": path,
        "line": None,
        "text": f"results[{i}]",
    }
    for placement in _PLACEMENTS:
        cell = res.get(placement)
        if cell is None:
            row[placement] = None
            continue
        if not isinstance(cell, dict):
            raise NcclTestsJsonError("expected an object or null", path, key=where + placement)
        w = where + placement + "."
        out = {
            "time": _get(cell, "time", float, path, w)
            if "time" in cell
            else _get(cell, "cpu_time", float, path, w),
            "algbw": _get(cell, "alg_bw", float, path, w),
            "busbw": _get(cell, "bus_bw", float, path, w),
            "wrong": None,
        }
        for key in ("time", "cpu_time", "alg_bw", "bus_bw", "nwrong"):
            if isinstance(cell.get(key), str) or (key in cell and cell.get(key) is None and key != "nwrong"):
                row["nonfinite"] += 1
        nwrong = _get(cell, "nwrong", float, path, w)
        if nwrong is not None:
            if nwrong < 0 or nwrong != int(nwrong):
                raise NcclTestsJsonError(f"expected a count, got {nwrong!r}", path, key=w + "nwrong")
            out["wrong"] = int(nwrong)
        row[placement] = out
    return row
