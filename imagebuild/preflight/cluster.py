"""The cluster file of the pre-flight recipes: loaded, every key checked with its line (exit 2 on
bad input), matched against the variant it runs (`check_target`) and bound to an image digest
(`bind_image`). The keys are listed in imagebuild/preflight/recipes.py."""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from imagebuild.components import nccl, nccl_tests
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
    "nvlink_domain_nodes",
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
    for key in ("nodes", "timeout", "idle_timeout", "gpus_per_node", "efa_devices", "nvlink_domain_nodes"):
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


def need(cluster: Dict[str, Any], key: str, recipe: str) -> Any:
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
