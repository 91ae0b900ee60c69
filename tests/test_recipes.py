"""Launch recipes from a lock and a cluster description: the exact words, quoting, and user errors."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
import yaml

from imagebuild import recipes
from imagebuild.errors import UserError

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


def _cluster(tmp_path, text):
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return recipes.load_cluster(str(p))


def test_mpirun_line_has_env_hostfile_and_runs_under_the_validator(tmp_path):
    c = _cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarge\nhostfile: /shared/my hosts\n")
    line = recipes.mpirun_line(LOCK, c)
    words = shlex.split(line)
    assert words[:4] == ["/usr/bin/python3", "-m", "validators", "run"]
    mp = words[words.index("--") + 1 :]
    assert mp[:5] == ["mpirun", "-np", "16", "-N", "8"]
    assert "--hostfile" in mp and mp[mp.index("--hostfile") + 1] == "/shared/my hosts"
    xs = [mp[i + 1] for i, w in enumerate(mp) if w == "-x"]
    assert xs == ["NCCL_DEBUG=INFO", "FI_EFA_USE_HUGE_PAGE=0", "LD_LIBRARY_PATH", "NCCL_WEIRD=a b;'q' & x"]
    assert "SAGEMAKER_PROGRAM" not in line
    assert "/opt/nccl-tests/bin/all_reduce_perf" in mp


def test_sbatch_script_is_valid_bash_with_pyxis_flags(tmp_path):
    c = _cluster(
        tmp_path, "nodes: 4\ninstance_type: p5en.48xlarge\ncontainer_image: 'repo/img:1'\npartition: gpu\n"
    )
    text = recipes.sbatch_script(LOCK, c)
    assert "#SBATCH --nodes=4" in text and "#SBATCH --partition=gpu" in text
    assert "srun --mpi=pmix -l --container-image=repo/img:1" in text
    assert "export NCCL_WEIRD=" + shlex.quote("a b;'q' & x") in text
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def test_mpijob_requests_efa_gpus_hugepages_and_shm(tmp_path):
    c = _cluster(tmp_path, "nodes: 2\ninstance_type: p4d.24xlarge\ncontainer_image: repo/img:1\n")
    doc = yaml.safe_load(recipes.mpijob_manifest(LOCK, c))
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    res = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert res["vpc.amazonaws.com/efa"] == 4 and res["nvidia.com/gpu"] == 8 and "hugepages-2Mi" in res
    assert worker["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"
    cmd = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:4] == ["/usr/bin/python3", "-m", "validators", "run"] and "NCCL_WEIRD=a b;'q' & x" in cmd


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("nodes: 2\ninstance_type: p5.48xlarge\nnodez: 3\n", "nodez", 3),
        ("nodes: 0\ninstance_type: p5.48xlarge\n", "nodes", 1),
        ("nodes: 2\ninstance_type: p77.huge\n", "instance_type", 2),
        ("instance_type: p5.48xlarge\n", "nodes", 1),
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
    cl.write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\n")
    run = [sys.executable, str(project_root / "build.py"), "preflight"]
    ok = subprocess.run(
        run + ["--print", "mpirun", "--cluster", str(cl), "--lock", str(lock)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "-H a:8,b:8" in ok.stdout
    bad = subprocess.run(
        run + ["--print", "sbatch", "--cluster", str(cl), "--lock", str(lock)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "container_image" in bad.stderr and "Traceback" not in bad.stderr


def test_build_py_preflight_sagemaker_delegates(project_root):
    """--sagemaker goes to imagebuild.sagemaker (issue 6); --dry-run prints the request, touches nothing."""
    pytest.importorskip("imagebuild.sagemaker")
    digest = "a" * 64
    proc = subprocess.run(
        [
            sys.executable,
            str(project_root / "build.py"),
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
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ml.p5.48xlarge" in proc.stdout
