"""Judge an nccl-tests result against an instance profile: checks and findings that never pass on absence.

Three checks, each pass/fail/unknown with the lines that prove it:
* `busbw-plateau`: the plateau busbw (see parse/nccltests_result.py for the rule and why not the average),
  as a percentage of the wire speed (profiles.wire_busbw) and against the expected floor
  (profiles.expected_busbw, source stated). One node sends nothing over EFA: unknown, never pass.
* `wrong-zero`: every row's #wrong visible and 0 (N/A or Inf/NaN are not zero); for the old `error`
  column (a deviation, not a count), every deviation surely within nccl-tests' own tolerance.
* `out-of-bounds`: the footer's `Out of bounds values : 0 OK` seen, with data checking on.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

from efa_validators.judge import profiles
from efa_validators.judge.agree import json_table_check
from efa_validators.judge.shortlist import few
from efa_validators.parse.nccltests_result import PLATEAU_MIN_BYTES

Check = Dict[str, Any]
Finding = Dict[str, Any]

_MAX_EVIDENCE = 10


def judge(
    nccl_tests: Optional[Dict[str, Any]],
    profile: Optional[profiles.Profile],
    nodes: Optional[int],
    ranks: Optional[int],
) -> Tuple[List[Check], List[Finding]]:
    """(checks, findings) for one nccl-tests object; `nodes`/`ranks` None means "read them from the log"."""
    findings: List[Finding] = []
    if nccl_tests is None:
        why = "no nccl-tests output seen"
        return [
            _check(name, "unknown", why, []) for name in ("busbw-plateau", "wrong-zero", "out-of-bounds")
        ], []
    nt = nccl_tests
    k, n, how = _shape(nt, profile, nodes, ranks)
    hosts = nt.get("hosts") or []
    if nodes is not None and hosts and len(hosts) != nodes:
        findings.append(
            {
                "id": "nccl-tests-node-count-mismatch",
                "severity": "warning",
                "message": f"{nodes} nodes were expected but nccl-tests ran on {len(hosts)} host(s): "
                + few(hosts, 8),
                "evidence": [_rank_ev(r) for r in (nt["ranks"][0], nt["ranks"][-1])]
                if nt.get("ranks")
                else [],
                "remedy": "check the launcher's host list (mpirun -H/--hostfile, srun -N) against the node "
                "count",
            }
        )
    checks = [
        _plateau_check(nt, profile, k, n, how, findings),
        _wrong_check(nt, findings),
        _oob_check(nt, findings),
    ]
    _general_findings(nt, findings)
    # Further tables of the same log (a script running several tests): their data checks count too, so
    # a corrupted second test cannot hide behind a clean first one. Bandwidth stays the first table's.
    for i, extra in enumerate(nt.get("additional_tables") or [], 2):
        label = f"table {i} ({extra.get('collective') or 'collective unknown'})"
        checks[1] = _merge(checks[1], _wrong_check(extra, findings), label)
        checks[2] = _merge(checks[2], _oob_check(extra, findings), label)
        _general_findings(extra, findings)
    agreement = json_table_check([nt] + list(nt.get("additional_tables") or []))
    if agreement is not None:
        checks.append(agreement[0])
        findings.extend(agreement[1])
    return checks, findings


_RANK = {"pass": 0, "unknown": 1, "fail": 2}


def _merge(first: Check, other: Check, label: str) -> Check:
    """Worst status wins (fail > unknown > pass): every table must pass for the check to pass."""
    status = max(first["status"], other["status"], key=lambda s: _RANK.get(s, 1))
    detail = f"{first['detail']}; {label}: {other['status']}, {other['detail']}"
    return _check(first["name"], status, detail, first["evidence"] + other["evidence"])


def _check(name: str, status: str, detail: str, evidence: List[Dict[str, Any]]) -> Check:
    return {"name": name, "status": status, "detail": detail, "evidence": evidence}


def _ev(item: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    if not item:
        return []
    return [{"file": item.get("file"), "line": item.get("line"), "text": item.get("text")}]


def _rank_ev(rank: Dict[str, Any]) -> Dict[str, Any]:
    """Evidence for a `# Rank` line (the report keeps its fields, not its text)."""
    text = f"#  Rank {rank.get('rank')} ... on {rank.get('host')} device {rank.get('device')}"
    return {"file": rank.get("file"), "line": rank.get("line"), "text": text}


def _shape(
    nt: Dict[str, Any], profile: Optional[profiles.Profile], nodes: Optional[int], ranks: Optional[int]
) -> Tuple[Optional[int], Optional[int], str]:
    """Node and rank counts: given, else read from the `# Rank` lines, else ranks = nodes x GPUs (said so)."""
    notes = []
    k = nodes
    if k is None and nt.get("hosts"):
        k = len(nt["hosts"])
        notes.append(f"{k} node(s) from the '# Rank' lines")
    n = ranks
    if n is None and nt.get("ranks"):
        n = len(nt["ranks"])
        notes.append(f"{n} ranks from the '# Rank' lines")
    if n is None and k is not None and profile is not None:
        n = k * profile.gpus
        notes.append(f"{n} ranks assumed ({k} nodes x {profile.gpus} GPUs)")
    return k, n, "; ".join(notes)


def _gib(size: Optional[int]) -> str:
    if size is None:
        return "?"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / float(1 << shift):g} {unit}"
    return f"{size} B"


def _plateau_check(
    nt: Dict[str, Any],
    profile: Optional[profiles.Profile],
    k: Optional[int],
    n: Optional[int],
    how: str,
    findings: List[Finding],
) -> Check:
    name = "busbw-plateau"
    bw, size = nt.get("plateau_busbw"), nt.get("plateau_size")
    if bw is None:
        return _check(name, "unknown", "no row with a busbw value", _ev(nt.get("evidence", {}).get("header")))
    row = _row_at(nt, size, nt.get("plateau_placement"), bw)
    ev = _ev(row)
    said = f"plateau {bw:g} GB/s at {_gib(size)} ({nt.get('plateau_placement')}; {nt.get('plateau_rule')})"
    if how:
        said += f"; {how}"
    units = nt.get("units")
    if units is not None and "(GB/s)" not in units:
        return _check(name, "unknown", said + f"; bandwidth units are not GB/s ({' '.join(units)})", ev)
    coll = nt.get("collective")
    if coll and nt.get("collective_source") != "binary":
        said += f"; {coll} read from the {nt.get('collective_source')}"
    if profile is None:
        return _check(name, "unknown", said + "; no instance profile to judge it against (give the type)", ev)
    if k is None:
        return _check(name, "unknown", said + "; node count unknown (give the node count)", ev)
    if k < 2:
        findings.append(
            {
                "id": "single-node-run",
                "severity": "info",
                "message": "a single-node run sends nothing over EFA: its busbw says nothing about EFA",
                "evidence": ev,
                "remedy": "run nccl-tests across at least 2 nodes to judge EFA bandwidth",
            }
        )
        return _check(name, "unknown", said + "; single node: EFA bandwidth not tested", ev)
    if n is None or n < k:
        return _check(name, "unknown", said + "; rank count unknown", ev)
    if coll is None:
        return _check(name, "unknown", said + "; collective unknown (the test binary was not named)", ev)
    wire = profiles.wire_busbw(profile, coll, k, n)
    if wire:
        said += (
            f"; {100.0 * bw / wire:.0f}% of wire speed {wire:.0f} GB/s busbw "
            f"({profile.efa_gbps} Gbps EFA per node, {k} nodes, {n} ranks)"
        )
    if wire and bw > wire:
        findings.append(
            {
                "id": "busbw-above-wire",
                "severity": "error",
                "message": f"{coll} busbw plateau {bw:g} GB/s is {100.0 * bw / wire:.0f}% of the wire speed "
                f"{wire:.0f} GB/s busbw of {k} x {profile.name} ({profile.efa_gbps} Gbps EFA per node, {n} "
                "ranks): more than the NICs can carry, not a real measurement",
                "evidence": ev,
                "remedy": "check the node and rank counts (--nodes, the log's nRanks) and that the table is "
                "this run's output; a table edited or taken from another run is no evidence",
            }
        )
        return _check(name, "fail", said + "; above the wire speed: not a real measurement", ev)
    exp = profiles.expected_busbw(profile, coll, k, n, size)
    if exp is None:
        return _check(name, "unknown", said + f"; no published {coll} reference for {profile.name}", ev)
    said += f"; expected >= {exp.floor:.1f} GB/s ({exp.how})"
    if bw >= exp.floor:
        return _check(name, "pass", said, ev)
    if size is not None and size < PLATEAU_MIN_BYTES:
        findings.append(
            {
                "id": "busbw-plateau-not-reached",
                "severity": "warning",
                "message": f"the largest message was {_gib(size)}: busbw {bw:g} GB/s is below the expected "
                f"{exp.floor:.1f} GB/s, but the curve may not have reached its plateau",
                "evidence": ev,
                "remedy": "run nccl-tests up to at least 1 GiB (-e 1G or more) to judge the plateau",
            }
        )
        return _check(name, "unknown", said + "; largest size below 1 GiB: plateau not reached", ev)
    findings.append(
        {
            "id": "busbw-below-expected",
            "severity": "error",
            "message": f"{coll} busbw plateau {bw:g} GB/s at {_gib(size)} is below the expected "
            f"{exp.floor:.1f} GB/s for {k} x {profile.name}"
            + (f" ({100.0 * bw / wire:.0f}% of wire speed)" if wire else ""),
            "evidence": ev,
            "remedy": "check that every rank uses EFA with GPUDirect RDMA (NET/OFI .../GDRDMA channels), "
            "that all EFA devices are in the container, and that no NCCL_ALGO/NCCL_PROTO/NCCL_BUFFSIZE "
            "override is set; then run pairwise node tests to find a slow node",
        }
    )
    return _check(name, "fail", said, ev)


def _row_at(nt: Dict[str, Any], size: Optional[int], placement: Optional[str], bw: float) -> Optional[Dict]:
    for row in nt.get("rows") or []:
        cell = row.get(placement) if placement else None
        if row.get("size") == size and cell and cell.get("busbw") == bw:
            return row
    return None


def _wrong_check(nt: Dict[str, Any], findings: List[Finding]) -> Check:
    name = "wrong-zero"
    rows = nt.get("rows") or []
    if not rows:
        return _check(name, "unknown", "no result rows", _ev(nt.get("evidence", {}).get("header")))
    bad = [
        r
        for r in rows
        if any((r.get(p) or {}).get("wrong") not in (None, 0) for p in ("out_of_place", "in_place"))
    ]
    nonfinite = [r for r in rows if r.get("nonfinite")]
    if bad or nonfinite:
        total = nt.get("wrong") or 0
        parts = []
        if bad:
            parts.append(f"{total} wrong elements in {len(bad)} row(s)")
        if nonfinite:
            parts.append(f"Inf/NaN values in {len(nonfinite)} row(s)")
        ev = [e for r in (bad + nonfinite)[:_MAX_EVIDENCE] for e in _ev(r)]
        findings.append(_wrong_results(", ".join(parts), ev))
        return _check(name, "fail", "; ".join(parts), ev)
    if nt.get("old_error_column"):
        return _old_error_check(nt, rows, findings)
    unseen = nt.get("wrong_unseen_rows") or 0
    if nt.get("wrong") is None or unseen:
        return _check(
            name,
            "unknown",
            f"#wrong not visible in {unseen} result cell(s) (N/A: data check off, -c 0)",
            _ev(nt.get("evidence", {}).get("header")),
        )
    last = rows[-1]
    return _check(name, "pass", f"#wrong 0 in all {len(rows)} rows (out-of-place and in-place)", _ev(last))


# nccl-tests before 51af557 (2022-08-19) printed `error`: the largest deviation from the expected
# result over all ranks (`%5.0le`: one significant digit), and counted a test out of bounds when a
# rank's deviation passed DeltaMaxValue(type) x (nranks - 1). Source: NVIDIA/nccl-tests
# src/common.cu at 51af557^ (DeltaMaxValue, CheckData). Integer types must match exactly.
_OLD_TOLERANCE = {"half": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12}
_INT_TYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "int", "char")


def _printed_bounds(value: float) -> Tuple[float, float]:
    """The interval a deviation printed with one significant digit came from."""
    if value <= 0:
        return 0.0, 0.0
    exp = math.floor(math.log10(value))
    digit = round(value / 10.0**exp)
    return (digit - 0.5) * 10.0**exp, (digit + 0.5) * 10.0**exp


def _old_error_check(nt: Dict[str, Any], rows: List[Dict[str, Any]], findings: List[Finding]) -> Check:
    """Judge each row's deviation as that nccl-tests did: pass only when every one is surely in bounds."""
    name = "wrong-zero"
    header = _ev(nt.get("evidence", {}).get("header"))
    nranks = len(nt.get("ranks") or [])
    if nranks < 1:
        return _check(
            name, "unknown", "old 'error' column, but the ranks were not listed: no tolerance", header
        )
    bad, unsure, worst = [], [], 0.0
    for r in rows:
        tol = 0.0 if r.get("type") in _INT_TYPES else _OLD_TOLERANCE.get(r.get("type") or "")
        for placement in ("out_of_place", "in_place"):
            cell = r.get(placement)
            if cell is None:
                continue
            dev = cell.get("error")
            if dev is None or tol is None:
                unsure.append(r)
                continue
            lo, hi = _printed_bounds(dev)
            worst = max(worst, dev)
            limit = tol * (nranks - 1)
            if lo > limit * (1 + 1e-9):  # the margins keep float rounding on the side of "unknown"
                bad.append(r)
            elif hi >= limit * (1 - 1e-9) and hi > 0:
                unsure.append(r)
    if bad:
        rows_bad = list({id(r): r for r in bad}.values())  # a row whose two cells both fail: once
        ev = [e for r in rows_bad[:_MAX_EVIDENCE] for e in _ev(r)]
        what = (
            "deviation above the tolerance for its type in %d result cell(s) (old 'error' column, %d ranks)"
        )
        findings.append(_wrong_results(what % (len(bad), nranks), ev))
        return _check(name, "fail", f"deviation above tolerance in {len(bad)} result cell(s)", ev)
    if unsure:
        why = (
            f"old 'error' column: {len(unsure)} result cell(s) N/A (data check off), of an unknown type, "
            "or too close to the tolerance to tell at one printed digit"
        )
        return _check(name, "unknown", why, header)
    return _check(
        name,
        "pass",
        f"old 'error' column: largest deviation {worst:.0e} within the tolerance for its type x "
        f"(nranks - 1) = {nranks - 1} in all {len(rows)} rows",
        _ev(rows[-1]),
    )


