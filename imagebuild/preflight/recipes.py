"""Launch recipes for the pre-flight: an `mpirun` line, a Slurm `sbatch` script and an EKS MPIJob manifest,
each running nccl-tests under the image's validator (`python -m efa_validators`) inside the image, from a
variant lock and a cluster description.

Pure functions of (lock, cluster) -> text; every value that enters a shell line goes through the one
quoting layer (imagebuild/preflight/quoting.py), and the YAML manifest is written with yaml.safe_dump,
never by string pasting. The flags follow what AWS runs with EFA; each is cited where it is set
(docs/preflight.md lists them with their sources).

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
    iters: 100                        # or nccl-tests' -n, -w, -R, -J by key: preflight/nccltests_flags.py
    master_addr: node-1               # torch probe with a hostfile: rank 0's host (else hosts[0])
    imex: true                        # sbatch, GB200: each job gets an IMEX channel (switch/nvidia_imex)
    report_volume: {pvc: reports}     # mpijob, required: the launcher's report folder (or host_path: /x)
    node_selector: {team: ml}         # mpijob: extra node labels for launcher and workers
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]  # mpijob
    hugepages: 5120Mi                 # mpijob: hugepages-2Mi per worker, only where the node pool has them

Every string lands somewhere in a printed script or manifest; `quoting.FIELD_PLACES` says where, and a value
that cannot be printed safely there is refused here, with its line (imagebuild/preflight/quoting.py).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

import yaml

from imagebuild.components import nccl, nccl_tests, openmpi, openssh, torch
from imagebuild.errors import UserError, did_you_mean
from imagebuild.preflight import nccltests_flags, quoting

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
    "imex",
    "report_volume",
    "node_selector",
    "tolerations",
    "hugepages",
} | nccltests_flags.KEYS
# Where each string of the cluster file lands, strictest place first (quoting.PLACES checks each)
FIELD_PLACES = {
    "instance_type": "instance_type",  # a word and the value of an EKS node label
    "container_image": "word",
    "hostfile": "path",
    "hosts": "host",  # mpirun -H a:8,b:8, MASTER_ADDR, a comment of the torchrun script
    "partition": "slurm_name",  # an #SBATCH line
    "account": "slurm_name",
    "output_dir": "mount_path",  # pyxis --container-mounts SRC:DST,...
    "namespace": "k8s_name",
    "name": "k8s_name",  # #SBATCH --job-name, MPIJob and pod names, a path part
    "test_args": "words",
    "master_addr": "host",
    "hugepages": "quantity",
    "json_output": "word",  # nccl-tests -J FILE: a word of the launch line
}
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
    for key in ("hugepages",):
        if key in out and not isinstance(out[key], str):
            raise UserError("must be a string, got %r" % (out[key],), file=path, line=lines.get(key), key=key)
    if "imex" in out and not isinstance(out["imex"], bool):
        raise UserError(
            "must be true or false, got %r" % (out["imex"],), file=path, line=lines.get("imex"), key="imex"
        )
    for key, place in FIELD_PLACES.items():
        for value in (out.get(key) or []) if key == "hosts" else ([out[key]] if key in out else []):
            if key == "json_output" and not isinstance(value, str):
                continue  # false (no -J) or a wrong type: nccltests_flags says what it must be
            bad = quoting.why_not(value, place)
            if bad:
                raise UserError("%r %s" % (value, bad), file=path, line=lines.get(key), key=key)
    for key, check in (
        ("report_volume", _report_volume),
        ("node_selector", _node_selector),
        ("tolerations", _tolerations),
    ):
        if key in out:
            bad = check(out[key])
            if bad:
                raise UserError(bad, file=path, line=lines.get(key), key=key)
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


# Where the MPIJob launcher keeps the report: a volume the cluster file names, mounted here
REPORT_MOUNT = "/efa-preflight-report"
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
# [kubernetes/kubernetes staging/src/k8s.io/api/core/v1/types.go Toleration: TolerationOperator
# Exists|Equal, TaintEffect NoSchedule|PreferNoSchedule|NoExecute; commit 815c3d8f]
_OPERATORS = {"Exists", "Equal"}
_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def _report_volume(value: Any) -> Optional[str]:
    """`{pvc: CLAIM}` or `{host_path: /abs/dir}`: exactly one."""
    if not isinstance(value, dict) or len(value) != 1 or not set(value) <= {"pvc", "host_path"}:
        return "must be a mapping with exactly one of pvc: CLAIM-NAME or host_path: /DIR"
    kind, where = next(iter(value.items()))
    if not isinstance(where, str):
        return "%s must be a string, got %r" % (kind, where)
    bad = quoting.why_not(where, "k8s_name" if kind == "pvc" else "mount_path")
    return "%s %r %s" % (kind, where, bad) if bad else None


def _node_selector(value: Any) -> Optional[str]:
    if not isinstance(value, dict) or not value:
        return "must be a mapping of node label to value"
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return "label %r: key and value must be strings (quote numbers and booleans)" % (k,)
        bad = quoting.why_not(k, "k8s_label_key") or quoting.why_not(v, "k8s_label_value")
        if bad:
            return "label %r: %r %s" % (k, v, bad)
    return None


def _tolerations(value: Any) -> Optional[str]:
    if not isinstance(value, list) or not value:
        return "must be a list of tolerations ({key, operator, value, effect})"
    for i, tol in enumerate(value):
        if not isinstance(tol, dict) or not set(tol) <= _TOLERATION_KEYS:
            return "toleration %d: a mapping of %s" % (i, ", ".join(sorted(_TOLERATION_KEYS)))
        checks = [
            ("key", "k8s_label_key"),
            ("value", "k8s_label_value"),
        ]
        for field, place in checks:
            if field in tol and (not isinstance(tol[field], str) or quoting.why_not(tol[field], place)):
                return "toleration %d: %s %r is not a label %s" % (i, field, tol[field], field)
        if tol.get("operator", "Equal") not in _OPERATORS:
            return "toleration %d: operator must be Exists or Equal" % i
        if "effect" in tol and tol["effect"] not in _EFFECTS:
            return "toleration %d: effect must be one of %s" % (i, ", ".join(sorted(_EFFECTS)))
        secs = tol.get("tolerationSeconds", 0)
        if not isinstance(secs, int) or isinstance(secs, bool) or secs < 0:
            return "toleration %d: tolerationSeconds must be a whole number >= 0" % i
    return None


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
        uri = f"{name}:{parsed.digest}"  # the tag is dropped: the digest names the image
    else:
        uri = f"{name}:{parsed.tag}" if parsed.tag else name
    if not PYXIS_IMAGE.fullmatch(uri):
        raise UserError(f"image reference {ref!r} has no pyxis form ({uri!r})", key="container_image")
    return uri


# The form pyxis documents for --container-image, `[USER@][REGISTRY#]IMAGE[:TAG]` (NVIDIA/pyxis README.md
# "Usage", commit 10751994), with enroot's alphabets: IMAGE `[[:lower:][:digit:]/._-]+`, TAG
# `[[:alnum:]._:-]+` (which admits `sha256:<hex>`), REGISTRY no '#', '/' or '@' (NVIDIA/enroot src/docker.sh
# docker::_parse_uri, commit 8ea147d3). No user part: credentials belong in enroot's credentials file.
PYXIS_IMAGE = re.compile(r"^(?:[^#/@\s]+#)?[a-z0-9/._-]+(?::[A-Za-z0-9._:-]+)?$")


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


def mpirun_argv(
    lock: Dict[str, Any],
    cluster: Dict[str, Any],
    tcp_exclude: str = TCP_EXCLUDE,
    report: str = "preflight-report.json",
) -> List[str]:
    """`python -m efa_validators run ... -- mpirun ...`: run in the image on the first node."""
    launch = mpirun_launch(lock, cluster, tcp_exclude)
    return _validator(lock, cluster, ["--json", report, "--"]) + launch


# What each host runs for the mpirun recipe (the worker side): the image with its sshd on openssh.PORT, the
# host's network (Open MPI and NCCL reach the other hosts directly), every EFA device, unlimited locked
# memory and a large /dev/shm. [awsome-distributed-training 1.architectures/3.aws-batch/
# 0.aws-batch-distributed-training-p5.yaml, commit 7217859f: Devices /dev/infiniband/uverbs0..N-1, Ulimits
# memlock -1, SharedMemorySize 49152 (MiB)]
WORKER_CONTAINER = "efa-preflight"
SHM_SIZE = "49152m"


def worker_docker_run(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """`docker run ...` that starts one host's side of the mpirun recipe, as a list of words."""
    image = _need(cluster, "container_image", "mpirun (the image every host runs)")
    argv = ["docker", "run", "--detach", "--rm", "--name", WORKER_CONTAINER, "--network", "host"]
    argv += ["--gpus", "all", "--ulimit", "memlock=-1:-1", "--shm-size", SHM_SIZE]
    for i in range(int(cluster["efa_devices"] or 0)):
        argv += ["--device", "/dev/infiniband/uverbs%d" % i]
    return argv + [image] + _worker_sshd(lock)


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


