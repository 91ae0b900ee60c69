"""`python -m efa_validators node-check` and `python -m efa_validators run`: the pre-flight verbs.

`run` launches a command (mpirun, srun, torchrun, plain) under the watchdog and judges its output with
the log parser; `--repeat` and `--pairwise` run it several times to find a flaky or bad node.
Exit codes as `parse`: 0 pass, 1 fail (a hang is a fail), 2 usage (a launcher that cannot start), 3 unknown.
"""

import argparse
import datetime
import functools
import math
import os
import re
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from efa_validators.judge.shortlist import few
from efa_validators.report import jsonout, outfile
from efa_validators.report.contract import REPLAY_NOTE
from efa_validators.report.printable import printable
from efa_validators.run import drain, forked, imagebind, launchcheck, pairwise, sagemaker_env, sweep
from efa_validators.run import report as runreport
from efa_validators.run.runner import (
    MAX_LINE,
    MAX_OUTPUT,
    NotStarted,
    StreamingParser,
    nccl_env,
    prepare,
    run_command,
)
from efa_validators.scan.redact import redact_argv, secret_values

EXIT_USAGE = 2
BACKGROUND_NICE = 10  # reading and parsing yield the CPU to the job's ranks; the watchdog's thread does not


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if not math.isfinite(value) or value <= 0:  # nan passed `<= 0` (every comparison with NaN is false)
        raise argparse.ArgumentTypeError("must be a finite number > 0: %r" % text)
    return value


