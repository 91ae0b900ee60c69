"""The EKS `mpijob` recipe: a Kubeflow MPIJob (v2beta1) whose launcher runs the validator around mpirun and
whose workers run sshd; a ComputeDomain for GB200's multi-node NVLink."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

import yaml

from imagebuild.preflight.launch import (
    CLIQUE_KEY,
    MNNVL_TYPES,
    TCP_EXCLUDE_EKS,
    need,
    node_name_env,
    worker_port,
    worker_sshd,
)
from imagebuild.preflight.targets.mpirun import mpirun_argv

# Where the MPIJob launcher keeps the report: a volume the cluster file names, mounted here
REPORT_MOUNT = "/efa-preflight-report"

# EKS nodes carry their instance type as a well-known label; ADT's MPIJob selects its nodes by it
# [awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml, commit 7217859f]
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# The launcher retries while workers come up (mpirun fails when a worker's sshd is not up yet), but not for
# ever: runPolicy.backoffLimit 20 as awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/
# nccl-tests.yaml and nccl-tests-gb200.yaml (commit 7217859f); and the launcher starts only once every worker
# is Ready: spec.launcherCreationPolicy WaitForWorkersReady (kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/
# types.go LauncherCreationPolicy, commit caa3c47f). restartPolicy is set on the replica: the operator
# overrides a pod template's with a warning event (pkg/controller/mpi_job_controller.go
# newLauncherPodTemplate, same commit).
BACKOFF_LIMIT = 20


def _worker_ready(lock: Dict[str, Any]) -> Dict[str, Any]:
    """A worker is Ready once its sshd accepts, whichever sshd the image runs (ours or a base's): with
    WaitForWorkersReady the launcher then never dials a worker whose sshd is not up yet."""
    return {"readinessProbe": {"tcpSocket": {"port": worker_port(lock)}, "periodSeconds": 5}}


def mpijob_manifest(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A Kubeflow MPIJob (v2beta1): the launcher runs the validator around mpirun; each worker runs sshd
    with host keys made at its start (`worker_sshd`: the image's efa-sshd, or a base's sshd after
    `ssh-keygen -A`; not mpi-operator's default `/usr/sbin/sshd -De`, kubeflow/mpi-operator
    pkg/controller/mpi_job_controller.go newWorker, which exits on an image with no host keys), is Ready once
    that sshd accepts (a tcpSocket probe on its port), and requests every GPU and EFA device of its node,
    hugepages for libfabric where the cluster file asks, and a memory-backed /dev/shm for NCCL (ADT
    kubernetes/nccl-tests.yaml). Every file the job writes is an absolute path on the cluster file's
    `report_volume`, named per job: the launcher's report, and nccl-tests' -J JSON, which rank 0 writes in
    worker-0, so the workers mount that volume at the launcher's path and the launcher's validator reads the
    JSON there. A pvc (ReadWriteMany: FSx, EFS) is one folder for every pod; a host_path is each node's own
    folder, the same one only where that path is a shared file system's mount."""
    image = need(cluster, "container_image", "mpijob")
    gpus, efa = cluster["gpus_per_node"], cluster["efa_devices"]
    workers = cluster["nodes"]
    mnnvl = cluster["instance_type"] in MNNVL_TYPES
    mp = dict(cluster, hostfile="/etc/mpi/hostfile")  # where mpi-operator v2 mounts the hostfile
    mp.pop("hosts", None)
    # the first worker's name in that hostfile: <job>-worker-0.<job>.<namespace>.svc (kubeflow/mpi-operator
    # pkg/controller/mpi_job_controller.go newConfigMap and workerName, commit caa3c47f)
    mp.setdefault(
        "master_addr",
        "%s-worker-0.%s.%s.svc" % (cluster["name"], cluster["name"], cluster.get("namespace") or "default"),
    )
    if mnnvl:
        mp["_extra_env"] = ["NCCL_MNNVL_ENABLE=1"]
    report = need(
        cluster, "report_volume", "mpijob (the launcher's report outlives its pod only on a volume)"
    )
    report_file = "%s/%s-report.json" % (REPORT_MOUNT, cluster["name"])
    # nccl-tests' -J: rank 0 writes it in worker-0 (the launcher runs no rank), so onto the report volume,
    # which the workers mount too, beside the report and named per job as it is
    mp["_json_dir"], mp["_json_prefix"] = REPORT_MOUNT, cluster["name"] + "-"
    command = mpirun_argv(lock, mp, TCP_EXCLUDE_EKS, report=report_file)
    amounts: Dict[str, Any] = {"nvidia.com/gpu": gpus, "vpc.amazonaws.com/efa": efa, "memory": "32000Mi"}
    if cluster.get("hugepages"):  # only where the pool has them: a pod asking for absent ones stays Pending
        amounts["hugepages-2Mi"] = cluster["hugepages"]
    resources: Dict[str, Any] = {"limits": dict(amounts), "requests": dict(amounts)}
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    if "pvc" in report:
        report_vol = {"name": "report", "persistentVolumeClaim": {"claimName": report["pvc"]}}
    else:
        report_vol = {
            "name": "report",
            "hostPath": {"path": report["host_path"], "type": "DirectoryOrCreate"},
        }
    placement: Dict[str, Any] = {}
    if cluster.get("tolerations"):
        placement["tolerations"] = [dict(t) for t in cluster["tolerations"]]
    selector = dict(cluster.get("node_selector") or {})
    launcher_spec: Dict[str, Any] = dict(placement, **({"nodeSelector": dict(selector)} if selector else {}))
    worker_spec: Dict[str, Any] = dict(
        placement, nodeSelector=dict(selector, **{INSTANCE_TYPE_LABEL: cluster["instance_type"]})
    )
    worker_meta: Dict[str, Any] = {}
    docs: List[Dict[str, Any]] = []
    if mnnvl:
        domain, claim = "%s-compute-domain" % cluster["name"], "compute-domain-channel"
        channel = {"resourceClaimTemplate": {"name": domain + "-channel"}}
        docs.append(
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"name": domain, "namespace": cluster.get("namespace") or "default"},
                "spec": {"numNodes": workers, "channel": channel},
            }
        )
        replica = {"efa-image-build/preflight": "%s-worker" % cluster["name"]}
        worker_meta = {"labels": replica}
        worker_spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": k, "operator": "In", "values": [v]} for k, v in replica.items()
                            ]
                        },
                        "topologyKey": CLIQUE_KEY,
                    }
                ]
            }
        }
        worker_spec["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": domain + "-channel"}]
        resources["claims"] = [{"name": claim}]
    doc = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": cluster["name"], "namespace": cluster.get("namespace") or "default"},
        "spec": {
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "backoffLimit": BACKOFF_LIMIT,
                "activeDeadlineSeconds": int(cluster["timeout"]) + 600,
            },
            "launcherCreationPolicy": "WaitForWorkersReady",
            "slotsPerWorker": gpus,
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",  # the replica's: the operator overrides a pod template's
                    "template": {
                        "spec": {
                            **launcher_spec,
                            "volumes": [report_vol],
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": command,
                                    "env": [node_name_env()],
                                    "volumeMounts": [{"name": "report", "mountPath": REPORT_MOUNT}],
                                }
                            ],
                        }
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {
                        **({"metadata": worker_meta} if worker_meta else {}),
                        "spec": {
                            **worker_spec,
                            "volumes": [shm, copy.deepcopy(report_vol)],  # no YAML anchor
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": worker_sshd(lock),
                                    "env": [node_name_env()],
                                    **_worker_ready(lock),
                                    "resources": resources,
                                    "volumeMounts": [
                                        {"name": "dshm", "mountPath": "/dev/shm"},
                                        {"name": "report", "mountPath": REPORT_MOUNT},
                                    ],
                                }
                            ],
                        },
                    },
                },
            },
        },
    }
    return yaml.safe_dump_all(docs + [doc], sort_keys=False, default_flow_style=False)
