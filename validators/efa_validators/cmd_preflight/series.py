"""One run under the watchdog, and several runs (--repeat, a sweep's tests) made into one report."""

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

from efa_validators.judge.shortlist import few
from efa_validators.run import launchcheck
from efa_validators.run import report as runreport
from efa_validators.run.runner import MAX_LINE, MAX_OUTPUT, StreamingParser, nccl_env, prepare, run_command

BACKGROUND_NICE = 10  # reading and parsing yield the CPU to the job's ranks; the watchdog's thread does not


def run_once(
    argv: List[str], args: argparse.Namespace, log_path: str, nodes: Optional[int], inject: bool = True
) -> Dict[str, Any]:
    """One run of argv under the watchdog -> its report (NotStarted propagates: exit 2)."""
    argv2, kind, notes = prepare(argv, inject=inject)
    env, env_notes = nccl_env()
    # what the launcher is given (hosts, a hostfile's too) is read before anything of the run can change it
    launch = launchcheck.declared(argv2, kind, env, nodes)
    from efa_validators.analyze import analyze

    # source: the evidence names the kept log, with its line numbers
    parser = StreamingParser(
        analyze,
        nice=BACKGROUND_NICE,
        instance_type=args.instance_type,
        nodes=nodes,
        source=log_path,
        named_json=True,  # the -J JSON the table names, checked against it (the recipes put it beside)
    )
    rank_logs = getattr(args, "rank_logs", None)
    if rank_logs:
        os.makedirs(rank_logs, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        result = run_command(
            argv2,
            kind=kind,
            timeout=args.timeout,
            idle_timeout=args.idle_timeout,
            grace=args.grace,
            env=env,
            log=log,
            on_lines=parser.feed,
            echo=None if args.quiet else sys.stderr,
            rank_logs=rank_logs,
            spool_dir=os.path.dirname(os.path.abspath(log_path)),
            nice=BACKGROUND_NICE,
            max_output=getattr(args, "max_output", MAX_OUTPUT),
            max_line=getattr(args, "max_line", MAX_LINE),
        )
    result.log = log_path
    result.notes = notes + env_notes + result.notes
    analysis, error = parser.finish()
    return runreport.combine(result, analysis, error, args.instance_type, nodes, launch)


def numbered(path: str, n: Any) -> str:
    """LOG.N.log, or LOG.N.K.log for (N, K): the K-th repeat of test N."""
    root, ext = os.path.splitext(path)
    number = ".".join(str(x) for x in n) if isinstance(n, tuple) else str(n)
    return "%s.%s%s" % (root, number, ext or ".log")


RANK = {"pass": 0, "unknown": 1, "fail": 2}


def worse(a: Optional[str], b: str) -> str:
    if a is None:
        return b
    return a if RANK.get(a, 1) >= RANK.get(b, 1) else b


def series_report(
    reports: List[Dict[str, Any]], labels: List[Dict[str, Any]], flaky: bool = True
) -> Dict[str, Any]:
    """Several runs -> one report: the worst run's report on top, every run summarised under `runs`.
    `flaky`: mixed results of the same test are a finding (not for a sweep, whose tests differ)."""
    worst_i = 0
    for i, rep in enumerate(reports):
        if RANK.get(rep["verdict"], 1) > RANK.get(reports[worst_i]["verdict"], 1):
            worst_i = i
    top = dict(reports[worst_i])
    runs = []
    for label, rep in zip(labels, reports):
        runs.append(
            dict(
                label,
                verdict=rep["verdict"],
                findings=[f.get("id") for f in rep.get("findings", [])],
                exit_code=rep["run"]["exit_code"],
                killed=rep["run"]["killed"],
                replay=bool(rep.get("replay")),
                duration_s=rep["run"]["duration_s"],
                log=rep["run"]["log"],
            )
        )
    verdicts = [r["verdict"] for r in runs]
    findings = list(top.get("findings") or [])
    if flaky and len(set(verdicts)) > 1 and "fail" in verdicts:
        findings = _with_flaky(
            findings,
            {
                "id": "flaky",
                "severity": "error",
                "message": "%d of %d runs failed: %s"
                % (
                    verdicts.count("fail"),
                    len(verdicts),
                    ", ".join(_label(lab) for lab, r in zip(labels, runs) if r["verdict"] == "fail"),
                ),
                "evidence": [],
                "remedy": "an intermittent failure: repeat with --pairwise to find the node",
            },
        )
    top["findings"] = findings
    top["runs"] = runs
    verdict = "pass"
    for v in verdicts:
        verdict = worse(verdict, v)
    top["verdict"] = verdict
    return top


def _with_flaky(findings: List[Dict[str, Any]], flaky: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The worst run's findings (already in efa_validators.judge.causes order) with `flaky` where that order
    puts a consequence: the REPLAY findings stay first, the root cause leads and `flaky` follows the causes,
    `caused_by` the root cause; only when no error fired does `flaky` lead. So a repeated run's lead sentence
    names what failed, not that it failed only sometimes."""
    from efa_validators.judge.causes import root_cause

    replays = [f for f in findings if str(f.get("id", "")).startswith("replay")]
    rest = [f for f in findings if not str(f.get("id", "")).startswith("replay")]
    root = root_cause(rest)
    if root is None:
        return replays + [flaky] + rest
    flaky["caused_by"] = root["id"]
    flaky["message"] = "it failed only sometimes (see %s): %s" % (root["id"], flaky["message"])
    at = next(
        (i for i, f in enumerate(rest) if f.get("severity") != "error" or f.get("caused_by")), len(rest)
    )
    return replays + rest[:at] + [flaky] + rest[at:]


def _label(label: Dict[str, Any]) -> str:
    if "pair" in label:
        return "-".join(label["pair"])
    if "group" in label:
        return few(label["group"], 4)
    return "run %s" % label.get("run")
