"""node-check's drop-in modes (issue 39 item 4): node-problem-detector's custom plugin contract, and the Slurm
HealthCheckProgram mode's choices (what drains, with which name and reason). The mode on a real slurmd:
tests/validators/run/test_dropin_slurm_docker.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from cli import VALIDATORS
from paths import IMPORT_PATH, ROOT
from preflight_util import fake_tools, run_cli
from test_nodecheck import _alive

from efa_validators.node import dropin, nodecheck

SEVEN = "".join(
    "%d, NVIDIA H100 80GB HBM3, 570.86.15, 00000000:%02X:00.0\n" % (i, 0x10 + i) for i in range(7)
)
EIGHT = SEVEN + "7, NVIDIA H100 80GB HBM3, 570.86.15, 00000000:17:00.0\n"


def _smi(rows: str) -> str:
    """A recorded nvidia-smi: `rows` for --query-gpu, nothing (exit 0) for everything else."""
    return 'case "$1" in --query-gpu*) printf "%s";; esac; exit 0' % rows.replace("\n", "\\n")


def _report(*checks):
    return {"verdict": nodecheck.verdict_of(list(checks)), "checks": list(checks)}


@pytest.mark.parametrize(
    "tools, code, starts",
    [
        ({"nvidia-smi": _smi(SEVEN)}, 1, "replace-hardware gpus: 7 GPU(s)"),  # no NVIDIA GPU on this bus
        ({"nvidia-smi": "echo 'NVIDIA-SMI has failed'; exit 9"}, 1, "configure gpus: nvidia-smi exited 9"),
        # a hung nvidia-smi (300 s) is bounded: the plugin answers inside run_cli's 60 s, with this machine's
        # own settings (no /dev/infiniband, memlock) as the finding: NonOK, configure
        ({"nvidia-smi": "exec sleep 300"}, 1, "configure "),
    ],
)
def test_npd_plugin_contract(tmp_path, tools, code, starts):
    """kubernetes/node-problem-detector pkg/custompluginmonitor: exit 0 OK, 1 NonOK, 2 Unknown; stdout is the
    condition's message, cut at max_output_length (80). One line, ASCII, at most 80 characters."""
    env = fake_tools(tmp_path / "bin", dict(tools, dmesg=":"), path="/usr/bin:/bin")
    args = ["node-check", "--npd", "--instance-type", "p5.48xlarge", "--dcgm-level", "0", "--deadline", "3"]
    proc, _ = run_cli(args, env=env, timeout=60)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1, proc.stdout
    line = proc.stdout.strip()
    assert len(line) <= dropin.NPD_MAX and line.isascii() and line.startswith(starts), line


def test_npd_line_for_each_verdict():
    ok = nodecheck.check("gpus", "pass", "8 GPU(s)")
    assert dropin.npd_line(_report(ok)) == (0, "efa-image-build: node healthy, 1 checks pass")
    odd = nodecheck.check("gdr-capability", "unknown", "no RDMA device \x1b[31m\u00e9" + "x" * 100)
    code, line = dropin.npd_line(_report(ok, odd))
    assert code == 2 and len(line) == 80 and "\x1b" not in line and line.isascii() and line.endswith("..."), (
        line
    )
    bad = nodecheck.check("memlock", "fail", "64 KiB", remedy="configure")
    worse = nodecheck.check("gpus", "fail", "7 of 8", remedy="replace-hardware")
    assert dropin.npd_line(_report(ok, bad, worse, odd)) == (1, "replace-hardware gpus: 7 of 8")


def _sinfo(rows):
    """A stand-in for drain.apply that answers sinfo for the names in `rows` (name -> 'state|reason')."""
    asked = []

    def run(argvs, timeout):
        out = []
        for argv in argvs:
            asked.append(argv)
            name = argv[argv.index("-n") + 1]
            said = "%s|%s\n" % (name, rows[name]) if name in rows else ""
            out.append((argv, 0, said))
        return out

    return run, asked


