"""`run --pairwise` and `run --bisect`: rounds of tests run at once to find a bad or slow node."""

import argparse
import functools
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from efa_validators.cmd_preflight.series import RANK, numbered, run_once, series_report, worse
from efa_validators.judge.shortlist import few
from efa_validators.run import forked, pairwise, sweep
from efa_validators.run import report as runreport
from efa_validators.run.runner import NotStarted, prepare


def sweep_usage(command: List[str], args: argparse.Namespace) -> Optional[str]:
    """What is wrong with the sweep options, or None."""
    if args.pairwise and args.bisect:
        return "--pairwise and --bisect are two searches: give one"
    if args.known_good and not args.pairwise:
        return "--known-good needs --pairwise HOST..."
    if args.plan != "adaptive" and not args.pairwise:
        return "--plan needs --pairwise HOST..."
    if (args.max_rounds or args.parallel) and not (args.pairwise or args.bisect):
        return "--max-rounds and --parallel need --pairwise or --bisect"
    if args.pairwise and not pairwise.uses_placeholders(command):
        return "--pairwise needs {hosts}, {host1}/{host2} or {hostfile} in the command to place each pair"
    if args.bisect and not pairwise.uses_placeholders(command, groups=True):
        return "--bisect needs {hosts} or {hostfile} in the command to place each group"
    if args.bisect and not args.instance_type:
        return "--bisect judges each group's busbw against an instance profile: give --instance-type"
    return None


def _warm() -> None:
    """Import here what each test imports when it first needs it: a forked test then starts with it (at
    128 tests a round, compiling the parser's modules once per test would be seconds of CPU)."""
    import socket  # noqa: F401 - launchcheck's

    import efa_validators.analyze  # noqa: F401
    import efa_validators.parse.nccltests  # noqa: F401
    import efa_validators.parse.nccltests_json  # noqa: F401


class _Rounds:
    """Runs the tests of one round at once, each a whole `validators run` in a forked process of its own
    (efa_validators/run/forked.py: own watchdog, log and process tracking), and keeps what each showed."""

    def __init__(self, command: List[str], args: argparse.Namespace, base_log: str, label: str) -> None:
        self.command, self.args, self.base_log, self.label = command, args, base_log, label
        self.workdir = tempfile.mkdtemp(prefix="validators-pairs-")
        self.reports = []  # type: List[Dict[str, Any]]
        self.labels = []  # type: List[Dict[str, Any]]
        self.records = []  # type: List[Dict[str, Any]]
        self.runs = 0
        self.t0 = time.monotonic()
        _warm()

    def run(self, groups: Sequence[Sequence[str]]) -> List[str]:
        """One round: every group's test at once (at most --parallel); their verdicts, in order (a test
        repeated with --repeat passes only if every repeat passed)."""
        number = len(self.records) + 1
        jobs, logsets = [], []
        for group in groups:
            self.runs += 1
            hostfile = os.path.join(self.workdir, "hosts-%d" % self.runs)
            with open(hostfile, "w", encoding="utf-8") as fh:
                for host in group:
                    fh.write(host + (" slots=%d" % self.args.slots if self.args.slots else "") + "\n")
            argv = pairwise.substitute(self.command, group, hostfile, self.args.slots)
            prepare(argv, not self.args.no_inject)  # exit 2 before anything starts
            logs = [numbered(self.base_log, self.runs if self.args.repeat == 1 else (self.runs, k + 1))
                    for k in range(self.args.repeat)]  # fmt: skip
            logsets.append(logs)
            jobs.append(functools.partial(_test_job, argv, self.args, logs, len(group)))
        what = "%d %s%s" % (len(groups), self.label, "" if len(groups) == 1 else "s")
        print("round %d: %s at once" % (number, what), file=sys.stderr)
        began = time.monotonic()
        results = forked.run_all(jobs, self.args.parallel)
        wall = time.monotonic() - began
        tests, verdicts = [], []
        for group, logs, res in zip(groups, logsets, results):
            reports = res.get("value") or [_lost_test(self.args, group, logs[0], res.get("error"))]
            verdict = "pass"
            for rep in reports:
                verdict = worse(verdict, rep["verdict"])
                self.reports.append(rep)
                self.labels.append({self.label: list(group), "round": number})
            verdicts.append(verdict)
            tests.append(_test_record(group, verdict, reports, logs, res, self.t0))
        record = {
            "round": number,
            "tests": tests,
            "wall_s": round(wall, 3),
            "started_s": min(t["started_s"] for t in tests),
            "ended_s": max(t["ended_s"] for t in tests),
        }
        record.update(_overlap(tests))
        self.records.append(record)
        counts = {v: verdicts.count(v) for v in ("pass", "fail", "unknown") if v in verdicts}
        failed = [t["hosts"] for t in tests if t["verdict"] != "pass"]
        print(
            "round %d: done in %.2f s: %s%s"
            % (number, wall, ", ".join("%d %s" % (n, v) for v, n in counts.items()),
               (" (not pass: %s)" % few(["-".join(h) for h in failed], 6)) if failed else ""),
            file=sys.stderr,
        )  # fmt: skip
        return verdicts


