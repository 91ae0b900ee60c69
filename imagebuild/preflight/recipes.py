"""Launch recipes for the pre-flight: an `mpirun` line, a Slurm `sbatch` script and an EKS MPIJob manifest,
each running nccl-tests under the image's validator (`python -m efa_validators`) inside the image, from a
variant lock and a cluster description.

Pure functions of (lock, cluster) -> text; every value that enters a shell line is quoted (shlex.quote),
and the YAML manifest is written with yaml.safe_dump, never by string pasting. The flags follow what AWS
runs with EFA; each is cited where it is set (docs/preflight.md lists them with their sources).

Cluster description (YAML), every key checked with its line on error:
    nodes: 2                          # required, >= 1
    instance_type: p5.48xlarge        # required; GPUs and EFA devices per node come from its profile
    container_image: repo/name:tag    # required for sbatch (pyxis) and mpijob; a digest ref works too
    hostfile: /shared/hosts           # mpirun (or hosts: [a, b])
    partition: gpu                    # sbatch
    account: team                     # sbatch, optional
    output_dir: /fsx/preflight        # sbatch: a directory every node sees (default: the job's directory)
    request_gpus: false               # sbatch: add --gpus-per-node (needs GPUs as Slurm GRES)
    run_as_root: true                 # mpirun/mpijob: the image runs as root (--allow-run-as-root)
    namespace: default                # mpijob, optional
    name: preflight                   # job name, optional
    timeout: 1800                     # validator total timeout (s), optional
    idle_timeout: 300                 # validator idle timeout (s), optional
    test_args: "-b 8 -e 16G -f 2 -g 1"  # nccl-tests flags (or efa_validators.probe_torch's), optional
    master_addr: node-1               # torch probe with a hostfile: rank 0's host (else hosts[0])
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

import yaml

from imagebuild.components import nccl, nccl_tests, openmpi, openssh, torch
from imagebuild.errors import UserError, did_you_mean

KEYS = {
    "nodes",
    "instance_type",
    "container_image",
    "hostfile",
    "hosts",
    "partition",
    "account",
    "output_dir",
    "request_gpus",
    "run_as_root",
    "namespace",
    "name",
    "timeout",
    "idle_timeout",
    "test_args",
    "gpus_per_node",
    "efa_devices",
    "master_addr",
}
DEFAULT_TEST_ARGS = "-b 8 -e 16G -f 2 -g 1 -c 1 -n 20"
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


def load_cluster(path: str) -> Dict[str, Any]:
    """The cluster file, checked: unknown keys, missing ones and bad values are UserErrors with lines."""
    from imagebuild.matrix import yamlsrc

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
                hint=did_you_mean(str(key), KEYS) or "known: " + ", ".join(sorted(KEYS)),
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
        "output_dir",
        "namespace",
        "name",
        "test_args",
        "master_addr",
    ):
        if key in out and not isinstance(out[key], str):
            raise UserError("must be a string, got %r" % (out[key],), file=path, line=lines.get(key), key=key)
    for key in ("request_gpus", "run_as_root"):
        if key in out and not isinstance(out[key], bool):
            raise UserError(
                "must be true or false, got %r" % (out[key],), file=path, line=lines.get(key), key=key
            )
    if "hosts" in out and (
        not isinstance(out["hosts"], list) or not all(isinstance(h, str) for h in out["hosts"])
    ):
        raise UserError("must be a list of host names", file=path, line=lines.get("hosts"), key="hosts")
    if out.get("container_image"):
        try:
            enroot_image(out["container_image"])
        except UserError as err:
            raise UserError(
                err.message,
                file=path,
                line=lines.get("container_image"),
                key="container_image",
                hint=err.hint,
            ) from None
    from efa_validators.judge.profiles import get_profile, known_instance_types

    profile = get_profile(out["instance_type"])
    if profile is None and not ("gpus_per_node" in out and "efa_devices" in out):
        raise UserError(
            "no instance profile for %r" % out["instance_type"],
            file=path,
            line=lines.get("instance_type"),
            key="instance_type",
            hint="%s; or give gpus_per_node and efa_devices"
            % (
                did_you_mean(
                    re.sub(r"^ml\.", "", out["instance_type"].strip().lower()), known_instance_types(), 3, 0.5
                )
                or "known: " + ", ".join(known_instance_types())
            ),
        )
    out.setdefault("gpus_per_node", profile.gpus if profile else None)
    out.setdefault("efa_devices", profile.efa_devices if profile else None)
    out.setdefault("name", "efa-preflight")
    out.setdefault("timeout", 1800)
    out.setdefault("run_as_root", True)
    out.setdefault("request_gpus", False)
    out["_file"] = path
    out["_lines"] = dict(lines)
    return out


# The instance profile's CPU architecture and the OCI platform an image for it is built for.
PLATFORM_OF_ARCH = {"x86_64": "linux/amd64", "arm64": "linux/arm64"}


def check_target(lock: Dict[str, Any], cluster: Dict[str, Any]) -> None:
    """Refuse a recipe for a cluster the image was not built for, naming both sides (exit 2).

    Why before printing: a p4d cluster (A100, sm_80) given the sm_90/sm_100 variant loads an NCCL and
    nccl-tests with no kernel for its GPUs, and an x86 cluster cannot run the arm64 image at all; both would
    surface as a failed job on the cluster, not as the mismatch they are. An EFA device count nobody states
    would go into the MPIJob's resource request as null.
    """
    from imagebuild import catalog

    file, lines = cluster.get("_file"), cluster.get("_lines") or {}
    itype = cluster["instance_type"]
    where = {"file": file, "line": lines.get("instance_type"), "key": "instance_type"}
    variant = lock.get("name") or "the variant"
    wanted = list(lock.get("instance_types") or [])
    if wanted and itype not in wanted:
        raise UserError(
            f"the cluster's instance type {itype} is not among variant {variant}'s: {', '.join(wanted)}",
            hint="pick a variant built for it, or add it to the variant's instance_types and rebuild",
            **where,
        )
    profile = catalog.instances().get(itype) or {}
    platform = lock.get("platform")
    arch = profile.get("arch")
    if platform and arch and PLATFORM_OF_ARCH.get(arch) != platform:
        raise UserError(
            f"{itype} has {arch} CPUs; variant {variant} is built for {platform}",
            hint=f"use the variant built for {PLATFORM_OF_ARCH.get(arch, arch)}",
            **where,
        )
    comps = lock.get("components") or {}
    kernels = [n for n in (nccl.NAME, nccl_tests.NAME) if (comps.get(n) or {}).get("method") == "source"]
    archs = str((lock.get("options") or {}).get("cuda_arch") or "").split(";")
    need = profile.get("cuda_arch")
    if kernels and need and need not in archs:
        raise UserError(
            f"{itype}'s GPUs ({profile.get('gpu')}) are sm_{need}; variant {variant}'s "
            f"{' and '.join(kernels)} were compiled for sm_{', sm_'.join(archs)} only "
            "(no kernel for these GPUs)",
            hint="use a variant whose options.cuda_arch includes " + need,
            **where,
        )
    if cluster.get("efa_devices") is None:
        raise UserError(
            f"the EFA device count of {itype} is unknown (no public source states it)",
            file=file,
            line=lines.get("instance_type"),
            key="efa_devices",
            hint="give efa_devices: N in the cluster file (what each node has, e.g. from `fi_info -p efa`)",
        )


def _need(cluster: Dict[str, Any], key: str, recipe: str) -> Any:
    if not cluster.get(key):
        raise UserError("the %s recipe needs this key" % recipe, file=cluster.get("_file"), line=1, key=key)
    return cluster[key]


def enroot_image(ref: str) -> str:
    """The image as pyxis/enroot must read it: `registry#repo:tag`; a digest as `registry#repo:sha256:<hex>`.

    Why: enroot before 4.0 parses `docker://[USER@][REGISTRY#]IMAGE[:TAG]` only, so `registry/repo:tag`
    is read as a Docker Hub repository and `@sha256:` is refused (NVIDIA/enroot v3.5.0 src/docker.sh);
    its TAG pattern admits `sha256:<hex>`, which lands in `/v2/<repo>/manifests/<reference>` (a digest is a
    valid reference there). enroot 4.x still accepts both forms (src/docker.sh `REGISTRY#IMAGE[:TAG]`).
    A path to a squashfs file (`/...`, `./...`, `*.sqsh`) and a ref already holding `#` pass through.
    """
    from imagebuild.adapters.registry import split_ref

    text = ref.strip()
    if text.startswith(("/", "./", "../")) or text.endswith(".sqsh"):
        return text
    if text.startswith("docker://"):
        text = text[len("docker://") :]
    if "#" in text:
        registry, _, rest = text.partition("#")
        parsed = split_ref(rest, key="container_image")
        if parsed.registry:
            raise UserError(f"two registries in image reference {ref!r}", key="container_image")
    else:
        parsed = split_ref(text, key="container_image")
        registry = parsed.registry
    name = f"{registry}#{parsed.repository}" if registry else parsed.repository
    if parsed.digest:
        return f"{name}:{parsed.digest}"  # the tag is dropped: the digest names the image
    return f"{name}:{parsed.tag}" if parsed.tag else name


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
        hint="choose a variant with nccl_tests or torch (`build.py list` shows the components), or add "
        "nccl_tests to this variant in the matrix",
    )


def probe_argv(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """The program each rank runs."""
    if probe(lock) == TORCH_PROBE:
        python = lock.get("python") or "python3"
        args = shlex.split(cluster.get("test_args") or DEFAULT_TORCH_ARGS)
        return [python, "-m", "efa_validators.probe_torch"] + args + ["--timeout", str(cluster["timeout"])]
    return [nccl_tests_binary(lock)] + shlex.split(cluster.get("test_args") or DEFAULT_TEST_ARGS)


def _master(cluster: Dict[str, Any], recipe: str) -> str:
    """Rank 0's host for torch.distributed's rendezvous: `master_addr`, else the first of `hosts`."""
    if cluster.get("master_addr"):
        return cluster["master_addr"]
    if cluster.get("hosts"):
        return cluster["hosts"][0]
    return _need(cluster, "master_addr", recipe + " (the torch probe: rank 0's host)")


def nccl_tests_binary(lock: Dict[str, Any], collective: str = "all_reduce") -> str:
    return _prefix_bin(lock, nccl_tests.NAME, "/opt/nccl-tests", "%s_perf" % collective)


def mpirun_binary(lock: Dict[str, Any]) -> str:
    """The image's mpirun by absolute path: Open MPI then starts its remote daemons from the same prefix
    (`--prefix` implied), which ssh sessions in a container need, since they do not see the image's ENV."""
    return _prefix_bin(lock, openmpi.NAME, "", "mpirun")