def _wrong_results(what: str, evidence: List[Dict[str, Any]]) -> Finding:
    return {
        "id": "nccl-tests-wrong-results",
        "severity": "error",
        "message": "nccl-tests found corrupted results: " + what,
        "evidence": evidence,
        "remedy": "data corruption: with aws-ofi-nccl <= 1.5 set NCCL_PROTO=simple (LL/LL128 "
        "unsupported), better upgrade the plugin (>= 1.6); otherwise suspect a faulty GPU or NIC "
        "(run pairwise)",
    }


def _check_disabled(nt: Dict[str, Any]) -> bool:
    """Data checking off (-c 0): the header says `validation: 0`, or every #wrong cell is N/A."""
    if nt.get("check") == 0:
        return True
    rows = nt.get("rows") or []
    return bool(rows) and not nt.get("old_error_column") and nt.get("wrong") is None


def _oob_check(nt: Dict[str, Any], findings: List[Finding]) -> Check:
    name = "out-of-bounds"
    ev = _ev(nt.get("evidence", {}).get("out_of_bounds"))
    count, ok = nt.get("out_of_bounds"), nt.get("out_of_bounds_ok")
    if count is None:
        why = (
            "footer not seen (output truncated)" if nt.get("truncated") else "no 'Out of bounds values' line"
        )
        return _check(name, "unknown", why, _ev(nt.get("evidence", {}).get("header")))
    if count > 0 or ok is False:
        findings.append(
            {
                "id": "nccl-tests-out-of-bounds",
                "severity": "error",
                "message": f"nccl-tests reported {count} out-of-bounds values (results differ from expected)",
                "evidence": ev,
                "remedy": "data corruption: see LL/LL128 with old plugins (NCCL_PROTO=simple on aws-ofi-nccl "
                "<= 1.5, or upgrade); else a faulty GPU or NIC (run pairwise node tests)",
            }
        )
        return _check(name, "fail", f"{count} out-of-bounds values", ev)
    if _check_disabled(nt):
        return _check(
            name, "unknown", "0 out-of-bounds but data checking was off (-c 0): nothing was checked", ev
        )
    return _check(name, "pass", "0 out-of-bounds values (OK)", ev)


