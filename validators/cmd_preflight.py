"""`python -m validators node-check` and `python -m validators run`: the pre-flight verbs.

`run` launches a command (mpirun, srun, torchrun, plain) under the watchdog and judges its output with
the log parser; `--repeat` and `--pairwise` run it several times to find a flaky or bad node.
Exit codes as `parse`: 0 pass, 1 fail (a hang is a fail), 2 usage (a launcher that cannot start), 3 unknown.
"""

import argparse
import datetime
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

from validators.report import jsonout, outfile
from validators.run import imagebind, launchcheck, pairwise, sagemaker_env
from validators.run import report as runreport
from validators.run.runner import NotStarted, StreamingParser, nccl_env, prepare, run_command

EXIT_USAGE = 2
BACKGROUND_NICE = 10  # reading and parsing yield the CPU to the job's ranks; the watchdog's thread does not


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0: %r" % text)
    return value


def image_ref(text: str) -> str:
    """`REF@sha256:<64 hex>`: a digest, because `build.py release --require-preflight` matches on it."""
    try:
        return imagebind.parse_image_ref(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1: %r" % text)
    return value


def register(sub: Any) -> None:
    nc = sub.add_parser(
        "node-check",
        help="check this node: GPUs, EFA devices, /dev/infiniband, memlock, GDR, driver, env, plugin",
        description="Each check is pass, fail or unknown with its evidence; a missing tool is unknown.",
    )
    nc.add_argument("--instance-type", metavar="T", help="judge counts against this instance profile")
    nc.add_argument("--json", metavar="FILE|-", help="write the JSON report here ('-' = stdout)")
    nc.set_defaults(func=_node_check)

    run = sub.add_parser(
        "run",
        help="run a launch command under a watchdog and judge its NCCL output",
        description="Runs COMMAND (after --) in its own process group with NCCL_DEBUG=INFO, keeps its output,"
        " "
        "parses it as it arrives; ends the whole group on silence or timeout and reports a hang.",
    )
    run.add_argument(
        "--timeout", type=_positive, default=1800.0, metavar="S", help="total limit (default 1800)"
    )
    run.add_argument("--idle-timeout", type=_positive, default=None, metavar="S", help="limit on silence")
    run.add_argument(
        "--grace", type=_positive, default=3.0, metavar="S", help="SIGTERM to SIGKILL (default 3)"
    )
    run.add_argument("--instance-type", metavar="T")
    run.add_argument("--nodes", type=_count, metavar="N")
    run.add_argument("--json", metavar="FILE|-", help="write the JSON report here ('-' = stdout)")
    run.add_argument("--junit", metavar="FILE", help="write a JUnit XML report here")
    run.add_argument("--markdown", metavar="FILE", help="write a Markdown summary here")
    run.add_argument("--log", metavar="FILE", help="keep the whole output here (default: a file in $TMPDIR)")
    run.add_argument("--rank-logs", metavar="DIR", help="also write each rank's lines to DIR/rank-N.log")
    run.add_argument("--repeat", type=_count, default=1, metavar="K", help="run K times; any failure fails")
    run.add_argument("--pairwise", nargs="+", metavar="HOST", help="run once per pair of these hosts")
    run.add_argument("--known-good", metavar="HOST", help="with --pairwise: pair every host with this one")
    run.add_argument("--slots", type=_count, metavar="N", help="with --pairwise: slots=N in {hostfile}")
    run.add_argument(
        "--image",
        type=image_ref,
        metavar="REF@sha256:D",
        help="the image this ran in (recorded for `build.py release --require-preflight`)",
    )
    run.add_argument(
        "--resource-config",
        metavar="FILE",
        default=None,
        help="SageMaker's resource config, for {sm_...} placeholders in COMMAND (default "
        "/opt/ml/input/config/resourceconfig.json; see validators/run/sagemaker_env.py)",
    )
    run.add_argument(
        "--exit-by",
        choices=("verdict", "command"),
        default="verdict",
        help="exit code from the verdict (default), or from the command alone: 0 when it ran to "
        "completion with status 0. For a node that sees only its own ranks, where the judge reads "
        "every node's log (the SageMaker pre-flight)",
    )
    run.add_argument("--quiet", action="store_true", help="do not echo the command's output to stderr")
    run.add_argument("--no-inject", action="store_true", help="run the command exactly as given")
    run.add_argument("command", nargs="*", metavar="COMMAND", help="the launch command, after --")
    run.set_defaults(func=_run)


def _node_check(args: argparse.Namespace) -> int:
    from validators.node import nodecheck

    if args.instance_type:
        from validators.judge.profiles import unknown_instance_type

        problem = unknown_instance_type(args.instance_type)
        if problem:
            print("error: %s" % problem, file=sys.stderr)
            return EXIT_USAGE
    report = nodecheck.run_checks(instance_type=args.instance_type)
    _write_json(report, args.json)
    if args.json != "-":
        sys.stdout.write(nodecheck.format_text(report))
    return runreport.EXIT_BY_VERDICT.get(report["verdict"], 3)


def _default_log() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(tempfile.gettempdir(), "validators-run-%s-%d.log" % (stamp, os.getpid()))


def run_once(
    argv: List[str], args: argparse.Namespace, log_path: str, nodes: Optional[int], inject: bool = True
) -> Dict[str, Any]:
    """One run of argv under the watchdog -> its report (NotStarted propagates: exit 2)."""
    argv2, kind, notes = prepare(argv, inject=inject)
    env, env_notes = nccl_env()
    from validators.analyze import analyze

    # source: the evidence names the kept log, with its line numbers
    parser = StreamingParser(
        analyze, nice=BACKGROUND_NICE, instance_type=args.instance_type, nodes=nodes, source=log_path
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
        )
    result.log = log_path
    result.notes = notes + env_notes + result.notes
    analysis, error = parser.finish()
    launch = launchcheck.declared(argv2, kind, env, nodes)
    return runreport.combine(result, analysis, error, args.instance_type, nodes, launch)


def _image_default(name: str) -> bool:
    """`name` is unset, or holds the value the image's lock calls a site default (`overridable`): SageMaker's
    own interface name may replace it. A value the job set itself is kept."""
    have = os.environ.get(name)
    if have is None:
        return True
    from validators.node import nodecheck

    lock, _ = nodecheck.load_lock(dict(os.environ))
    items = (lock or {}).get("env") or []
    return any(e.get("name") == name and e.get("overridable") and e.get("value") == have for e in items)


def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if not command:
        print("error: no command given: python -m validators run [options] -- COMMAND...", file=sys.stderr)
        return EXIT_USAGE
    if args.instance_type:
        from validators.judge.profiles import unknown_instance_type

        problem = unknown_instance_type(args.instance_type)
        if problem:  # before anything runs: a typo would judge nothing and read as a verdict
            print("error: %s" % problem, file=sys.stderr)
            return EXIT_USAGE
    if args.exit_by == "command" and (args.pairwise or args.repeat > 1):
        print("error: --exit-by command is for a single run (not --repeat or --pairwise)", file=sys.stderr)
        return EXIT_USAGE
    sm = None
    if sagemaker_env.uses_placeholders(command):
        try:
            where = args.resource_config or sagemaker_env.RESOURCE_CONFIG
            sm = sagemaker_env.values(sagemaker_env.load(where), where)
            command = sagemaker_env.expand(command, sm)
        except sagemaker_env.ConfigError as err:
            print("error: %s" % err, file=sys.stderr)
            return EXIT_USAGE
        if sm["sm_ifname"] and _image_default("NCCL_SOCKET_IFNAME"):  # NCCL's bootstrap interface
            os.environ["NCCL_SOCKET_IFNAME"] = sm["sm_ifname"]
        print("sagemaker: %s is node %s of %s, master %s" % (sm["sm_current_host"], sm["sm_node_rank"],
              sm["sm_nodes"], sm["sm_master"]), file=sys.stderr)  # fmt: skip
    if args.known_good and not args.pairwise:
        print("error: --known-good needs --pairwise HOST...", file=sys.stderr)
        return EXIT_USAGE
    if args.pairwise and not pairwise.uses_placeholders(command):
        print(
            "error: --pairwise needs {hosts}, {host1}/{host2} or {hostfile} in the command"
            " to place each pair",
            file=sys.stderr,
        )
        return EXIT_USAGE
    base_log = args.log or _default_log()
    for flag, path in (
        ("--log", base_log),
        ("--json", args.json),
        ("--junit", args.junit),
        ("--markdown", args.markdown),
    ):
        if path and path != "-":
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
                print(
                    "error: %s %s: directory %s does not exist or is not writable" % (flag, path, parent),
                    file=sys.stderr,
                )
                return EXIT_USAGE
    try:
        if args.pairwise:
            report = _run_pairwise(command, args, base_log)
        elif args.repeat > 1:
            reports = []
            for i in range(args.repeat):
                reports.append(
                    run_once(command, args, _numbered(base_log, i + 1), args.nodes, not args.no_inject)
                )
            report = series_report(reports, [{"run": i + 1} for i in range(len(reports))])
        else:
            report = run_once(command, args, base_log, args.nodes, not args.no_inject)
    except NotStarted as err:
        print("error: %s" % err, file=sys.stderr)
        return EXIT_USAGE
    replayed = report.get("replay") or any(r.get("replay") for r in report.get("runs") or [])
    if args.image and replayed:  # a recording is no pre-flight of any image: nothing for a gate to match
        report["replay"] = True
        report["findings"].insert(0, {
            "id": "replay-image-not-recorded", "severity": "warning",
            "message": "REPLAY: --image %s not recorded: a replayed log proves nothing about it" % args.image,
            "evidence": [], "remedy": "run the real GPU program in the image under the launcher",
        })  # fmt: skip
    elif args.image:  # with the lock the image carries: the gate compares it with the digest's
        report["image"] = imagebind.binding(args.image)
    if sm is not None:
        report["sagemaker_node"] = {"host": sm["sm_current_host"], "node_rank": int(sm["sm_node_rank"]),
                                    "nodes": int(sm["sm_nodes"]), "master": sm["sm_master"],
                                    "command": command}  # fmt: skip
    _write_outputs(report, args)
    if args.json != "-":
        sys.stdout.write(summary_text(report))
    print("log: %s" % base_log, file=sys.stderr)
    if args.exit_by == "command":
        return runreport.command_exit(report)
    return runreport.EXIT_BY_VERDICT.get(report["verdict"], 3)


def _numbered(path: str, n: int) -> str:
    root, ext = os.path.splitext(path)
    return "%s.%d%s" % (root, n, ext or ".log")


def _run_pairwise(command: List[str], args: argparse.Namespace, base_log: str) -> Dict[str, Any]:
    pairs = pairwise.plan(args.pairwise, args.known_good)
    if not pairs:
        raise NotStarted("--pairwise needs at least two distinct hosts")
    reports, labels = [], []
    workdir = tempfile.mkdtemp(prefix="validators-pairs-")
    for i, pair in enumerate(pairs):
        hostfile = os.path.join(workdir, "hosts-%d" % (i + 1))
        with open(hostfile, "w", encoding="utf-8") as fh:
            for host in pair:
                fh.write(host + (" slots=%d" % args.slots if args.slots else "") + "\n")
        argv = pairwise.substitute(command, pair, hostfile)
        for _k in range(args.repeat):
            log = _numbered(base_log, len(reports) + 1)
            reports.append(run_once(argv, args, log, 2, not args.no_inject))
            labels.append({"pair": list(pair)})
    verdicts = [(tuple(lab["pair"]), rep["verdict"]) for lab, rep in zip(labels, reports)]
    # a pair passes only if every repeat passed
    per_pair = {}  # type: Dict[Any, str]
    for pair, verdict in verdicts:
        prev = per_pair.get(pair)
        per_pair[pair] = _worse(prev, verdict) if prev else verdict
    outcome = pairwise.eliminate(list(per_pair.items()), args.known_good)
    report = series_report(reports, labels)
    report["pairwise"] = dict(
        outcome,
        known_good=args.known_good,
        pairs=[{"hosts": list(p), "verdict": v} for p, v in per_pair.items()],
    )
    if outcome["implicated"] or outcome["suspects"]:
        named = outcome["implicated"] or outcome["suspects"]
        proven = bool(outcome["implicated"])
        report["findings"].insert(
            0,
            {
                "id": "bad-node",
                "severity": "error",
                "message": "%s: %s (pairs failed: %s)"
                % (
                    "implicated by elimination"
                    if proven
                    else "suspect (every pair with it failed, none cleared)",
                    ", ".join(named),
                    "; ".join("-".join(p) for p, v in per_pair.items() if v == "fail"),
                ),
                "evidence": [],
                "remedy": "drain the node and rerun; run `python -m validators node-check` on it",
                "hosts": named,
            },
        )
    return report


_RANK = {"pass": 0, "unknown": 1, "fail": 2}


def _worse(a: Optional[str], b: str) -> str:
    if a is None:
        return b
    return a if _RANK.get(a, 1) >= _RANK.get(b, 1) else b


def series_report(reports: List[Dict[str, Any]], labels: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Several runs -> one report: the worst run's report on top, every run summarised under `runs`."""
    worst_i = 0
    for i, rep in enumerate(reports):
        if _RANK.get(rep["verdict"], 1) > _RANK.get(reports[worst_i]["verdict"], 1):
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
    if len(set(verdicts)) > 1 and "fail" in verdicts:
        findings.insert(
            0,
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
        verdict = _worse(verdict, v)
    top["verdict"] = verdict
    return top


def _label(label: Dict[str, Any]) -> str:
    if "pair" in label:
        return "-".join(label["pair"])
    return "run %s" % label.get("run")


def _write_json(report: Dict[str, Any], dest: Optional[str]) -> None:
    """Streamed (validators.report.jsonout), not built as one string first: at 8192 ranks the text is
    megabytes."""
    if dest:
        outfile.write(dest, jsonout.document(report))


def _write_outputs(report: Dict[str, Any], args: argparse.Namespace) -> None:
    """JSON, JUnit and Markdown, each written whole (validators.report.outfile): never half a report."""
    _write_json(report, args.json)
    if not (args.junit or args.markdown):
        return
    from validators.report import formats as writers

    for path, render in ((args.junit, "to_junit"), (args.markdown, "to_markdown")):
        if path:
            outfile.write_whole(path, getattr(writers, render)(report))


def _metric_lines(report: Dict[str, Any]) -> List[str]:
    """The parser's `key=value` lines (SageMaker metric regexes read them)."""
    from validators.report.formats import metric_lines

    try:
        return list(metric_lines(report))
    except Exception:  # noqa: BLE001 - a summary line must never turn a verdict into a crash
        return []


def summary_text(report: Dict[str, Any]) -> str:
    """A few lines for a terminal: verdict, then each finding with its remedy."""
    lines = ["verdict: %s" % report.get("verdict")]
    if report.get("replay"):
        lines[0] += " (REPLAY of a recorded log: no evidence about this cluster)"
    lines += [m for m in _metric_lines(report) if not m.startswith("verdict")]
    run = report.get("run") or {}
    if run:
        lines.append(
            "run: %s exit=%s killed=%s %.1fs, %s lines"
            % (
                run.get("launcher"),
                run.get("exit_code"),
                run.get("killed"),
                run.get("duration_s") or 0,
                run.get("lines"),
            )
        )
    for f in report.get("findings") or []:
        lines.append("  [%s] %s: %s" % (f.get("severity"), f.get("id"), f.get("message")))
        if f.get("remedy"):
            lines.append("      remedy: %s" % f["remedy"])
    if report.get("pairwise"):
        pw = report["pairwise"]
        lines.append(
            "pairwise: implicated=%s suspects=%s cleared=%s"
            % (pw["implicated"], pw["suspects"], pw["cleared"])
        )
    return "\n".join(lines) + "\n"