def _test_job(argv: List[str], args: argparse.Namespace, logs: List[str], nodes: int) -> List[Dict[str, Any]]:
    """In the forked child: the test, once per --repeat, under the watchdog (its output in its log only:
    the round's tests would interleave on the terminal)."""
    args.quiet = True
    return [run_once(argv, args, log, nodes, not args.no_inject) for log in logs]


def _lost_test(
    args: argparse.Namespace, group: Sequence[str], log: str, error: Optional[str]
) -> Dict[str, Any]:
    """The report of a test whose process gave no report (it was killed, or the runner failed): unknown."""
    rep = runreport.empty_report(args.instance_type, len(group))
    rep["run"] = {"exit_code": None, "killed": None, "duration_s": 0.0, "log": log}
    rep["findings"] = [{
        "id": "test-lost", "severity": "error", "evidence": [],
        "message": "the test of %s gave no report: %s" % ("-".join(group), error or "its process ended"),
        "remedy": "see its log; rerun the sweep",
    }]  # fmt: skip
    return rep


def _test_record(
    group: Sequence[str],
    verdict: str,
    reports: List[Dict[str, Any]],
    logs: List[str],
    res: Dict[str, Any],
    t0: float,
) -> Dict[str, Any]:
    """One test of a round in the report: hosts, verdict, busbw, when it ran, and its evidence."""
    worst = max(reports, key=lambda r: RANK.get(r["verdict"], 1))
    checks = {c.get("name"): c.get("status") for c in worst.get("checks") or []}
    errors = [f for f in worst.get("findings") or [] if f.get("severity") == "error"]
    nt = worst.get("nccl_tests") or {}
    started = res.get("started", t0)
    return {
        "hosts": list(group),
        "verdict": verdict,
        "slow": checks.get("busbw-plateau") == "fail",
        "busbw_plateau": nt.get("plateau_busbw"),
        "started_s": round(started - t0, 3),
        "ended_s": round(res.get("ended", started) - t0, 3),
        "logs": logs,
        "findings": [f.get("id") for f in errors],
        "why": errors[0]["message"] if errors else None,
        "replay": any(bool(r.get("replay")) for r in reports),
    }


def _overlap(tests: List[Dict[str, Any]]) -> Dict[str, Any]:
    """How many of a round's tests ran at the same time, from their recorded start and end."""
    events = sorted([(t["started_s"], 1) for t in tests] + [(t["ended_s"], -1) for t in tests])
    now = most = 0
    for _when, step in events:  # an end at the same instant as a start is counted first
        now += step
        most = max(most, now)
    return {
        "max_at_once": most,
        "all_at_once": max(t["started_s"] for t in tests) < min(t["ended_s"] for t in tests),
    }


