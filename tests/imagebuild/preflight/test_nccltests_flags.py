"""nccl-tests flags from the cluster file (issue 34, item 3): -n, -w, -R and -J, each gated on the image's
nccl-tests and NCCL by version (NVIDIA/nccl-tests src/common.cu: -R from v2.13.10, -R 2 from v2.16.0, -J from
v2.17.3; AWS's nccl-tests scripts run -n 100: awslabs/awsome-distributed-ai
micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch at a59b4db5). Bad values are exit 2 naming file,
line and key, through the CLI as a user runs it."""

from __future__ import annotations

import json
import shlex

import pytest
from cli import build_py_process

from imagebuild.errors import UserError
from imagebuild.preflight import recipes

BINARY = "/opt/nccl-tests/bin/all_reduce_perf"
BASE = "-b 8 -e 16G -f 2 -g 1 -c 1".split()


def _lock(tests="2.19.6", nccl="2.27.7", **extra):
    comps = {"nccl_tests": {"version": tests, "prefix": "/opt/nccl-tests"}, "nccl": {"version": nccl}}
    comps.update(extra)
    return {"name": "v1", "python": "/usr/bin/python3", "components": comps, "env": []}


def _cluster(tmp_path, extra=""):
    p = tmp_path / "cluster.yaml"
    p.write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\n" + extra)
    return recipes.load_cluster(str(p))


def _argv(lock, cluster):
    words = recipes.probe_argv(lock, cluster)
    assert words[0] == BINARY
    return words[1:]


def test_defaults_are_100_iterations_and_json_where_nccl_tests_has_it(tmp_path):
    c = _cluster(tmp_path)
    assert _argv(_lock(), c) == BASE + ["-n", "100", "-J", "nccl-tests.json"]
    assert _argv(_lock(tests="2.17.3"), c)[-2:] == ["-J", "nccl-tests.json"]
    # 2.17.10 is newer than 2.17.3 (as strings it sorts before), 2.16.2 is older: no -J, nothing asked by name
    assert _argv(_lock(tests="2.17.10"), c)[-2:] == ["-J", "nccl-tests.json"]
    assert _argv(_lock(tests="2.16.2"), c) == BASE + ["-n", "100"]


def test_keys_become_flags(tmp_path):
    c = _cluster(tmp_path, "iters: 50\nwarmup_iters: 5\nregister: 1\njson_output: /fsx/out/run.json\n")
    assert _argv(_lock(), c) == BASE + ["-n", "50", "-w", "5", "-R", "1", "-J", "/fsx/out/run.json"]
    c = _cluster(tmp_path, "register: 2\njson_output: false\nwarmup_iters: 0\n")
    assert _argv(_lock(), c) == BASE + ["-n", "100", "-w", "0", "-R", "2"]


@pytest.mark.parametrize(
    "lock, extra, says",
    [
        (_lock(tests="2.13.9"), "register: 1\n", "-R 1 needs nccl-tests >= 2.13.10; the image has 2.13.9"),
        (_lock(nccl="2.18.5"), "register: 1\n", "-R 1 needs NCCL >= 2.19.0; the image has 2.18.5"),
        (_lock(tests="2.15.0"), "register: 2\n", "-R 2 needs nccl-tests >= 2.16.0"),
        (_lock(nccl="2.26.2"), "register: 2\n", "-R 2 needs NCCL >= 2.27.0; the image has 2.26.2"),
        (_lock(tests="2.16.2"), "json_output: x.json\n", "-J needs nccl-tests >= 2.17.3"),
        (_lock(), "register: 3\n", "must be 0, 1 or 2"),
        (_lock(), "register: true\n", "must be 0, 1 or 2"),
        (_lock(), "iters: 0\n", "must be a whole number from 1"),
        (_lock(), "iters: '100'\n", "must be a whole number from 1"),
        (_lock(), "warmup_iters: -1\n", "must be a whole number from 0"),
        (_lock(), "json_output: '-o'\n", "must be a file name"),
        (_lock(), "json_output: true\n", "must be a file name"),
        (_lock(), "test_args: '-b 8'\niters: 5\n", "test_args gives every nccl-tests flag verbatim"),
    ],
)
def test_what_the_image_cannot_do_or_a_bad_value_is_refused_naming_the_key(tmp_path, lock, extra, says):
    c = _cluster(tmp_path, extra)
    with pytest.raises(UserError) as err:
        recipes.probe_argv(lock, c)
    key = extra.split(":")[0] if not extra.startswith("test_args") else "iters"
    assert says in err.value.message and err.value.key == key
    assert err.value.file == str(tmp_path / "cluster.yaml") and err.value.line == extra.count("\n") + 3


def test_test_args_alone_stay_verbatim(tmp_path):
    c = _cluster(tmp_path, "test_args: '-b 1M -e 1G -n 7'\n")
    assert _argv(_lock(), c) == ["-b", "1M", "-e", "1G", "-n", "7"]


def test_the_torch_probe_refuses_nccl_tests_keys(tmp_path):
    lock = {
        "name": "t",
        "python": "/usr/bin/python3",
        "components": {"torch": {"version": "2.7.1"}},
        "env": [],
    }
    with pytest.raises(UserError) as err:
        recipes.probe_argv(lock, _cluster(tmp_path, "timeout: 60\niters: 10\n"))
    assert err.value.key == "iters" and "torch probe" in err.value.message


def test_the_printed_recipe_carries_them_and_a_bad_one_is_exit_2_with_nothing_printed(tmp_path):
    lock = tmp_path / "variant.lock.json"
    lock.write_text(json.dumps(_lock()))
    image = "localhost:5000/x@sha256:" + "a" * 64
    good = tmp_path / "good.yaml"
    good.write_text(
        "nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\niters: 20\nregister: 1\noutput_dir: /fsx/pf\n"
    )
    res = build_py_process(
        "preflight", "--print", "mpirun", "--cluster", good, "--lock", lock, "--image", image
    )
    assert res.returncode == 0, res.stderr
    words = shlex.split(res.stdout)
    at = words.index(BINARY)
    # -J under the mpirun recipe's shared run folder, an absolute path (rank 0's host writes it)
    assert words[at + 1 :] == BASE + ["-n", "20", "-R", "1", "-J", "/fsx/pf/efa-preflight/nccl-tests.json"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\nregister: 2\noutput_dir: /fsx/pf\n")
    lock.write_text(json.dumps(_lock(nccl="2.26.2")))
    res = build_py_process(
        "preflight", "--print", "mpirun", "--cluster", bad, "--lock", lock, "--image", image
    )
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert f"{bad}:4" in res.stderr and "register" in res.stderr and "NCCL >= 2.27.0" in res.stderr
