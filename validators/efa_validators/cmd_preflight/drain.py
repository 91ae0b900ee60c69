"""`python -m efa_validators drain`: the scheduler's action for the nodes node-check or a sweep named."""

import argparse
import datetime
import re
import sys
from typing import Any, Dict

from efa_validators.cmd_preflight.common import EXIT_USAGE, write_json
from efa_validators.report.printable import printable
from efa_validators.run import drain


def register(sub: Any) -> None:
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
        write_json(drain.as_json(found), args.json or "-")
        return bad
    write_json(drain.as_json(found), args.json)
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
