"""The `mpirun` recipe: the worker side (`docker run` on every host, its sshd) and the launch line run in
the image on the first host, the validator around mpirun. The MPIJob launcher runs `mpirun_argv` too."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from imagebuild.components import openssh
from imagebuild.errors import UserError
from imagebuild.preflight import quoting
from imagebuild.preflight.launch import (
    MPI_MCA,
    PMIX_ENV,
    TCP_EXCLUDE,
    TORCH_PORT,
    TORCH_PROBE,
    master_host,
    mpirun_binary,
    nccl_env,
    need,
    probe,
    probe_argv,
    validator_argv,
    worker_sshd,
)


def mpirun_launch(lock: Dict[str, Any], cluster: Dict[str, Any], tcp_exclude: str = TCP_EXCLUDE) -> List[str]:
    """`mpirun ... all_reduce_perf ...` with the flags AWS uses with EFA, as a list of words."""
    ranks = cluster["nodes"] * cluster["gpus_per_node"]
    argv = [mpirun_binary(lock)]
    if cluster.get("run_as_root", True):
        argv.append("--allow-run-as-root")  # DLC scripts/docker/common/install_efa.sh wraps mpirun with it
    argv += ["-np", str(ranks), "-N", str(cluster["gpus_per_node"])]
    if cluster.get("hostfile"):
        argv += ["--hostfile", cluster["hostfile"]]
    elif cluster.get("hosts"):
        argv += ["-H", ",".join("%s:%d" % (h, cluster["gpus_per_node"]) for h in cluster["hosts"])]
    else:
        need(cluster, "hostfile", "mpirun")
    argv += ["--bind-to", "none", "--tag-output"] + MPI_MCA + ["--mca", "btl_tcp_if_exclude", tcp_exclude]
    # remote ranks start from ssh sessions that lack the image's ENV: PATH and LD_LIBRARY_PATH travel
    # (ADT kubernetes/nccl-tests.yaml `-x PATH -x LD_LIBRARY_PATH`)
    names = ["NCCL_DEBUG=INFO", "PATH", "LD_LIBRARY_PATH", "%s=%s" % PMIX_ENV] + list(
        cluster.get("_extra_env") or []
    )
    for name, value in nccl_env(lock):
        word = name if value is None else "%s=%s" % (name, value)
        if word not in names:
            names.append(word)
    if (
        probe(lock) == TORCH_PROBE
    ):  # probe_torch reads its rank from OMPI_COMM_WORLD_*, rank 0's host from here
        names += ["MASTER_ADDR=%s" % master_host(cluster, "mpirun"), "MASTER_PORT=%s" % TORCH_PORT]
    for word in names:
        argv += ["-x", word]
    return argv + probe_argv(lock, cluster)


def mpirun_argv(
    lock: Dict[str, Any],
    cluster: Dict[str, Any],
    tcp_exclude: str = TCP_EXCLUDE,
    report: Optional[str] = None,
) -> List[str]:
    """`python -m efa_validators run ... -- mpirun ...`: run in the image on the first node.

    `report` given (the MPIJob: its report volume) is that launcher's own. Left out, this is the mpirun
    recipe's line: every file it writes is an absolute path under the run's shared folder (`run_dir`), the
    hostfile is read from there, and ssh goes to the workers' sshd with this run's key (`RSH_ARGS`)."""
    if report is not None:
        return validator_argv(lock, cluster, ["--json", report, "--"]) + mpirun_launch(
            lock, cluster, tcp_exclude
        )
    run = run_dir(cluster)
    mp = dict(cluster)
    if cluster.get("hostfile"):
        mp["hostfile"] = run + "/" + HOSTFILE
    mp["_json_dir"] = run  # nccl-tests -J, a relative name: rank 0's host writes it, so the shared folder
    launch = mpirun_launch(lock, mp, tcp_exclude)
    at = launch.index("--bind-to")
    launch[at:at] = ["--mca", "plm_rsh_args", RSH_ARGS]
    return validator_argv(lock, mp, ["--json", run + "/" + REPORT_FILE, "--"]) + launch


# The mpirun recipe's run folder: `output_dir/<name>`, one folder every host sees (a shared file system).
# In it: this run's ssh key (made on the first host, mounted read-only into every container at KEY_MOUNT,
# never in an image: a key in an image is a credential every copy of it shares), a copy of the hostfile,
# the nccl-tests JSON (-J, written on rank 0's host) and the report. The workers' sshd trusts only that key
# (AuthorizedKeysFile), and mpirun's ssh uses it on the tool's sshd port (host networking: 22 is the host's
# own sshd), as efa_validators.run.sm_mpi does for SageMaker.
KEY_MOUNT = "/etc/efa-preflight-ssh"
KEY_FILE = "id_ed25519"
AUTHORIZED = "authorized_keys"
HOSTFILE = "hostfile"
REPORT_FILE = "preflight-report.json"
RSH_ARGS = (
    "-p %d -i %s/%s -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    % (
        openssh.PORT,
        KEY_MOUNT,
        KEY_FILE,
    )
)


def run_dir(cluster: Dict[str, Any]) -> str:
    """`output_dir/<name>`: the mpirun recipe's shared folder (required: key, -J and report live there)."""
    out = need(
        cluster,
        "output_dir",
        "mpirun (a folder every host sees: the run's ssh key, the hostfile, nccl-tests' JSON and the report)",
    )
    if '"' in out:  # docker reads --mount as one CSV record: a quote there is refused or misread
        raise UserError(
            "holds '\"', which docker's --mount (a CSV record) cannot take in a path",
            file=cluster.get("_file"),
            line=(cluster.get("_lines") or {}).get("output_dir"),
            key="output_dir",
        )
    return out.rstrip("/") + "/" + cluster["name"]


