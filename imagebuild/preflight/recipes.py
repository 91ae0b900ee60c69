"""Launch recipes for the pre-flight: an `mpirun` line, a Slurm `sbatch` script and an EKS MPIJob manifest,
each running nccl-tests under the image's validator (`python -m efa_validators`) inside the image, from a
variant lock and a cluster description.

Pure functions of (lock, cluster) -> text; every value that enters a shell line goes through the one
quoting layer (imagebuild/preflight/quoting.py), and the YAML manifest is written with yaml.safe_dump,
never by string pasting. The flags follow what AWS runs with EFA; each is cited where it is set
(docs/preflight.md lists them with their sources).

One module per target in imagebuild/preflight/targets/ (mpirun, sbatch, mpijob, torchrun); what they share
in imagebuild/preflight/launch.py, the cluster file in imagebuild/preflight/cluster.py. This module renders
a target by name and keeps the public names importable from here.

Cluster description (YAML), every key checked with its line on error:
    nodes: 2                          # required, >= 1
    instance_type: p5.48xlarge        # required; GPUs and EFA devices per node come from its profile
    container_image: repo/name:tag    # required for sbatch (pyxis) and mpijob; a digest ref works too
    hostfile: /shared/hosts           # mpirun (or hosts: [a, b])
    partition: gpu                    # sbatch
    account: team                     # sbatch, optional
    output_dir: /fsx/preflight        # a directory every node sees: sbatch (default: the job's directory),
                                      # mpirun (required: the run's key, hostfile copy, -J JSON and report)
    request_gpus: false               # sbatch: add --gpus-per-node (needs GPUs as Slurm GRES)
    run_as_root: true                 # mpirun/mpijob: the image runs as root (--allow-run-as-root)
    namespace: default                # mpijob, optional
    name: preflight                   # job name, optional
    timeout: 1800                     # validator total timeout (s), optional
    idle_timeout: 300                 # validator idle timeout (s), optional
    test_args: "-b 8 -e 16G -f 2 -g 1"  # nccl-tests flags (or efa_validators.probe_torch's), optional
    iters: 100                        # or nccl-tests' -n, -w, -R, -J by key: preflight/nccltests_flags.py
    master_addr: node-1               # torch probe with a hostfile: rank 0's host (else hosts[0])
    imex: true                        # sbatch, GB200: each job gets an IMEX channel (switch/nvidia_imex)
    nvlink_domain_nodes: 18           # sbatch, GB200: nodes per NVLink domain = the topology/block base block
    report_volume: {pvc: reports}     # mpijob, required: the launcher's report folder (or host_path: /x)
    node_selector: {team: ml}         # mpijob: extra node labels for launcher and workers
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]  # mpijob
    hugepages: 5120Mi                 # mpijob: hugepages-2Mi per worker, only where the node pool has them

Every string lands somewhere in a printed script or manifest; `quoting.FIELD_PLACES` says where, and a value
that cannot be printed safely there is refused here, with its line (imagebuild/preflight/quoting.py).
"""

from __future__ import annotations

from typing import Any, Dict

from imagebuild.preflight.cluster import (
    FIELD_PLACES,
    KEYS,
    PLATFORM_OF_ARCH,
    PYXIS_IMAGE,
    bind_image,
    check_target,
    enroot_image,
    load_cluster,
)
from imagebuild.preflight.launch import (
    CLIQUE_KEY,
    DEFAULT_TORCH_ARGS,
    MNNVL_TYPES,
    MPI_MCA,
    NCCL_ENV_PREFIXES,
    PMIX_ENV,
    TCP_EXCLUDE,
    TCP_EXCLUDE_EKS,
    TORCH_PORT,
    TORCH_PROBE,
    mpirun_binary,
    nccl_env,
    nccl_tests_binary,
    node_name_env,
    probe,
    probe_argv,
)
from imagebuild.preflight.targets.mpijob import (
    BACKOFF_LIMIT,
    INSTANCE_TYPE_LABEL,
    REPORT_MOUNT,
    mpijob_manifest,
)
from imagebuild.preflight.targets.mpirun import (
    KEY_MOUNT,
    RSH_ARGS,
    SHM_SIZE,
    WORKER_CONTAINER,
    mpirun_argv,
    mpirun_launch,
    mpirun_line,
    mpirun_recipe,
    run_dir,
    run_setup,
    worker_docker_run,
)
from imagebuild.preflight.targets.sbatch import IMEX_CHANNELS, sbatch_script
from imagebuild.preflight.targets.torchrun import SHARED_MARKER, SHARED_WAIT, torch_only, torchrun_script

# the names callers import from here (they moved to the modules above)
__all__ = [
    "BACKOFF_LIMIT",
    "CLIQUE_KEY",
    "DEFAULT_TORCH_ARGS",
    "FIELD_PLACES",
    "IMEX_CHANNELS",
    "INSTANCE_TYPE_LABEL",
    "KEY_MOUNT",
    "KEYS",
    "MNNVL_TYPES",
    "MPI_MCA",
    "NCCL_ENV_PREFIXES",
    "PLATFORM_OF_ARCH",
    "PMIX_ENV",
    "PYXIS_IMAGE",
    "RECIPES",
    "REPORT_MOUNT",
    "RSH_ARGS",
    "SHARED_MARKER",
    "SHARED_WAIT",
    "SHM_SIZE",
    "TCP_EXCLUDE",
    "TCP_EXCLUDE_EKS",
    "TORCH_PORT",
    "TORCH_PROBE",
    "WORKER_CONTAINER",
    "bind_image",
    "check_target",
    "enroot_image",
    "load_cluster",
    "mpijob_manifest",
    "mpirun_argv",
    "mpirun_binary",
    "mpirun_launch",
    "mpirun_line",
    "mpirun_recipe",
    "nccl_env",
    "nccl_tests_binary",
    "node_name_env",
    "probe",
    "probe_argv",
    "render",
    "run_dir",
    "run_setup",
    "sbatch_script",
    "torch_only",
    "torchrun_script",
    "worker_docker_run",
]

RECIPES = {
    "mpirun": mpirun_recipe,
    "sbatch": sbatch_script,
    "mpijob": mpijob_manifest,
    "torchrun": torch_only,
}


def render(kind: str, lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    return RECIPES[kind](lock, cluster)
