"""The report of a run: the parser's report on the output, plus what the run itself showed (a hang the
watchdog ended, a rank or launcher that exited non-zero, processes left behind), folded into one verdict.

A run that hung or failed is a fail whatever its output said; a clean run is only as good as what its
output proves (a `sleep` that exits 0 proves nothing: unknown).
"""

from typing import Any, Dict, List, Optional

from validators.runner import RunResult

SCHEMA = "efa-image-build/report/v1"
HANG_REMEDY = (
    "find the node by elimination: `python -m validators run --pairwise HOST... -- mpirun -H {hosts} ...`; "
    "check security groups allow all traffic to themselves (bootstrap works, then a hang),"
    " and run nccl-tests "
    "with -T/--timeout so ranks report the collective that stalled"
)
EXIT_BY_VERDICT = {"pass": 0, "fail": 1, "unknown": 3}


def empty_report(instance_type: Optional[str], nodes: Optional[int]) -> Dict[str, Any]:
    """The contract's keys with nothing known: used when the parser is not available or failed."""
    return {
        "schema": SCHEMA,
        "verdict": "unknown",
        "efa": None,
        "gdr": None,
        "network": None,
        "nccl_version": None,
        "cuda_version": None,
        "plugin": {"name": None, "version": None},
        "libfabric_version": None,
        "platform": None,
        "provider": None,
        "nics": None,
        "ranks": [],
        "hosts": [],
        "nccl_tests": None,
        "checks": [],
        "findings": [],
        "instance_type": instance_type,
        "nodes": nodes,
        "inputs": [],
    }


def _evidence(log: Optional[str], lineno: int, text: str) -> Dict[str, Any]:
    return {"file": log or "<output>", "line": lineno, "text": text[:500]}


def rank_name(rank: Optional[int]) -> str:
    return "launcher/untagged" if rank is None else "rank %d" % rank


def run_facts(result: RunResult) -> Dict[str, Any]:
    """The `run` object of the report: the command and how it ended, per rank line counts and tails."""
    ranks = []
    for rank in sorted(result.ranks, key=lambda r: (r is not None, r if r is not None else -1)):
        state = result.ranks[rank]
        ranks.append(
            {
                "rank": rank,
                "lines": state.lines,
                "last_output_s": round(state.last_time, 3),
                "last_lines": [text for _n, text in state.last],
            }
        )
    return {
        "command": result.argv,
        # true when the command ran the replay stand-in: every report made from this one must say REPLAY
        "replay": any(str(a) in ("validators.replay", "validators/replay.py") for a in result.argv or []),
        "launcher": result.kind,
        "notes": result.notes,
        "exit_code": result.returncode,
        "killed": result.killed,
        "kill_signal": result.kill_signal,
        "timeout_s": result.timeout,
        "idle_timeout_s": result.idle_timeout,
        "duration_s": result.duration_s,
        "lines": result.lines,
        "partial_line": result.partial_line,
        "cut_lines": result.cut_lines,
        "leftover_pids": result.leftovers,
        "failed_ranks": [
            {"rank": f.rank, "host": f.host, "exit_code": f.code, "text": f.text}
            for f in result.failed_ranks()
        ],
        "log": result.log,
        "rank_output": ranks,
    }


def run_findings(result: RunResult) -> List[Dict[str, Any]]:
    """Findings that come from how the run ended rather than from what NCCL printed."""
    findings = []
    if result.killed is not None:
        findings.append(_hang(result))
    failed = result.failed_ranks()
    if result.killed is None and result.returncode not in (0, None):
        if failed:
            for f in failed:
                where = " on %s" % f.host if f.host else ""
                code = " with exit code %d" % f.code if f.code is not None else ""
                findings.append(
                    {
                        "id": "rank-exit",
                        "severity": "error",
                        "message": "%s%s exited%s (%s exit code %s)"
                        % (rank_name(f.rank), where, code or " abnormally", result.kind, result.returncode),
                        "evidence": _tail_evidence(result, f.rank, 3) + [_evidence(result.log, 0, f.text)],
                        "remedy": "read that rank's last lines above;"
                        " rerun with --pairwise to see if the node "
                        "fails with others too",
                        "rank": f.rank,
                        "host": f.host,
                    }
                )
        else:
            signal_note = " (killed by signal %d)" % -result.returncode if result.returncode < 0 else ""
            findings.append(
                {
                    "id": "launcher-exit",
                    "severity": "error",
                    "message": "%s exited with code %d%s; the launcher did not name a rank"
                    % (result.argv[0], result.returncode, signal_note),
                    "evidence": _all_tails(result, 2),
                    "remedy": "read the last lines of the output; run the command by hand with the same env",
                }
            )
    if result.leftovers:
        findings.append(
            {
                "id": "leftover-processes",
                "severity": "warning",
                "message": "the command left %d process(es) running after it ended (pids %s);"
                " the runner ended them"
                % (len(result.leftovers), ", ".join(str(p) for p in result.leftovers[:10])),
                "evidence": [],
                "remedy": "a launcher should wait for its ranks; check for daemonised children",
            }
        )
    if result.partial_line and result.killed is None:
        findings.append(
            {
                "id": "output-cut",
                "severity": "warning",
                "message": "the output ended in the middle of a line",
                "evidence": _all_tails(result, 1),
                "remedy": None,
            }
        )
    if result.lines == 0 and result.killed is None:
        findings.append(
            {
                "id": "no-output",
                "severity": "warning",
                "message": "the command printed nothing: no evidence of NCCL, EFA or GDR",
                "evidence": [],
                "remedy": "run nccl-tests or the torch probe"
                " (python -m validators.probe_torch) under the launcher",
            }
        )
    return findings


