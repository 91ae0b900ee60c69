"""`python -m efa_validators run`: a launch command under the watchdog, judged by the log parser.

`run` launches a command (mpirun, srun, torchrun, plain) under the watchdog and judges its output with
the log parser; `--repeat` and `--pairwise` run it several times to find a flaky or bad node (sweep.py).
Exit codes as `parse`: 0 pass, 1 fail (a hang is a fail), 2 usage (a launcher that cannot start), 3 unknown.
"""

import argparse
import datetime
import os
import sys
import tempfile
from typing import Any, Dict, List

from efa_validators.cmd_preflight.common import EXIT_USAGE, count, image_ref, positive, size, write_json
from efa_validators.cmd_preflight.series import numbered, run_once, series_report
from efa_validators.cmd_preflight.sweep import run_bisect, run_pairwise, sweep_usage
from efa_validators.judge.shortlist import few
from efa_validators.report import outfile
from efa_validators.report.contract import REPLAY_NOTE
from efa_validators.report.printable import printable
from efa_validators.run import imagebind, sagemaker_env, sweep
from efa_validators.run import report as runreport
from efa_validators.run.runner import MAX_LINE, MAX_OUTPUT, NotStarted
from efa_validators.scan.redact import redact_argv, secret_values


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a launch command under a watchdog and judge its NCCL output",
        description="Runs COMMAND (after --) in its own process group with NCCL_DEBUG=INFO, keeps its output,"
        " "
        "parses it as it arrives; ends the whole group on silence or timeout and reports a hang.",
    )
    run.add_argument(
        "--timeout", type=positive, default=1800.0, metavar="S", help="total limit (default 1800)"
    )
    run.add_argument("--idle-timeout", type=positive, default=None, metavar="S", help="limit on silence")
    run.add_argument(
        "--grace", type=positive, default=3.0, metavar="S", help="SIGTERM to SIGKILL (default 3)"
    )
    run.add_argument("--instance-type", metavar="T")
    run.add_argument("--nodes", type=count, metavar="N")
    run.add_argument("--json", metavar="FILE|-", help="write the JSON report here ('-' = stdout)")
    run.add_argument("--junit", metavar="FILE", help="write a JUnit XML report here")
    run.add_argument("--markdown", metavar="FILE", help="write a Markdown summary here")
    run.add_argument("--log", metavar="FILE", help="keep the whole output here (default: a file in $TMPDIR)")
    run.add_argument("--rank-logs", metavar="DIR", help="also write each rank's lines to DIR/rank-N.log")
    run.add_argument(
        "--max-output",
        type=size,
        default=MAX_OUTPUT,
        metavar="SIZE",
        help="output read and kept, at most (default 512M): past it the run is ended (finding output-limit)",
    )
    run.add_argument(
        "--max-line",
        type=size,
        default=MAX_LINE,
        metavar="SIZE",
        help="bytes kept of one line (default 64K): the rest is counted, not kept (finding long-lines)",
    )
    run.add_argument("--repeat", type=count, default=1, metavar="K", help="run K times; any failure fails")
    run.add_argument(
        "--pairwise",
        nargs="+",
        metavar="HOST",
        help="find a bad node by pairs of these hosts, in rounds of disjoint pairs run at once",
    )
    run.add_argument(
        "--plan",
        choices=("adaptive", "fixed"),
        default="adaptive",
        help="with --pairwise: adaptive (default: h0-h1, h2-h3, ..., then each undecided host beside a "
        "cleared one: a bad host is named in 2 rounds) or fixed (the ring h0-h1, h1-h2, ..., hn-h0, or "
        "every host with --known-good; 2-3 rounds for a ring, one per host for --known-good)",
    )
    run.add_argument(
        "--known-good",
        metavar="HOST",
        help="with --pairwise: a host known to be good (cleared from the start)",
    )
    run.add_argument(
        "--bisect",
        nargs="+",
        metavar="HOST",
        help="find a slow node that passes in pairs: the whole set, then halves, quarters, ... at once "
        "(needs --instance-type: busbw is judged against its profile)",
    )
    run.add_argument(
        "--max-rounds",
        type=count,
        metavar="N",
        help="with --pairwise/--bisect: at most N rounds (default %d for pairs, 1 + log2(hosts) for "
        "--bisect)" % sweep.DEFAULT_MAX_ROUNDS,
    )
    run.add_argument(
        "--parallel",
        type=count,
        metavar="N",
        help="with --pairwise/--bisect: at most N tests at once (default: every test of a round)",
    )
    run.add_argument(
        "--slots", type=count, metavar="N", help="with --pairwise/--bisect: slots=N in {hostfile}, {np}"
    )
    run.add_argument(
        "--image",
        type=image_ref,
        metavar="REF@sha256:D",
        help="the image this ran in (recorded for `efa-image-build release --require-preflight`)",
    )
    run.add_argument(
        "--resource-config",
        metavar="FILE",
        default=None,
        help="SageMaker's resource config, for {sm_...} placeholders in COMMAND (default "
        "/opt/ml/input/config/resourceconfig.json; see efa_validators/run/sagemaker_env.py)",
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


def _default_log() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(tempfile.gettempdir(), "validators-run-%s-%d.log" % (stamp, os.getpid()))


def _image_default(name: str) -> bool:
    """`name` is unset, or holds the value the image's lock calls a site default (`overridable`): SageMaker's
    own interface name may replace it. A value the job set itself is kept."""
    have = os.environ.get(name)
    if have is None:
        return True
    from efa_validators.node import nodecheck

    lock, _ = nodecheck.load_lock(dict(os.environ))
    items = (lock or {}).get("env") or []
    return any(e.get("name") == name and e.get("overridable") and e.get("value") == have for e in items)


def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if not command:
        print(
            "error: no command given: python -m efa_validators run [options] -- COMMAND...", file=sys.stderr
        )
        return EXIT_USAGE
    if args.instance_type:
        from efa_validators.judge.profiles import unknown_instance_type

        problem = unknown_instance_type(args.instance_type)
        if problem:  # before anything runs: a typo would judge nothing and read as a verdict
            print("error: %s" % problem, file=sys.stderr)
            return EXIT_USAGE
    if args.exit_by == "command" and (args.pairwise or args.bisect or args.repeat > 1):
        print(
            "error: --exit-by command is for a single run (not --repeat, --pairwise or --bisect)",
            file=sys.stderr,
        )
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
    usage = sweep_usage(command, args)
    if usage:
        print("error: %s" % usage, file=sys.stderr)
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
            report = run_pairwise(command, args, base_log)
        elif args.bisect:
            report = run_bisect(command, args, base_log)
        elif args.repeat > 1:
            reports = []
            for i in range(args.repeat):
                reports.append(
                    run_once(command, args, numbered(base_log, i + 1), args.nodes, not args.no_inject)
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
        shown = redact_argv(command, secret_values(dict(os.environ)))
        report["sagemaker_node"] = {"host": sm["sm_current_host"], "node_rank": int(sm["sm_node_rank"]),
                                    "nodes": int(sm["sm_nodes"]), "master": sm["sm_master"],
                                    "command": shown}  # fmt: skip
    _write_outputs(report, args)
    if args.json != "-":
        sys.stdout.write(summary_text(report))
    print("log: %s" % base_log, file=sys.stderr)
    if args.exit_by == "command":
        return runreport.command_exit(report)
    return runreport.EXIT_BY_VERDICT.get(report["verdict"], 3)


def _write_outputs(report: Dict[str, Any], args: argparse.Namespace) -> None:
    """JSON, JUnit and Markdown, each written whole (efa_validators.report.outfile): never half a report."""
    write_json(report, args.json)
    if not (args.junit or args.markdown):
        return
    from efa_validators.report import formats as writers

    for path, render in ((args.junit, "to_junit"), (args.markdown, "to_markdown")):
        if path:
            outfile.write_whole(path, getattr(writers, render)(report))


def _metric_lines(report: Dict[str, Any]) -> List[str]:
    """The parser's `key=value` lines (SageMaker metric regexes read them)."""
    from efa_validators.report.formats import metric_lines

    try:
        return list(metric_lines(report))
    except Exception:  # noqa: BLE001 - a summary line must never turn a verdict into a crash
        return []


def summary_text(report: Dict[str, Any]) -> str:
    """A few lines for a terminal: verdict, the root cause and its remedy in one sentence, then each finding
    with its remedy."""
    from efa_validators.judge.causes import lead_sentence

    lines = ["verdict: %s" % report.get("verdict")]
    if report.get("replay"):
        lines[0] += " (%s)" % REPLAY_NOTE
    lead = lead_sentence(report.get("findings") or [])
    if lead:  # the root cause and its remedy, right under the verdict
        lines.append(printable(lead))
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
        lines.append("  [%s] %s: %s" % (f.get("severity"), f.get("id"), printable(f.get("message"))))
        if f.get("remedy"):
            lines.append("      remedy: %s" % printable(f["remedy"]))
    for key in ("pairwise", "bisect"):
        if report.get(key):
            found = report[key]
            for record in found.get("rounds") or []:
                bad = [t for t in record["tests"] if t["verdict"] != "pass"]
                lines.append("  round %d: %d test(s), %d at once, %.2f s; not pass: %s" % (
                    record["round"], len(record["tests"]), record["max_at_once"], record["wall_s"],
                    few(["-".join(t["hosts"]) if len(t["hosts"]) <= 4 else "%d hosts" % len(t["hosts"])
                         for t in bad], 6) or "none"))  # fmt: skip
            lines.append(
                "%s: implicated=%s suspects=%s cleared=%s"
                % (key, found["implicated"], found["suspects"], few(found["cleared"], 16))
            )
    return "\n".join(lines) + "\n"
