"""What every pre-flight recipe shares: the program each rank runs (`probe_argv`), the validator around
it (`validator_argv`), the lock's NCCL/libfabric env (`nccl_env`), the MPI flags AWS uses with EFA, and
what a worker container runs (`worker_sshd`). Each target module (imagebuild/preflight/targets/) builds its
text from these; every value that enters a shell line goes through imagebuild/preflight/quoting.py."""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Tuple

from imagebuild.components import nccl_tests, openmpi, openssh, torch
from imagebuild.errors import UserError
from imagebuild.preflight import nccltests_flags, quoting

DEFAULT_TORCH_ARGS = (
    "--max-bytes 16G"  # efa_validators.probe_torch: sizes 8 B .. 16 GiB, as nccl-tests' default
)
# env NCCL and libfabric read: the lock's values for these travel with -x to every rank
NCCL_ENV_PREFIXES = ("NCCL_", "FI_", "RDMAV_", "LD_LIBRARY_PATH", "OFI_NCCL_", "CUDA_", "PATH")
# Open MPI between containers with EFA. pml: keep MPI's own traffic off libfabric and UCX (DLC
# test/efa/scripts/nccl_allreduce.sh `--mca pml ^cm`; awsome-distributed-training (ADT)
# micro-benchmarks/nccl-tests `--mca pml ^ucx`); btl tcp,self and the interfaces to leave out (same two
# files; `veth_def_agent` is the EKS one, ADT kubernetes/nccl-tests.yaml).
MPI_MCA = ["--mca", "pml", "^cm,ucx", "--mca", "btl", "tcp,self"]
TCP_EXCLUDE = "lo,docker0"
TCP_EXCLUDE_EKS = "lo,docker0,veth_def_agent"
# PMIx's shared-memory datastore errors in containers (ADT nccl-tests.Dockerfile `PMIX_MCA_gds=hash`,
# citing open-mpi/ompi#7516)
PMIX_ENV = ("PMIX_MCA_gds", "hash")


def need(cluster: Dict[str, Any], key: str, recipe: str) -> Any:
    if not cluster.get(key):
        raise UserError("the %s recipe needs this key" % recipe, file=cluster.get("_file"), line=1, key=key)
    return cluster[key]


def nccl_env(lock: Dict[str, Any]) -> List[Tuple[str, Optional[str]]]:
    """(name, value) for the lock's env that NCCL/libfabric read; value None where it refers to other
    variables (`${LD_LIBRARY_PATH:+...}`): then the rank gets the launcher's value, set by the image."""
    out = []
    for item in lock.get("env") or []:
        name, value = item.get("name"), item.get("value")
        if not name or not name.startswith(NCCL_ENV_PREFIXES):
            continue
        bad = quoting.why_not(str(name), "env_name") or quoting.why_not(str(value or ""), "word")
        if bad:  # printed after `export` and `-x`: a lock from anywhere is input too
            raise UserError("env %r: %s" % (name, bad), key="env")
        out.append((name, None if value is None or "$" in str(value) else str(value)))
    return out


def _prefix_bin(lock: Dict[str, Any], component: str, default: str, program: str) -> str:
    comp = (lock.get("components") or {}).get(component) or {}
    prefix = (comp.get("prefix") or default).rstrip("/")
    return "%s/bin/%s" % (prefix, program) if prefix else program


TORCH_PORT = "29500"  # MASTER_PORT of the torch probe (torchrun's default)
TORCH_PROBE = "probe_torch"  # probe(): efa_validators.probe_torch, the framework's own NCCL


def probe(lock: Dict[str, Any]) -> str:
    """What the pre-flight runs: nccl-tests where the image has them, else the torch all-reduce probe
    (efa_validators.probe_torch: the framework's own NCCL, as a training job loads it)."""
    comps = lock.get("components") or {}
    if comps.get(nccl_tests.NAME):
        return "nccl-tests"
    if comps.get(torch.NAME):
        return TORCH_PROBE
    raise UserError(
        f"variant {lock.get('name')!r} has neither nccl_tests nor torch: the pre-flight has nothing to run "
        f"({nccl_tests_binary(lock)} is not in its image)",
        key="components.nccl_tests",
        hint="choose a variant with nccl_tests or torch (`efa-image-build list` shows the components), "
        "or add "
        "nccl_tests to this variant in the matrix",
    )