def _hang(result: RunResult) -> Dict[str, Any]:
    if result.killed == "timeout":
        why = "the total timeout of %gs passed" % (result.timeout or 0)
    else:
        why = "no output for %gs (idle timeout)" % (result.idle_timeout or 0)
    if result.lines == 0:
        why += "; nothing was printed at all: start-up did not finish within the limit"
    stale = _stalest_ranks(result)
    if stale:
        why += "; %s went quiet first" % ", ".join(rank_name(r) for r in stale)
    return {
        "id": "hang",
        "severity": "error",
        "message": "%s: the run was ended (%s to the process group) and its partial log kept"
        % (why, (result.kill_signal or "none").upper()),
        "evidence": _all_tails(result, 3),
        "remedy": HANG_REMEDY,
        "ranks": stale,
    }


def _stalest_ranks(result: RunResult) -> List[Optional[int]]:
    """Tagged ranks whose output stopped at least a second before the last rank's: the likely stragglers."""
    tagged = {r: s.last_time for r, s in result.ranks.items() if r is not None}
    if len(tagged) < 2:
        return []
    newest = max(tagged.values())
    return sorted(r for r, t in tagged.items() if newest - t >= 1.0)


def _tail_evidence(result: RunResult, rank: Optional[int], n: int) -> List[Dict[str, Any]]:
    state = result.ranks.get(rank)
    if state is None:
        return []
    return [_evidence(result.log, lineno, text) for lineno, text in list(state.last)[-n:]]


def _all_tails(result: RunResult, n: int, max_ranks: int = 64) -> List[Dict[str, Any]]:
    out = []
    keys = sorted(result.ranks, key=lambda r: (r is not None, r if r is not None else -1))
    for rank in keys[:max_ranks]:
        out.extend(_tail_evidence(result, rank, n))
    return out


def command_exit(report: Dict[str, Any]) -> int:
    """0 when the run's command ended by itself with status 0 (its `run-completed` check), else 1.

    For a node that sees only its own ranks: its partial verdict is not the job's, the judge that
    reads every node's log gives that one.
    """
    done = [c for c in report.get("checks") or [] if c.get("name") == "run-completed"]
    return 0 if done and all(c.get("status") == "pass" for c in done) else 1


def combine(
    result: RunResult,
    analysis: Optional[Dict[str, Any]],
    parse_error: Optional[BaseException],
    instance_type: Optional[str],
    nodes: Optional[int],
) -> Dict[str, Any]:
    """The run report: the parser's report (or an empty one), the run's findings first, one verdict."""
    report = dict(analysis) if analysis else empty_report(instance_type, nodes)
    findings = run_findings(result)
    checks = list(report.get("checks") or [])
    if parse_error is not None:
        findings.append(
            {
                "id": "parser-error",
                "severity": "error",
                "message": "the log parser failed: %s: %s" % (type(parse_error).__name__, parse_error),
                "evidence": [],
                "remedy": "keep the log (%s) and report the parser failure" % (result.log or "use --log"),
            }
        )
    elif analysis is None:
        findings.append(
            {
                "id": "parser-unavailable",
                "severity": "warning",
                "message": "validators.analyze is not available in this copy of the validators:"
                " output not judged",
                "evidence": [],
                "remedy": "use a complete copy of the validators package",
            }
        )
    ended_ok = result.killed is None and result.returncode == 0
    checks.insert(
        0,
        {
            "name": "run-completed",
            "status": "pass" if ended_ok else "fail",
            "detail": "exit code %s%s in %.1fs"
            % (
                result.returncode,
                ", ended by watchdog (%s)" % result.killed if result.killed else "",
                result.duration_s,
            ),
            "evidence": [],
        },
    )
    report["checks"] = checks
    report["findings"] = findings + list(report.get("findings") or [])
    verdict = report.get("verdict") or "unknown"
    if not ended_ok or parse_error is not None:
        verdict = "fail" if not ended_ok else "unknown"
    if verdict not in EXIT_BY_VERDICT:
        verdict = "unknown"
    report["verdict"] = verdict
    report["run"] = run_facts(result)
    report.setdefault("instance_type", instance_type)
    report.setdefault("nodes", nodes)
    return report
