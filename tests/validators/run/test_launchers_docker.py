"""The runner through real launchers in containers: Open MPI over ssh between two containers on a
user-defined docker network, and a one-node Slurm (slurmctld + slurmd + munge) in one container.

One image (tests/fixtures/launchers/Dockerfile, FROM the local debootstrap base) serves both; it is
built once per session and cached by the engine. The project is bind-mounted read-only at /src, so the
validators that run are the ones under test. Every container and network made here is removed."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid

import pytest
from paths import ROOT

IMAGE = "h5-launchers:test"  # test-only image; prefix names what this suite created
REPLAY_LOG = "/src/tests/fixtures/replay/good-efa-p5-2node.log"
MPI_NET = ["--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"]

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def launcher_image(docker_client, local_base):
    docker_client.images.build(
        path=str(ROOT / "tests" / "fixtures" / "launchers"), tag=IMAGE, rm=True, forcerm=True
    )
    return IMAGE


def _exec(container, cmd, timeout=120):
    """docker exec through the CLI with a hard timeout (the SDK's exec has none)."""
    proc = subprocess.run(
        ["docker", "exec", "-w", "/src", container.name] + cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc


def _processes(container, word):
    out = _exec(container, ["ps", "-eo", "pid,stat,args"]).stdout.splitlines()
    return [line for line in out if word in line and " Z" not in line and "ps -eo" not in line]


def _processes_after(container, word, seconds: float):
    """_processes once they are gone, or when `seconds` have passed (a remote side ends asynchronously)."""
    deadline = time.monotonic() + seconds
    while _processes(container, word) and time.monotonic() < deadline:
        time.sleep(0.5)
    return _processes(container, word)


def _start(client, image, name, network=None, command=None):
    kwargs = dict(
        name=name,
        hostname=name,
        detach=True,
        init=True,
        volumes={str(ROOT): {"bind": "/src", "mode": "ro"}},
    )
    if network is not None:
        kwargs["network"] = network.name
    return client.containers.run(image, command or ["sleep", "infinity"], **kwargs)


@pytest.fixture(scope="module")
def ssh_pair(docker_client, launcher_image):
    tag = uuid.uuid4().hex[:8]
    net = docker_client.networks.create("h5-net-%s" % tag, driver="bridge")
    made = []
    try:
        for role in ("a", "b"):
            c = _start(
                docker_client,
                launcher_image,
                "h5-mpi-%s-%s" % (role, tag),
                net,
                ["sh", "-c", "/usr/sbin/sshd && exec sleep infinity"],
            )
            made.append(c)
        yield made
    finally:
        for c in made:
            c.remove(force=True)
        net.remove()


@contextlib.contextmanager
def slurm_started(client, image, prefix, *nodes):
    """A container named `prefix`-<random> with its test Slurm started (slurm-start.sh NODES: one node
    unless told), removed after."""
    c = _start(client, image, "%s-%s" % (prefix, uuid.uuid4().hex[:8]))
    try:
        proc = _exec(c, ["slurm-start.sh", *nodes], timeout=90)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield c
    finally:
        c.remove(force=True)


@pytest.fixture(scope="module")
def slurm_node(docker_client, launcher_image):
    with slurm_started(docker_client, launcher_image, "h5-slurm") as c:
        yield c


def _hosts(pair):
    return "%s:2,%s:2" % (pair[0].name, pair[1].name)


def _run(container, args, timeout=120):
    return _exec(
        container, ["python3", "-m", "efa_validators", "run", "--quiet", "--json", "-"] + args, timeout
    )


def _replay(*flags):
    """The ranks' command: efa_validators.replay of the good two-node log, rank-filtered, with `flags`."""
    return ["python3", "-m", "efa_validators.replay", "--rank-filter", *flags, REPLAY_LOG]


def _report(proc):
    import json

    return json.loads(proc.stdout)


def test_mpirun_across_two_containers_replays_good_log(ssh_pair):
    a, _b = ssh_pair
    cmd = ["mpirun", "--allow-run-as-root", "-H", _hosts(ssh_pair), "-np", "4"] + MPI_NET
    cmd += _replay()
    proc = _run(a, ["--instance-type", "p5.48xlarge", "--nodes", "2", "--"] + cmd)
    report = _report(proc)
    assert report["run"]["exit_code"] == 0
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1, 2, 3}
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]
    assert proc.returncode == 0


def test_nccl_debug_reaches_remote_ranks_only_when_injected(ssh_pair):
    a, b = ssh_pair
    cmd = ["mpirun", "--allow-run-as-root", "-H", "%s:1,%s:1" % (a.name, b.name), "-np", "2"] + MPI_NET
    cmd += ["sh", "-c", 'echo "$(hostname) debug=$NCCL_DEBUG"']
    injected = _report(_run(a, ["--"] + cmd))
    lines = sorted(r["last_lines"][-1] for r in injected["run"]["rank_output"] if r["rank"] is not None)
    assert lines == ["[1,0]<stdout>:%s debug=INFO" % a.name, "[1,1]<stdout>:%s debug=INFO" % b.name]
    raw = _report(_run(a, ["--no-inject", "--"] + cmd))
    remote = [
        line for r in raw["run"]["rank_output"] for line in r["last_lines"] if b.name + " debug=" in line
    ]
    assert remote == ["%s debug=" % b.name]  # without -x NCCL_DEBUG, the remote rank never sees INFO


def test_remote_rank_hang_is_ended_on_both_nodes(ssh_pair):
    a, b = ssh_pair
    cmd = ["mpirun", "--allow-run-as-root", "-H", _hosts(ssh_pair), "-np", "4"] + MPI_NET
    cmd += _replay("--hang-after", "3", "--only-rank", "3")
    proc = _run(a, ["--idle-timeout", "2", "--timeout", "60", "--"] + cmd)
    report = _report(proc)
    assert proc.returncode == 1
    assert any(f["id"] == "hang" for f in report["findings"])
    assert report["run"]["duration_s"] < 30
    assert _processes(a, "efa_validators.replay") == [], a.name
    # the remote rank is ended by Open MPI's daemon on b once mpirun is gone: asynchronous, so bounded
    assert _processes_after(b, "efa_validators.replay", 20) == [], b.name


def test_srun_through_the_runner_labels_ranks(slurm_node):
    cmd = ["srun", "-n2"] + _replay()
    proc = _run(slurm_node, ["--instance-type", "p5.48xlarge", "--nodes", "2", "--"] + cmd)
    report = _report(proc)
    assert report["run"]["command"][:2] == ["srun", "-l"]
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1}
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]


def test_srun_rank_that_dies_is_named(slurm_node):
    cmd = ["srun", "-n2"] + _replay("--exit-after", "4", "--exit-code", "5", "--only-rank", "1")
    report = _report(_run(slurm_node, ["--"] + cmd))
    died = [f for f in report["findings"] if f["id"] == "rank-exit"]
    assert died and died[0]["rank"] == 1 and "exit code 5" in died[0]["message"], report["findings"]
    assert report["verdict"] == "fail"


def test_srun_hang_is_ended_and_job_gone(slurm_node):
    cmd = ["srun", "-n2"] + _replay("--hang-after", "3")
    proc = _run(slurm_node, ["--idle-timeout", "2", "--timeout", "60", "--"] + cmd)
    report = _report(proc)
    assert proc.returncode == 1 and any(f["id"] == "hang" for f in report["findings"])
    assert _processes_after(slurm_node, "efa_validators.replay", 15) == []
    assert _exec(slurm_node, ["squeue", "-h"]).stdout.strip() == ""