def run_pairwise(command: List[str], args: argparse.Namespace, base_log: str) -> Dict[str, Any]:
    known_good = args.known_good
    order = sweep.sweep_hosts(args.pairwise, known_good)
    if len(order) < 2 or not pairwise.plan(args.pairwise, known_good):
        raise NotStarted("--pairwise needs at least two distinct hosts")
    rounds = _Rounds(command, args, base_log, "pair")
    results = []  # type: List[Tuple[pairwise.Pair, str]]
    if args.plan == "fixed":
        planned = sweep.fixed_rounds(pairwise.plan(args.pairwise, known_good))
        for pairs in planned[: args.max_rounds or len(planned)]:
            results += list(zip(pairs, rounds.run(pairs)))
    else:
        done = sweep.adaptive_rounds(
            order, rounds.run, known_good, args.max_rounds or sweep.DEFAULT_MAX_ROUNDS
        )
        results = [item for rnd in done["rounds"] for item in rnd]  # type: ignore[union-attr]
    outcome = sweep.conclude(order, results, known_good)
    seen = []  # type: List[Tuple[pairwise.Pair, str]]
    for record in rounds.records:
        seen += [(tuple(t["hosts"]), t["verdict"]) for t in record["tests"]]  # type: ignore[misc]
        now = sweep.conclude(order, seen, known_good)
        record["conclusion"] = {k: now[k] for k in ("cleared", "implicated", "suspects", "undecided")}
    report = series_report(rounds.reports, rounds.labels, flaky=False)
    report["pairwise"] = dict(
        outcome,
        known_good=known_good,
        plan=args.plan,
        parallel=args.parallel,
        pairs=[{"hosts": list(p), "verdict": v} for p, v in results],
        rounds=rounds.records,
        wall_s=round(time.monotonic() - rounds.t0, 3),
    )
    named = outcome["implicated"] or outcome["suspects"]
    if named:
        proven = bool(outcome["implicated"])
        report["findings"].insert(0, {
            "id": "bad-node", "severity": "error",
            "message": "%s: %s (pairs failed: %s; %d round(s))" % (
                "implicated by elimination" if proven
                else "suspect (every pair with it failed, none cleared)",
                ", ".join(named),  # type: ignore[arg-type]
                few(["-".join(p) for p, v in results if v == "fail"], 8), len(rounds.records)),
            "evidence": _evidence_for(named, rounds.records),  # type: ignore[arg-type]
            "remedy": "drain the node and rerun; run `python -m efa_validators node-check` on it",
            "hosts": named,
        })  # fmt: skip
    return report


def _next_of(recorded: Any, _groups: Any) -> List[str]:
    return next(recorded)


def _evidence_for(hosts: Sequence[str], records: List[Dict[str, Any]], cap: int = 12) -> List[Dict[str, Any]]:
    """The tests that were not good and hold one of `hosts`: log, round, verdict, why."""
    out = []
    for record in records:
        for t in record["tests"]:
            if t["verdict"] != "pass" and any(h in t["hosts"] for h in hosts) and len(out) < cap:
                text = "round %d: %s %s%s" % (record["round"], "-".join(t["hosts"]) if len(t["hosts"]) <= 4
                                              else few(t["hosts"], 4), t["verdict"],
                                              ": %s" % t["why"] if t.get("why") else "")  # fmt: skip
                out.append({"file": t["logs"][0], "line": None, "text": text})
    return out


def run_bisect(command: List[str], args: argparse.Namespace, base_log: str) -> Dict[str, Any]:
    order = sweep.unique(args.bisect)
    if len(order) < 2:
        raise NotStarted("--bisect needs at least two distinct hosts")
    rounds = _Rounds(command, args, base_log, "group")
    done = sweep.bisect_rounds(order, rounds.run, args.max_rounds)
    for record, planned in zip(rounds.records, done["rounds"]):  # type: ignore[call-overload]
        for test, plan in zip(record["tests"], planned):
            test["under_test"], test["filler"] = list(plan["under_test"]), list(plan["filler"])
    for number, record in enumerate(rounds.records, 1):  # what was known after each round
        recorded = iter([[t["verdict"] for t in r["tests"]] for r in rounds.records])
        replayed = functools.partial(_next_of, recorded)
        now = sweep.bisect_rounds(order, replayed, max_rounds=number)["outcome"]
        record["conclusion"] = {k: now[k] for k in ("cleared", "implicated", "suspects")}  # type: ignore[index]
    outcome = done["outcome"]  # type: Dict[str, Any]  # type: ignore[assignment]
    report = series_report(rounds.reports, rounds.labels, flaky=False)
    report["bisect"] = dict(
        outcome, parallel=args.parallel, rounds=rounds.records, wall_s=round(time.monotonic() - rounds.t0, 3)
    )
    named = outcome["implicated"] or outcome["suspects"]
    if named and report["verdict"] != "pass":
        proven = bool(outcome["implicated"])
        report["findings"].insert(0, {
            "id": "slow-node", "severity": "error",
            "message": "%s: %s (%d round(s))" % (
                "implicated by bisection (not good beside cleared nodes, at the scale the job was slow)"
                if proven else "suspects: the slowness needs all of these together (each half was good)",
                few(named, 16), len(rounds.records)),
            "evidence": _evidence_for(named, rounds.records),
            "remedy": "drain the node and rerun; run `python -m efa_validators node-check` on it and check "
            "its EFA devices (`fi_info -p efa`) and GPU clocks",
            "hosts": named,
        })  # fmt: skip
    return report
