"""The drain on a real Slurm (issue 33, item 2): a sweep through srun over three slurmd nodes (one container,
tests/fixtures/launchers/slurm-start.sh) names the bad one, `drain --apply` runs the printed scontrol line,
and sinfo shows that node drained with the finding as its reason. REPLAY: the GPU binary is the replay
stand-in, node3's pairs replay a socket-fallback log; the drain is told the replay is meant (--replay-ok)."""

from __future__ import annotations

import json
import shlex
import time

import pytest
from test_launchers_docker import _exec, launcher_image, slurm_started  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPLAY = "/src/tests/fixtures/replay"


@pytest.fixture(scope="module")
def slurm_three_nodes(docker_client, launcher_image):  # noqa: F811 - the fixture imported above
    with slurm_started(docker_client, launcher_image, "h5-drain", "3") as c:
        yield c


def test_a_sweep_over_slurm_names_the_bad_node_and_apply_drains_it(slurm_three_nodes):
    c = slurm_three_nodes
    # rank 0 of each two-node srun step replays the pair's log: node3's pairs fall back to sockets
    task = (
        'case ",$PAIR," in *,node3,*) log=%s/socket-fallback-p5-2node.log;; '
        "*) log=%s/good-efa-p5-2node.log;; esac; "
        '[ "$SLURM_PROCID" = 0 ] && exec python3 -m efa_validators.replay "$log"; true' % (REPLAY, REPLAY)
    )
    step = "PAIR={hosts} srun -N 2 -n 2 -w {hosts} --export=ALL sh -c %s" % shlex.quote(task)
    sweep = ["python3", "-m", "efa_validators", "run", "--quiet", "--instance-type", "p5.48xlarge",
             "--timeout", "60", "--json", "/tmp/sweep.json", "--pairwise", "node1", "node2", "node3",
             "--", "sh", "-c", step]  # fmt: skip
    proc = _exec(c, sweep, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(_exec(c, ["cat", "/tmp/sweep.json"]).stdout)
    assert report["pairwise"]["implicated"] == ["node3"] and report["replay"] is True

    printed = _exec(c, ["python3", "-m", "efa_validators", "drain", "/tmp/sweep.json", "--for", "slurm"])
    [line] = [x for x in printed.stdout.splitlines() if x.startswith("scontrol")]
    assert printed.returncode == 1 and shlex.split(line)[:4] == [
        "scontrol",
        "update",
        "nodename=node3",
        "state=drain",
    ]

    drain = ["python3", "-m", "efa_validators", "drain", "/tmp/sweep.json", "--for", "slurm"]
    applied = _exec(c, drain + ["--apply", "--replay-ok"])
    assert applied.returncode == 1 and line + " -> exit 0" in applied.stdout, applied.stdout + applied.stderr
    states = {}
    for row in _exec(c, ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]).stdout.splitlines():
        node, state, reason = row.split("|", 2)
        states[node] = (state, reason)
    assert states["node3"][0] in ("drained", "draining") and states["node3"][1].startswith(
        "efa-image-build: reboot-node: REPLAY bad-node: implicated by elimination: node3"
    ), states
    assert states["node1"][0] == "idle" and states["node2"][0] == "idle"

    # a report naming the host `all`: scontrol would read nodename=all as every node; refused, none drained
    every = dict(report, pairwise=dict(report["pairwise"], implicated=["all"], suspects=[]))
    _exec(c, ["sh", "-c", "cat > /tmp/every.json <<'EOF'\n%s\nEOF" % json.dumps(every)])
    refused = _exec(c, drain[:4] + ["/tmp/every.json", "--for", "slurm", "--apply", "--replay-ok"])
    assert refused.returncode == 2 and "every node" in refused.stderr, refused.stdout + refused.stderr
    after = _exec(c, ["sinfo", "-h", "-N", "-o", "%N|%T"]).stdout.split()
    assert {"node1|idle", "node2|idle"} <= set(after), after


def _states(c):
    """{node: (state, reason)} as sinfo shows them."""
    rows = _exec(c, ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]).stdout.splitlines()
    return {node: (state, reason) for node, state, reason in (row.split("|", 2) for row in rows)}


def _all_idle(c, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        states = _states(c)
        if len(states) == 3 and all(state == "idle" for state, _ in states.values()):
            return states
        time.sleep(0.5)
    return _states(c)


def test_a_nodeset_name_drains_nothing_not_even_the_real_node_beside_it(slurm_three_nodes):
    """A NodeSet in this Slurm's slurm.conf: `scontrol update nodename=rack1` takes the set's name as its
    nodes. A report naming rack1 (beside a real node3) with --apply: exit 2 naming rack1, nothing drained."""
    c = slurm_three_nodes
    conf = "/etc/slurm/slurm.conf"
    add = "grep -q '^NodeSet=rack1' %s || echo 'NodeSet=rack1 Nodes=node1,node2' >> %s" % (conf, conf)
    assert _exec(c, ["sh", "-c", add + " && scontrol reconfigure"]).returncode == 0
    # node3 was drained by the test before (when it ran): idle again
    _exec(c, ["scontrol", "update", "nodename=node3", "state=resume"])
    assert set(_all_idle(c).values()) == {("idle", "none")}, _states(c)

    sweep = {"schema": "efa-image-build/report/v1", "verdict": "fail", "replay": False,
             "findings": [{"id": "bad-node", "severity": "error", "message": "implicated by elimination"}],
             "pairwise": {"implicated": ["node3", "rack1"], "suspects": [], "cleared": []}}  # fmt: skip
    _exec(c, ["sh", "-c", "cat > /tmp/nodeset.json <<'EOF'\n%s\nEOF" % json.dumps(sweep)])
    drain = ["python3", "-m", "efa_validators", "drain", "/tmp/nodeset.json", "--for", "slurm"]
    printed = _exec(c, drain)
    assert printed.returncode == 1 and "nodename=rack1" in printed.stdout, printed.stdout + printed.stderr
    refused = _exec(c, drain + ["--apply"])
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    assert "/tmp/nodeset.json: host 'rack1': no Slurm node has that name (a NodeSet" in refused.stderr
    assert "host 'node3'" not in refused.stderr and "scontrol" not in refused.stdout, refused.stderr
    assert set(_states(c).values()) == {("idle", "none")}, _states(c)

    # what the refusal spared: the printed line, run by hand, drains the whole set on this Slurm
    by_hand = _exec(c, ["scontrol", "update", "nodename=rack1", "state=drain", "reason=by-hand"])
    assert by_hand.returncode == 0, by_hand.stderr
    states = _states(c)
    assert {n: s[1] for n, s in states.items()} == {"node1": "by-hand", "node2": "by-hand", "node3": "none"}
    _exec(c, ["scontrol", "update", "nodename=node1,node2", "state=resume"])
