"""The launch recipes run as printed: the `mpirun` line across two containers over ssh, and the `sbatch`
script on a two-node Slurm (two slurmd daemons in one container), each in the launcher test image.

What `build.py preflight --print` writes is run unchanged but for the substitution docs/preflight.md
names (`CONTAINER=()` where the nodes already run inside the image, as here: no pyxis in a container).
The image stands in for a built one the way a built one is laid out: validators importable through a .pth
file, nccl-tests under the lock's prefix. The GPU binary is the one stand-in the project allows: a script
that replays a recorded log (efa_validators.replay). Every container made here is removed."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import cli
import pytest
from test_launchers_docker import REPLAY_LOG, ROOT, _exec, launcher_image, slurm_started, ssh_pair  # noqa: F401

pytestmark = pytest.mark.docker

STAND_IN = "/opt/h5-replay"
IMAGE = "localhost:5000/h5/img@sha256:" + "d" * 64  # the digest every printed recipe binds its report to
LOCK = {
    "name": "h5-recipe",
    "python": "/usr/bin/python3",
    "components": {"nccl_tests": {"prefix": STAND_IN}, "openmpi": {"prefix": "/usr"}},
    "env": [
        {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"},
        {"name": "LD_LIBRARY_PATH", "value": "/opt/a/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"},
    ],
}
STAND_IN_SCRIPT = (
    "#!/bin/sh\n"
    "# stand-in for the GPU binary: replays a recorded nccl-tests log; its arguments are ignored\n"
    "exec python3 -m efa_validators.replay --rank-filter %s\n" % REPLAY_LOG
)


def _prepare(container) -> None:
    """Lay the container out like a built image: validators on the interpreter's path, nccl-tests binary."""
    script = (
        "set -e; echo /src > /usr/lib/python3/dist-packages/efa-image-build.pth; "
        "mkdir -p %s/bin; cat > %s/bin/all_reduce_perf; chmod 755 %s/bin/all_reduce_perf"
        % (STAND_IN, STAND_IN, STAND_IN)
    )
    proc = subprocess.run(
        ["docker", "exec", "-i", container.name, "sh", "-c", script],
        input=STAND_IN_SCRIPT,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def _print_recipe(tmp_path, recipe: str, cluster: str, lock_doc: dict = LOCK) -> str:
    lock = tmp_path / "variant.lock.json"
    lock.write_text(json.dumps(lock_doc))
    cl = tmp_path / "cluster.yaml"
    cl.write_text(cluster)
    proc = subprocess.run(
        [*cli.BUILD_PY, "preflight", "--print", recipe, "--cluster", str(cl), "--lock", str(lock)]
        + ["--image", IMAGE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _read(container, path: str) -> str:
    proc = subprocess.run(
        ["docker", "exec", container.name, "cat", path], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


RUN_DIR = "/tmp/h5-out"  # output_dir of the mpirun clusters below: the run folder is RUN_DIR/efa-preflight


def _host_side(text: str, pair) -> str:
    """Do what the printed mpirun recipe's comments say happens outside the image, with the edits this machine
    forces, each named: step 0 (the run's key and the hostfile copy) runs as printed in the first container;
    the shared file system is a copy of the run folder into the second (no shared mount between these
    already-running containers); the read-only key mount is a symlink at the mount point; the worker's
    command is the printed `docker run`'s, after the image, started with `docker exec -d` (the containers
    exist already). Returns the run folder."""
    a, b = pair
    lines = text.splitlines()
    step0 = lines[
        lines.index(next(x for x in lines if x.startswith("# 0."))) + 2 : lines.index(
            next(x for x in lines if x.startswith("# 1."))
        )
    ]
    for line in step0:
        words = shlex.split(line.lstrip("#").strip())
        proc = _exec(a, words)
        assert proc.returncode == 0, (words, proc.stderr)
    run_line = shlex.split(
        lines[lines.index(next(x for x in lines if x.startswith("# 1."))) + 1].lstrip("# ")
    )
    mounts = [run_line[i + 1] for i, w in enumerate(run_line) if w == "--mount"]
    run = mounts[0].split("source=")[1].split(",")[0]
    key_dir = mounts[1].split("target=")[1].split(",")[0]
    copy = subprocess.run(
        "docker exec %s tar -C / -cf - %s | docker exec -i %s tar -C / -xf -"
        % (a.name, run.lstrip("/"), b.name),
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert copy.returncode == 0, copy.stderr
    sshd = run_line[run_line.index(IMAGE) + 1 :]
    for c in pair:
        link = _exec(c, ["sh", "-c", "rm -rf %s && ln -s %s/ssh %s" % (key_dir, run, key_dir)])
        assert link.returncode == 0, link.stderr
        started = subprocess.run(
            ["docker", "exec", "-d", c.name] + sshd, capture_output=True, text=True, timeout=30
        )
        assert started.returncode == 0, started.stderr
    for c in pair:  # bounded: each sshd answers on the recipe's port within seconds
        for _ in range(30):
            if "ssh-" in _exec(c, ["ssh-keyscan", "-T", "2", "-p", "2222", "127.0.0.1"]).stdout:
                break
            time.sleep(1)
        else:
            raise AssertionError("no sshd on port 2222 in %s" % c.name)
    return run


@pytest.fixture(scope="module")
def slurm_two_nodes(docker_client, launcher_image):  # noqa: F811 - the fixture imported above
    with slurm_started(docker_client, launcher_image, "h5-sbatch", "2") as c:
        _prepare(c)
        yield c


def test_printed_mpirun_line_runs_across_two_containers(tmp_path, ssh_pair):  # noqa: F811
    a, b = ssh_pair
    for c in ssh_pair:
        _prepare(c)
    text = _print_recipe(
        tmp_path,
        "mpirun",
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\nhosts: [%s, %s]\n"
        "timeout: 120\nidle_timeout: 60\noutput_dir: %s\n" % (a.name, b.name, RUN_DIR),
    )
    # the host side first, as comments (it runs on each host, outside the image), then the launch line
    *workers, line = text.strip().split("\n")
    run = shlex.split(next(w for w in workers if w.startswith("#    docker run")).lstrip("# "))
    assert run[:2] == ["docker", "run"] and run[run.index("--network") + 1] == "host" and IMAGE in run
    assert "--allow-run-as-root" in line and "--mca btl tcp,self" in line
    folder = _host_side(text, ssh_pair)  # the run's key, and sshd on 2222 trusting it alone, in both
    proc = subprocess.run(  # the printed text as a whole: the comments are inert, the line launches
        ["docker", "exec", "-w", "/", a.name, "sh", "-c", text],
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads(_read(a, folder + "/preflight-report.json"))  # where the recipe says, not the cwd
    assert report["run"]["exit_code"] == 0, proc.stderr[-3000:]
    # bound to the digest; a replay proves nothing about any image, so it names none and clears no gate
    from imagebuild.release import record as rel

    assert shlex.split(line)[shlex.split(line).index("--image") + 1] == IMAGE
    assert report["replay"] is True and "image" not in report
    assert not rel.preflight_names(report, IMAGE.rpartition("@")[2], None)
    assert "REPLAY" in rel.preflight_refusal(report)
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1, 2, 3}
    assert report["ranks_seen"] == 16 and report["nodes_seen"] == 2  # the recorded job, replayed by 4 ranks
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]
    assert proc.returncode == 0


def test_printed_mpirun_line_runs_the_torch_probe_across_two_containers(tmp_path, ssh_pair):  # noqa: F811
    """An image without nccl-tests (a DLC extension): the recipe runs efa_validators.probe_torch under
    mpirun, the
    rank from OMPI_COMM_WORLD_*, rank 0's host from -x MASTER_ADDR. Real torch (the tests' own CPU build, seen
    through the /src mount), gloo between the containers: nothing about EFA is proven, so never a pass."""
    import torch

    site = (
        Path(torch.__file__).resolve().parents[1].relative_to(ROOT)
    )  # the venv the tests run in, under /src
    a, b = ssh_pair
    for c in ssh_pair:
        _prepare(c)
        pth = _exec(
            c, ["sh", "-c", "echo /src/%s > /usr/lib/python3/dist-packages/zz-tests-torch.pth" % site]
        )
        assert pth.returncode == 0, pth.stderr
    lock = {
        "name": "h5-torch",
        "python": "/usr/bin/python3",
        "components": {"torch": {"version": torch.__version__}, "openmpi": {"prefix": "/usr"}},
        "env": [],
    }
    text = _print_recipe(
        tmp_path,
        "mpirun",
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\nhosts: [%s, %s]\noutput_dir: %s\n"
        "timeout: 120\nidle_timeout: 60\ntest_args: '--max-bytes 64K --iters 2'\n"
        % (a.name, b.name, RUN_DIR),
        lock,
    )
    folder = _host_side(text, ssh_pair)
    words = shlex.split(text.strip().split("\n")[-1])
    assert "MASTER_ADDR=%s" % a.name in words and words[-8:-6] == ["-m", "efa_validators.probe_torch"]
    proc = subprocess.run(
        ["docker", "exec", "-w", "/", a.name, "sh", "-c", text],
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = json.loads(_read(a, folder + "/preflight-report.json"))
    assert report["run"]["exit_code"] == 0, proc.stderr[-3000:]
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1, 2, 3}  # ranks 2, 3 started on b
    rows = report["nccl_tests"]["rows"]
    assert rows and rows[-1]["size"] == 65536  # rank 0's table, parsed
    assert report["verdict"] == "unknown" and proc.returncode == 3


def test_printed_sbatch_script_runs_on_two_slurm_nodes(tmp_path, slurm_two_nodes):
    text = _print_recipe(
        tmp_path,
        "sbatch",
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\n"
        "container_image: localhost:5000/h5/img:1\ntimeout: 120\nidle_timeout: 60\n",
    )
    lines = text.splitlines()
    container = [i for i, line in enumerate(lines) if line.startswith("CONTAINER=(")]
    # pyxis pulls the digest the report names, not the cluster file's tag
    assert (
        len(container) == 1
        and "--container-image=localhost:5000#h5/img:sha256:" + "d" * 64 in lines[container[0]]
    )
    lines[container[0]] = "CONTAINER=()"  # the documented substitution: no pyxis, already in the image
    job = "/tmp/h5-job"
    proc = subprocess.run(
        [
            "docker",
            "exec",
            "-i",
            slurm_two_nodes.name,
            "sh",
            "-c",
            "mkdir -p %s && cat > %s/p.sbatch" % (job, job),
        ],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    run = _exec(slurm_two_nodes, ["sbatch", "--wait", "--parsable", "--chdir", job, job + "/p.sbatch"], 240)
    job_id = run.stdout.strip().split(";")[0]
    out = _read(slurm_two_nodes, "%s/efa-preflight-%s.out" % (job, job_id))
    assert run.returncode == 0, out[-3000:]
    report = json.loads(_read(slurm_two_nodes, "%s/preflight-%s/report.json" % (job, job_id)))
    assert report["ranks_seen"] == 16 and report["nodes_seen"] == 2
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]
    logs = _exec(slurm_two_nodes, ["sh", "-c", "ls %s/preflight-%s" % (job, job_id)]).stdout.split()
    assert sorted(n for n in logs if n.startswith("rank-")) == ["rank-%d.log" % r for r in range(4)]
    assert "verdict exit 0" in out


def test_printed_sbatch_script_runs_the_torch_probe_on_two_slurm_nodes(tmp_path, slurm_two_nodes):
    """The same probe under srun: the rank from SLURM_PROCID/SLURM_NTASKS, rank 0's host from the allocation's
    first node (`scontrol show hostnames`); this test Slurm's node names point at its loopback."""
    import torch

    site = Path(torch.__file__).resolve().parents[1].relative_to(ROOT)
    c = slurm_two_nodes
    setup = "echo /src/%s > /usr/lib/python3/dist-packages/zz-tests-torch.pth && " % site
    setup += "grep -q ' node1 ' /etc/hosts || echo '127.0.0.1 node1 node2 ' >> /etc/hosts"
    assert _exec(c, ["sh", "-c", setup]).returncode == 0
    lock = {"name": "h5-torch", "python": "/usr/bin/python3", "env": [],
            "components": {"torch": {"version": torch.__version__}}}  # fmt: skip
    text = _print_recipe(
        tmp_path,
        "sbatch",
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\ncontainer_image: localhost:5000/h5/img:1\n"
        "timeout: 120\nidle_timeout: 60\ntest_args: '--max-bytes 64K --iters 2'\nname: h5-torch\n",
        lock,
    )
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in text
    lines = ["CONTAINER=()" if line.startswith("CONTAINER=(") else line for line in text.splitlines()]
    job = "/tmp/h5-torch-job"
    write = ["docker", "exec", "-i", c.name, "sh", "-c", "mkdir -p %s && cat > %s/p.sbatch" % (job, job)]
    put = subprocess.run(write, input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=30)
    assert put.returncode == 0, put.stderr
    run = _exec(c, ["sbatch", "--wait", "--parsable", "--chdir", job, job + "/p.sbatch"], 240)
    job_id = run.stdout.strip().split(";")[0]
    out = _read(c, "%s/h5-torch-%s.out" % (job, job_id))
    report = json.loads(_read(c, "%s/preflight-%s/report.json" % (job, job_id)))
    rows = (report.get("nccl_tests") or {}).get("rows") or []
    assert rows and rows[-1]["size"] == 65536, out[-3000:]  # rank 0's table, from its kept log
    assert report["verdict"] == "unknown" and "verdict exit 3" in out  # gloo: nothing about EFA proven
    logs = _exec(c, ["sh", "-c", "ls %s/preflight-%s" % (job, job_id)]).stdout.split()
    assert sorted(n for n in logs if n.startswith("rank-")) == ["rank-%d.log" % r for r in range(4)]


def test_sagemaker_mpi_probe_runs_nccl_tests_across_two_instances_with_its_own_key(tmp_path, ssh_pair):  # noqa: F811
    """`--probe nccl-tests-mpi` as each SageMaker instance runs it: the same command on both, each role from
    its resourceconfig.json; the first host's validator wraps the mpirun that efa_validators.run.sm_mpi
    becomes, the other serves ssh until Open MPI's daemon has come and gone. Only the job's key pair (from
    the channel folder, IdentitiesOnly) can log in, so ranks on b prove the key path."""
    from imagebuild.preflight import sagemaker as smk

    a, b = ssh_pair
    key = tmp_path / "id_ed25519"
    made = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], capture_output=True
    )
    assert made.returncode == 0, made.stderr
    for c in ssh_pair:
        _prepare(c)
        config = json.dumps({"current_host": c.name, "hosts": [b.name, a.name]})
        pub = key.with_suffix(".pub").read_text()
        for name, text in (("id_ed25519", key.read_text()), ("id_ed25519.pub", pub), ("../rc.json", config)):
            path = "%s/%s" % (smk.SSH_DIR, name)
            put = subprocess.run(
                ["docker", "exec", "-i", c.name, "sh", "-c", 'mkdir -p "${1%/*}" && cat > "$1"', "-", path],
                input=text, text=True, capture_output=True, timeout=30,
            )  # fmt: skip
            assert put.returncode == 0, put.stderr
    words = shlex.split(smk.PROBES["nccl-tests-mpi"].replace("{gpus}", "2"))
    here = ["--port", "22", "--wait", "60", "--resource-config", smk.SSH_DIR + "/../rc.json"]
    words = words[:3] + here + words[3:]  # port 22: the test image's sshd; the config SageMaker would write
    words[words.index("all_reduce_perf")] = STAND_IN + "/bin/all_reduce_perf"
    validator = ["python3", "-m", "efa_validators", "run", "--instance-type", "p5.48xlarge", "--nodes", "2",
                 "--timeout", "120", "--exit-by", "command", "--json", "/tmp/sm-report.json",
                 "--"]  # fmt: skip
    worker = subprocess.Popen(
        ["docker", "exec", "-w", "/tmp", b.name, *validator, *words], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    first = subprocess.run(
        ["docker", "exec", "-w", "/tmp", a.name, *validator, *words],
        capture_output=True,
        text=True,
        timeout=180,
    )
    out, _ = worker.communicate(timeout=120)
    assert "serves ssh" in out and worker.returncode == 0, out[-3000:] + first.stdout[-3000:]
    report = json.loads(_read(a, "/tmp/sm-report.json"))
    assert report["run"]["exit_code"] == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1, 2, 3}  # ranks 2, 3 started on b
    assert "efa_preflight_id_ed25519" in first.stdout + first.stderr  # mpirun went with the job's key


def _submit(container, job: str, text: str) -> tuple:
    lines = [("CONTAINER=()" if line.startswith("CONTAINER=(") else line) for line in text.splitlines()]
    put = subprocess.run(
        ["docker", "exec", "-i", container.name, "sh", "-c", "mkdir -p %s && cat > %s/p.sbatch" % (job, job)],
        input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=30,
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    run = _exec(container, ["sbatch", "--wait", "--parsable", "--chdir", job, job + "/p.sbatch"], 240)
    job_id = run.stdout.strip().split(";")[0]
    assert job_id, run.stderr[-2000:]  # sbatch refused the script
    return run, job_id, _read(container, "%s/efa-preflight-gb200-%s.out" % (job, job_id))


def test_printed_gb200_sbatch_script_needs_the_jobs_imex_channel_on_a_real_slurm(tmp_path, slurm_two_nodes):
    """GB200 with `imex: true`: on a node where Slurm gave the job no IMEX channel the script stops before any
    step (exit 2, saying why); with a channel (here a stand-in file where switch/nvidia_imex puts the device)
    both steps run with NCCL_MNNVL_ENABLE=1."""
    text = _print_recipe(
        tmp_path,
        "sbatch",
        "nodes: 2\ninstance_type: p6e-gb200.36xlarge\nefa_devices: 4\ngpus_per_node: 2\nimex: true\n"
        "name: efa-preflight-gb200\ncontainer_image: localhost:5000/h5/img:1\n"
        "timeout: 120\nidle_timeout: 60\nnvlink_domain_nodes: 18\n",
    )
    assert "/dev/nvidia-caps-imex-channels:/dev/nvidia-caps-imex-channels" in text
    assert "#SBATCH --segment=2" in text.splitlines()  # one NVLink domain: the whole job one segment
    # the second named substitution: the test Slurm (Debian's 22.05) predates --segment (sbatch.1 has it from
    # slurm-24-05-0-1; switch/nvidia_imex, which imex: true names, needs 24.11), so that line goes here
    text = "\n".join(x for x in text.splitlines() if not x.startswith("#SBATCH --segment=")) + "\n"
    c = slurm_two_nodes
    run, job_id, out = _submit(c, "/tmp/h5-imex-none", text)
    assert run.returncode != 0 and "no IMEX channel" in out and "ranks exit" not in out
    made = _exec(
        c,
        [
            "sh",
            "-c",
            "mkdir -p /dev/nvidia-caps-imex-channels && : > /dev/nvidia-caps-imex-channels/channel1",
        ],
    )
    assert made.returncode == 0, made.stderr
    try:
        run, job_id, out = _submit(c, "/tmp/h5-imex", text)
        assert "ranks exit 0" in out, out[-3000:]
        logs = _exec(c, ["sh", "-c", "ls /tmp/h5-imex/preflight-%s" % job_id]).stdout.split()
        assert sorted(n for n in logs if n.startswith("rank-")) == ["rank-%d.log" % r for r in range(4)]
        env = _exec(c, ["sh", "-c", "grep -l NCCL_MNNVL_ENABLE /tmp/h5-imex/p.sbatch"])
        assert env.returncode == 0
    finally:
        _exec(c, ["rm", "-rf", "/dev/nvidia-caps-imex-channels"])
