"""node-check where teams run their node health today: as Slurm's HealthCheckProgram (NHC's contract) and as a
node-problem-detector custom plugin. Pure but `main`, which runs the checks and acts.

Slurm (`node-check --slurm-health-check`). slurm.conf(5) HealthCheckProgram: slurmd runs the program as root
on every node, on HealthCheckInterval, and "any action to be taken must be explicitly performed by the
program" (scontrol update ... State=drain). slurmd kills it if it runs too long: 60 s, fixed through 25.11
(SchedMD/slurm@d525b687 = slurm-22-05-8-1, src/slurmd/slurmd/slurmd.c run_script_health_check:
`.max_wait = 60 * 1000`), `HealthCheckTimeout` (default 60) from 26.05 (commit 74979c20). At the limit
slurmd sends SIGTERM then, 10 ms later, SIGKILL to the program's process group (src/common/run_command.c
_kill_pg, SchedMD/slurm@284c3b95): our tools run in their own sessions, out of that kill's reach, so this
mode keeps its own time: every tool at most TOOL_TIME, no tool started after DEADLINE, the scheduler's
commands SCHED_TIME each, and an alarm that ends every tool's group and exits before slurmd's 60 s.
`dcgmi diag` never runs here (seconds to minutes); `dcgmi health` does, in the tools' time.
The node's Slurm name: slurmd sets SLURMD_NODENAME for the program since 20.11 (commit 97a545ba, "Export
SLURMD_NODENAME envvar to HealthCheckProgram"); without it, as LBNL NHC does (mej/nhc@9c4a38c0, `nhc`:
HOSTNAME from /proc/sys/kernel/hostname, HOSTNAME_S its short form; helpers/node-mark-offline drains
`NodeName=$HOSTNAME`), the host name, then its short form: the first that sinfo names as exactly one node.
Exit codes as NHC's: 0 healthy, non-zero otherwise (1 fail, 3 unknown, as node-check; 142 when the alarm
ended it, NHC's own code for its watchdog timeout).

What drains: a fail whose remedy is reset-gpu, reboot-node or replace-hardware drains this node with the
reason `efa-image-build: <check>: <detail>` (the most severe first). A configure finding does not: it is a
setting (a limit slurmd passes on, a driver module not loaded, a device not passed in), the same on every node
it touches, and HealthCheckProgram runs on all nodes at once, so draining for it would take the whole cluster
out of service for what a fix and a rerun clear. It exits 1, and slurmd logs the program's output with its
exit code ("health_check failed: rc:1 output:..."). Unknown drains nothing either: no evidence (exit 3). A
node already drained, down or failed with a reason not ours keeps it (as NHC's node-mark-offline keeps an
operator's note). Plan or apply: here slurmd is the one who asked, and the HealthCheckProgram line in
slurm.conf is the administrator's consent, so the drain runs without `--apply`; `--plan` prints it instead.

node-problem-detector (`node-check --npd`): its custom plugin contract (kubernetes/node-problem-detector
@6632ca67 pkg/custompluginmonitor/types/types.go: exit 0 OK, 1 NonOK, 2 Unknown, any other code Unknown;
plugin/plugin.go: stdout trimmed and cut at max_output_length bytes, default 80 (types/config.go), the
plugin killed at its timeout, default 5 s). One line of at most NPD_MAX ASCII characters; pass -> 0,
fail -> 1, unknown -> 2. NPD acts on nothing itself; the line starts with the remedy class for whatever
reads the condition.
"""

import os
import signal
import socket
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from efa_validators.node import nodecheck
from efa_validators.report.printable import printable
from efa_validators.run import drain

Check = Dict[str, Any]
Runner = Callable[[List[List[str]], float], List[Tuple[List[str], Optional[int], str]]]

