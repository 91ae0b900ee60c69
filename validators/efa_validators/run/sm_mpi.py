"""nccl-tests across the instances of a SageMaker training job, under mpirun, without torch.

Why: SageMaker starts the same container with the same arguments on every instance, so one `all_reduce_perf`
per instance tests NVLink only, never EFA. SageMaker's own MPI distribution runs one mpirun on the first host
over ssh to the others (aws/sagemaker-training-toolkit src/sagemaker_training/mpi.py, commit 018dbf74:
MasterRunner starts sshd, waits until every worker's sshd accepts, runs `mpirun --host h1:N,h2:N ...`;
WorkerRunner starts sshd, waits for Open MPI's `orted` to appear and end). This does the same, each role
from SageMaker's resourceconfig.json (run/sagemaker_env.py):

  python3 -m efa_validators.run.sm_mpi --ssh-dir DIR --slots N [--port P] -- mpirun [flags] PROGRAM [args]

The key pair comes from DIR (a training input channel the host side fills for this job only; no key is
baked into any image). The first host adds `-np`, `-H` and ssh options to the mpirun words and becomes that
mpirun (exec: the validator wrapping this sees mpirun as its child); every other host serves ssh until the
first host's Open MPI daemon on it has come and gone. Exit codes: the first host mpirun's; others 0 once
the daemon ended, 1 when none came within --wait, 2 for bad input.
"""

import argparse
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from efa_validators.run import sagemaker_env

PORT = 2222  # the images' sshd (imagebuild/components/openssh.py PORT), as mpi-operator's
START = "/usr/local/sbin/efa-sshd"  # the images' sshd start script (host keys, then sshd -De)
SSHD = "/usr/sbin/sshd"
KEY = "id_ed25519"
# Open MPI's per-host daemon: orted (4.x), prted (5.x, PRRTE)
DAEMONS = ("orted", "prted")


def _fail(msg: str, code: int = 2) -> int:
    print("sm_mpi: " + msg, file=sys.stderr, flush=True)
    return code


def install_key(ssh_dir: str, home: str) -> str:
    """Copy the job's key into ~/.ssh (0600) and authorize its public half; the private key's path."""
    src, pub = os.path.join(ssh_dir, KEY), os.path.join(ssh_dir, KEY + ".pub")
    for path in (src, pub):
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 16384:
            raise ValueError("%s: missing, a link, not a file or too large (the job's ssh channel)" % path)
    dot = os.path.join(home, ".ssh")
    os.makedirs(dot, mode=0o700, exist_ok=True)
    os.chmod(dot, 0o700)
    key = os.path.join(dot, "efa_preflight_" + KEY)
    shutil.copyfile(src, key)
    os.chmod(key, 0o600)
    with open(pub, encoding="ascii") as fh:
        line = fh.read().strip()
    auth = os.path.join(dot, "authorized_keys")
    with open(auth, "a", encoding="ascii") as fh:
        fh.write(line + "\n")
    os.chmod(auth, 0o600)
    return key


