"""Launch recipes for the pre-flight: an `mpirun` line, a Slurm `sbatch` script and an EKS MPIJob manifest,
each running nccl-tests under the image's validator (`python -m validators run`), from a variant lock and a
cluster description.

Pure functions of (lock, cluster) -> text; every value that enters a shell line is quoted (shlex.quote),
and the YAML manifest is written with yaml.safe_dump, never by string pasting.

Cluster description (YAML), every key checked with its line on error:
    nodes: 2                          # required, >= 1
    instance_type: p5.48xlarge        # required; GPUs and EFA devices per node come from its profile
    container_image: repo/name:tag    # required for sbatch (pyxis) and mpijob
    hostfile: /shared/hosts           # mpirun (or hosts: [a, b])
    partition: gpu                    # sbatch
    account: team                     # sbatch, optional
    namespace: default                # mpijob, optional
    name: preflight                   # job name, optional
    timeout: 1800                     # validator total timeout (s), optional
    idle_timeout: 300                 # validator idle timeout (s), optional
    test_args: "-b 8 -e 16G -f 2 -g 1"  # nccl-tests flags, optional
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Tuple

import yaml

from imagebuild.errors import UserError

KEYS = {
    "nodes",
    "instance_type",
    "container_image",
    "hostfile",
    "hosts",
    "partition",
    "account",
    "namespace",
    "name",
    "timeout",
    "idle_timeout",
    "test_args",
    "gpus_per_node",
    "efa_devices",
}
DEFAULT_TEST_ARGS = "-b 8 -e 16G -f 2 -g 1 -c 1 -n 20"
# env NCCL and libfabric read: the lock's values for these travel with -x to every rank
NCCL_ENV_PREFIXES = ("NCCL_", "FI_", "RDMAV_", "LD_LIBRARY_PATH", "OFI_NCCL_", "CUDA_", "PATH")


def load_cluster(path: str) -> Dict[str, Any]:
    """The cluster file, checked: unknown keys, missing ones and bad values are UserErrors with lines."""
    from imagebuild import yamlsrc

    root = yamlsrc.load_file(path)
    if not isinstance(root, dict):
        raise UserError("the cluster description must be a mapping", file=path, line=1)
    lines = getattr(root, "key_lines", {})
    for key in root:
        if key not in KEYS:
            raise UserError(
                "unknown key",
                file=path,
                line=lines.get(key),
                key=str(key),
                hint="known: " + ", ".join(sorted(KEYS)),
            )
    for key in ("nodes", "instance_type"):
        if key not in root:
            raise UserError("missing required key", file=path, line=1, key=key)
    out = dict(root)
    for key in ("nodes", "timeout", "idle_timeout", "gpus_per_node", "efa_devices"):
        if key in out and (not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 1):
            raise UserError(
                "must be a whole number >= 1, got %r" % (out[key],), file=path, line=lines.get(key), key=key
            )
    for key in (
        "instance_type",
        "container_image",
        "hostfile",
        "partition",
        "account",
        "namespace",
        "name",
        "test_args",
    ):
        if key in out and not isinstance(out[key], str):
            raise UserError("must be a string, got %r" % (out[key],), file=path, line=lines.get(key), key=key)
    if "hosts" in out and (
        not isinstance(out["hosts"], list) or not all(isinstance(h, str) for h in out["hosts"])
    ):
        raise UserError("must be a list of host names", file=path, line=lines.get("hosts"), key="hosts")
    from validators.profiles import get_profile, known_instance_types

    profile = get_profile(out["instance_type"])
    if profile is None and not ("gpus_per_node" in out and "efa_devices" in out):
        raise UserError(
            "no instance profile for %r" % out["instance_type"],
            file=path,
            line=lines.get("instance_type"),
            key="instance_type",
            hint="known: %s; or give gpus_per_node and efa_devices" % ", ".join(known_instance_types()),
        )
    out.setdefault("gpus_per_node", profile.gpus if profile else None)
    out.setdefault("efa_devices", profile.efa_devices if profile else None)
    out.setdefault("name", "efa-preflight")
    out.setdefault("timeout", 1800)
    out.setdefault("test_args", DEFAULT_TEST_ARGS)
    out["_file"] = path
    out["_lines"] = dict(lines)
    return out


def _need(cluster: Dict[str, Any], key: str, recipe: str) -> Any:
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
        out.append((name, None if value is None or "$" in str(value) else str(value)))
    return out


def nccl_tests_binary(lock: Dict[str, Any], collective: str = "all_reduce") -> str:
    comp = (lock.get("components") or {}).get("nccl_tests") or {}
    prefix = comp.get("prefix") or "/opt/nccl-tests"
    return "%s/bin/%s_perf" % (prefix.rstrip("/"), collective)


def _validator(lock: Dict[str, Any], cluster: Dict[str, Any], extra: List[str]) -> List[str]:
    argv = [
        lock.get("python") or "python3",
        "-m",
        "validators",
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
    return argv + extra


def mpirun_argv(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """`python -m validators run ... -- mpirun ... all_reduce_perf ...` as a list of words."""
    ranks = cluster["nodes"] * cluster["gpus_per_node"]
    argv = ["mpirun", "-np", str(ranks), "-N", str(cluster["gpus_per_node"])]
    if cluster.get("hostfile"):
        argv += ["--hostfile", cluster["hostfile"]]
    elif cluster.get("hosts"):
        argv += ["-H", ",".join("%s:%d" % (h, cluster["gpus_per_node"]) for h in cluster["hosts"])]
    else:
        _need(cluster, "hostfile", "mpirun")
    argv += ["--bind-to", "none", "--tag-output", "-x", "NCCL_DEBUG=INFO"]
    for name, value in nccl_env(lock):
        argv += ["-x", name if value is None else "%s=%s" % (name, value)]
    argv += [nccl_tests_binary(lock)] + shlex.split(cluster["test_args"])
    return _validator(lock, cluster, ["--json", "preflight-report.json", "--"]) + argv


def mpirun_line(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    return " ".join(shlex.quote(w) for w in mpirun_argv(lock, cluster))


def sbatch_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """An sbatch script: one srun step under pyxis/enroot running the validator around nccl-tests."""
    image = _need(cluster, "container_image", "sbatch")
    q = shlex.quote
    gpus = cluster["gpus_per_node"]
    head = [
        "#!/bin/bash",
        "#SBATCH --job-name=%s" % q(cluster["name"]),
        "#SBATCH --nodes=%d" % cluster["nodes"],
        "#SBATCH --ntasks-per-node=%d" % gpus,
        "#SBATCH --gpus-per-node=%d" % gpus,
        "#SBATCH --exclusive",
        "#SBATCH --output=%x-%j.out",
    ]
    if cluster.get("partition"):
        head.append("#SBATCH --partition=%s" % q(cluster["partition"]))
    if cluster.get("account"):
        head.append("#SBATCH --account=%s" % q(cluster["account"]))
    body = ["set -euo pipefail", "export NCCL_DEBUG=INFO"]
    for name, value in nccl_env(lock):
        if value is not None:
            body.append("export %s=%s" % (name, q(value)))
    # srun is the launcher the validator watches; the validator itself runs once, on the batch host
    srun = [
        "srun",
        "--mpi=pmix",
        "-l",
        "--container-image=%s" % image,
        "--container-mounts=/dev/infiniband:/dev/infiniband",
        "--no-container-remap-root",
        nccl_tests_binary(lock),
    ] + shlex.split(cluster["test_args"])
    runner = _validator(lock, cluster, ["--json", "preflight-${SLURM_JOB_ID}.json", "--"]) + srun
    line = " ".join(q(w) if "${SLURM_JOB_ID}" not in w else '"%s"' % w for w in runner)
    return "\n".join(head + [""] + body + [line, ""])


def mpijob_manifest(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A Kubeflow MPIJob (v2beta1): the launcher runs the validator around mpirun; each worker requests
    every GPU and EFA device of its node, hugepages for libfabric, and a large /dev/shm for NCCL."""
    image = _need(cluster, "container_image", "mpijob")
    gpus, efa = cluster["gpus_per_node"], cluster["efa_devices"]
    workers = cluster["nodes"]
    hostfile = "/etc/mpi/hostfile"
    mp = dict(cluster, hostfile=hostfile)
    mp.pop("hosts", None)
    command = mpirun_argv(lock, mp)
    resources = {
        "limits": {
            "nvidia.com/gpu": gpus,
            "vpc.amazonaws.com/efa": efa,
            "hugepages-2Mi": "5120Mi",
            "memory": "32000Mi",
        },
        "requests": {
            "nvidia.com/gpu": gpus,
            "vpc.amazonaws.com/efa": efa,
            "hugepages-2Mi": "5120Mi",
            "memory": "32000Mi",
        },
    }
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    doc = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": cluster["name"], "namespace": cluster.get("namespace") or "default"},
        "spec": {
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "backoffLimit": 0,
                "activeDeadlineSeconds": int(cluster["timeout"]) + 600,
            },
            "slotsPerWorker": gpus,
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": command,
                                }
                            ],
                        }
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {
                        "spec": {
                            "volumes": [shm],
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "resources": resources,
                                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                                }
                            ],
                        }
                    },
                },
            },
        },
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


RECIPES = {
    "mpirun": lambda lock, c: mpirun_line(lock, c) + "\n",
    "sbatch": sbatch_script,
    "mpijob": mpijob_manifest,
}


def render(kind: str, lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    return RECIPES[kind](lock, cluster)
