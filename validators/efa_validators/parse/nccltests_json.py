"""Read an nccl-tests `-J FILE` (its JSON output) into the report's `nccl_tests` object, the same object
the text reader (nccltests.py) fills; a file not in that format is a NcclTestsJsonError naming file and key.
"""

import json
import math
import re
from typing import Any, Dict, Optional

from efa_validators.parse import nccltests_result as result

# The columns a `-J` result carries, named as the text header names them.
_JSON_COLUMNS = ("size", "count", "type", "redop", "root") + ("time", "algbw", "busbw", "#wrong") * 2
# The JSON's units are fixed by its writer: time in microseconds, bandwidths in GB/s (NVIDIA/nccl-tests
# src/util.cu writeBenchmarkLineBody, the same values the table prints under "(us)" and "(GB/s)")
_JSON_UNITS = ("(B)", "(elements)") + ("(us)", "(GB/s)", "(GB/s)") * 2


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
            data = fh.read()
    except OSError as err:
        raise NcclTestsJsonError(f"cannot read: {err.strerror}", path) from None
    return json_output_of(data, path)


def json_output_of(data: bytes, path: str) -> Dict[str, Any]:
    """`load_json_output` of bytes already read (a file named inside a log is read by its descriptor)."""
    raw = data.decode("utf-8", errors="replace")
    try:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = json.loads(_unbare(raw))
    except RecursionError:  # arrays nested deeper than Python's stack (a hostile file): no nccl-tests JSON
        raise NcclTestsJsonError("not an nccl-tests JSON report (nested too deep to read)", path) from None
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
    obj = result._empty_object()
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
        obj["nccl_version"] = result._nccl_version_string(version)
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        obj["collective"] = result.collective_from_binary(args[0])
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
    obj["hosts"] = result._unique(r["host"] for r in ranks if r["host"])
    obj["devices"] = result._unique(r["name"] for r in ranks if r["name"])
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
            for e in errors[: result._MAX_FAILURES]
            if isinstance(e, str) and e
        ]
    obj["evidence"]["header"] = {"file": path, "line": None, "text": f"results ({len(obj['rows'])} rows)"}
    result.summarize(obj)
    obj["additional_tables"] = []
    return obj


def _json_row(res: Any, i: int, path: str) -> Dict[str, Any]:
    where = f"results[{i}]."
    if not isinstance(res, dict):
        raise NcclTestsJsonError("expected an object", path, key=f"results[{i}]")
    root_raw = res.get("root")
    root = None
    if isinstance(root_raw, str) and result._int(root_raw.strip()) is not None:
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
    for placement in result._PLACEMENTS:
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
