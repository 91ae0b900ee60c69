"""Launch recipes from a lock and a cluster description: the exact words, quoting, and user errors."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml
from cli import build_py_process
from paths import ROOT

from imagebuild.errors import UserError
from imagebuild.preflight import recipes

LOCK = {
    "name": "v1",
    "python": "/usr/bin/python3",
    "components": {"nccl_tests": {"prefix": "/opt/nccl-tests"}},
    "env": [
        {"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"},
        {"name": "LD_LIBRARY_PATH", "value": "/opt/a/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"},
        {"name": "SAGEMAKER_PROGRAM", "value": "train.py"},
        {"name": "NCCL_WEIRD", "value": "a b;'q' & x"},
    ],
}


REPORT = "report_volume: {pvc: reports}\n"  # where an MPIJob keeps its report


def _cluster(tmp_path, text):
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return recipes.load_cluster(str(p))


def test_mpirun_line_has_env_hostfile_and_runs_under_the_validator(tmp_path):
    c = _cluster(
        tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\nhostfile: /shared/my hosts\noutput_dir: /fsx/pf\n"
    )
    line = recipes.mpirun_line(LOCK, c)
    words = shlex.split(line)
    assert words[:4] == ["/usr/bin/python3", "-m", "efa_validators", "run"]
    mp = words[words.index("--") + 1 :]
    assert mp[:6] == ["mpirun", "--allow-run-as-root", "-np", "16", "-N", "8"]
    # the hostfile as the container sees it: copied into the run's shared folder (step 0 of the recipe)
    assert "--hostfile" in mp and mp[mp.index("--hostfile") + 1] == "/fsx/pf/efa-preflight/hostfile"
    mca = [(mp[i + 1], mp[i + 2]) for i, w in enumerate(mp) if w == "--mca"]
    assert mca == [
        ("plm_rsh_args", recipes.RSH_ARGS),
        ("pml", "^cm,ucx"),
        ("btl", "tcp,self"),
        ("btl_tcp_if_exclude", "lo,docker0"),
    ]
    assert mp[mp.index("--bind-to") + 1] == "none"
    xs = [mp[i + 1] for i, w in enumerate(mp) if w == "-x"]
    assert xs == [
        "NCCL_DEBUG=INFO",
        "PATH",
        "LD_LIBRARY_PATH",
        "PMIX_MCA_gds=hash",
        "FI_EFA_USE_HUGE_PAGE=0",
        "NCCL_WEIRD=a b;'q' & x",
    ]
    assert "SAGEMAKER_PROGRAM" not in line
    assert "/opt/nccl-tests/bin/all_reduce_perf" in mp


def test_mpirun_is_the_images_own_and_root_is_a_choice(tmp_path):
    lock = dict(LOCK, components=dict(LOCK["components"], openmpi={"prefix": "/opt/amazon/openmpi"}))
    c = _cluster(
        tmp_path, "nodes: 2\ninstance_type: p4d.24xlarge\nhosts: [a, b]\nrun_as_root: false\noutput_dir: /o\n"
    )
    mp = shlex.split(recipes.mpirun_line(lock, c))
    mp = mp[mp.index("--") + 1 :]
    assert mp[0] == "/opt/amazon/openmpi/bin/mpirun" and "--allow-run-as-root" not in mp
    assert mp[mp.index("-H") + 1] == "a:8,b:8"


@pytest.mark.parametrize(
    "ref, want",
    [
        ("123456789012.dkr.example.com/team/img:1", "123456789012.dkr.example.com#team/img:1"),
        ("localhost:5000/img", "localhost:5000#img"),
        ("team/img:2", "team/img:2"),
        ("docker://reg.example.com/a/b:3", "reg.example.com#a/b:3"),
        ("reg.example.com#a/b:3", "reg.example.com#a/b:3"),
        ("reg.example.com/a/b@sha256:" + "c" * 64, "reg.example.com#a/b:sha256:" + "c" * 64),
        ("reg.example.com/a/b:3@sha256:" + "c" * 64, "reg.example.com#a/b:sha256:" + "c" * 64),
        ("reg.example.com#a/b@sha256:" + "c" * 64, "reg.example.com#a/b:sha256:" + "c" * 64),
        ("/fsx/images/nccl.sqsh", "/fsx/images/nccl.sqsh"),
    ],
)
def test_enroot_image_names(ref, want):
    """enroot < 4.0 reads `registry/repo` as a Docker Hub path and refuses `@sha256:` (enroot v3.5.0
    src/docker.sh): the recipe writes `registry#repo:tag`, a digest in the tag place."""
    assert recipes.enroot_image(ref) == want


def test_sbatch_script_runs_every_step_in_the_image(tmp_path):
    c = _cluster(
        tmp_path,
        "nodes: 4\ninstance_type: p5en.48xlarge\ncontainer_image: 'reg.example.com/img:1'\npartition: gpu\n",
    )
    text = recipes.sbatch_script(LOCK, c)
    assert "#SBATCH --nodes=4" in text and "#SBATCH --partition=gpu" in text
    assert "--gpus-per-node" not in text  # only with request_gpus: true (needs GPUs as Slurm GRES)
    assert "export NCCL_WEIRD=" + shlex.quote("a b;'q' & x") in text
    container = [line for line in text.splitlines() if line.startswith("CONTAINER=(")]
    assert len(container) == 1 and "'--container-image=reg.example.com#img:1'" in container[0]
    steps = [line for line in text.splitlines() if line.startswith("srun ")]
    assert len(steps) == 2 and all(s.startswith('srun "${CONTAINER[@]}" ') for s in steps)
    run, parse = (shlex.split(s.replace('"${CONTAINER[@]}"', "")) for s in steps)
    assert run[:5] == ["srun", "--mpi=pmix", "--cpu-bind=none", "-l", "sh"]
    inner = shlex.split(run[6])
    assert inner[:5] == ["exec", "/usr/bin/python3", "-m", "efa_validators", "run"] and "--exit-by" in inner
    # -n 100 as AWS's nccl-tests scripts; no -J: the lock does not say its nccl-tests has it (issue 34)
    flags = "-b 8 -e 16G -f 2 -g 1 -c 1 -n 100".split()
    want = ["/opt/nccl-tests/bin/all_reduce_perf"] + flags + ["||", "run_rc=$?"]
    assert run[8:] == want
    assert parse[3:7] == ["/usr/bin/python3", "-m", "efa_validators", "parse"] and "--nodes" in parse
    assert "python" not in " ".join(line for line in text.splitlines() if not line.startswith("srun "))
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    gres = _cluster(
        tmp_path, "nodes: 1\ninstance_type: p5.48xlarge\ncontainer_image: i\nrequest_gpus: true\n"
    )
    assert "#SBATCH --gpus-per-node=8" in recipes.sbatch_script(LOCK, gres)


def test_mpijob_requests_efa_gpus_hugepages_and_shm(tmp_path):
    c = _cluster(tmp_path, "nodes: 2\ninstance_type: p4d.24xlarge\ncontainer_image: repo/img:1\n" + REPORT)
    doc = yaml.safe_load(recipes.mpijob_manifest(LOCK, c))
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    spec = worker["template"]["spec"]["containers"][0]
    # a base's own sshd (LOCK has no openssh of ours): host keys made at start, never in a layer (the AL2023
    # DLC has none), StrictModes off and port 22 on the command line
    assert spec["command"] == [
        "/bin/sh",
        "-c",
        "mkdir -p /var/run/sshd && ssh-keygen -A >/dev/null"
        " && exec /usr/sbin/sshd -De -p 22 -o StrictModes=no",
    ]
    assert spec["readinessProbe"] == {"tcpSocket": {"port": 22}, "periodSeconds": 5}
    res = spec["resources"]["limits"]
    assert res["vpc.amazonaws.com/efa"] == 4 and res["nvidia.com/gpu"] == 8
    assert "hugepages-2Mi" not in res  # only where the cluster file asks: absent ones keep pods Pending
    asked = _cluster(
        tmp_path, "nodes: 2\ninstance_type: p4d.24xlarge\ncontainer_image: r/i:1\nhugepages: 2Gi\n" + REPORT
    )
    asked_doc = yaml.safe_load(recipes.mpijob_manifest(LOCK, asked))
    asked_res = asked_doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    assert asked_res["limits"]["hugepages-2Mi"] == asked_res["requests"]["hugepages-2Mi"] == "2Gi"
    assert worker["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    cmd = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:4] == ["/usr/bin/python3", "-m", "efa_validators", "run"] and "NCCL_WEIRD=a b;'q' & x" in cmd
    mp = cmd[cmd.index("--") + 1 :]
    assert mp[mp.index("--hostfile") + 1] == "/etc/mpi/hostfile" and "--allow-run-as-root" in mp
    assert "lo,docker0,veth_def_agent" in mp


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("nodes: 2\ninstance_type: p5.48xlarge\nnodez: 3\n", "nodez", 3),
        ("nodes: 0\ninstance_type: p5.48xlarge\n", "nodes", 1),
        ("nodes: 2\ninstance_type: p77.huge\n", "instance_type", 2),
        ("instance_type: p5.48xlarge\n", "nodes", 1),
        ("nodes: 2\ninstance_type: p5.48xlarge\nrun_as_root: 1\n", "run_as_root", 3),
        ("nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: 'r.io/a@sha256:12'\n", "container_image", 3),
        ("nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: 'r.io/A:1'\n", "container_image", 3),
    ],
)
def test_cluster_errors_name_file_line_key(tmp_path, text, key, line):
    with pytest.raises(UserError) as err:
        _cluster(tmp_path, text)
    assert err.value.key == key and err.value.line == line and err.value.file.endswith("cluster.yaml")


def test_recipe_needing_a_missing_key(tmp_path):
    c = _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\n")
    with pytest.raises(UserError) as err:
        recipes.sbatch_script(LOCK, c)
    assert err.value.key == "container_image"


def test_build_py_preflight_print_and_errors(tmp_path, project_root):
    import json

    lock = tmp_path / "variant.lock.json"
    lock.write_text(json.dumps(LOCK))
    cl = tmp_path / "c.yaml"
    cl.write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\noutput_dir: /fsx/pf\n")
    image = "reg.example.com/img@sha256:" + "b" * 64
    ok = build_py_process(
        "preflight", "--print", "mpirun", "--cluster", cl, "--lock", lock, "--image", image, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    assert "-H a:8,b:8" in ok.stdout
    # the report names the digest: the validator gets it (and reads the lock inside the image itself)
    assert shlex.split(ok.stdout)[shlex.split(ok.stdout).index("--image") + 1] == image
    unbound = build_py_process("preflight", "--print", "mpirun", "--cluster", cl, "--lock", lock, timeout=60)
    assert unbound.returncode == 2 and "key '--image'" in unbound.stderr and "digest" in unbound.stderr
    cl.write_text(
        "nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\ncontainer_image: r/i@sha256:" + "c" * 64
    )
    bad = build_py_process(
        "preflight", "--print", "sbatch", "--cluster", cl, "--lock", lock, "--image", image, timeout=60
    )
    assert bad.returncode == 2 and "different digests" in bad.stderr and "Traceback" not in bad.stderr
    ok = build_py_process("preflight", "--print", "sbatch", "--cluster", cl, "--lock", lock, timeout=60)
    assert ok.returncode == 0, ok.stderr
    # both steps name the image: the ranks' runs and the parse that gives the verdict
    assert ok.stdout.count("--image r/i@sha256:" + "c" * 64) == 2


def test_build_py_preflight_sagemaker_delegates(project_root):
    """--sagemaker goes to imagebuild.preflight.sagemaker (issue 6); --dry-run prints the request, touches
    nothing."""
    digest = "a" * 64
    proc = build_py_process(
        "preflight",
        "--sagemaker",
        "--dry-run",
        "--image",
        "repo/img@sha256:" + digest,
        "--instance-type",
        "p5.48xlarge",
        "--role-arn",
        "arn:aws:iam::123456789012:role/x",
        "--region",
        "us-east-1",
        "--output-s3",
        "s3://b/p",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ml.p5.48xlarge" in proc.stdout


@pytest.mark.parametrize(
    "name, recipe",
    [("slurm-p5", "sbatch"), ("hosts-p4d", "mpirun"), ("eks-p5en", "mpijob"), ("eks-p6e-gb200", "mpijob")],
)
def test_example_cluster_files_print_their_recipe(project_root, name, recipe):
    cluster = recipes.load_cluster(str(project_root / "examples" / "cluster" / ("%s.yaml" % name)))
    text = recipes.render(recipe, LOCK, recipes.bind_image(cluster, "r.io/i@sha256:" + "e" * 64))
    assert "validators" in text and "all_reduce_perf" in text


def _refused(tmp_path, lock, cluster_text):
    with pytest.raises(UserError) as err:
        recipes.check_target(lock, _cluster(tmp_path, cluster_text))
    return err.value


def test_a_cluster_the_image_was_not_built_for_is_refused_naming_both_sides(tmp_path):
    p5 = dict(LOCK, name="v-p5", instance_types=["p5.48xlarge", "p5en.48xlarge"], platform="linux/amd64")
    err = _refused(tmp_path, p5, "nodes: 2\ninstance_type: p4d.24xlarge\nhosts: [a, b]\n")
    assert err.key == "instance_type" and err.line == 2
    assert "p4d.24xlarge" in err.message and "v-p5" in err.message and "p5en.48xlarge" in err.message
    # GPUs: NCCL built from source for sm_90 only, on an A100 cluster (the lock lists no instance types)
    sm90 = dict(
        LOCK,
        platform="linux/amd64",
        options={"cuda_arch": "90"},
        components={"nccl": {"method": "source"}, "nccl_tests": {"method": "source", "prefix": "/opt/t"}},
    )
    err = _refused(tmp_path, sm90, "nodes: 2\ninstance_type: p4d.24xlarge\nhosts: [a, b]\n")
    assert "sm_80" in err.message and "sm_90" in err.message and err.key == "instance_type"
    wheel = dict(sm90, components={"nccl": {"method": "wheel"}, "nccl_tests": {"method": "source"}})
    wheel["options"] = {"cuda_arch": "80;90"}
    recipes.check_target(wheel, _cluster(tmp_path, "nodes: 2\ninstance_type: p4d.24xlarge\nhosts: [a]\n"))
    # CPU architecture
    arm = dict(LOCK, name="v-arm", platform="linux/arm64")
    err = _refused(tmp_path, arm, "nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\n")
    assert "x86_64" in err.message and "linux/arm64" in err.message
    # an EFA device count no source states: the cluster file must give it, never null in a manifest
    gb = "nodes: 2\ninstance_type: p6e-gb200.36xlarge\ncontainer_image: r/i:1\n" + REPORT
    err = _refused(tmp_path, arm, gb)
    assert err.key == "efa_devices" and "unknown" in err.message
    cluster = _cluster(tmp_path, gb + "efa_devices: 4\n")
    recipes.check_target(arm, cluster)
    assert "vpc.amazonaws.com/efa: 4" in recipes.mpijob_manifest(arm, cluster)


@pytest.mark.parametrize(
    "variant, cluster, words",
    [
        (
            "cuda12.8-efa1.51-nccl2.27.7-ofi1.22",
            "instance_type: p4d.24xlarge",
            ["p4d.24xlarge", "p5.48xlarge"],
        ),
        ("cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64", "instance_type: p5.48xlarge", ["p5.48xlarge"]),
        ("cuda12.8-efa1.51-nccl2.27.7-ofi1.22-arm64", "instance_type: p6e-gb200.36xlarge", ["efa_devices"]),
    ],
)
def test_build_py_preflight_refuses_mismatches_with_exit_2(tmp_path, project_root, variant, cluster, words):
    cl = tmp_path / "c.yaml"
    cl.write_text(f"nodes: 2\n{cluster}\nhosts: [a, b]\ncontainer_image: r/i:1\n")
    proc = build_py_process(
        "preflight", "--print", "mpijob", "--cluster", cl, "--matrix", project_root / "matrix.yaml",
        "--variant", variant, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{cl}:2" in proc.stderr and proc.stdout == ""
    for w in words:
        assert w in proc.stderr, proc.stderr


# The fields the printed MPIJob uses and their types, as kubeflow/mpi-operator's v2beta1 CRD declares them
# (manifests/base/kubeflow.org_mpijobs.yaml, commit caa3c47f, openAPIV3Schema; written here from reading it,
# not copied). `{}` maps every key to the one schema; a list is a list of that schema; QUANTITY is the CRD's
# int-or-string resource quantity; anything the printed manifest has that is not here is an error.
QUANTITY = "quantity"
CONTAINER = {
    "name": str, "image": str, "imagePullPolicy": str, "command": [str],
    "resources": {"limits": {"*": QUANTITY}, "requests": {"*": QUANTITY}, "claims": [{"name": str}]},
    "volumeMounts": [{"name": str, "mountPath": str}],
    "readinessProbe": {"tcpSocket": {"port": int}, "periodSeconds": int},
    "env": [{"name": str, "valueFrom": {"fieldRef": {"fieldPath": str}}}],
}  # fmt: skip
MATCH = {"key": str, "operator": str, "values": [str]}
TOLERATION = {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int}
VOLUME = {
    "name": str, "emptyDir": {"medium": str}, "persistentVolumeClaim": {"claimName": str},
    "hostPath": {"path": str, "type": str},
}  # fmt: skip
POD_SPEC = {
    "containers": [CONTAINER], "volumes": [VOLUME], "nodeSelector": {"*": str}, "tolerations": [TOLERATION],
    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [MATCH]}, "topologyKey": str}]}},
    "resourceClaims": [{"name": str, "resourceClaimTemplateName": str}],
}  # fmt: skip
REPLICA = {
    "replicas": int, "restartPolicy": str, "template": {"metadata": {"labels": {"*": str}}, "spec": POD_SPEC},
}  # fmt: skip
MPIJOB = {
    "apiVersion": str, "kind": str, "metadata": {"name": str, "namespace": str},
    "spec": {
        "runPolicy": {"cleanPodPolicy": str, "backoffLimit": int, "activeDeadlineSeconds": int},
        "launcherCreationPolicy": str, "slotsPerWorker": int, "mpiReplicaSpecs": {"*": REPLICA},
    },
}  # fmt: skip
_NUM = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
QUANTITY_RE = r"^(\+|-)?" + _NUM + r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?" + _NUM + r"))?$"


def _conform(value, schema, path="") -> list:
    """Where `value` leaves `schema`: [path: why]."""
    import re

    if schema is QUANTITY:
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and re.match(QUANTITY_RE, value)
        )
        return [] if ok else [f"{path}: not a quantity: {value!r}"]
    if isinstance(schema, type):
        ok = isinstance(value, schema) and not (schema is int and isinstance(value, bool))
        return [] if ok else [f"{path}: {type(value).__name__} {value!r}, want {schema.__name__}"]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        return [e for i, v in enumerate(value) for e in _conform(v, schema[0], f"{path}[{i}]")]
    if not isinstance(value, dict):
        return [f"{path}: not an object"]
    out = []
    for key, v in value.items():
        sub = schema.get(key, schema.get("*"))
        out += (
            [f"{path}.{key}: not in the CRD's fields"] if sub is None else _conform(v, sub, f"{path}.{key}")
        )
    return out


@pytest.mark.parametrize("itype", ["p5en.48xlarge", "p6e-gb200.36xlarge"])
def test_printed_mpijob_has_the_crds_fields_and_types_and_selects_its_nodes(tmp_path, itype):
    c = recipes.bind_image(
        _cluster(
            tmp_path, f"nodes: 2\ninstance_type: {itype}\ncontainer_image: r/i:1\nefa_devices: 4\n" + REPORT
        ),
        "r/i@sha256:" + "e" * 64,
    )
    docs = list(yaml.safe_load_all(recipes.mpijob_manifest(LOCK, c)))
    job = docs[-1]
    assert job["apiVersion"] == "kubeflow.org/v2beta1" and job["kind"] == "MPIJob"
    assert _conform(job, MPIJOB) == []
    assert set(job["spec"]["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert worker["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": itype}
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["image"] == "r/i@sha256:" + "e" * 64  # the digest the report names is what runs
    mnnvl = "NCCL_MNNVL_ENABLE=1" in launcher["command"]
    if itype == "p6e-gb200.36xlarge":  # IMEX channel, one NVLink clique, NCCL told to use MNNVL
        domain = docs[0]
        assert domain["kind"] == "ComputeDomain" and domain["spec"]["numNodes"] == 2 and mnnvl
        template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
        assert worker["spec"]["resourceClaims"] == [
            {"name": "compute-domain-channel", "resourceClaimTemplateName": template}
        ]
        assert worker["spec"]["containers"][0]["resources"]["claims"] == [{"name": "compute-domain-channel"}]
        term = worker["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "nvidia.com/gpu.clique"
        ((key, value),) = worker["metadata"]["labels"].items()
        assert term["labelSelector"]["matchExpressions"] == [
            {"key": key, "operator": "In", "values": [value]}
        ]
    else:
        assert len(docs) == 1 and not mnnvl and "affinity" not in worker["spec"]
    # the checker itself: a null count or a wrong type is caught
    bad = json_roundtrip(job)
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "vpc.amazonaws.com/efa"
    ] = None
    bad["spec"]["slotsPerWorker"] = "4"
    assert len(_conform(bad, MPIJOB)) == 2


def json_roundtrip(doc):
    import json

    return json.loads(json.dumps(doc))


TORCH_LOCK = {
    "name": "v-torch",
    "python": "/usr/local/bin/python3",
    "components": {"torch": {"version": "2.7.1"}, "nccl": {"method": "base"}},
    "env": [{"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"}],
}


def test_an_image_without_nccl_tests_gets_the_torch_probe_under_every_launcher(tmp_path):
    """A DLC extension has torch, not nccl-tests: every recipe runs efa_validators.probe_torch under its
    launcher,
    rank 0's host passed as MASTER_ADDR (the probe reads its rank from mpirun's or srun's env)."""
    c = recipes.bind_image(
        _cluster(
            tmp_path,
            "nodes: 2\ninstance_type: p5.48xlarge\nhosts: [n1, n2]\ncontainer_image: r/i:1\noutput_dir: /o\n"
            + REPORT,
        ),
        "r/i@sha256:" + "f" * 64,
    )
    words = shlex.split(recipes.mpirun_line(TORCH_LOCK, c))
    tail = words[words.index("-x") :]
    assert ["-x", "MASTER_ADDR=n1"] == tail[
        tail.index("MASTER_ADDR=n1") - 1 : tail.index("MASTER_ADDR=n1") + 1
    ]
    assert words[-6:] == ["-m", "efa_validators.probe_torch", "--max-bytes", "16G", "--timeout", "1800"]
    assert "all_reduce_perf" not in " ".join(words)
    sbatch = recipes.sbatch_script(TORCH_LOCK, c)
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in sbatch
    assert "efa_validators.probe_torch --max-bytes 16G" in sbatch
    job = yaml.safe_load(recipes.mpijob_manifest(TORCH_LOCK, c))
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert "MASTER_ADDR=efa-preflight-worker-0.efa-preflight.default.svc" in command
    hostfile = dict(c, hosts=None, hostfile="/shared/hosts")
    with pytest.raises(UserError) as err:
        recipes.mpirun_line(TORCH_LOCK, hostfile)
    assert err.value.key == "master_addr"
    assert "MASTER_ADDR=n9" in recipes.mpirun_line(TORCH_LOCK, dict(hostfile, master_addr="n9"))
    script = recipes.render("torchrun", TORCH_LOCK, c)
    assert 'torchrun --nnodes 2 --node_rank "$NODE_RANK" --nproc_per_node 8 --master_addr n1' in script
    with pytest.raises(UserError) as err:
        recipes.render("torchrun", LOCK, c)
    assert err.value.key == "components.torch"
    with pytest.raises(UserError) as err:
        recipes.render("mpirun", dict(LOCK, components={}), c)
    assert "neither nccl_tests nor torch" in err.value.message