def sbatch_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """An sbatch script whose every step runs in the image (pyxis), never the image's Python on the host.

    Step 1, one task per GPU: each task's validator runs its nccl-tests rank under the watchdog and keeps
    the rank's log (`--exit-by command`: one rank sees only itself). Step 2, one task: `validators parse`
    over every rank's log gives the verdict, the script's exit code (a failed step 1 cannot pass).
    Flags as awsome-distributed-training micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch.
    """
    image = enroot_image(_need(cluster, "container_image", "sbatch"))
    q = quoting.word
    gpus = cluster["gpus_per_node"]
    imex = _slurm_imex(cluster)
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
    mounts = '/dev/infiniband:/dev/infiniband,"$PREFLIGHT_OUT":"$PREFLIGHT_OUT"'
    if imex:
        body += [
            "# multi-node NVLink: the job's IMEX channel, from Slurm's switch/nvidia_imex",
            "if ! ls %s/channel* >/dev/null 2>&1; then" % IMEX_CHANNELS,
            "  echo 'no IMEX channel in %s: the cluster needs SwitchType=switch/nvidia_imex' >&2"
            % IMEX_CHANNELS,
            "  exit 2",
            "fi",
            "export NCCL_MNNVL_ENABLE=1",
        ]
        mounts += ",%s:%s" % (IMEX_CHANNELS, IMEX_CHANNELS)
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
                "--container-mounts=" + mounts,
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