def _validator(lock: Dict[str, Any], cluster: Dict[str, Any], extra: List[str]) -> List[str]:
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
    return argv + _image_args(cluster) + extra


def _image_args(cluster: Dict[str, Any]) -> List[str]:
    """`--image REF@sha256:D` where the recipe is bound to a digest (`bind_image`)."""
    return ["--image", cluster["_image"]] if cluster.get("_image") else []


def bind_image(cluster: Dict[str, Any], image: Optional[str]) -> Dict[str, Any]:
    """The cluster with the image the recipe proves: `--image`, else a `container_image` pinned by digest.

    Why required: `build.py release --require-preflight` promotes a digest only on a report that names it,
    so a recipe that names no digest gives a report no release can use. Where `--image` and a pinned
    `container_image` are both given they must name the same digest; the digest is also what pyxis and the
    MPIJob pull, never a tag that may have moved since.
    """
    from efa_validators.run.imagebind import parse_image_ref

    file, lines = cluster.get("_file"), cluster.get("_lines") or {}
    pinned = cluster.get("container_image") if "@sha256:" in str(cluster.get("container_image")) else None
    ref = image or pinned
    if not ref:
        raise UserError(
            "the recipe names no image digest, so its report could clear no release",
            key="--image",
            hint="--image REPO@sha256:<digest> (build/summary.json has the pushed digest), or "
            "container_image: REPO@sha256:<digest> in " + str(file),
        )
    try:
        parse_image_ref(ref)
    except ValueError as err:
        raise UserError(str(err), key="--image") from None
    if image and pinned and pinned.rpartition("@")[2] != image.rpartition("@")[2]:
        raise UserError(
            f"--image {image} and container_image {pinned} name different digests",
            file=file,
            line=lines.get("container_image"),
            key="container_image",
        )
    return dict(cluster, _image=ref, container_image=ref)  # what pulls is what the report names


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
        _need(cluster, "hostfile", "mpirun")
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
        names += ["MASTER_ADDR=%s" % _master(cluster, "mpirun"), "MASTER_PORT=%s" % TORCH_PORT]
    for word in names:
        argv += ["-x", word]
    return argv + probe_argv(lock, cluster)


