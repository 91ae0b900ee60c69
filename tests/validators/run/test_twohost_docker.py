"""The printed mpirun recipe run across two containers of an image this project builds (issue 40 item 1, the
mpirun part): matrix.local.yaml's local-dlc-layout-extend, with its own sshd (efa-sshd) and Open MPI, no
fixture image and no key baked anywhere.

Two containers on a network of their own (each its own network namespace and host name), started by the
printed `docker run` line with only these edits, each named where it is made:
- no `--gpus all` and no `--device /dev/infiniband/uverbsN`: this machine has neither GPU nor EFA device;
- no `--ulimit memlock=-1:-1`: this machine's engine may not raise the locked-memory limit (EFA needs it;
  nothing here registers memory);
- `--network <the test's network> --hostname hN` for `--network host`: two "hosts" on one machine;
- `--name` unique per test, and the image by its local tag for the digest the recipe names (no registry here);
- the replay stand-in mounted where the lock says the GPU binary is (the lock given to `--print` names that
  prefix for nccl_tests: the image has no nccl-tests), and the recorded log it replays mounted read-only.
Step 0 (the run's key) runs as printed on this host, in a folder both containers mount: a real shared
folder. The launch line then runs as printed in the first container, and the report is read from where the
recipe says it is. Runs that leave out the key's mount, mpirun's ssh options or the run folder's mount fail:
ssh to the second host is refused, or the report is not where the recipe says."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from paths import ROOT
from twohost import docker as _docker
from twohost import image_lock, print_recipe

pytestmark = pytest.mark.docker
pytest_plugins = ["twohost_fixtures"]  # fixture: dlc_extend_image

STAND_IN = "/opt/h-twohost-replay"  # the prefix the lock names for nccl_tests: the stand-in goes there
IMAGE = "localhost:5000/h-twohost/img@sha256:" + "d" * 64  # the digest the printed recipe binds its report to
REPLAY = ROOT / "tests" / "fixtures" / "replay"


def _recipe(tmp_path: Path, image: str, out: Path) -> str:
    lock = image_lock(image)
    assert lock["components"]["openssh"]["method"] == "apt"  # the image's own sshd, efa-sshd
    # the named edit of the lock: the GPU binary's place is the stand-in's (the image has no nccl-tests)
    lock["components"]["nccl_tests"] = {"prefix": STAND_IN}
    cluster = (
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\nhosts: [h1, h2]\n"
        "timeout: 120\nidle_timeout: 60\noutput_dir: %s\n" % out
    )
    return print_recipe("mpirun", tmp_path, lock, cluster, IMAGE)


def _run_line(text: str) -> list:
    lines = text.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("# 1."))) + 1
    return shlex.split(lines[at].lstrip("#").strip())


def _edit(run: list, image: str, name: str, host: str, net: str, stand_in: Path) -> list:
    """The printed `docker run` with the edits this machine forces (module docstring), each one here."""
    out, i = [], 0
    while i < len(run):
        w = run[i]
        if w == "--gpus" or w == "--device":  # no GPU, no EFA device on this machine
            i += 2
            continue
        if w == "--ulimit" and run[i + 1].startswith("memlock="):  # this engine may not raise memlock
            i += 2
            continue
        if w == "--network":  # two hosts on one machine: a network of their own, a host name each
            out += ["--network", net, "--hostname", host]
            i += 2
            continue
        if w == "--name":
            out += ["--name", name]
            i += 2
            continue
        out.append(image if w == IMAGE else w)  # the local tag for the digest (no registry here)
        i += 1
    at = out.index(image)
    out[at:at] = [
        "--mount",
        "type=bind,source=%s,target=%s/bin/all_reduce_perf,readonly" % (stand_in, STAND_IN),
        "--mount",
        "type=bind,source=%s,target=/replay,readonly" % REPLAY,
    ]
    return out


def _run_folder(run: list) -> str:
    mount = next(run[i + 1] for i, w in enumerate(run) if w == "--mount" and "readonly" not in run[i + 1])
    return mount.split("target=")[1]


def _wait_sshd(name: str) -> None:
    for _ in range(30):  # bounded: sshd is up within seconds
        scan = _docker("exec", name, "ssh-keyscan", "-T", "2", "-p", "2222", "127.0.0.1", check=False)
        if "ssh-" in scan.stdout:
            return
        time.sleep(1)
    raise AssertionError(
        "no sshd on 2222 in %s: %s" % (name, _docker("logs", name, check=False).stderr[-2000:])
    )


def _two_hosts(text: str, image: str, tmp_path: Path, drop: str = ""):
    tag = uuid.uuid4().hex[:8]
    net = "h-twohost-net-%s" % tag
    names = ["h-twohost-%s-%s" % (h, tag) for h in ("h1", "h2")]
    stand_in = tmp_path / "all_reduce_perf"
    stand_in.write_text(
        "#!/bin/sh\n# stand-in for the GPU binary: replays a recorded nccl-tests log (arguments ignored)\n"
        "exec python3 -m efa_validators.replay --rank-filter /replay/good-efa-p5-2node.log\n"
    )
    stand_in.chmod(0o755)
    run = _run_line(text)
    if drop in ("key-mount", "run-mount"):  # one mount of the printed docker run left out
        want = "/etc/efa-preflight-ssh" if drop == "key-mount" else ",target=%s" % _run_folder(run)
        at = next(i for i, w in enumerate(run) if w == "--mount" and want in run[i + 1])
        del run[at : at + 2]
    if drop == "rsh-args":  # the launch line's ssh options (the run's key, the sshd port) left out
        *head, line = text.rstrip("\n").split("\n")
        words = shlex.split(line)
        at = words.index("plm_rsh_args")
        del words[at - 1 : at + 2]
        text = "\n".join(head + [shlex.join(words)]) + "\n"
    _docker("network", "create", net)
    try:
        for name, host in zip(names, ("h1", "h2")):
            _docker(*_edit(run, image, name, host, net, stand_in)[1:])
        for name in names:
            _wait_sshd(name)
        proc = subprocess.run(  # the printed text as a whole, as printed: comments inert, the line launches
            ["docker", "exec", "-w", "/", names[0], "sh", "-c", text],
            capture_output=True,
            text=True,
            timeout=240,
        )
        return proc
    finally:
        for name in names:
            _docker("rm", "--force", name, check=False)
        _docker("network", "rm", net, check=False)


def _step0(text: str) -> None:
    """Step 0 as printed, on this host (the first host): the run's key in the shared folder."""
    lines = text.splitlines()
    start = lines.index(next(x for x in lines if x.startswith("# 0."))) + 2
    end = lines.index(next(x for x in lines if x.startswith("# 1.")))
    for line in lines[start:end]:
        words = shlex.split(line.lstrip("#").strip())
        proc = subprocess.run(words, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (words, proc.stderr)


def test_the_printed_mpirun_recipe_runs_across_two_containers_of_the_projects_image(
    dlc_extend_image, tmp_path
):
    out = tmp_path / "shared"
    text = _recipe(tmp_path, dlc_extend_image, out)
    _step0(text)
    run = out / "efa-preflight"
    assert (run / "ssh" / "id_ed25519").is_file() and (run / "ssh" / "authorized_keys").is_file()
    # no key of any kind in the image: no user key, no host key (efa-sshd makes those at start)
    listing = "ls /root/.ssh/id_* /etc/ssh/ssh_host_* 2>/dev/null; true"
    keys = _docker("run", "--rm", "--entrypoint", "sh", dlc_extend_image, "-c", listing)
    assert keys.stdout.strip() == "", keys.stdout
    proc = _two_hosts(text, dlc_extend_image, tmp_path)
    report = json.loads((run / "preflight-report.json").read_text())  # where the recipe says it is
    assert report["run"]["exit_code"] == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert {r["rank"] for r in report["run"]["rank_output"]} >= {0, 1, 2, 3}  # ranks 2, 3 started on h2
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]
    assert proc.returncode == 0


@pytest.mark.parametrize("drop", ["key-mount", "rsh-args", "run-mount"])
def test_a_printed_line_without_its_key_mount_ssh_options_or_run_folder_fails(
    dlc_extend_image, tmp_path, drop
):
    """Each piece is needed: without the key's mount or mpirun's ssh options the launcher cannot reach the
    second host's sshd; without the run folder's mount the report is not where the recipe says."""
    out = tmp_path / "shared"
    text = _recipe(tmp_path, dlc_extend_image, out)
    _step0(text)
    proc = _two_hosts(text, dlc_extend_image, tmp_path, drop=drop)
    report = out / "efa-preflight" / "preflight-report.json"
    if drop == "run-mount":
        assert not report.exists(), proc.stdout[-2000:]
        return
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and ("Permission denied" in said or "Connection refused" in said), said[
        -3000:
    ]
    assert not report.exists() or json.loads(report.read_text())["verdict"] != "pass"