SLURM_LIMIT = 60.0  # what slurmd allows the program (see above)
DEADLINE = 40.0  # no tool starts after this; then the scheduler's two commands, SCHED_TIME each
TOOL_TIME = 10.0
SCHED_TIME = 5.0
ALARM = int(DEADLINE + 2 * SCHED_TIME + 2)  # 52 s: every group ended, exit 142, before slurmd's 60 s
EXIT_ALARM = 142
DRAIN_REMEDIES = ("reset-gpu", "reboot-node", "replace-hardware")
PREFIX = drain.PREFIX
NPD_OK, NPD_NONOK, NPD_UNKNOWN = 0, 1, 2
NPD_MAX = 80
_OFFLINE = ("drain", "drng", "down", "fail", "maint")  # sinfo %t states a drain would overwrite


def worst_fail(report: Dict[str, Any]) -> Optional[Check]:
    """The failing check whose remedy asks most (replace > reboot > reset > configure), first among equals."""
    fails = [c for c in report["checks"] if c["status"] == "fail"]
    order = nodecheck.REMEDIES
    rank = lambda c: order.index(c.get("remedy")) if c.get("remedy") in order else -1  # noqa: E731
    return max(fails, key=rank) if fails else None  # max keeps the first of equal rank


def first_unknown(report: Dict[str, Any]) -> Optional[Check]:
    return next((c for c in report["checks"] if c["status"] == "unknown"), None)


def slurm_reason(c: Check) -> str:
    """`efa-image-build: <check>: <detail>`, one line a scheduler shows (control characters escaped)."""
    text = printable("%s: %s: %s" % (PREFIX, c["name"], " ".join(str(c["detail"]).split())))
    return text if len(text) <= drain.REASON_MAX else text[: drain.REASON_MAX - 3] + "..."


def node_names(env: Dict[str, str], hostname: str) -> List[str]:
    """The names this node may have in Slurm, in the order they are tried (see the module's docstring)."""
    if env.get("SLURMD_NODENAME"):
        return [env["SLURMD_NODENAME"]]
    short = hostname.split(".")[0]
    return [hostname] + ([short] if short != hostname else [])


def sinfo_state_argv(name: str) -> List[str]:
    """sinfo(1): the node's name (%N), compact state (%t) and reason (%E), one line per node, no header."""
    return ["sinfo", "-N", "-h", "-n", name, "-o", "%N|%t|%E"]


def read_state(name: str, rc: Optional[int], out: str) -> Tuple[Optional[str], str, str]:
    """(why not this node or None, state, reason) from what sinfo_state_argv said."""
    rows = [line.split("|", 2) for line in out.splitlines() if line.strip()]
    why = drain.not_one_node(name, rc, "\n".join(r[0] for r in rows) if rc == 0 else out)
    if why or len(rows) != 1 or len(rows[0]) != 3:
        return why or "sinfo printed %r" % out[:120], "", ""
    return None, rows[0][1].strip(), rows[0][2].strip()


def slurm_plan(
    report: Dict[str, Any], names: Sequence[str], run: Runner
) -> Tuple[int, List[str], Optional[List[str]]]:
    """(exit code, lines to print, the scontrol argv to run or None). `run` is drain.apply (sinfo only)."""
    verdict = report["verdict"]
    code = {"pass": 0, "fail": 1}.get(verdict, 3)
    lines = ["%s node-check: %s" % (PREFIX, verdict)]
    lines += ["  %s %s (%s): %s" % (c["status"], c["name"], c.get("remedy") or "-", printable(c["detail"]))
              for c in report["checks"] if c["status"] != "pass"]  # fmt: skip
    worst = worst_fail(report)
    if worst is None or worst.get("remedy") not in DRAIN_REMEDIES:
        if worst is not None and worst.get("remedy") is None:  # a reader that gives none: not acted on
            lines.append("not drained: %s fails without a remedy class" % worst["name"])
        elif worst is not None:
            lines.append(
                "not drained: %s is configure (a setting to fix and rerun), never a drain" % worst["name"]
            )
        return code, lines, None
    tried = []
    for name in names:
        ((_, rc, out),) = run([sinfo_state_argv(name)], SCHED_TIME)
        why, state, reason = read_state(name, rc, out)
        if why:
            tried.append("%s: %s" % (name, why))
            continue
        if (
            state.rstrip("*~#!%$@^-").startswith(_OFFLINE)
            and reason not in ("none", "")
            and not (reason.startswith(PREFIX))
        ):
            lines.append(
                "not drained: %s is %s with another reason kept: %s" % (name, state, printable(reason))
            )
            return code, lines, None
        argv = ["scontrol", "update", "nodename=" + name, "state=drain", "reason=" + slurm_reason(worst)]
        return code, lines, argv
    lines.append("not drained: no Slurm node name confirmed (%s)" % "; ".join(tried))
    return code, lines, None