# Slurm's own IMEX support: with SwitchType=switch/nvidia_imex (Slurm 24.11+) slurmctld gives each job a
# channel and every step of the job (batch step included) gets /dev/nvidia-caps-imex-channels/channelN.
# [SchedMD/slurm src/plugins/switch/nvidia_imex/switch_nvidia_imex.c switch_p_setup_special_steps and
# _stepd_setup_imex_channel, commit 19f81310; testsuite IMEX_CHANNEL_PATH = /dev/nvidia-caps-imex-channels]
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"


def _slurm_imex(cluster: Dict[str, Any]) -> bool:
    """Whether the sbatch script uses the job's IMEX channel; a GB200 cluster that lacks one is refused:
    NCCL over multi-node NVLink cannot start without it, and the pre-flight would fail for a reason no
    image fix can change."""
    if cluster["instance_type"] not in MNNVL_TYPES:
        return False
    if cluster.get("imex") is True:
        return True
    lines = cluster.get("_lines") or {}
    raise UserError(
        "%s GPUs share one NVLink domain across nodes: NCCL needs the job's IMEX channel, and the cluster "
        "file does not say Slurm gives one" % cluster["instance_type"],
        file=cluster.get("_file"),
        line=lines.get("imex", lines.get("instance_type")),
        key="imex",
        hint="with SwitchType=switch/nvidia_imex in slurm.conf (Slurm 24.11+) each job gets a channel: "
        "say imex: true; without it run the pre-flight on EKS (--print mpijob, a ComputeDomain)",
    )


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