def test_printed_torchrun_script_runs_two_nodes_on_loopback_and_gives_one_verdict(tmp_path):
    """Run as printed, two "nodes" of this machine (loopback, gloo on CPU: nothing about EFA is proven, so the
    verdict is unknown, never pass); the verdict step reads both nodes' logs and names the image."""
    import json
    import os
    import sys

    torch = pytest.importorskip("torch")  # the test extra installs it (CI has it)
    assert torch
    lock = dict(TORCH_LOCK, python=sys.executable)
    cluster = _cluster(
        tmp_path,
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 1\nmaster_addr: 127.0.0.1\n"
        f"output_dir: {tmp_path}\nname: tr\ntimeout: 120\ntest_args: '--max-bytes 64K --iters 2'\n",
    )
    image = "r/i@sha256:" + "f" * 64
    script = tmp_path / "preflight.sh"
    script.write_text(recipes.render("torchrun", lock, recipes.bind_image(cluster, image)))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    env.pop("CUDA_VISIBLE_DEVICES", None)
    nodes = [
        subprocess.Popen(["bash", str(script), "run"], env=dict(env, NODE_RANK=str(r)), cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in (0, 1)
    ]  # fmt: skip
    outs = [p.communicate(timeout=200)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outs
    verdict = subprocess.run(["bash", str(script), "verdict"], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    report = json.loads((tmp_path / "tr" / "report.json").read_text())
    assert verdict.returncode == 3 and report["verdict"] == "unknown", verdict.stdout + verdict.stderr
    assert report["image"]["digest"] == "sha256:" + "f" * 64
    rows = report["nccl_tests"]["rows"]
    assert rows and rows[-1]["size"] == 65536  # the probe's table from rank 0, parsed
    assert sorted(p.name for p in (tmp_path / "tr").glob("node-*.log")) == ["node-0.log", "node-1.log"]


def test_mpijob_survives_a_slow_start_and_keeps_its_report(tmp_path):
    """The launcher starts only once the workers are Ready, retries a bounded number of times, its
    restartPolicy is the replica's (a pod template's is overridden by the operator with a warning), and
    its report lands on the volume the cluster file names; placement comes from the cluster file."""
    c = _cluster(
        tmp_path,
        "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\nname: pf\n"
        "report_volume: {host_path: /fsx/reports}\nnode_selector: {team: ml}\n"
        "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n",
    )
    job = yaml.safe_load(recipes.mpijob_manifest(LOCK, c))
    spec = job["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert 0 < spec["runPolicy"]["backoffLimit"] == 20
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert launcher["restartPolicy"] == "OnFailure"
    assert (
        "restartPolicy" not in launcher["template"]["spec"]
        and "restartPolicy" not in worker["template"]["spec"]
    )
    pod = launcher["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "report", "hostPath": {"path": "/fsx/reports", "type": "DirectoryOrCreate"}}
    ]
    ctr = pod["containers"][0]
    assert ctr["volumeMounts"] == [{"name": "report", "mountPath": recipes.REPORT_MOUNT}]
    assert ctr["command"][ctr["command"].index("--json") + 1] == recipes.REPORT_MOUNT + "/pf-report.json"
    toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["tolerations"] == toleration and pod["nodeSelector"] == {"team": "ml"}
    wpod = worker["template"]["spec"]
    assert wpod["tolerations"] == toleration
    assert wpod["nodeSelector"] == {"team": "ml", "node.kubernetes.io/instance-type": "p5.48xlarge"}
    pvc = _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\n" + REPORT)
    pvc_job = yaml.safe_load(recipes.mpijob_manifest(LOCK, pvc))
    vols = pvc_job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["volumes"]
    assert vols == [{"name": "report", "persistentVolumeClaim": {"claimName": "reports"}}]
    sshd = dict(LOCK, components=dict(LOCK["components"], openssh={"method": "source"}))
    ours = yaml.safe_load(recipes.mpijob_manifest(sshd, c))
    wctr = ours["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert wctr["command"] == ["/usr/local/sbin/efa-sshd"]  # Ready only once its sshd accepts on 2222
    assert wctr["readinessProbe"] == {"tcpSocket": {"port": 2222}, "periodSeconds": 5}
    # a base's sshd: Ready too, on the port its command line names
    assert worker["template"]["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 22}
    assert _conform(ours, MPIJOB) == []
    lost = _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\n")
    with pytest.raises(UserError) as err:  # a report lost with the pod clears no release: refused
        recipes.mpijob_manifest(LOCK, lost)
    assert err.value.key == "report_volume"


GB200_SLURM = "nodes: 2\ninstance_type: p6e-gb200.36xlarge\nefa_devices: 4\ncontainer_image: r.io/i:1\n"


def test_gb200_on_slurm_takes_the_jobs_imex_channel_or_is_refused_with_why(tmp_path):
    lock = dict(LOCK, platform="linux/arm64")
    without = _cluster(tmp_path, GB200_SLURM)
    with pytest.raises(UserError) as err:
        recipes.sbatch_script(lock, without)
    assert err.value.key == "imex" and "IMEX" in err.value.message and "switch/nvidia_imex" in err.value.hint
    script = recipes.sbatch_script(
        lock, _cluster(tmp_path, GB200_SLURM + "imex: true\nnvlink_domain_nodes: 18\n")
    )
    assert "/dev/nvidia-caps-imex-channels:/dev/nvidia-caps-imex-channels" in script
    assert "export NCCL_MNNVL_ENABLE=1" in script
    # the header refuses (exit 2, before any step) on a node where Slurm gave the job no channel
    header = script[: script.index("run_rc=0")]
    proc = subprocess.run(
        ["bash", "-c", header], cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "3"},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2 and "no IMEX channel" in proc.stderr
    p5 = recipes.sbatch_script(
        LOCK, _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\n")
    )
    assert "imex" not in p5.lower()


def test_gb200_on_slurm_stays_in_one_nvlink_domain_by_segment_or_is_refused(tmp_path):
    """Without --segment a GB200 job could straddle NVLink domains; the cluster file says how many nodes a
    domain (a topology/block base block) holds, and the script asks Slurm for segments no larger."""
    lock = dict(LOCK, platform="linux/arm64")
    gb200 = GB200_SLURM + "imex: true\n"
    with pytest.raises(UserError) as err:  # no way to keep it in one domain: refused, naming file and line
        recipes.sbatch_script(lock, _cluster(tmp_path, gb200))
    assert err.value.key == "nvlink_domain_nodes" and err.value.line == 2  # the instance_type line
    assert "topology/block" in err.value.hint and str(tmp_path) in str(err.value.file)
    one = recipes.sbatch_script(lock, _cluster(tmp_path, gb200 + "nvlink_domain_nodes: 18\n"))
    assert "#SBATCH --segment=2" in one.splitlines()  # the whole job one segment: one base block
    two = _cluster(tmp_path, gb200.replace("nodes: 2", "nodes: 36") + "nvlink_domain_nodes: 18\n")
    assert "#SBATCH --segment=18" in recipes.sbatch_script(lock, two).splitlines()  # one domain each
    odd = _cluster(tmp_path, gb200.replace("nodes: 2", "nodes: 20") + "nvlink_domain_nodes: 18\n")
    with pytest.raises(UserError) as err:  # Slurm's --segment needs nodes divisible by it
        recipes.sbatch_script(lock, odd)
    assert err.value.key == "nodes" and err.value.line == 1 and "divisible" in err.value.message
    p5 = _cluster(
        tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\nnvlink_domain_nodes: 2\n"
    )
    with pytest.raises(UserError) as err:  # no NVLink domain across p5 nodes: a misplaced key
        recipes.sbatch_script(LOCK, p5)
    assert err.value.key == "nvlink_domain_nodes" and err.value.line == 4
    with pytest.raises(UserError) as err:
        _cluster(tmp_path, gb200 + "nvlink_domain_nodes: 0\n")
    assert err.value.key == "nvlink_domain_nodes"


@pytest.mark.parametrize(
    "ref",
    [
        "123456789012.dkr.example.com/team/img:1",
        "reg.example.com/a/b@sha256:" + "c" * 64,
        "localhost:5000/img",
        "team/img:2",
    ],
)
def test_the_sbatch_image_is_in_the_form_pyxis_documents(ref):
    uri = recipes.enroot_image(ref)
    assert recipes.PYXIS_IMAGE.match(uri)
    assert "@" not in uri and uri.count("#") <= 1  # [REGISTRY#]IMAGE[:TAG], the digest as the tag


def test_torchrun_refuses_to_start_a_node_on_a_folder_node_0_does_not_share(tmp_path):
    c = recipes.bind_image(
        _cluster(
            tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\nmaster_addr: n1\noutput_dir: %s\n" % tmp_path
        ),
        "r/i@sha256:" + "e" * 64,
    )
    script = tmp_path / "pf.sh"
    script.write_text(recipes.render("torchrun", dict(LOCK, components={"torch": {"version": "2"}}), c))
    assert "must be one folder every node sees" in script.read_text()
    env = {"PATH": "/usr/bin:/bin", "NODE_RANK": "1", "PREFLIGHT_SHARED_WAIT": "1"}
    proc = subprocess.run(["bash", str(script), "run"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "is not shared with node 0" in proc.stderr
    assert not list((tmp_path / "efa-preflight").glob("node-*.log"))  # no rank started


def test_print_mpirun_gives_each_hosts_docker_run(tmp_path):
    c = recipes.bind_image(
        _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\noutput_dir: /fsx/pf\n"),
        "r.io/i@sha256:" + "e" * 64,
    )
    run = recipes.worker_docker_run(
        dict(LOCK, components=dict(LOCK["components"], openssh={"method": "source"})), c
    )
    assert run[:2] == ["docker", "run"] and run[run.index("--network") + 1] == "host"
    assert run[run.index("--ulimit") + 1] == "memlock=-1:-1" and "--shm-size" in run
    devices = [run[i + 1] for i, w in enumerate(run) if w == "--device"]
    assert devices == ["/dev/infiniband/uverbs%d" % i for i in range(32)]  # p5: 32 EFA devices
    # sshd on port 2222 trusting only this run's key, mounted read-only; the run folder where the host has it
    assert run[-4:] == [
        "r.io/i@sha256:" + "e" * 64,
        "/usr/local/sbin/efa-sshd",
        "-o",
        "AuthorizedKeysFile=/etc/efa-preflight-ssh/authorized_keys",
    ]
    mounts = [run[i + 1] for i, w in enumerate(run) if w == "--mount"]
    assert mounts == [
        "type=bind,source=/fsx/pf/efa-preflight,target=/fsx/pf/efa-preflight",
        "type=bind,source=/fsx/pf/efa-preflight/ssh,target=/etc/efa-preflight-ssh,readonly",
    ]
    text = recipes.render("mpirun", LOCK, c)
    assert shlex.join(recipes.worker_docker_run(LOCK, c)) in text
    lines = text.splitlines()
    assert lines[-1] == recipes.mpirun_line(LOCK, c)
    assert (
        "Afterwards, on that host: rm -rf /fsx/pf/efa-preflight/ssh" in lines[-2]
    )  # the key goes with the run


NODE_NAME = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def _containers(doc) -> list:
    """Every container of every pod spec anywhere in a manifest (a Pod's, a template's)."""
    if isinstance(doc, list):
        return [c for item in doc for c in _containers(item)]
    if not isinstance(doc, dict):
        return []
    found = [c for c in doc.get("containers") or [] if isinstance(c, dict)]
    return found + [c for k, v in doc.items() if k != "containers" for c in _containers(v)]


@pytest.mark.parametrize("itype", ["p5en.48xlarge", "p6e-gb200.36xlarge"])
def test_every_printed_pod_gets_its_node_name_from_the_downward_api(tmp_path, itype):
    """In a pod the host name is the pod's: node-check reports NODE_NAME as the node `drain --for kubernetes`
    acts on, so every container of every printed manifest gets it from spec.nodeName (issue 39 item 3)."""
    c = recipes.bind_image(
        _cluster(
            tmp_path, f"nodes: 2\ninstance_type: {itype}\ncontainer_image: r/i:1\nefa_devices: 4\n" + REPORT
        ),
        "r/i@sha256:" + "e" * 64,
    )
    for lock in (LOCK, TORCH_LOCK):
        text = recipes.mpijob_manifest(lock, c)
        containers = _containers(list(yaml.safe_load_all(text)))
        assert len(containers) == 2 and "&id" not in text  # launcher and worker; no YAML aliases
        for container in containers:
            assert NODE_NAME in container.get("env", []), container["name"]


def test_every_documented_manifest_that_runs_node_check_gets_its_node_name():
    """The manifests the docs show for node-check set NODE_NAME the same way (a copied example without it
    would make drain refuse the report)."""
    import re

    blocks = [
        (md.name, block)
        for md in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
        for block in re.findall(r"```ya?ml\n(.*?)```", md.read_text(), re.S)
        if "node-check" in block
    ]
    assert blocks, "no documented node-check manifest: the test would prove nothing"
    for name, block in blocks:
        containers = _containers(list(yaml.safe_load_all(block)))
        assert containers, (name, block)
        for container in containers:
            assert NODE_NAME in container.get("env", []), (name, container)


def test_mpirun_recipe_makes_a_key_per_run_and_writes_every_file_under_its_shared_folder(tmp_path):
    """The key is made by the recipe for this run (never in an image) and mounted read-only; mpirun's ssh
    uses it on the tool's sshd port; the report and nccl-tests' JSON are absolute paths in the run folder
    every host mounts (relative, they were lost with the --rm container); no output_dir is exit 2."""
    c = recipes.bind_image(
        _cluster(
            tmp_path,
            "nodes: 2\ninstance_type: p5.48xlarge\nhostfile: /home/me/hosts\noutput_dir: /fsx/pf/\n"
            "name: r1\n",
        ),
        "r.io/i@sha256:" + "e" * 64,
    )
    lock = dict(LOCK, components=dict(LOCK["components"], nccl_tests={"version": "2.19.6"}))
    text = recipes.render("mpirun", lock, c)
    setup = recipes.run_setup(c)
    assert all("#    " + shlex.join(step) in text.splitlines() for step in setup)  # printed as step 0
    assert ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "efa-preflight", "-f"] == setup[2][:9]
    assert setup[2][9] == "/fsx/pf/r1/ssh/id_ed25519"
    assert setup[4] == ["cp", "/home/me/hosts", "/fsx/pf/r1/hostfile"]
    words = shlex.split(text.splitlines()[-1])
    assert words[words.index("--json") + 1] == "/fsx/pf/r1/preflight-report.json"
    assert words[words.index("-J") + 1] == "/fsx/pf/r1/nccl-tests.json"
    assert words[words.index("--hostfile") + 1] == "/fsx/pf/r1/hostfile"
    rsh = words[words.index("plm_rsh_args") + 1]
    assert "-p 2222 -i /etc/efa-preflight-ssh/id_ed25519 -o IdentitiesOnly=yes" in rsh
    mine = recipes.render("mpirun", lock, dict(c, json_output="/elsewhere/x.json"))
    assert "-J /elsewhere/x.json" in mine  # an absolute one asked for stays where asked
    # a base's own sshd (the DLC's) gets the same key and port, its host keys made at start
    run = recipes.worker_docker_run(lock, c)
    assert run[-3:-1] == ["/bin/sh", "-c"]
    assert run[-1].endswith(
        "-p 2222 -o StrictModes=no -o AuthorizedKeysFile=/etc/efa-preflight-ssh/authorized_keys"
    )
    # the MPIJob keeps its own report path and the operator's ssh: no key of the recipe's
    job = yaml.safe_load(recipes.mpijob_manifest(lock, dict(c, report_volume={"pvc": "r"})))
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert "plm_rsh_args" not in command and command[command.index("--json") + 1].startswith("/efa-preflight")
    with pytest.raises(UserError) as err:
        recipes.render("mpirun", lock, dict(c, output_dir=None))
    assert err.value.key == "output_dir"
    with pytest.raises(UserError) as err:  # docker's --mount is a CSV record: a quote cannot pass
        recipes.render("mpirun", lock, dict(c, output_dir='/fsx/a"b'))
    assert err.value.key == "output_dir" and err.value.line == 4


def test_sbatch_puts_nccl_tests_json_in_the_jobs_shared_folder(tmp_path):
    """-J was a relative name: rank 0's pyxis container wrote it in its working folder, not beside the logs
    and the report. Now it is $PREFLIGHT_OUT/<name>, which every step mounts; an absolute one stays."""
    lock = dict(LOCK, components=dict(LOCK["components"], nccl_tests={"version": "2.19.6"}))
    c = _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\n")
    step1 = next(line for line in recipes.sbatch_script(lock, c).splitlines() if line.startswith("srun"))
    assert ' -J "$PREFLIGHT_OUT"/nccl-tests.json ' in step1
    mine = recipes.sbatch_script(lock, dict(c, json_output="/fsx/x.json"))
    assert " -J /fsx/x.json " in next(line for line in mine.splitlines() if line.startswith("srun"))


def test_mpijob_writes_every_file_absolute_on_its_report_volume_which_rank_0_mounts(tmp_path):
    """-J was a relative name: rank 0 (in worker-0, mpi-operator's launcher runs no rank) wrote it in its
    working folder, lost with the pod and never beside the report. Now every file the MPIJob writes is an
    absolute path on the report volume, per job name, and the workers mount that volume where the launcher
    does, so the launcher's validator reads -J's JSON where it exists; an absolute json_output stays."""
    lock = dict(LOCK, components=dict(LOCK["components"], nccl_tests={"version": "2.19.6"}))
    c = _cluster(
        tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\ncontainer_image: r/i:1\nname: pf\n" + REPORT
    )
    job = yaml.safe_load(recipes.mpijob_manifest(lock, c))
    replicas = job["spec"]["mpiReplicaSpecs"]
    command = replicas["Launcher"]["template"]["spec"]["containers"][0]["command"]
    mount = recipes.REPORT_MOUNT
    assert command[command.index("--json") + 1] == mount + "/pf-report.json"
    assert command[command.index("-J") + 1] == mount + "/pf-nccl-tests.json"
    written = [command[i + 1] for i, w in enumerate(command) if w in ("--json", "-J", "--log", "--markdown")]
    assert written and all(w.startswith(mount + "/") for w in written), written
    volume = {"name": "report", "persistentVolumeClaim": {"claimName": "reports"}}
    for role in ("Launcher", "Worker"):
        pod = replicas[role]["template"]["spec"]
        assert volume in pod["volumes"], role
        assert {"name": "report", "mountPath": mount} in pod["containers"][0]["volumeMounts"], role
    mine = yaml.safe_load(recipes.mpijob_manifest(lock, dict(c, json_output="/fsx/x.json")))
    command = mine["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("-J") + 1] == "/fsx/x.json"  # an absolute one asked for stays where asked