def mpirun_argv(lock: Dict[str, Any], cluster: Dict[str, Any], tcp_exclude: str = TCP_EXCLUDE) -> List[str]:
    """`python -m efa_validators run ... -- mpirun ...`: run in the image on the first node."""
    launch = mpirun_launch(lock, cluster, tcp_exclude)
    return _validator(lock, cluster, ["--json", "preflight-report.json", "--"]) + launch


def mpirun_line(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    return " ".join(shlex.quote(w) for w in mpirun_argv(lock, cluster))


def sbatch_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """An sbatch script whose every step runs in the image (pyxis), never the image's Python on the host.

    Step 1, one task per GPU: each task's validator runs its nccl-tests rank under the watchdog and keeps
    the rank's log (`--exit-by command`: one rank sees only itself). Step 2, one task: `validators parse`
    over every rank's log gives the verdict, the script's exit code (a failed step 1 cannot pass).
    Flags as awsome-distributed-training micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch.
    """
    image = enroot_image(_need(cluster, "container_image", "sbatch"))
    q = shlex.quote
    gpus = cluster["gpus_per_node"]
    python = lock.get("python") or "python3"
    head = [
        "#!/bin/bash",
        "#SBATCH --job-name=%s" % q(cluster["name"]),
        "#SBATCH --nodes=%d" % cluster["nodes"],
        "#SBATCH --ntasks-per-node=%d" % gpus,
        "#SBATCH --exclusive",
        "#SBATCH --wait-all-nodes=1",
        "#SBATCH --output=%x-%j.out",
    ]
    if cluster.get("request_gpus"):
        head.append("#SBATCH --gpus-per-node=%d" % gpus)
    if cluster.get("partition"):
        head.append("#SBATCH --partition=%s" % q(cluster["partition"]))
    if cluster.get("account"):
        head.append("#SBATCH --account=%s" % q(cluster["account"]))
    out_dir = q(cluster["output_dir"]) if cluster.get("output_dir") else '"$PWD"'
    body = [
        "set -uo pipefail",
        "# a directory every node sees: each rank's log, then the report",
        'export PREFLIGHT_OUT=%s/"preflight-${SLURM_JOB_ID}"' % out_dir,
        'mkdir -p "$PREFLIGHT_OUT"',
        "export NCCL_DEBUG=INFO",
        "export %s=%s" % PMIX_ENV,
    ]
    for name, value in nccl_env(lock):
        if value is not None:
            body.append("export %s=%s" % (name, q(value)))
    if probe(lock) == TORCH_PROBE:  # rank 0 is the first node's first task (srun's block distribution)
        body.append('export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"')
        body.append("export MASTER_PORT=%s" % TORCH_PORT)
    body += [
        "# pyxis: every step runs in the image (enroot < 4.0 wants registry#repo:tag). Nodes that already",
        "# run inside the image, without pyxis: CONTAINER=()",
        "CONTAINER=(%s)"
        % " ".join(
            [
                q("--container-image=%s" % image),
                '--container-mounts=/dev/infiniband:/dev/infiniband,"$PREFLIGHT_OUT":"$PREFLIGHT_OUT"',
                "--no-container-remap-root",
            ]
        ),
    ]
    rank_cmd = _validator(lock, cluster, ["--exit-by", "command", "--log", "@LOG@", "--"])
    for flag in ("--instance-type", "--nodes"):  # one rank cannot judge the job: step 2 does
        i = rank_cmd.index(flag)
        del rank_cmd[i : i + 2]
    inner = " ".join(q(w) for w in rank_cmd).replace("@LOG@", '"$PREFLIGHT_OUT/rank-$SLURM_PROCID.log"')
    step1 = ["srun", '"${CONTAINER[@]}"', "--mpi=pmix", "--cpu-bind=none", "-l", "sh", "-c"]
    step1 += [q('exec %s "$@"' % inner), "rank"] + [q(a) for a in probe_argv(lock, cluster)]
    parse = [q(python), "-m", "efa_validators", "parse", '"$PREFLIGHT_OUT"/rank-*.log']
    parse += [q(w) for w in _image_args(cluster)]
    parse += ["--instance-type", q(cluster["instance_type"]), "--nodes", str(cluster["nodes"])]
    parse += ["--json", '"$PREFLIGHT_OUT/report.json"', "--markdown", '"$PREFLIGHT_OUT/report.md"']
    step2 = ["srun", '"${CONTAINER[@]}"', "--nodes=1", "--ntasks=1"] + parse
    tail = [
        "run_rc=0",
        " ".join(step1) + " || run_rc=$?",
        "verdict_rc=0",
        " ".join(step2) + " || verdict_rc=$?",
        'echo "report: $PREFLIGHT_OUT/report.json (ranks exit $run_rc, verdict exit $verdict_rc)"',
        'if [ "$verdict_rc" -eq 0 ] && [ "$run_rc" -ne 0 ]; then exit 1; fi',
        'exit "$verdict_rc"',
    ]
    return "\n".join(head + [""] + body + [""] + tail + [""])


# Instance types whose GPUs share one NVLink domain across nodes (multi-node NVLink, MNNVL): a job needs an
# IMEX channel (a DRA ComputeDomain claim on EKS), its workers on one NVLink clique, and NCCL told to use it.
# [aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml,
# commit 7217859f: ComputeDomain resource.nvidia.com/v1beta1 with a channel resourceClaimTemplate, a
# podAffinity on topologyKey nvidia.com/gpu.clique, the claim on each worker, -x NCCL_MNNVL_ENABLE=1]
MNNVL_TYPES = {"p6e-gb200.36xlarge"}
CLIQUE_KEY = "nvidia.com/gpu.clique"
# EKS nodes carry their instance type as a well-known label; ADT's MPIJob selects its nodes by it
# [awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml, commit 7217859f]
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def _worker_sshd(lock: Dict[str, Any]) -> List[str]:
    """What a worker runs: the image's sshd start script (this container's host keys, port 2222), or a
    base's own sshd as mpi-operator runs it by default (a DLC's, keys made at its build)."""
    ssh = (lock.get("components") or {}).get(openssh.NAME) or {}
    if ssh and ssh.get("method") != "base":
        return [openssh.START]
    return [openssh.SSHD, "-De"]


def mpijob_manifest(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A Kubeflow MPIJob (v2beta1): the launcher runs the validator around mpirun; each worker runs sshd
    (`/usr/sbin/sshd -De`, the command mpi-operator v2 gives a worker that names none: kubeflow/mpi-operator
    pkg/controller/mpi_job_controller.go newWorker) and requests every GPU and EFA device of its node,
    hugepages for libfabric, and a memory-backed /dev/shm for NCCL (ADT kubernetes/nccl-tests.yaml)."""
    image = _need(cluster, "container_image", "mpijob")
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
    command = mpirun_argv(lock, mp, TCP_EXCLUDE_EKS)
    amounts = {
        "nvidia.com/gpu": gpus,
        "vpc.amazonaws.com/efa": efa,
        "hugepages-2Mi": "5120Mi",
        "memory": "32000Mi",
    }
    resources: Dict[str, Any] = {"limits": dict(amounts), "requests": dict(amounts)}
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    worker_spec: Dict[str, Any] = {"nodeSelector": {INSTANCE_TYPE_LABEL: cluster["instance_type"]}}
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
                        **({"metadata": worker_meta} if worker_meta else {}),
                        "spec": {
                            **worker_spec,
                            "volumes": [shm],
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": _worker_sshd(lock),
                                    "resources": resources,
                                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                                }
                            ],
                        },
                    },
                },
            },
        },
    }
    return yaml.safe_dump_all(docs + [doc], sort_keys=False, default_flow_style=False)


def torchrun_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A script for clusters that start one process per node (a plain fleet, a custom scheduler): `run`
    on every node with NODE_RANK=0..nodes-1 starts torchrun's ranks of the torch probe under the validator,
    each node keeping its log in a directory every node sees; `verdict` on one node, once all have run,
    judges every node's log together (one node sees only its own ranks)."""
    q = shlex.quote
    gpus, nodes = cluster["gpus_per_node"], cluster["nodes"]
    python = lock.get("python") or "python3"
    master = _master(cluster, "torchrun")
    out_dir = q(cluster["output_dir"]) if cluster.get("output_dir") else '"$PWD"'
    node = _validator(lock, cluster, ["--exit-by", "command", "--log", "@LOG@", "--"])
    for flag in ("--instance-type", "--nodes"):  # one node cannot judge the job: `verdict` does
        i = node.index(flag)
        del node[i : i + 2]
    torchrun = ["torchrun", "--nnodes", str(nodes), "--node_rank", "@RANK@", "--nproc_per_node", str(gpus)]
    torchrun += ["--master_addr", master, "--master_port", TORCH_PORT]
    words = probe_argv(lock, cluster)
    torchrun += ["-m"] + words[words.index("-m") + 1 :]
    run = " ".join(q(w) for w in node + torchrun)
    run = run.replace("@LOG@", '"$PREFLIGHT_OUT/node-$NODE_RANK.log"').replace("@RANK@", '"$NODE_RANK"')
    parse = [q(python), "-m", "efa_validators", "parse", '"$PREFLIGHT_OUT"/node-*.log']
    parse += [q(w) for w in _image_args(cluster)]
    parse += ["--instance-type", q(cluster["instance_type"]), "--nodes", str(nodes)]
    parse += ["--json", '"$PREFLIGHT_OUT/report.json"', "--markdown", '"$PREFLIGHT_OUT/report.md"']
    lines = [
        "#!/bin/bash",
        "# torch all-reduce pre-flight over %d node(s) x %d GPU(s), inside the image." % (nodes, gpus),
        "#   on every node:   NODE_RANK=<0..%d> $0 run     (node 0 is %s)" % (nodes - 1, master),
        "#   then on one:     $0 verdict",
        "set -uo pipefail",
        "export PREFLIGHT_OUT=%s/%s" % (out_dir, q(cluster["name"])),
        "export NCCL_DEBUG=INFO",
    ]
    for name, value in nccl_env(lock):
        if value is not None:
            lines.append("export %s=%s" % (name, q(value)))
    lines += [
        'case "${1:-}" in',
        "  run)",
        '    : "${NODE_RANK:?set NODE_RANK (0 to %d)}"' % (nodes - 1),
        '    mkdir -p "$PREFLIGHT_OUT"',
        "    exec %s ;;" % run,
        "  verdict)",
        "    exec %s ;;" % " ".join(parse),
        '  *) echo "usage: NODE_RANK=N $0 run | $0 verdict" >&2; exit 2 ;;',
        "esac",
        "",
    ]
    return "\n".join(lines)


def _torch_only(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    if not (lock.get("components") or {}).get(torch.NAME):
        raise UserError(
            f"the torchrun recipe runs the torch probe; variant {lock.get('name')!r} has no torch",
            key="components.torch",
            hint="use --print mpirun, sbatch or mpijob (nccl-tests, or the torch probe under that launcher)",
        )
    return torchrun_script(dict(lock, components={torch.NAME: lock["components"][torch.NAME]}), cluster)


RECIPES = {
    "mpirun": lambda lock, c: mpirun_line(lock, c) + "\n",
    "sbatch": sbatch_script,
    "mpijob": mpijob_manifest,
    "torchrun": _torch_only,
}


def render(kind: str, lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    return RECIPES[kind](lock, cluster)
