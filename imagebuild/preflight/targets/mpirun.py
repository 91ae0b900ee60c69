"""The `mpirun` recipe: the worker side (`docker run` on every host, its sshd) and the launch line run in
the image on the first host, the validator around mpirun. The MPIJob launcher runs `mpirun_argv` too."""

from __future__ import annotations

from typing import Any, Dict, List

from imagebuild.components import openssh
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
    report: str = "preflight-report.json",
) -> List[str]:
    """`python -m efa_validators run ... -- mpirun ...`: run in the image on the first node."""
    launch = mpirun_launch(lock, cluster, tcp_exclude)
    return validator_argv(lock, cluster, ["--json", report, "--"]) + launch


# What each host runs for the mpirun recipe (the worker side): the image with its sshd on openssh.PORT, the
# host's network (Open MPI and NCCL reach the other hosts directly), every EFA device, unlimited locked
# memory and a large /dev/shm. [awsome-distributed-training 1.architectures/3.aws-batch/
# 0.aws-batch-distributed-training-p5.yaml, commit 7217859f: Devices /dev/infiniband/uverbs0..N-1, Ulimits
# memlock -1, SharedMemorySize 49152 (MiB)]
WORKER_CONTAINER = "efa-preflight"
SHM_SIZE = "49152m"


def worker_docker_run(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """`docker run ...` that starts one host's side of the mpirun recipe, as a list of words."""
    image = need(cluster, "container_image", "mpirun (the image every host runs)")
    argv = ["docker", "run", "--detach", "--rm", "--name", WORKER_CONTAINER, "--network", "host"]
    argv += ["--gpus", "all", "--ulimit", "memlock=-1:-1", "--shm-size", SHM_SIZE]
    for i in range(int(cluster["efa_devices"] or 0)):
        argv += ["--device", "/dev/infiniband/uverbs%d" % i]
    return argv + [image] + worker_sshd(lock)


def mpirun_line(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """The launch line alone, run in the image on the first host."""
    return quoting.words(mpirun_argv(lock, cluster))


def mpirun_recipe(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """The worker side as comments (it runs outside the image, on every host), then the launch line."""
    head = [
        quoting.comment(
            "1. on every host (outside the image): the image, its sshd on port %d" % openssh.PORT
        ),
        quoting.comment("   " + quoting.words(worker_docker_run(lock, cluster))),
        quoting.comment(
            "2. on the first host, in that container (docker exec -it %s bash):" % WORKER_CONTAINER
        ),
    ]
    return "\n".join(head + [mpirun_line(lock, cluster)]) + "\n"
