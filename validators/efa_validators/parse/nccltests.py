"""Read nccl-tests text output (table, parameters, ranks, footer) into the report's `nccl_tests` object.

The table is read BY ITS HEADER, never by column position: nccl-tests changed its columns over the years
(per-test headers without `redop` and/or `root` before 2022, the `error` column renamed `#wrong`, `cputime`
instead of `time`, per-iteration columns, a trailing timestamp), and a parser that counts columns from the
left reads the wrong number as bandwidth on a format it has not seen. A row is accepted only when every
column the header announced is there and parses as its kind; anything else is ignored, so junk, cut lines
and other ranks' interleaved output can never invent a row.

Streaming: `NcclTestsParser.feed()` takes one line at a time (already stripped of launcher prefixes) and
keeps only the facts (header values, ranks, rows; all small), never the lines.

The object, its summary and the plateau rule are in nccltests_result.py (the `-J` JSON reader,
nccltests_json.py, fills the same object).
"""

import math
import re
from typing import Any, Dict, List, Optional, Tuple

from efa_validators.parse.nccltests_result import (
    _MAX_FAILURES,
    _PARAM_KEYS,
    _PLACEMENTS,
    _empty_object,
    _int,
    _nccl_version_string,
    _unique,
    collective_from_binary,
    summarize,
)

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


def _number(tok: str) -> Tuple[bool, Optional[float]]:
    """(ok, value): `N/A` is (True, None), a non-number (False, None); inf/nan are kept (caller decides)."""
    if tok == "N/A":
        return True, None
    try:
        return True, float(tok)
    except ValueError:
        return False, None


_STAMP_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


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


def _infer_collective(table: _Table) -> Optional[str]:
    """Only the unambiguous case: a reduction with a root is `reduce` (every other column set is shared)."""
    lay = table.layout
    if lay.old_error:
        return "reduce" if "redop" in lay.prefix and "root" in lay.prefix else None
    if table.rows and all(r["redop"] not in (None, "none") and (r["root"] or -1) >= 0 for r in table.rows):
        return "reduce"
    return None