def test_slurm_drains_only_for_reset_reboot_or_replace_with_the_reason():
    conf = nodecheck.check("memlock", "fail", "64 KiB", remedy="configure")
    hw = nodecheck.check("gpus", "fail", "7 GPU(s)\nof 8", remedy="replace-hardware")
    run, asked = _sinfo({"node2": "idle|none"})
    code, lines, argv = dropin.slurm_plan(_report(conf), ["node2"], run)
    assert code == 1 and argv is None and asked == [] and "memlock is configure" in lines[-1], lines
    code, lines, argv = dropin.slurm_plan(_report(conf, hw), ["node2"], run)
    assert code == 1 and argv == [
        "scontrol", "update", "nodename=node2", "state=drain", "reason=efa-image-build: gpus: 7 GPU(s) of 8",
    ]  # fmt: skip
    unclassed = nodecheck.check("gpu-ecc", "fail", "ECC off")  # a reader that gives no class: not acted on
    code, lines, argv = dropin.slurm_plan(_report(unclassed), ["node2"], run)
    assert (code, argv, lines[-1]) == (1, None, "not drained: gpu-ecc fails without a remedy class")
    unknown = nodecheck.check("gpus", "unknown", "nvidia-smi did not answer within 10s")
    assert dropin.slurm_plan(_report(unknown), ["node2"], run)[::2] == (3, None)
    assert dropin.slurm_plan(_report(nodecheck.check("gpus", "pass", "8")), ["node2"], run)[::2] == (0, None)


def test_slurm_names_the_node_as_slurmd_does_then_as_nhc_does():
    assert dropin.node_names({"SLURMD_NODENAME": "node2"}, "ip-10-0-0-1.ec2.internal") == ["node2"]
    assert dropin.node_names({}, "ip-10-0-0-1.ec2.internal") == ["ip-10-0-0-1.ec2.internal", "ip-10-0-0-1"]
    hw = nodecheck.check("gpus", "fail", "7 GPU(s)", remedy="reboot-node")
    run, asked = _sinfo({"ip-10-0-0-1": "mix|none"})
    _, _, argv = dropin.slurm_plan(_report(hw), dropin.node_names({}, "ip-10-0-0-1.ec2.internal"), run)
    assert argv[2] == "nodename=ip-10-0-0-1" and len(asked) == 2, asked
    run, _ = _sinfo({})
    _, lines, argv = dropin.slurm_plan(_report(hw), ["nodeX"], run)
    assert argv is None and "no Slurm node name confirmed (nodeX: no Slurm node has that name" in lines[-1]


def test_slurm_keeps_an_operators_drain_reason():
    hw = nodecheck.check("gpus", "fail", "7 GPU(s)", remedy="replace-hardware")
    run, _ = _sinfo({"node2": "drain|maintenance window"})
    _, lines, argv = dropin.slurm_plan(_report(hw), ["node2"], run)
    assert argv is None and "another reason kept: maintenance window" in lines[-1]
    run, _ = _sinfo({"node2": "drain|efa-image-build: gpus: 6 GPU(s)"})
    assert dropin.slurm_plan(_report(hw), ["node2"], run)[2] is not None  # ours: updated


def test_hook_options_are_refused_where_they_do_not_apply():
    for args, said in (
        (["--plan"], "--plan: only with --slurm-health-check or --npd"),
        (["--npd", "--dcgm-level", "1"], "dcgmi diag never runs in a health hook"),
        (["--npd", "--plan"], "--plan: only with --slurm-health-check"),
        (["--slurm-health-check", "--deadline", "50"], "at most 45 s"),
        (["--slurm-health-check", "--json", "-"], "a health hook's output is its contract"),
    ):
        proc, _ = run_cli(["node-check"] + args)
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_health_hook_never_runs_dcgmi_diag_but_reads_dcgmi_health(tmp_path):
    """`dcgmi diag` runs seconds to minutes, past what slurmd allows; the health watches are a quick read."""
    calls = tmp_path / "dcgmi.calls"
    tools = {"nvidia-smi": _smi(EIGHT), "dmesg": ":", "dcgmi": 'echo "$*" >> %s; exit 0' % calls}
    env = fake_tools(tmp_path / "bin", tools, path="/usr/bin:/bin")
    proc, _ = run_cli(["node-check", "--npd", "--instance-type", "p5.48xlarge"], env=env, timeout=60)
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    assert calls.read_text().splitlines() == ["health -c -j"], calls.read_text()
    calls.unlink()
    run_cli(["node-check", "--dcgm-level", "1", "--json", str(tmp_path / "n.json")], env=env, timeout=60)
    assert calls.read_text().splitlines() == ["diag -r 1 -j", "health -c -j"]  # the plain node-check: both


