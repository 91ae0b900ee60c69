"""node-check --slurm-health-check as a real slurmd's HealthCheckProgram (issue 39 item 4): the drain test's
three slurmd nodes in one container (tests/fixtures/launchers/slurm-start.sh 3), slurm.conf given
HealthCheckProgram and HealthCheckInterval, and a wrapper that puts recorded tools first on PATH by the node
slurmd names (SLURMD_NODENAME): node2's nvidia-smi lists 7 of a p5's 8 GPUs (none on this bus:
replace-hardware), node1's all 8 and a healthy p5's NVLink (its other findings here are settings of this
container: configure, never drained); node3 has no nvidia-smi at all (unknown: no evidence, never drained).
node2 is drained with the finding as its reason, node1 and node3 stay idle, and no node-check process is
left running."""

from __future__ import annotations

import time

import pytest
from test_drain_docker import _states, slurm_three_nodes  # noqa: F401 - the fixture
from test_launchers_docker import _exec, _processes_after, launcher_image  # noqa: F401 - the fixture

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROWS = "".join(
    "%d, NVIDIA H100 80GB HBM3, 570.86.15, 00000000:%02X:00.0\\n" % (i, 0x10 + i) for i in range(8)
)
# node1's NVLink as a healthy p5 prints it (18 links a GPU up, no recovery): `nvidia-smi nvlink -s` and `-e`
# (formats in efa_validators/node/nvlink.py); the p5 profile expects links, so a silent nvlink would be a
# finding
NVLINK_S = "".join(
    "GPU %d: NVIDIA H100 80GB HBM3\\n" % g + "".join("\\t Link %d: 26.562 GB/s\\n" % k for k in range(18))
    for g in range(8)
)
NVLINK_E = "".join(
    "GPU %d: NVIDIA H100 80GB HBM3\\n" % g
    + "".join(
        "\\t Link %d: Replay Errors: 0\\n\\t Link %d: Recovery Errors: 0\\n\\t Link %d: CRC Errors: 0\\n"
        % (k, k, k)
        for k in range(18)
    )
    for g in range(8)
)
WRAPPER = """#!/bin/sh
# HealthCheckProgram takes no arguments: this wrapper gives node-check its mode and the node's recorded tools
PATH=/tmp/hc/$SLURMD_NODENAME:$PATH
export PATH
cd /src && python3 -m efa_validators node-check --slurm-health-check --instance-type p5.48xlarge \
  --dcgm-level 0
echo "exit $?" >> /tmp/hc/$SLURMD_NODENAME.exit
"""


def _tool(c, path, body):
    script = "mkdir -p $(dirname {0}) && cat > {0} <<'EOF'\n#!/bin/sh\n{1}\nEOF\nchmod 755 {0}"
    proc = _exec(c, ["sh", "-c", script.format(path, body)])
    assert proc.returncode == 0, proc.stderr


def test_health_check_program_drains_the_failing_node_and_leaves_the_healthy_one(slurm_three_nodes):  # noqa: F811
    c = slurm_three_nodes
    for node, rows in (("node1", ROWS), ("node2", ROWS.rsplit("7, ", 1)[0])):
        answers = '--query-gpu*) printf "%s";; '
        answers += 'nvlink) case "$2" in -s) printf "%s";; -e) printf "%s";; esac;;'
        body = 'case "$1" in %s esac; exit 0' % (answers % (rows, NVLINK_S, NVLINK_E))
        _tool(c, "/tmp/hc/%s/nvidia-smi" % node, body)
        _tool(c, "/tmp/hc/%s/dmesg" % node, ":")
    _tool(c, "/tmp/hc/health.sh", WRAPPER.strip().split("\n", 1)[1])
    conf = "HealthCheckProgram=/tmp/hc/health.sh\nHealthCheckInterval=5\n"
    added = _exec(c, ["sh", "-c", "printf '%s' >> /etc/slurm/slurm.conf && scontrol reconfigure" % conf])
    assert added.returncode == 0, added.stdout + added.stderr

    deadline = time.monotonic() + 90  # slurmctld asks each slurmd every HealthCheckInterval (5 s)
    while time.monotonic() < deadline:
        states = _states(c)
        ran = _exec(c, ["sh", "-c", "cat /tmp/hc/node1.exit /tmp/hc/node2.exit 2>/dev/null"]).stdout
        if (
            states.get("node2", ("",))[0] in ("drained", "draining")
            and "exit" in ran
            and ran.count("exit") >= 2
        ):
            break
        time.sleep(1)
    states = _states(c)
    log = _exec(c, ["sh", "-c", "tail -n 20 /var/log/slurm/slurmd.log"]).stdout
    assert states["node2"][0] in ("drained", "draining"), (states, log)
    assert states["node2"][1].startswith("efa-image-build: gpus: 7 GPU(s) (NVIDIA H100 80GB HBM3)"), states
    assert "a GPU is missing from the PCI bus" in states["node2"][1], states
    assert states["node1"] == ("idle", "none") and states["node3"] == ("idle", "none"), (states, log)
    exits = {
        node: _exec(c, ["cat", "/tmp/hc/%s.exit" % node]).stdout.split("\n")[0] for node in ("node1", "node2")
    }
    assert exits == {"node1": "exit 1", "node2": "exit 1"}, exits  # NHC's: non-zero when not healthy
    # slurmd asks no more (interval 0); then nothing of node-check is left running
    stop = "sed -i 's/^HealthCheckInterval=5/HealthCheckInterval=0/' /etc/slurm/slurm.conf"
    stop += " && scontrol reconfigure"
    assert _exec(c, ["sh", "-c", stop]).returncode == 0
    assert _processes_after(c, "node-check", 30) == []
