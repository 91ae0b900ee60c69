"""An nccl-tests `-J` JSON read beside the table of the same run: the two must agree, row by row.

Why: the JSON file and the table are written by the same process from the same numbers (NVIDIA/nccl-tests
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432:src/util.cu: writeBenchmarkLine* prints the table row with
`%7.2f` and writes the JSON cell with `%lf`; the footer's out-of-bounds count goes to both). When they
differ, one of them was edited or they are not one run, and neither can be trusted to pass: the
disagreement is a failing check that names both sides.

Pairing: a JSON result is compared with the table (text result) of the same collective that shares the
most rows, keyed by (size, type); a JSON that shares no row with any table is another run, not compared.
"""

from typing import Any, Dict, List, Optional, Tuple

Check = Dict[str, Any]
Finding = Dict[str, Any]

_PLACEMENTS = ("out_of_place", "in_place")
# the table prints bandwidths with two decimals (%7.2f): equal within half the last digit, plus float slack
_ABS_TOL, _REL_TOL = 0.0051, 1e-6
_MAX_DIFFS = 5


def _key(row: Dict[str, Any]) -> Tuple[Any, Any]:
    return row.get("size"), row.get("type")


def _same_number(a: Optional[float], b: Optional[float]) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= _ABS_TOL + _REL_TOL * max(abs(a), abs(b))


def _where(obj: Dict[str, Any]) -> str:
    header = (obj.get("evidence") or {}).get("header") or {}
    file = header.get("file") or (obj.get("rows") or [{}])[0].get("file") or "?"
    return f"{file}:{header['line']}" if header.get("line") else str(file)


def _partner(js: Dict[str, Any], tables: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    keys = {_key(r) for r in js.get("rows") or []}
    best, shared = None, 0
    for t in tables:
        if js.get("collective") and t.get("collective") and js["collective"] != t["collective"]:
            continue
        n = len(keys & {_key(r) for r in t.get("rows") or []})
        if n > shared:
            best, shared = t, n
    return best


def differences(js: Dict[str, Any], table: Dict[str, Any]) -> List[str]:
    """What the JSON says that its table does not, one sentence each (empty: they agree)."""
    out = []
    trows = {_key(r): r for r in table.get("rows") or []}
    jrows = {_key(r): r for r in js.get("rows") or []}
    for key, jrow in jrows.items():
        trow = trows.get(key)
        if trow is None:
            if not table.get("truncated"):
                out.append(f"size {key[0]} {key[1]}: in the JSON, not in the table")
            continue
        for placement in _PLACEMENTS:
            jc, tc = jrow.get(placement) or {}, trow.get(placement) or {}
            if jc.get("wrong") != tc.get("wrong"):
                out.append(
                    f"size {key[0]} {placement} #wrong: JSON {jc.get('wrong')}, table {tc.get('wrong')}"
                )
            for name in ("busbw", "algbw"):
                if not _same_number(jc.get(name), tc.get(name)):
                    out.append(f"size {key[0]} {placement} {name}: JSON {jc.get(name)}, table {tc.get(name)}")
    for key in trows:
        if key not in jrows and not js.get("truncated"):
            out.append(f"size {key[0]} {key[1]}: in the table, not in the JSON")
    for name in ("out_of_bounds", "nonfinite"):
        a, b = js.get(name), table.get(name)
        if a is not None and b is not None and a != b:
            out.append(f"{name.replace('_', ' ')}: JSON {a}, table {b}")
    return out


def json_table_check(tables: List[Dict[str, Any]]) -> Optional[Tuple[Check, List[Finding]]]:
    """The `json-agrees` check over every (JSON, table) pair among `tables`; None when no pair exists."""
    texts = [t for t in tables if t.get("source") == "text" and t.get("rows")]
    pairs = []
    for js in tables:
        if js.get("source") == "json":
            partner = _partner(js, texts)
            if partner is not None:
                pairs.append((js, partner))
    if not pairs:
        return None
    bad, evidence = [], []
    for js, table in pairs:
        diffs = differences(js, table)
        if diffs:
            more = f" (and {len(diffs) - _MAX_DIFFS} more)" if len(diffs) > _MAX_DIFFS else ""
            bad.append(f"{_where(js)} vs {_where(table)}: " + "; ".join(diffs[:_MAX_DIFFS]) + more)
            header = (table.get("evidence") or {}).get("header")
            if header:
                evidence.append(
                    {"file": header.get("file"), "line": header.get("line"), "text": header["text"]}
                )
            evidence.append({"file": _where(js), "line": None, "text": "nccl-tests -J JSON"})
    if not bad:
        names = ", ".join(_where(js) for js, _ in pairs)
        return {
            "name": "json-agrees",
            "status": "pass",
            "detail": f"the -J JSON ({names}) agrees with its table, row by row",
            "evidence": [],
        }, []
    detail = "the -J JSON and the table of the same run disagree: " + " | ".join(bad)
    finding = {
        "id": "nccl-tests-json-disagrees",
        "severity": "error",
        "message": detail,
        "evidence": evidence,
        "remedy": "give the JSON and the log of one run, unedited; rerun the test when they came from one",
        "source": "efa_validators/judge/agree.py",
    }
    return {"name": "json-agrees", "status": "fail", "detail": detail, "evidence": evidence}, [finding]