def _signal_and_reap(proc, pids, send, expect: int) -> list:
    """Once the hung command has written both its pids (at most 30 s), `send` the signal (slurmd's SIGTERM to
    the program's group, or the mode's alarm to it alone), check the mode's exit code, and return the pids
    still alive after 3 s (killed here: this test's own children are never left running)."""
    try:
        for _ in range(300):
            if pids.exists() and len(pids.read_text().split()) == 2:
                break
            time.sleep(0.1)
        started = [int(p) for p in pids.read_text().split()]
        send()
        assert proc.wait(timeout=30) == expect
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 3  # a SIGKILLed process is gone a moment later, not at once
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in started if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_slurmds_kill_leaves_no_tool_running(tmp_path):
    """At its limit slurmd sends SIGTERM to the program's process group, then SIGKILL 10 ms later
    (SchedMD/slurm src/common/run_command.c _kill_pg). Our tools run in sessions of their own, out of reach
    of that: on SIGTERM the mode ends every tool's group itself. A hung nvidia-smi that started a child: after
    the SIGTERM, neither is left."""
    pids = tmp_path / "pids"
    hung = "sleep 300 & echo $! >> %s; echo $$ >> %s; wait" % (pids, pids)
    env = fake_tools(tmp_path / "bin", {"nvidia-smi": hung, "dmesg": ":"}, path="/usr/bin:/bin")
    env.update(PYTHONPATH=IMPORT_PATH)
    proc = subprocess.Popen(
        [*VALIDATORS, "node-check", "--slurm-health-check", "--plan", "--dcgm-level", "0"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    left = _signal_and_reap(proc, pids, lambda: os.killpg(proc.pid, signal.SIGTERM), 128 + signal.SIGTERM)
    assert left == [], "the hung tool's processes %s outlived the health check" % left


def test_the_alarm_during_a_scheduler_command_leaves_no_process(tmp_path):
    """Attack on issue 39 item 4's bound: the mode's own alarm (or a SIGTERM sent to it alone) while its sinfo
    or scontrol ran ended the mode and left that command running: drain.apply's commands were neither in
    the tools the handler ends nor in a group of their own (a hung sinfo, slurmctld away, outlived the
    hook). The node fails replace-hardware (7 of 8 GPUs), so the mode asks sinfo; SIGALRM arrives while
    sinfo hangs: exit 142 and neither sinfo nor its child is left."""
    pids = tmp_path / "pids"
    hung = "sleep 300 & echo $! >> %s; echo $$ >> %s; wait" % (pids, pids)
    tools = {"nvidia-smi": _smi(SEVEN), "dmesg": ":", "sinfo": hung}
    env = fake_tools(tmp_path / "bin", tools, path="/usr/bin:/bin")
    env.update(PYTHONPATH=IMPORT_PATH, SLURMD_NODENAME="node2")
    proc = subprocess.Popen(
        [*VALIDATORS, "node-check", "--slurm-health-check", "--plan", "--instance-type", "p5.48xlarge"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    left = _signal_and_reap(proc, pids, lambda: os.kill(proc.pid, signal.SIGALRM), dropin.EXIT_ALARM)
    assert left == [], "the hung sinfo's processes %s outlived the health check" % left


def test_a_deadline_or_timeout_that_is_no_finite_number_is_exit_2():
    """Attack on the health hook's bound: --deadline nan passed the '> 0' and '<= 45' tests (every comparison
    with NaN is false) and ended in a ValueError traceback at signal.alarm; `run --timeout nan` was taken
    as a limit no run ever reaches. A duration is a finite number > 0, else exit 2 naming the flag."""
    for args, flag in (
        (["node-check", "--slurm-health-check", "--plan", "--deadline", "nan"], "--deadline"),
        (["run", "--timeout", "nan", "--", "true"], "--timeout"),
        (["run", "--grace", "inf", "--", "true"], "--grace"),
    ):
        proc, _ = run_cli(args)
        assert proc.returncode == 2 and flag in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
