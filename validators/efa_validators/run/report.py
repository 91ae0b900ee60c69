"""The report of a run: the parser's report on the output, plus what the run itself showed (a hang the
watchdog ended, a rank or launcher that exited non-zero, processes left behind), folded into one verdict.

A run that hung or failed is a fail whatever its output said; a clean run is only as good as what its
output proves (a `sleep` that exits 0 proves nothing: unknown).
"""

from typing import Any, Dict, List, Optional, Tuple

from efa_validators.judge import causes
from efa_validators.judge.shortlist import few as names
from efa_validators.judge.shortlist import ranges
from efa_validators.report.contract import EXIT_BY_VERDICT, SCHEMA
from efa_validators.run import launchcheck
from efa_validators.run.runner import OUTPUT_LIMIT, RunResult

HANG_REMEDY = (
    "find the node by elimination: "
    "`python -m efa_validators run --pairwise HOST... -- mpirun -H {hosts} ...`; "
    "check security groups allow all traffic to themselves (bootstrap works, then a hang),"
    " and run nccl-tests "
    "with -T/--timeout so ranks report the collective that stalled"
)
REPORT_TAILS = 64  # ranks whose last lines the report carries (the quietest first): bounded at any scale
EVIDENCE_RANKS = 16  # ranks whose last lines are a finding's evidence
LIST_CAP = 64  # rank numbers listed in a finding; the rest are counted and given as ranges
TAIL_TEXT = 1024  # characters of each last line in the report (a 64 KiB line x 8 x 64 ranks would be 32 MiB)


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


def _by_quiet(result: RunResult) -> List[Optional[int]]:
    """Ranks in the order their output stopped (untagged lines first, then ties by rank number)."""
    return sorted(
        result.ranks,
        key=lambda r: (r is not None, result.ranks[r].last_time, r if r is not None else -1),
    )


def run_facts(result: RunResult) -> Dict[str, Any]:
    """The `run` object of the report: the command and how it ended, per rank line counts and tails
    (last lines for the REPORT_TAILS ranks that went quiet first: the JSON stays small at any scale)."""
    tailed = set(_by_quiet(result)[:REPORT_TAILS])
    ranks = []
    for rank in sorted(result.ranks, key=lambda r: (r is not None, r if r is not None else -1)):
        state = result.ranks[rank]
        entry = {"rank": rank, "lines": state.lines, "last_output_s": round(state.last_time, 3)}
        if state.host is not None:
            entry["host"] = state.host
        if rank in tailed:
            entry["last_lines"] = [text[:TAIL_TEXT] for _n, text in state.last]
        ranks.append(entry)
    return {
        "command": result.redactor.argv(result.argv),
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
        "long_lines": result.long_lines,
        "output_bytes": result.output_bytes,
        "dropped_bytes": result.dropped_bytes,
        "max_output_bytes": result.max_output,
        "max_line_bytes": result.max_line,
        "leftover_pids": result.leftovers,
        "escaped_pids": result.escaped,
        "subreaper": result.subreaper,
        # how the run's processes were found: the tree this process adopts orphans into, and the marker
        # variable every descendant inherits; ended until a walk and a scan in a row find none
        "tracking": ("cgroup v2 %s, " % result.cgroup if result.cgroup else "")
        + ("subreaper tree walk and marker scan" if result.subreaper else "marker scan"),
        "cgroup": result.cgroup,
        "ended_pids": result.ended[:LIST_CAP],
        "ended_count": result.ended_count,
        # the replay stand-in announced itself: every report made from this one must say REPLAY
        "replay": result.replay,
        "failed_ranks": [
            {"rank": f.rank, "host": f.host, "exit_code": f.code, "text": f.text}
            for f in result.failed_ranks()
        ],
        "log": result.log,
        "rank_output": ranks,
        "ranks_tailed": len(tailed),
    }