def _general_findings(nt: Dict[str, Any], findings: List[Finding]) -> None:
    evidence = nt.get("evidence", {})
    rows = nt.get("rows") or []
    if nt.get("truncated"):
        last = rows[-1] if rows else evidence.get("header")
        findings.append(
            {
                "id": "nccl-tests-truncated",
                "severity": "warning",
                "message": f"the nccl-tests table stops after {len(rows)} row(s) without its footer "
                "(Out of bounds / Avg bus bandwidth): the run stopped, hung, or the log was cut",
                "evidence": _ev(last),
                "remedy": "if the run hung, rerun with a timeout (nccl-tests -T, the validator's watchdog) "
                "and test node pairs; if the log was cut, give the whole log",
            }
        )
    footer = nt.get("out_of_bounds") is not None or nt.get("avg_busbw") is not None
    if not rows and not nt.get("columns") and not footer and (nt.get("ranks") or evidence.get("parameters")):
        started = evidence.get("parameters") or (nt.get("ranks") or [None])[-1]
        findings.append(
            {
                "id": "nccl-tests-no-results",
                "severity": "warning",
                "message": "nccl-tests started (parameters/devices printed) but printed no result table: "
                "it hung or failed in communicator setup, or the log was cut",
                "evidence": _ev(started),
                "remedy": "look for NCCL WARN lines and 'Test NCCL failure'; check security groups allow "
                "all traffic between the nodes; rerun with a timeout (-T) and test node pairs",
            }
        )
    if nt.get("avg_busbw_check") == "FAILED":
        findings.append(
            {
                "id": "nccl-tests-min-bw-failed",
                "severity": "error",
                "message": "nccl-tests' own NCCL_TESTS_MIN_BW check failed (average below 0.9 x the minimum)",
                "evidence": _ev(evidence.get("avg_busbw")),
                "remedy": "see busbw-plateau; note the average includes small messages",
            }
        )
    avg, plateau = nt.get("avg_busbw"), nt.get("plateau_busbw")
    if avg is not None and plateau:
        findings.append(
            {
                "id": "avg-busbw-is-not-plateau",
                "severity": "info",
                "message": f"'Avg bus bandwidth' {avg:g} GB/s is the mean over every size, small ones "
                f"included; bandwidth is judged on the plateau, {plateau:g} GB/s at "
                f"{_gib(nt.get('plateau_size'))}",
                "evidence": _ev(evidence.get("avg_busbw")),
                "remedy": "compare plateau busbw, not the average, with published figures",
            }
        )
    failures = nt.get("failures") or []
    if failures:
        findings.append(
            {
                "id": "nccl-tests-failure",
                "severity": "error",
                "message": f"nccl-tests reported {len(failures)} failure line(s): {failures[0].get('text')}",
                "evidence": [_ev(f)[0] for f in failures[:_MAX_EVIDENCE]],
                "remedy": "read the NCCL WARN lines before the failure; run with NCCL_DEBUG=INFO",
            }
        )
    skipped = nt.get("skipped_lines") or 0
    if skipped:
        findings.append(
            {
                "id": "nccl-tests-unreadable-rows",
                "severity": "warning",
                "message": f"{skipped} line(s) in the table looked like rows but did not match its header",
                "evidence": _ev(evidence.get("header")),
                "remedy": "interleaved or cut output: tag each rank's output (mpirun --tag-output, srun -l)",
            }
        )
