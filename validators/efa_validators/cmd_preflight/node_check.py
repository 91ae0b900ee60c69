"""`python -m efa_validators node-check`: the node's checks, or a health hook's (Slurm, NPD)."""

import argparse
import sys
from typing import Any, Optional

from efa_validators.cmd_preflight.common import EXIT_USAGE, positive, write_json
from efa_validators.run import report as runreport


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
        type=positive,
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
    write_json(report, args.json)
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
