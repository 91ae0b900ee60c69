"""The one quoting layer: every cluster-file string is refused at load where it cannot be printed safely, and
whatever loads prints scripts that bash parses and whose header runs nothing a value smuggled in."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from cli import build_py_process
from clusterfile import CLUSTER, write_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.errors import UserError
from imagebuild.preflight import recipes

LOCK = {
    "name": "v1",
    "python": "/usr/bin/python3",
    "components": {"nccl_tests": {"prefix": "/opt/nccl-tests"}, "torch": {"version": "2.7.0"}},
    "env": [{"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"}],
}
TORCH_LOCK = dict(LOCK, components={"torch": {"version": "2.7.0"}})
IMAGE = "reg.example.com/img@sha256:" + "b" * 64
BASE = dict(
    CLUSTER,
    name="pf",
    test_args="-b 8 -e 1M",
    report_volume={"pvc": "reports"},
    output_dir="/fsx/preflight",  # the mpirun recipe's shared folder (its key, -J and report)
)


@pytest.mark.parametrize(
    "key, value",
    [
        ("partition", "gpu\ntouch /tmp/pwned"),  # ends the #SBATCH line: bash runs the next one
        ("account", "team --wrap=x"),
        ("name", "pf\n#SBATCH --uid=0"),
        ("hosts", ["a,evil", "b"]),  # one more host in mpirun -H
        ("hosts", ["a:9", "b"]),
        ("master_addr", "n1\ntouch /tmp/pwned"),  # pasted into the torchrun script's comment
        ("master_addr", "$(touch /tmp/pwned)"),
        ("output_dir", "/fsx/a,/etc:/mnt"),  # one more pyxis mount
        ("output_dir", "relative/dir"),
        ("hostfile", "/shared/h\nx"),
        ("namespace", "Default"),
        ("test_args", "-b 'unbalanced"),
        ("container_image", "reg.example.com/img:1\n"),
        ("hugepages", "5 Gi; rm"),
        ("node_selector", {"team": "a b"}),
        ("node_selector", {"bad key!": "x"}),
        ("tolerations", [{"key": "k", "operator": "Sometimes"}]),
        ("tolerations", [{"key": "k", "command": "x"}]),
        ("report_volume", {"pvc": "r", "host_path": "/x"}),
        ("report_volume", {"host_path": "/x,y:z"}),
        ("imex", "yes"),
    ],
)
def test_a_value_that_cannot_land_safely_is_refused_at_load_with_file_line_key(tmp_path, key, value):
    path = write_cluster(tmp_path, dict(BASE, **{key: value}))
    with pytest.raises(UserError) as err:
        recipes.load_cluster(path)
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if text.startswith(key))
    assert (err.value.file, err.value.key, err.value.line) == (path, key, line)


def test_an_instance_type_that_is_no_eks_label_value_is_refused_even_with_counts_given(tmp_path):
    long = "p5." + "x" * 30 + "." + "x" * 30  # a host name; as an EKS label value over 63
    path = write_cluster(tmp_path, dict(BASE, instance_type=long, gpus_per_node=8, efa_devices=32))
    with pytest.raises(UserError) as err:
        recipes.load_cluster(path)
    assert err.value.key == "instance_type" and "label value" in err.value.message


def test_build_py_refuses_a_hostile_host_with_exit_2_and_prints_nothing(tmp_path):
    import json

    lock = tmp_path / "variant.lock.json"
    lock.write_text(json.dumps(LOCK))
    path = write_cluster(tmp_path, dict(BASE, hosts=["a,evil"]))
    proc = build_py_process(
        "preflight", "--print", "mpirun", "--cluster", path, "--lock", lock, "--image", IMAGE, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "key 'hosts'" in proc.stderr and path in proc.stderr and "not a host name" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_lock_value_that_cannot_be_printed_is_a_user_error_not_a_traceback(tmp_path):
    cluster = recipes.bind_image(recipes.load_cluster(write_cluster(tmp_path, BASE)), IMAGE)
    for kind in ("mpirun", "sbatch", "torchrun"):
        with pytest.raises(UserError) as err:
            recipes.render(kind, dict(TORCH_LOCK, python="/usr/bin/python3\ntouch /tmp/p"), cluster)
        assert err.value.key == "--lock" and "control byte" in err.value.message


def test_a_lock_env_name_that_is_not_a_name_is_refused(tmp_path):
    lock = dict(LOCK, env=[{"name": "NCCL_X;touch /tmp/p", "value": "1"}])
    cluster = recipes.load_cluster(write_cluster(tmp_path, BASE))
    with pytest.raises(UserError) as err:
        recipes.render("sbatch", lock, recipes.bind_image(cluster, IMAGE))
    assert err.value.key == "env"


# Hostile pieces: shell metacharacters, line ends, the separators of the lists values land in.
# MARK is replaced by a file that must never come to exist.
PIECES = [
    "$(touch MARK)", "`touch MARK`", ";touch MARK;", "\ntouch MARK\n", "|touch MARK", "&&touch MARK",
    "'", '"', "\\", "#", ",", ":", " ", "\r", "${IFS}", "\x1b[2J", "a", "-", ".", "/", "n1", "$MARKV", "\t",
    "*", "~", "{a,b}", ">MARK",
]  # fmt: skip
HOSTILE = st.lists(
    st.sampled_from(PIECES) | st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=3),
    min_size=1,
    max_size=6,
).map("".join)
FIELDS = list(recipes.FIELD_PLACES) + ["report_volume", "node_selector"]


def _shell_ok(script: str, cwd: str, args=(), env=None) -> subprocess.CompletedProcess:
    syntax = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    path = Path(cwd) / "script.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path), *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": cwd, **(env or {})},
        text=True,
        capture_output=True,
        timeout=30,
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=HOSTILE)
def test_hostile_strings_in_any_field_never_run(field, value):
    """Every recipe field gets a generated hostile string: either the cluster file is refused (exit-2
    error naming file, line and key), or every printed script parses (`bash -n`), its header runs
    harmlessly, the mpirun words are exactly the argv meant, and the marker file a smuggled command would
    make never exists."""
    with tempfile.TemporaryDirectory() as tmp:
        mark = Path(tmp) / "MARKED"
        value = value.replace("MARK", str(mark))
        if field in ("output_dir", "hostfile"):
            value = tmp + "/" + value  # absolute, and under the scratch folder if it is ever created
        doc = dict(BASE)
        if field == "hosts":
            doc["hosts"] = [value, "n2"]
        elif field == "report_volume":
            doc["report_volume"] = {"host_path": value}
        elif field == "node_selector":
            doc["node_selector"] = {"team": value}
        else:
            doc[field] = value
        path = write_cluster(Path(tmp), doc)
        try:
            cluster = recipes.bind_image(recipes.load_cluster(path), IMAGE)
        except UserError as err:
            assert err.key and (err.file == path or err.key in ("--image", "container_image")), err
            return
        for kind, lock in (("mpirun", LOCK), ("sbatch", LOCK), ("torchrun", TORCH_LOCK), ("mpijob", LOCK)):
            try:
                text = recipes.render(kind, lock, cluster)
            except UserError as err:
                assert err.key, err
                continue
            if kind == "mpijob":
                job = list(yaml.safe_load_all(text))[-1]
                launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
                assert all(isinstance(w, str) for w in launcher["command"])
                continue
            if kind == "mpirun":  # every word expanded by bash, none run: printf instead of the launch
                *head, line = text.rstrip("\n").split("\n")
                proc = _shell_ok("\n".join(head + ["printf '%s\\0' " + line]), tmp)
                assert proc.stdout.split("\0")[:-1] == recipes.mpirun_argv(lock, cluster)
            elif kind == "sbatch":  # the header: everything before the first srun
                header = text[: text.index("run_rc=0")]
                proc = _shell_ok(header, tmp, env={"SLURM_JOB_ID": "7"})
                assert proc.returncode == 0, proc.stderr
            else:  # usage path, then a node that waits for node 0's mark and refuses: no rank starts
                assert _shell_ok(text, tmp).returncode == 2
                proc = _shell_ok(text, tmp, ["run"], {"NODE_RANK": "1", "PREFLIGHT_SHARED_WAIT": "0"})
                assert proc.returncode == 2 and "not shared" in proc.stderr, proc.stderr
            assert not mark.exists(), (kind, field, value)