# What each host runs for the mpirun recipe (the worker side): the image with its sshd on openssh.PORT, the
# host's network (Open MPI and NCCL reach the other hosts directly), every EFA device, unlimited locked
# memory and a large /dev/shm. [awsome-distributed-training 1.architectures/3.aws-batch/
# 0.aws-batch-distributed-training-p5.yaml, commit 7217859f: Devices /dev/infiniband/uverbs0..N-1, Ulimits
# memlock -1, SharedMemorySize 49152 (MiB)]
WORKER_CONTAINER = "efa-preflight"
SHM_SIZE = "49152m"


def worker_docker_run(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """`docker run ...` that starts one host's side of the mpirun recipe, as a list of words: the run folder
    mounted where it is on the host (`--mount`, which refuses a source that is missing: a host that does not
    see the shared folder stops here), the run's key folder read-only at KEY_MOUNT, and sshd on
    openssh.PORT trusting that key alone."""
    image = need(cluster, "container_image", "mpirun (the image every host runs)")
    run = run_dir(cluster)
    argv = ["docker", "run", "--detach", "--rm", "--name", WORKER_CONTAINER, "--network", "host"]
    argv += ["--gpus", "all", "--ulimit", "memlock=-1:-1", "--shm-size", SHM_SIZE]
    for i in range(int(cluster["efa_devices"] or 0)):
        argv += ["--device", "/dev/infiniband/uverbs%d" % i]
    argv += ["--mount", "type=bind,source=%s,target=%s" % (run, run)]
    argv += ["--mount", "type=bind,source=%s/ssh,target=%s,readonly" % (run, KEY_MOUNT)]
    sshd = worker_sshd(lock, openssh.PORT, ("AuthorizedKeysFile=%s/%s" % (KEY_MOUNT, AUTHORIZED),))
    return argv + [image] + sshd


def run_setup(cluster: Dict[str, Any]) -> List[List[str]]:
    """What the first host runs once per run, outside the image, before the containers: the run folder, a
    fresh key pair in it (no passphrase, this run only), its public half as the workers' authorized key, and
    the hostfile copied in (the containers see the run folder, not the host's hostfile)."""
    run = run_dir(cluster)
    ssh = run + "/ssh"
    steps = [
        ["rm", "-rf", ssh],
        ["mkdir", "-p", "-m", "700", ssh],
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "efa-preflight", "-f", ssh + "/" + KEY_FILE],
        ["cp", ssh + "/" + KEY_FILE + ".pub", ssh + "/" + AUTHORIZED],
    ]
    if cluster.get("hostfile"):
        steps.append(["cp", cluster["hostfile"], run + "/" + HOSTFILE])
    return steps


def mpirun_line(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """The launch line alone, run in the image on the first host."""
    return quoting.words(mpirun_argv(lock, cluster))


def mpirun_recipe(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """The host side as comments (it runs outside the image: the run's key and hostfile on the first host,
    the container on every host, the key's removal afterwards), then the launch line."""
    run = run_dir(cluster)
    head = [
        quoting.comment(
            "0. on the first host, once per run (outside the image): this run's ssh key and the hostfile"
        ),
        quoting.comment("   in %s, a folder every host must see" % run),
    ]
    head += [quoting.comment("   " + quoting.words(step)) for step in run_setup(cluster)]
    head += [
        quoting.comment(
            "1. on every host (outside the image): the image, its sshd on port %d trusting that key"
            % openssh.PORT
        ),
        quoting.comment("   " + quoting.words(worker_docker_run(lock, cluster))),
        quoting.comment(
            "2. on the first host, in that container (docker exec -it %s bash); the report and"
            % WORKER_CONTAINER
        ),
        quoting.comment(
            "   nccl-tests' JSON land in %s. Afterwards, on that host: %s (the key goes with the run)"
            % (run, quoting.words(["rm", "-rf", run + "/ssh"]))
        ),
    ]
    return "\n".join(head + [mpirun_line(lock, cluster)]) + "\n"
