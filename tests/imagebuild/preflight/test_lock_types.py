"""`build.py preflight --lock` reads the lock's fields typed (issue 41, hostile input round five, item 7):
`components.nccl_tests.prefix: 5` (a number where a string is expected) was an AttributeError traceback in
the recipe; every lock field a recipe reads as text or a list is now exit 2 naming the file and the key."""

from __future__ import annotations

import json

import pytest
from cli import build_py

LOCK = {
    "name": "v1",
    "python": "/usr/bin/python3",
    "platform": "linux/amd64",
    "instance_types": ["p5.48xlarge"],
    "options": {"cuda_arch": "90"},
    "components": {"nccl_tests": {"prefix": "/opt/nccl-tests", "method": "source", "version": "2.19.6"}},
    "env": [{"name": "FI_EFA_USE_HUGE_PAGE", "value": "0"}],
}
IMAGE = "reg.example.com/img@sha256:" + "b" * 64


def _run(tmp_path, lock, recipe="mpirun"):
    (tmp_path / "lock.json").write_text(json.dumps(lock))
    (tmp_path / "cluster.yaml").write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [n1, n2]\n")
    return build_py("preflight", "--lock", tmp_path / "lock.json", "--cluster", tmp_path / "cluster.yaml",
                    "--print", recipe, "--image", IMAGE)  # fmt: skip


def test_the_well_typed_lock_prints_its_recipe(tmp_path):
    res = _run(tmp_path, LOCK)
    assert res.rc == 0 and "/opt/nccl-tests/bin/all_reduce_perf" in res.out, res.err


@pytest.mark.parametrize(
    "path, value",
    [
        (("components", "nccl_tests", "prefix"), 5),
        (("components", "nccl_tests", "method"), ["source"]),
        (("components", "nccl_tests", "version"), 2.19),
        (("platform",), 5),
        (("instance_types",), "p5.48xlarge"),
        (("options", "cuda_arch"), {"90": True}),
        (("python",), 3),
        (("name",), 1),
    ],
)
@pytest.mark.parametrize("recipe", ["mpirun", "sbatch"])
def test_a_lock_field_of_the_wrong_type_is_exit_2_naming_file_and_key(tmp_path, path, value, recipe):
    lock = json.loads(json.dumps(LOCK))
    target = lock
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    res = _run(tmp_path, lock, recipe)
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert f"{tmp_path / 'lock.json'}: key '{'.'.join(path)}'" in res.err, res.err