def accepts(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def base_sshd_line(port: int, options: Sequence[str] = ()) -> str:
    """The shell line that starts a base's own sshd (no START in the image) in a container: host keys made
    first where absent (`ssh-keygen -A` makes each missing type: the Amazon Linux 2023 DLC's EFA script
    installs openssh-server and nothing makes its keys, aws/deep-learning-containers@e0ecedea), then
    `sshd -De` on `port` with StrictModes off (kubeflow/mpi-operator build/base/Dockerfile caa3c47). The keys
    live in this container, never in an image layer. The printed MPIJob and mpirun recipes run the same
    line (imagebuild/components/openssh.py); `options` are more `-o` settings (a recipe's key file)."""
    extra = "".join(" -o " + shlex.quote(o) for o in options)
    return "mkdir -p /var/run/sshd && ssh-keygen -A >/dev/null && exec %s -De -p %d -o StrictModes=no%s" % (
        SSHD,
        int(port),
        extra,
    )


def sshd_argv(port: int, start_ok: bool) -> List[str]:
    """This host's sshd: the image's START where it has one (on its port), else a base's sshd (pure)."""
    if start_ok:
        return [START] + ([] if port == PORT else ["-p", str(port)])
    return ["/bin/sh", "-c", base_sshd_line(port)]


def start_sshd(port: int) -> Optional[subprocess.Popen]:
    """This host's sshd, unless one already listens on the port (a base that starts its own)."""
    if accepts("127.0.0.1", port):
        return None
    return subprocess.Popen(sshd_argv(port, os.access(START, os.X_OK)))


def daemons_running(proc: str = "/proc") -> bool:
    for pid in os.listdir(proc):
        if pid.isdigit():
            try:
                with open(os.path.join(proc, pid, "comm"), encoding="utf-8", errors="replace") as fh:
                    if fh.read().strip() in DAEMONS:
                        return True
            except OSError:
                continue
    return False


def launch_argv(mpirun: List[str], vals: Dict[str, str], slots: int, key: str, port: int) -> List[str]:
    """The mpirun words with this job's hosts and ssh options inserted after the program name (pure)."""
    hosts = vals["sm_hosts"].split(",")
    rsh = "-p %d -i %s -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null" % (
        port,
        key,
    )
    extra = ["-np", str(slots * len(hosts)), "-H", ",".join("%s:%d" % (h, slots) for h in hosts)]
    extra += ["--mca", "plm_rsh_args", rsh]
    if vals.get("sm_ifname"):  # SageMaker names the interface between instances (as its MPI runner uses)
        extra += [
            "--mca",
            "btl_tcp_if_include",
            vals["sm_ifname"],
            "--mca",
            "oob_tcp_if_include",
            vals["sm_ifname"],
        ]
    return mpirun[:1] + extra + mpirun[1:]


def _wait(cond, seconds: float, step: float = 1.0) -> bool:
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() >= end:
            return False
        time.sleep(step)
    return True


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m efa_validators.run.sm_mpi", description=__doc__.split("\n")[0]
    )
    p.add_argument("--ssh-dir", required=True, help="folder with id_ed25519 and id_ed25519.pub for this job")
    p.add_argument("--slots", type=int, required=True, help="ranks per host (its GPUs)")
    p.add_argument("--port", type=int, default=PORT, help="sshd port on every host (default %d)" % PORT)
    p.add_argument("--wait", type=float, default=900.0, help="seconds to wait for the other hosts")
    p.add_argument("--resource-config", default=sagemaker_env.RESOURCE_CONFIG)
    p.add_argument("mpirun", nargs=argparse.REMAINDER, help="-- mpirun [flags] PROGRAM [args]")
    args = p.parse_args(argv)
    words = args.mpirun[1:] if args.mpirun[:1] == ["--"] else args.mpirun
    if not words or not 1 <= args.slots <= 1024 or not 0 < args.port < 65536 or not 0 < args.wait <= 86400:
        return _fail("need --slots 1..1024, a port, --wait 1..86400 and -- mpirun PROGRAM")
    try:
        vals = sagemaker_env.values(sagemaker_env.load(args.resource_config), args.resource_config)
        key = install_key(args.ssh_dir, os.path.expanduser("~"))
    except (sagemaker_env.ConfigError, ValueError, OSError) as err:
        return _fail(str(err))
    sshd = start_sshd(args.port)
    others = [h for h in vals["sm_hosts"].split(",") if h != vals["sm_current_host"]]
    if vals["sm_node_rank"] == "0":
        for host in others:
            if not _wait(lambda h=host: accepts(h, args.port), args.wait):
                return _fail("host %s: no sshd on port %d after %gs" % (host, args.port, args.wait), 1)
        # by absolute path Open MPI starts its daemons from the same prefix (ssh lacks the image's ENV)
        argv = launch_argv([shutil.which(words[0]) or words[0]] + words[1:], vals, args.slots, key, args.port)
        print("sm_mpi: first host, launching: %s" % " ".join(argv), flush=True)
        try:
            os.execvp(argv[0], argv)
        except OSError as err:
            return _fail("cannot start %s: %s" % (argv[0], err))
    print("sm_mpi: host %s serves ssh for %s" % (vals["sm_current_host"], vals["sm_master"]), flush=True)
    try:
        # polled often: on a short run the daemon may live well under a second
        if not _wait(daemons_running, args.wait, step=0.05):
            return _fail("no Open MPI daemon came from %s within %gs" % (vals["sm_master"], args.wait), 1)
        _wait(lambda: not daemons_running(), 86400.0)
        return 0
    finally:
        if sshd is not None:
            sshd.terminate()


if __name__ == "__main__":
    sys.exit(main())