def run_findings(result: RunResult) -> List[Dict[str, Any]]:
    """Findings that come from how the run ended rather than from what NCCL printed."""
    findings = []
    if result.killed == OUTPUT_LIMIT:
        findings.append(_output_limit(result))
    elif result.killed is not None:
        findings.append(_hang(result))
    if result.long_lines:
        findings.append(
            {
                "id": "long-lines",
                "severity": "warning",
                "message": "%d line(s) longer than %d bytes: each keeps its first %d bytes (marked cut), "
                "%d byte(s) of output were not kept" % (
                    result.long_lines, result.max_line, result.max_line, result.dropped_bytes
                ),
                "evidence": [],
                "remedy": "a program that prints without newlines (a progress bar, binary data) floods "
                "the log: redirect it, or print lines",
            }
        )  # fmt: skip
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
                "message": "the command left %d process(es) running after it ended (pids %s)%s;"
                " the runner ended %d process(es) (pids %s)"
                % (
                    len(result.leftovers),
                    names([str(p) for p in result.leftovers], 10),
                    "; %d had left its process group (setsid or a double fork)" % len(result.escaped)
                    if result.escaped
                    else "",
                    result.ended_count,
                    names([str(p) for p in result.ended], 10),
                ),
                "evidence": [],
                "remedy": "a launcher should wait for its ranks; check for daemonised children",
                "pids": result.leftovers[:LIST_CAP],
                "escaped_pids": result.escaped[:LIST_CAP],
                "ended_pids": result.ended[:LIST_CAP],
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
                " (python -m efa_validators.probe_torch) under the launcher",
            }
        )
    return findings


def _output_limit(result: RunResult) -> Dict[str, Any]:
    return {
        "id": "output-limit",
        "severity": "error",
        "message": "the command printed more than %d bytes (the cap on the log): the run was ended (%s to "
        "its processes); the first %d bytes are kept and judged, %d were not read"
        % (
            result.max_output,
            (result.kill_signal or "none").upper(),
            result.max_output,
            max(0, result.output_bytes - result.max_output),
        ),
        "evidence": _all_tails(result, 2),
        "remedy": "print less (NCCL_DEBUG=INFO, not TRACE; no per-step debug output), or raise --max-output",
    }


def _hang(result: RunResult) -> Dict[str, Any]:
    if result.killed == "timeout":
        why = "the total timeout of %gs passed" % (result.timeout or 0)
    else:
        why = "no output for %gs (idle timeout)" % (result.idle_timeout or 0)
    if result.lines == 0:
        why += "; nothing was printed at all: start-up did not finish within the limit"
    stale = _stalest_ranks(result)
    if stale:
        why += "; " + _quiet_summary(result, stale)
    return {
        "id": "hang",
        "severity": "error",
        "message": "%s: the run was ended (%s to its processes) and its partial log kept"
        % (why, (result.kill_signal or "none").upper()),
        "evidence": _all_tails(result, 3, EVIDENCE_RANKS),
        "remedy": HANG_REMEDY,
        "ranks": stale[:LIST_CAP],
        "ranks_count": len(stale),
        "rank_ranges": ranges(stale, 64),
    }


def _quiet_summary(result: RunResult, stale: List[int]) -> str:
    """`3 of 16 ranks went quiet first: ranks 4-6 on 1 host (p5-b)`: readable at 8192 ranks."""
    hosts = sorted({h for h in (result.ranks[r].host for r in stale) if h is not None})
    tagged = sum(1 for r in result.ranks if r is not None)
    where = " on %d host%s (%s)" % (len(hosts), "" if len(hosts) == 1 else "s", names(hosts)) if hosts else ""
    if len(stale) == 1:
        return "rank %d went quiet first%s" % (stale[0], where)
    return "%d of %d ranks went quiet first: ranks %s%s" % (len(stale), tagged, ranges(stale), where)


def _stalest_ranks(result: RunResult) -> List[int]:
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


def _all_tails(result: RunResult, n: int, max_ranks: int = EVIDENCE_RANKS) -> List[Dict[str, Any]]:
    """The last n lines of the ranks that went quiet first (untagged output first)."""
    out = []
    for rank in _by_quiet(result)[:max_ranks]:
        out.extend(_tail_evidence(result, rank, n))
    return out


def command_exit(report: Dict[str, Any]) -> int:
    """0 when the run's command ended by itself with status 0 (its `run-completed` check), else 1.

    For a node that sees only its own ranks: its partial verdict is not the job's, the judge that
    reads every node's log gives that one.
    """
    done = [c for c in report.get("checks") or [] if c.get("name") == "run-completed"]
    return 0 if done and all(c.get("status") == "pass" for c in done) else 1


def replay_finding(bad: List[str]) -> Dict[str, Any]:
    """The REPLAY finding: `validators run` and `validators parse` of a saved replay log give the same one."""
    return {
        "id": "replay",
        "severity": "warning",
        "message": "REPLAY: the output was printed by the replay stand-in (efa_validators.replay) from a "
        "recorded log; it is no evidence about this cluster and cannot clear a release gate"
        + ("; launch and log disagree, as a recording does: " + "; ".join(bad) if bad else ""),
        "evidence": [],
        "remedy": "run the real GPU program (nccl-tests, the torch probe) under the launcher",
    }