def _size(text: str) -> int:
    """A byte count: `65536`, `64K`, `512M`, `1G` (powers of 1024), at least 1024."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError("not a size: %r (bytes, or a number and K, M or G)" % text) from None
    if value < 1024:
        raise argparse.ArgumentTypeError("must be at least 1K: %r" % text)
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
        help="check this node: GPUs and their health, EFA devices, /dev/infiniband, memlock, GDR, "
        "driver, env, plugin",
        description="Each check is pass, fail or unknown with its evidence; a missing tool is unknown.",
    )
    nc.add_argument("--instance-type", metavar="T", help="judge counts against this instance profile")
    nc.add_argument("--json", metavar="FILE|-", help="write the JSON report here ('-' = stdout)")
    nc.add_argument(
        "--dcgm-level",
        type=int,
        choices=(0, 1, 2),
        default=None,
        help=(
            "dcgmi diag run level, with dcgmi health -c read beside it (default: 1 where dcgmi is installed;"
            " 0: no DCGM; 2 runs for minutes)"
        ),
    )
    hook = nc.add_mutually_exclusive_group()
    hook.add_argument(
        "--slurm-health-check",
        action="store_true",
        help="run as Slurm's HealthCheckProgram (NHC's contract): bounded to finish inside slurmd's 60 s, no "
        "dcgmi diag, drains this node for a reset/reboot/replace finding; exit 0 healthy, non-zero otherwise "
        "(docs/preflight.md)",
    )
    hook.add_argument(
        "--npd",
        action="store_true",
        help="run as a node-problem-detector custom plugin: one line of at most 80 characters; exit 0 OK, "
        "1 NonOK, 2 Unknown",
    )
    nc.add_argument(
        "--plan",
        action="store_true",
        help="with --slurm-health-check: print the drain instead of running it (slurmd's call runs it)",
    )
    nc.add_argument(
        "--deadline",
        type=_positive,
        default=None,
        metavar="S",
        help="with --slurm-health-check or --npd: no tool starts after S s (default 40; each tool 10 s)",
    )
    nc.add_argument(
        "--with-image-checks",
        action="store_true",
        help="with --slurm-health-check or --npd: also judge the image (env-policy, plugin, libfabric), "
        "for a hook that runs inside the image",
    )
    nc.set_defaults(func=_node_check)

    dr = sub.add_parser(
        "drain",
        help="the scheduler's action, in proportion to each node's remedy class, for the nodes node-check "
        "or a sweep named: the plan printed, run with --apply",
        description="Reads node-check reports (verdict fail: each failing check's remedy class) and sweep "
        "reports (run --pairwise/--bisect: the implicated hosts, reboot at most) and prints the plan, then "
        "the commands that act on those nodes: configure is a setting to fix (never drained), reset-gpu and "
        "reboot-node take the node out of service or reboot it, only replace-hardware replaces; --apply "
        "runs them. Exit 0: nothing to do; 1: nodes named (printed or acted on); 2: bad input.",
    )
    dr.add_argument("reports", nargs="+", metavar="REPORT", help="node-check or run --json reports")
    dr.add_argument("--for", dest="scheduler", required=True, choices=drain.SCHEDULERS)
    dr.add_argument("--apply", action="store_true", help="run the commands (default: print them)")
    dr.add_argument(
        "--mark",
        choices=drain.MARKS,
        default="taint",
        help="--for kubernetes: beside the cordon, a taint and an annotation (default) or a NodeCondition "
        "(%s, node-problem-detector's shape) on the node's status" % drain.CONDITION_TYPE,
    )
    dr.add_argument("--cluster", metavar="NAME", help="the HyperPod cluster's name or ARN (--for hyperpod)")
    dr.add_argument(
        "--instance-id",
        action="append",
        default=[],
        metavar="HOST=ID",
        help="a host's EC2 instance id (hyperpod)",
    )
    dr.add_argument(
        "--replay-ok",
        action="store_true",
        help="act on a REPLAY report (a replayed log proves nothing about a cluster: for tests only)",
    )
    dr.add_argument("--json", metavar="FILE|-", help="write the node list (drain/v1) here")
    dr.set_defaults(func=_drain)

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
    run.add_argument(
        "--max-output",
        type=_size,
        default=MAX_OUTPUT,
        metavar="SIZE",
        help="output read and kept, at most (default 512M): past it the run is ended (finding output-limit)",
    )
    run.add_argument(
        "--max-line",
        type=_size,
        default=MAX_LINE,
        metavar="SIZE",
        help="bytes kept of one line (default 64K): the rest is counted, not kept (finding long-lines)",
    )
    run.add_argument("--repeat", type=_count, default=1, metavar="K", help="run K times; any failure fails")
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
        type=_count,
        metavar="N",
        help="with --pairwise/--bisect: at most N rounds (default %d for pairs, 1 + log2(hosts) for "
        "--bisect)" % sweep.DEFAULT_MAX_ROUNDS,
    )
    run.add_argument(
        "--parallel",
        type=_count,
        metavar="N",
        help="with --pairwise/--bisect: at most N tests at once (default: every test of a round)",
    )
    run.add_argument(
        "--slots", type=_count, metavar="N", help="with --pairwise/--bisect: slots=N in {hostfile}, {np}"
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
    from efa_validators.node import imagecheck, nodecheck

    if args.instance_type:
        from efa_validators.judge.profiles import unknown_instance_type

        problem = unknown_instance_type(args.instance_type)
        if problem:
            print("error: %s" % problem, file=sys.stderr)
            return EXIT_USAGE
    hook = "slurm" if args.slurm_health_check else "npd" if args.npd else None
    problem = _hook_usage(args, hook)
    if problem:
        print("error: %s" % problem, file=sys.stderr)
        return EXIT_USAGE
    if hook:
        from efa_validators.node import dropin

        return dropin.main(
            hook,
            args.instance_type,
            args.dcgm_level,
            imagecheck.image_checks if args.with_image_checks else None,
            plan_only=args.plan,
            deadline=args.deadline or dropin.DEADLINE,
        )
    report = nodecheck.run_checks(
        instance_type=args.instance_type, dcgm_level=args.dcgm_level, image_checks=imagecheck.image_checks
    )
    _write_json(report, args.json)
    if args.json != "-":
        sys.stdout.write(nodecheck.format_text(report))
    return runreport.EXIT_BY_VERDICT.get(report["verdict"], 3)


def _hook_usage(args: argparse.Namespace, hook: Optional[str]) -> Optional[str]:
    """What a health-hook mode refuses: options of the plain node-check, or a deadline past slurmd's limit."""
    if hook is None:
        extra = [o for o, v in (("--plan", args.plan), ("--deadline", args.deadline),
                                ("--with-image-checks", args.with_image_checks)) if v]  # fmt: skip
        return "%s: only with --slurm-health-check or --npd" % ", ".join(extra) if extra else None
    if args.dcgm_level in (1, 2):
        return "--dcgm-level %d: dcgmi diag never runs in a health hook (dcgmi health does)" % args.dcgm_level
    if args.json:
        return (
            "--json: a health hook's output is its contract (a line, an exit code); run node-check for JSON"
        )
    if args.plan and hook != "slurm":
        return "--plan: only with --slurm-health-check"
    if args.deadline is not None and args.deadline > 45:
        return (
            "--deadline %g: at most 45 s, so the drain and the exit fit inside slurmd's 60 s" % args.deadline
        )
    return None


REPORT_MAX_BYTES = 64 << 20


def _read_report(path: str) -> Dict[str, Any]:
    """A report file: regular, bounded (run.smallfile: a FIFO or a device would hang or never end), JSON."""
    import json

    from efa_validators.run.smallfile import NotAFile, read_small

    try:
        data = read_small(path, REPORT_MAX_BYTES)
    except NotAFile as err:
        raise drain.DrainError(str(err)) from None
    except OSError as err:
        raise drain.DrainError("%s: %s" % (path, err.strerror or err)) from None
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as err:
        raise drain.DrainError("%s: not JSON (%s)" % (path, err)) from None
    except RecursionError:  # arrays or objects nested deeper than Python's stack: no report is
        raise drain.DrainError("%s: not a report (JSON nested too deep)" % path) from None


_CLUSTER = re.compile(
    r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]*:\d{12}:cluster/[a-z0-9]{12}|[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,62}"
)