def node_name_env() -> Dict[str, Any]:
    """The env entry every container of a printed pod gets: its node's name. In a pod the host name is the
    pod's; `efa_validators node-check` reports NODE_NAME as the report's `node`, the name `drain --for
    kubernetes` acts on (a report without it is refused). The downward API's spec.nodeName (Kubernetes
    "Expose Pod Information to Containers Through Environment Variables": fieldRef supports spec.nodeName).
    A fresh dict each call: yaml.safe_dump writes a dict met twice as an anchor and an alias."""
    return {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def _worker_sshd(lock: Dict[str, Any]) -> List[str]:
    """What a worker runs: the image's sshd start script (this container's host keys, port 2222), or a
    base's own sshd as mpi-operator runs it by default (a DLC's, keys made at its build)."""
    ssh = (lock.get("components") or {}).get(openssh.NAME) or {}
    if ssh and ssh.get("method") != "base":
        return [openssh.START]
    return [openssh.SSHD, "-De"]


# The launcher retries while workers come up (mpirun fails when a worker's sshd is not up yet), but not for
# ever: runPolicy.backoffLimit 20 as awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/
# nccl-tests.yaml and nccl-tests-gb200.yaml (commit 7217859f); and the launcher starts only once every worker
# is Ready: spec.launcherCreationPolicy WaitForWorkersReady (kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/
# types.go LauncherCreationPolicy, commit caa3c47f). restartPolicy is set on the replica: the operator
# overrides a pod template's with a warning event (pkg/controller/mpi_job_controller.go
# newLauncherPodTemplate, same commit).
BACKOFF_LIMIT = 20


def _worker_ready(lock: Dict[str, Any]) -> Dict[str, Any]:
    """A worker is Ready once its sshd accepts (our START listens on openssh.PORT): with
    WaitForWorkersReady the launcher then never dials a worker whose sshd is not up yet. A base's own sshd
    listens where the base says, so no probe is guessed for it."""
    if _worker_sshd(lock) != [openssh.START]:
        return {}
    return {"readinessProbe": {"tcpSocket": {"port": openssh.PORT}, "periodSeconds": 5}}


def mpijob_manifest(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A Kubeflow MPIJob (v2beta1): the launcher runs the validator around mpirun; each worker runs sshd
    (`/usr/sbin/sshd -De`, the command mpi-operator v2 gives a worker that names none: kubeflow/mpi-operator
    pkg/controller/mpi_job_controller.go newWorker) and requests every GPU and EFA device of its node,
    hugepages for libfabric where the cluster file asks, and a memory-backed /dev/shm for NCCL (ADT
    kubernetes/nccl-tests.yaml). The launcher writes its report onto the cluster file's `report_volume`."""
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
    report = _need(
        cluster, "report_volume", "mpijob (the launcher's report outlives its pod only on a volume)"
    )
    report_file = "%s/%s-report.json" % (REPORT_MOUNT, cluster["name"])
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
                            "volumes": [shm],
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": image,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": _worker_sshd(lock),
                                    "env": [node_name_env()],
                                    **_worker_ready(lock),
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


# The torchrun script's proof that its output folder is shared: node 0 writes it, the others wait for it
SHARED_MARKER = ".written-by-node-0"
SHARED_WAIT = 300  # seconds a node waits for node 0's marker (nodes are started by hand or a scheduler)


def torchrun_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A script for clusters that start one process per node (a plain fleet, a custom scheduler): `run`
    on every node with NODE_RANK=0..nodes-1 starts torchrun's ranks of the torch probe under the validator,
    each node keeping its log in a directory every node sees; `verdict` on one node, once all have run,
    judges every node's log together (one node sees only its own ranks).

    The output folder must be one folder every node sees (`verdict` reads all nodes' logs from it): node 0
    leaves a marker there and every other node waits, bounded, for it, refusing to start (exit 2) on a
    folder that is not shared, before any rank runs."""
    q = quoting.word
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
        quoting.comment(
            "  on every node:   NODE_RANK=<0..%d> $0 run     (node 0 is %s)" % (nodes - 1, master)
        ),
        "#   then on one:     $0 verdict",
        "# PREFLIGHT_OUT must be one folder every node sees (a shared file system): node 0 marks it, and",
        "# every other node refuses to start unless it sees that mark within PREFLIGHT_SHARED_WAIT seconds.",
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
        '    mkdir -p "$PREFLIGHT_OUT" || exit 2',
        '    marker="$PREFLIGHT_OUT/%s"' % SHARED_MARKER,
        '    if [ "$NODE_RANK" = 0 ]; then',
        '      printf \'%s\\n\' "${HOSTNAME:-node-0}" > "$marker" || exit 2',
        "    else",
        "      waited=0",
        '      until [ -s "$marker" ]; do',
        '        if [ "$waited" -ge "${PREFLIGHT_SHARED_WAIT:-%d}" ]; then' % SHARED_WAIT,
        '          echo "$PREFLIGHT_OUT is not shared with node 0 (no $marker after ${waited}s):'
        ' give output_dir a folder every node sees" >&2',
        "          exit 2",
        "        fi",
        "        sleep 1; waited=$((waited + 1))",
        "      done",
        "    fi",
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
    "mpirun": mpirun_recipe,
    "sbatch": sbatch_script,
    "mpijob": mpijob_manifest,
    "torchrun": _torch_only,
}


def render(kind: str, lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    return RECIPES[kind](lock, cluster)