def npd_line(report: Dict[str, Any]) -> Tuple[int, str]:
    """(exit code, the one line) by node-problem-detector's custom plugin contract (module docstring)."""
    worst = worst_fail(report)
    if worst is not None:
        code, text = NPD_NONOK, "%s %s: %s" % (worst.get("remedy") or "fail", worst["name"], worst["detail"])
    elif report["verdict"] == "pass":
        code, text = NPD_OK, "%s: node healthy, %d checks pass" % (PREFIX, len(report["checks"]))
    else:
        c = first_unknown(report) or {"name": "node-check", "detail": "no check ran"}
        code, text = NPD_UNKNOWN, "unknown %s: %s" % (c["name"], c["detail"])
    flat = printable(" ".join(text.split())).encode("ascii", "backslashreplace").decode("ascii")
    return code, flat if len(flat) <= NPD_MAX else flat[: NPD_MAX - 3] + "..."


def run_sched(argvs: List[List[str]], timeout: float) -> List[Tuple[List[str], Optional[int], str]]:
    """drain.apply's shape, each command run as a tool is (nodecheck.run_tool): in a group of its own that
    the signal handler ends. Why: drain.apply's children were not among the tools the handler ends, so the
    alarm (or a SIGTERM to this process alone) while sinfo or scontrol hung left it running."""
    return [(argv, *nodecheck.run_tool(argv, timeout)) for argv in argvs]


def _bounded_exit(signum: int, _frame: Any) -> None:
    """End every tool's process group, then this process: nothing is left running when the hook is done."""
    nodecheck.end_running()
    sys.stdout.flush()
    os._exit(EXIT_ALARM if signum == signal.SIGALRM else 128 + signum)


def main(
    mode: str,
    instance_type: Optional[str],
    dcgm_level: Optional[int],
    image_checks: Optional[Callable[[Dict[str, str]], List[Check]]],
    plan_only: bool = False,
    deadline: float = DEADLINE,
) -> int:
    """Run the checks bounded in time, then print (and for Slurm act) by the mode's contract."""
    for sig in nodecheck.HOOK_SIGNALS:
        signal.signal(sig, _bounded_exit)
    signal.alarm(int(deadline + 2 * SCHED_TIME + 2))
    try:
        with nodecheck.bounded(deadline, TOOL_TIME):
            report = nodecheck.run_checks(
                instance_type=instance_type,
                dcgm_level=dcgm_level,
                image_checks=image_checks,
                dcgm_diag=False,
            )
        if mode == "npd":
            code, line = npd_line(report)
            print(line)
            return code
        names = node_names(dict(os.environ), socket.gethostname())
        # the scheduler's commands: every one inside the alarm's budget (2 x SCHED_TIME in all, however
        # many names sinfo is asked for), each ended by the handler
        with nodecheck.bounded(2 * SCHED_TIME, SCHED_TIME):
            code, lines, argv = slurm_plan(report, names, run_sched)
            if argv is not None and plan_only:
                lines.append("plan (--plan, not run): " + drain.shell_lines([argv]).strip())
            elif argv is not None:
                ((_, rc, out),) = run_sched([argv], SCHED_TIME)
                said = printable(out.strip()[:200])
                lines.append("drained: %s -> exit %s%s" % (argv[2], rc, ": " + said if said else ""))
        print("\n".join(lines))
        return code
    finally:
        signal.alarm(0)