def _drain(args: argparse.Namespace) -> int:
    try:
        if args.cluster is not None and not _CLUSTER.fullmatch(args.cluster):
            raise drain.DrainError("--cluster %r is not a HyperPod cluster name or ARN" % args.cluster)
        found = drain.bad_nodes(
            [(path, _read_report(path)) for path in args.reports], by_node=args.scheduler in drain.KUBERNETES
        )
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        argvs = drain.commands(
            found, args.scheduler, args.cluster, drain.parse_instance_ids(args.instance_id), args.mark, now
        )
        if args.apply and found["replay"] and not args.replay_ok and argvs:
            raise drain.DrainError(
                "REPLAY: a report made from a replayed log drains nothing (--replay-ok in tests)"
            )
        if args.apply and argvs and args.scheduler in ("slurm", "hyperpod-slurm"):
            drain.confirm_slurm_nodes(found)  # a NodeSet's name would drain the whole set
        if args.apply and argvs and args.scheduler in drain.KUBERNETES:
            drain.confirm_kube_nodes(found)  # a pod's name is no node
    except drain.DrainError as err:
        print("error: %s" % err, file=sys.stderr)
        return EXIT_USAGE
    bad = 1 if found["nodes"] else 0
    if args.scheduler == "json" or args.json == "-":
        _write_json(drain.as_json(found), args.json or "-")
        return bad
    _write_json(drain.as_json(found), args.json)
    for suspect in found["suspects"]:
        print("# %s: %s (%s)" % (suspect["host"], suspect["why"], suspect["source"]))
    if not found["nodes"]:
        print("# no node to drain")
        return 0
    if found["replay"]:
        print("# REPLAY: these nodes were named from a replayed log, not from a cluster")
    print("\n".join(drain.plan_lines(found, args.scheduler)))  # the plan first, with or without --apply
    if not args.apply:
        sys.stdout.write(drain.shell_lines(argvs))
        return bad
    for argv, rc, out in drain.apply(argvs):
        done = "exit %s" % rc if rc is not None else "not run"
        said = (": " + printable(out.strip()[:300])) if out.strip() else ""  # the tool's reply, escaped
        print("%s -> %s%s" % (drain.shell_lines([argv]).strip(), done, said))
        if rc != 0:
            print("error: %s did not take: the node is still in service" % argv[0], file=sys.stderr)
    return bad


def _default_log() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(tempfile.gettempdir(), "validators-run-%s-%d.log" % (stamp, os.getpid()))


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
    usage = _sweep_usage(command, args)
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
            report = _run_pairwise(command, args, base_log)
        elif args.bisect:
            report = _run_bisect(command, args, base_log)
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


def _numbered(path: str, n: Any) -> str:
    """LOG.N.log, or LOG.N.K.log for (N, K): the K-th repeat of test N."""
    root, ext = os.path.splitext(path)
    number = ".".join(str(x) for x in n) if isinstance(n, tuple) else str(n)
    return "%s.%s%s" % (root, number, ext or ".log")


def _sweep_usage(command: List[str], args: argparse.Namespace) -> Optional[str]:
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


class _Rounds:
    """Runs the tests of one round at once, each a whole `validators run` in a forked process of its own
    (validators/run/forked.py: own watchdog, log and process tracking), and keeps what each showed."""

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
            logs = [_numbered(self.base_log, self.runs if self.args.repeat == 1 else (self.runs, k + 1))
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
                verdict = _worse(verdict, rep["verdict"])
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
    worst = max(reports, key=lambda r: _RANK.get(r["verdict"], 1))
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


def _run_pairwise(command: List[str], args: argparse.Namespace, base_log: str) -> Dict[str, Any]:
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


def _run_bisect(command: List[str], args: argparse.Namespace, base_log: str) -> Dict[str, Any]:
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


_RANK = {"pass": 0, "unknown": 1, "fail": 2}


def _worse(a: Optional[str], b: str) -> str:
    if a is None:
        return b
    return a if _RANK.get(a, 1) >= _RANK.get(b, 1) else b


def series_report(
    reports: List[Dict[str, Any]], labels: List[Dict[str, Any]], flaky: bool = True
) -> Dict[str, Any]:
    """Several runs -> one report: the worst run's report on top, every run summarised under `runs`.
    `flaky`: mixed results of the same test are a finding (not for a sweep, whose tests differ)."""
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
        verdict = _worse(verdict, v)
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


def _write_json(report: Dict[str, Any], dest: Optional[str]) -> None:
    """Streamed (efa_validators.report.jsonout), not built as one string first: at 8192 ranks the text is
    megabytes."""
    if dest:
        outfile.write(dest, jsonout.document(report))


def _write_outputs(report: Dict[str, Any], args: argparse.Namespace) -> None:
    """JSON, JUnit and Markdown, each written whole (efa_validators.report.outfile): never half a report."""
    _write_json(report, args.json)
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
