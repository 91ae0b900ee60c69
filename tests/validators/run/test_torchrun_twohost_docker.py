"""The printed torchrun script run across two containers of an image this project builds (issue 40 item 1, the
torchrun part): matrix.local.yaml's local-dlc-layout-extend, whose DLC-layout base holds torch (the CPU build,
imagebuild/building/dlcbase.py), so torch's own launcher and the probe run for real, nothing replayed: on CPU
the probe takes gloo (efa_validators/probe_torch.py), so the report proves the launch, the rendezvous across
the two hosts and where the files land, never EFA or GPUDirect.

The torchrun recipe is a script run inside the image on every node; it prints no `docker run`. The two
containers are started by the test on a network of their own (each its own network namespace and host name,
h1 and h2 as the cluster file's `hosts` names them), each with:
- the shared folder (a host folder) mounted at the cluster file's output_dir: the recipe's one demand on the
  nodes (every node sees $PREFLIGHT_OUT);
- the script as printed, mounted read-only at /preflight.sh: a person copies it to every node.
The only edit is of the lock given to `--print`: it names torch (`source: base`), which the base holds;
matrix.local.yaml does not record it, since the torch-nccl check of `build.py test` is unknown on a CPU build
(torch holds no NCCL of its own) and unknown never passes. The script then runs as printed: `NODE_RANK=0
/preflight.sh run` in h1 and `NODE_RANK=1 /preflight.sh run` in h2 at once, `/preflight.sh verdict` in h1.
Runs without the shared folder on node 1, or with the script's `--nnodes` left out, fail: node 1 refuses to
start, or each node runs alone and no report holds both nodes' ranks."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Dict, List

import pytest
from twohost import docker, image_lock, print_recipe

pytestmark = [pytest.mark.docker, pytest.mark.slow]
pytest_plugins = ["twohost_fixtures"]  # fixture: dlc_extend_image

IMAGE = (
    "localhost:5000/h-torchrun/img@sha256:" + "f" * 64
)  # the digest the printed script binds its report to
SHARED = "/shared"  # the cluster file's output_dir: a host folder both containers mount there
NAME = "h-torchrun"  # the cluster file's name: $PREFLIGHT_OUT is SHARED/NAME
HOSTS = ("h1", "h2")
RUN_TIMEOUT = 240  # seconds: a bounded wait on each node's `run` (the validator's own --timeout is 120)


def _script(tmp_path: Path, image: str) -> str:
    lock = image_lock(image)
    assert "torch" not in lock["components"]  # the edit below adds it (module docstring)
    lock["components"]["torch"] = {"version": "2.13.0", "source": "base", "method": "base"}
    cluster = (
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\nhosts: [h1, h2]\n"
        "timeout: 120\nidle_timeout: 60\noutput_dir: %s\nname: %s\n"
        "test_args: --max-bytes 1M\n" % (SHARED, NAME)  # a short sweep: gloo on two CPU cores
    )
    return print_recipe("torchrun", tmp_path, lock, cluster, IMAGE)


def _run_all(tmp_path: Path, image: str, text: str, drop: str = "") -> Dict[str, object]:
    """Both containers up, the script's `run` in each at once, `verdict` in h1; returns what each said."""
    shared = tmp_path / "shared"
    shared.mkdir()
    script = tmp_path / "preflight.sh"
    script.write_text(text)
    script.chmod(0o755)
    tag = uuid.uuid4().hex[:8]
    net = "h-torchrun-net-%s" % tag
    names = ["h-torchrun-%s-%s" % (h, tag) for h in HOSTS]
    docker("network", "create", net)
    try:
        for name, host in zip(names, HOSTS):
            argv: List[str] = ["run", "-d", "--init", "--name", name, "--network", net, "--hostname", host]
            if not (drop == "shared-mount" and host == "h2"):  # node 1 without the shared folder
                argv += ["--mount", "type=bind,source=%s,target=%s" % (shared, SHARED)]
            argv += ["--mount", "type=bind,source=%s,target=/preflight.sh,readonly" % script]
            docker(*argv, "--entrypoint", "sleep", image, "infinity")
        env = ["-e", "PREFLIGHT_SHARED_WAIT=10"] if drop == "shared-mount" else []  # the script's own knob
        runs = [
            subprocess.Popen(
                ["docker", "exec", *env, name, "sh", "-c", "NODE_RANK=%d /preflight.sh run" % rank],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for rank, name in enumerate(names)
        ]
        said: Dict[str, object] = {}
        for host, proc in zip(HOSTS, runs):
            if drop == "shared-mount" and host == "h1":
                continue  # node 0 waits on node 1 at the rendezvous: stopped with its container below
            out, _ = proc.communicate(timeout=RUN_TIMEOUT)
            said[host] = (proc.returncode, out)
        if drop != "shared-mount":
            verdict = docker("exec", names[0], "/preflight.sh", "verdict", check=False)
            said["verdict"] = (verdict.returncode, verdict.stdout + verdict.stderr)
        folder = shared / NAME  # $PREFLIGHT_OUT, read on the host before the cleanup removes it
        said["files"] = {p.name: p.read_text() for p in sorted(folder.iterdir())} if folder.is_dir() else {}
        return said
    finally:
        # the run's files are root's: removed from inside, so the host's tmp folder can go
        docker("exec", names[0], "rm", "-rf", "%s/%s" % (SHARED, NAME), check=False)
        for name in names:
            docker("rm", "--force", name, check=False)
        docker("network", "rm", net, check=False)
        for proc in locals().get("runs") or []:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def _probe_ranks(log: str) -> set:
    """(rank, host) from the probe's own first line of each rank: `# probe rank R of W on HOST, device D`."""
    out = set()
    for line in log.splitlines():
        words = line.split(":", 1)[-1].split()
        if words[:3] == ["#", "probe", "rank"] and len(words) >= 8:
            out.add((int(words[3]), int(words[5]), words[7].rstrip(",")))
    return out


def test_the_printed_torchrun_script_runs_across_two_containers_of_the_projects_image(
    dlc_extend_image, tmp_path
):
    text = _script(tmp_path, dlc_extend_image)
    assert "export PREFLIGHT_OUT=%s/%s" % (SHARED, NAME) in text
    assert '--nnodes 2 --node_rank "$NODE_RANK" --nproc_per_node 2 --master_addr h1' in text
    said = _run_all(tmp_path, dlc_extend_image, text)
    for host in HOSTS:
        rc, out = said[host]
        assert rc == 0, (host, out[-3000:])
    files = said["files"]
    assert sorted(files) == [".written-by-node-0", "node-0.log", "node-1.log", "report.json", "report.md"]
    # one job of 4 ranks over both hosts: torchrun's rendezvous at h1 joined them (rank, world, host)
    assert _probe_ranks(files["node-0.log"]) == {(0, 4, "h1"), (1, 4, "h1")}, files["node-0.log"][-2000:]
    assert _probe_ranks(files["node-1.log"]) == {(2, 4, "h2"), (3, 4, "h2")}, files["node-1.log"][-2000:]
    report = json.loads(files["report.json"])  # where the script says: $PREFLIGHT_OUT/report.json
    inputs = sorted(i["file"] for i in report["inputs"])
    assert inputs == ["%s/%s/node-%d.log" % (SHARED, NAME, n) for n in (0, 1)]  # both nodes' logs judged
    assert report["image"]["ref"] == IMAGE  # bound to the digest the script names
    assert report["nccl_tests"]["wrong"] == 0 and report["nccl_tests"]["max_bytes"] == 1 << 20
    # gloo on CPU: nothing crossed EFA and nothing says it did. EFA, GPUDirect, the world size (no NCCL
    # init line) are unknown, and unknown never passes: the verdict is unknown, exit 3
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["efa"] == checks["gdr"] == checks["ranks-seen"] == "unknown", checks
    assert report["efa"] is None and report["gdr"] is None
    assert report["verdict"] == "unknown" and said["verdict"][0] == 3, said["verdict"][1][-2000:]
    assert "**UNKNOWN**" in files["report.md"].splitlines()[0]
    assert "REPLAY" not in files["report.md"] and not report.get("replay")  # torch really ran


def test_a_node_without_the_shared_folder_refuses_to_start(dlc_extend_image, tmp_path):
    """Node 1 without the folder node 0 writes to: it waits for node 0's mark (PREFLIGHT_SHARED_WAIT, the
    script's knob, shortened to 10 s here), then refuses (exit 2) before any rank runs."""
    text = _script(tmp_path, dlc_extend_image)
    said = _run_all(tmp_path, dlc_extend_image, text, drop="shared-mount")
    rc, out = said["h2"]
    assert rc == 2 and "is not shared with node 0" in out, out[-3000:]
    assert "probe rank" not in out
    assert "report.json" not in said["files"] and "node-1.log" not in said["files"]


def test_a_printed_line_without_nnodes_makes_no_two_node_report(dlc_extend_image, tmp_path):
    """torchrun's `--nnodes 2` left out: it defaults to one node, so node 0 runs a job of its own two ranks
    and node 1's torchrun, asked for a node rank past the one node, fails at the rendezvous: no job spans
    both hosts, and the verdict over both logs fails."""
    text = _script(tmp_path, dlc_extend_image)
    assert text.count("torchrun --nnodes 2 ") == 1
    said = _run_all(tmp_path, dlc_extend_image, text.replace("torchrun --nnodes 2 ", "torchrun "))
    files = said["files"]
    assert _probe_ranks(files["node-0.log"]) == {(0, 2, "h1"), (1, 2, "h1")}, files["node-0.log"][-2000:]
    assert _probe_ranks(files["node-1.log"]) == set() and said["h2"][0] != 0, said["h2"][1][-2000:]
    assert json.loads(files["report.json"])["verdict"] == "fail" and said["verdict"][0] == 1