def probe_argv(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """The program each rank runs."""
    if probe(lock) == TORCH_PROBE:
        nccl_only = sorted(nccltests_flags.KEYS & set(cluster))
        if nccl_only:
            raise UserError(
                f"{nccl_only[0]} is an nccl-tests flag; variant {lock.get('name')!r} runs the torch probe",
                file=cluster.get("_file"),
                line=(cluster.get("_lines") or {}).get(nccl_only[0]),
                key=nccl_only[0],
                hint="drop it (the torch probe takes test_args)",
            )
        python = lock.get("python") or "python3"
        args = shlex.split(cluster.get("test_args") or DEFAULT_TORCH_ARGS)
        return [python, "-m", "efa_validators.probe_torch"] + args + ["--timeout", str(cluster["timeout"])]
    return [nccl_tests_binary(lock)] + nccltests_flags.args(lock, cluster)


def master_host(cluster: Dict[str, Any], recipe: str) -> str:
    """Rank 0's host for torch.distributed's rendezvous: `master_addr`, else the first of `hosts`."""
    if cluster.get("master_addr"):
        return cluster["master_addr"]
    if cluster.get("hosts"):
        return cluster["hosts"][0]
    return need(cluster, "master_addr", recipe + " (the torch probe: rank 0's host)")


def nccl_tests_binary(lock: Dict[str, Any], collective: str = "all_reduce") -> str:
    return _prefix_bin(lock, nccl_tests.NAME, "/opt/nccl-tests", "%s_perf" % collective)


def mpirun_binary(lock: Dict[str, Any]) -> str:
    """The image's mpirun by absolute path: Open MPI then starts its remote daemons from the same prefix
    (`--prefix` implied), which ssh sessions in a container need, since they do not see the image's ENV."""
    return _prefix_bin(lock, openmpi.NAME, "", "mpirun")


def validator_argv(lock: Dict[str, Any], cluster: Dict[str, Any], extra: List[str]) -> List[str]:
    argv = [
        lock.get("python") or "python3",
        "-m",
        "efa_validators",
        "run",
        "--instance-type",
        cluster["instance_type"],
        "--nodes",
        str(cluster["nodes"]),
        "--timeout",
        str(cluster["timeout"]),
    ]
    if cluster.get("idle_timeout"):
        argv += ["--idle-timeout", str(cluster["idle_timeout"])]
    return argv + image_args(cluster) + extra


def image_args(cluster: Dict[str, Any]) -> List[str]:
    """`--image REF@sha256:D` where the recipe is bound to a digest (`bind_image`)."""
    return ["--image", cluster["_image"]] if cluster.get("_image") else []


# Instance types whose GPUs share one NVLink domain across nodes (multi-node NVLink, MNNVL): a job needs an
# IMEX channel (a DRA ComputeDomain claim on EKS), its workers on one NVLink clique, and NCCL told to use it.
# [aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml,
# commit 7217859f: ComputeDomain resource.nvidia.com/v1beta1 with a channel resourceClaimTemplate, a
# podAffinity on topologyKey nvidia.com/gpu.clique, the claim on each worker, -x NCCL_MNNVL_ENABLE=1]
MNNVL_TYPES = {"p6e-gb200.36xlarge"}
CLIQUE_KEY = "nvidia.com/gpu.clique"


def node_name_env() -> Dict[str, Any]:
    """The env entry every container of a printed pod gets: its node's name. In a pod the host name is the
    pod's; `efa_validators node-check` reports NODE_NAME as the report's `node`, the name `drain --for
    kubernetes` acts on (a report without it is refused). The downward API's spec.nodeName (Kubernetes
    "Expose Pod Information to Containers Through Environment Variables": fieldRef supports spec.nodeName).
    A fresh dict each call: yaml.safe_dump writes a dict met twice as an anchor and an alias."""
    return {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def sshd_is_ours(lock: Dict[str, Any]) -> bool:
    """Whether the image's sshd is this tool's (openssh installed and configured here, START in it)."""
    ssh = (lock.get("components") or {}).get(openssh.NAME) or {}
    return bool(ssh) and ssh.get("method") != "base"


def worker_port(lock: Dict[str, Any]) -> int:
    """The port a worker's sshd listens on, which the launcher's ssh client goes to: ours on openssh.PORT
    (the image's client drop-in says so), a base's own on openssh.BASE_PORT (its client's default)."""
    return openssh.PORT if sshd_is_ours(lock) else openssh.BASE_PORT


def worker_sshd(lock: Dict[str, Any], port: Optional[int] = None, options: Tuple[str, ...] = ()) -> List[str]:
    """What a worker runs: sshd in the foreground with this container's host keys, made when it starts.

    Ours: START (keys, then `sshd -De`; port and StrictModes from its drop-in), with `-p` where a recipe
    asks for another port. A base's own sshd: its keys are not taken on trust, since the Amazon Linux 2023
    DLC's EFA script installs openssh-server and nothing runs `ssh-keygen -A` (only its CPU image's
    configure_ssh.sh does: aws/deep-learning-containers@e0ecedea, FIELD-NOTES), so mpi-operator's default
    `/usr/sbin/sshd -De` exits with "no hostkeys available". `ssh-keygen -A` makes each missing key type
    and keeps the ones a base has; the keys live in the container, never in a layer. StrictModes off on
    the command line too (mpi-operator mounts its key Secret on .ssh; kubeflow/mpi-operator build/base/
    Dockerfile caa3c47 sets `StrictModes no`) and the port explicit, so the readiness probe and the
    client agree with it. `options` are sshd `-o` settings a recipe adds (the mpirun recipe's key file)."""
    opts = [w for o in options for w in ("-o", o)]
    if sshd_is_ours(lock):
        return [openssh.START] + (["-p", str(port)] if port and port != openssh.PORT else []) + opts
    return ["/bin/sh", "-c", openssh.base_sshd_command(port or openssh.BASE_PORT, options)]