def launch_findings(
    result: RunResult, report: Dict[str, Any], launch: launchcheck.Launch, here: str
) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """(check `launch-matches-log`, findings): does the log describe the job the launcher started?

    A replay says so itself: its report is marked REPLAY and the comparison is only informative."""
    status, bad, good = launchcheck.compare(
        launch,
        result.claims,
        report.get("nranks"),
        report.get("ranks_seen"),
        result.seen_pids,
        result.commands,
        here,
    )
    hosts = sorted(result.claims)
    detail = "%s; the log claims %d host(s)%s" % (
        launch.said,
        len(hosts),
        " (%s)" % names(hosts) if hosts else "",
    )
    if good:
        detail += "; agree: " + ", ".join(good)
    if bad and status == "unknown":
        detail += "; short: " + "; ".join(bad)
    findings = []
    if result.replay:
        findings.append(replay_finding(bad))
        status = "unknown"
        detail = "REPLAY, not compared: " + detail
    elif status == "fail":
        findings.append(
            {
                "id": "launch-mismatch",
                "severity": "error",
                "message": "the log does not describe the job that was started: " + "; ".join(bad),
                "evidence": [],
                "remedy": "a program printed NCCL lines of another job (a recorded log?): run the real GPU "
                "program under the launcher; check the launcher's -np/-H/--hostfile, srun -N/-n, torchrun "
                "--nnodes/--nproc-per-node",
            }
        )
    elif status == "unknown" and hosts:
        findings.append(
            {
                "id": "launch-unverified",
                "severity": "warning",
                "message": "the log's ranks and hosts could not be checked against the launch (%s)%s"
                % (launch.said, ": " + "; ".join(bad) if bad else ""),
                "evidence": [],
                "remedy": "run mpirun, srun or torchrun directly under `validators run`, or give --nodes N",
            }
        )
    check = {"name": "launch-matches-log", "status": status, "detail": detail, "evidence": []}
    return check, findings


def combine(
    result: RunResult,
    analysis: Optional[Dict[str, Any]],
    parse_error: Optional[BaseException],
    instance_type: Optional[str],
    nodes: Optional[int],
    launch: Optional[launchcheck.Launch] = None,
    here: Optional[str] = None,
) -> Dict[str, Any]:
    """The run report: the parser's report (or an empty one) and what the run showed, one verdict.

    The findings are in the order `parse` gives (efa_validators.judge.causes, the runner's own by the same
    table), so the report leads with the root cause `parse` would name: a run that hung after a completion
    error leads with the completion error. Only the REPLAY finding comes before them all.
    With `launch` (what the launcher was asked to start) the log's claims are checked against it: a
    contradiction fails, nothing comparable keeps a pass from standing (unknown)."""
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
                "message": "efa_validators.analyze is not available in this copy of the validators:"
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
    verdict = report.get("verdict") or "unknown"
    if launch is not None:
        check, launch_found = launch_findings(result, report, launch, here or launchcheck.local_host())
        checks.insert(1, check)
        findings += launch_found
        if check["status"] == "fail":
            verdict = "fail"
        elif verdict == "pass" and check["status"] == "unknown" and not result.replay:
            verdict = "unknown"
    report["checks"] = result.redactor.tree(checks)  # a detail may quote the command line
    # the lines were masked as they arrived; messages built from the command line are masked here
    replay = [f for f in findings if f["id"] == "replay"]
    ordered = causes.order(list(report.get("findings") or []), [f for f in findings if f["id"] != "replay"])
    report["findings"] = result.redactor.tree(replay + ordered)
    if not ended_ok:
        verdict = "fail"
    elif parse_error is not None and verdict != "fail":
        verdict = "unknown"
    if verdict not in EXIT_BY_VERDICT:
        verdict = "unknown"
    report["verdict"] = verdict
    run = run_facts(result)
    if launch is not None:  # the launcher the run started, and what it was given: what the log is held to
        argv = result.redactor.argv(result.argv)
        run["launch"] = dict(argv=argv, pid=result.pid, kind=result.kind, **launch.facts())
    report["run"] = result.redactor.tree(run)
    if result.replay:
        report["replay"] = True
    report.setdefault("instance_type", instance_type)
    report.setdefault("nodes", nodes)
    return report
