"""The breaks issue 32 (item 3) names, one by one: files a verb reads that hung it or ended in a traceback.
Each is exit 2 naming the file (and the key where one is wrong), read bounded and typed;
tests/test_file_inputs.py walks every file flag of every verb with the same kinds of input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli import build_py, build_py_process

SUMMARY = {"schema": "efa-image-build/build-summary/v1", "variants": []}


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("verb", ["verify", "attest", "release"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_key_that_is_a_fifo_or_a_device_is_exit_2(tmp_path, verb, kind):
    """A FIFO as --key hung verify/attest/release; /dev/zero grew to a MemoryError traceback."""
    key = str(_fifo(tmp_path)) if kind == "fifo" else "/dev/zero"
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    summary = tmp_path / "summary.json"
    argv = {
        "verify": ["verify", "localhost:1/x@sha256:" + "a" * 64, "--key", key],
        "attest": ["attest", "--summary", summary, "--sign-key", key, "--registry", "localhost:1"],
        "release": ["release", "--summary", summary, "--require-signed", key, "--registry", "localhost:1"],
    }[verb]
    try:
        proc = build_py_process(*argv, "--attempts", "1", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{verb} hung on a {kind} key")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and key in proc.stderr, proc.stderr
    assert "not a regular file" in proc.stderr


LOCK = {"name": "v", "env": [{"name": "FI_PROVIDER", "value": "efa"}], "components": {}}


@pytest.mark.parametrize(
    "doc, key",
    [
        ({"env": "x"}, "key 'env'"),
        ({"env": [{"name": 5}]}, "key 'env[0].name'"),
        ({"env": [], "components": []}, "key 'components'"),
        ({"env": [], "components": {"nccl": "2.27"}}, "key 'components.nccl'"),
    ],
)
def test_preflight_lock_of_the_wrong_types_is_exit_2_naming_the_key(tmp_path, doc, key):
    """`preflight --lock` checked only that "env" exists: other types were tracebacks."""
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps(doc))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\n")
    res = build_py("preflight", "--print", "mpirun", "--lock", lock, "--cluster", cluster)
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert f"{lock}: {key}" in res.err, res.err


def test_preflight_lock_that_is_a_fifo_is_exit_2(tmp_path):
    fifo = _fifo(tmp_path)
    proc = build_py_process("preflight", "--print", "mpirun", "--lock", fifo, "--cluster", fifo, timeout=60)
    assert proc.returncode == 2 and f"{fifo}: key '--lock': not a regular file (a FIFO)" in proc.stderr


@pytest.mark.parametrize(
    "summary, lock, words",
    [
        ([], None, "build summary must be a JSON object"),
        ({"schema": SUMMARY["schema"], "variants": [{"variant": ["a"]}]}, None, "key 'variants[0].variant'"),
        (None, "/dev/zero", "/dev/zero: not a regular file (a character device)"),
        (None, "lock.json", "key 'env'"),
    ],
)
def test_build_test_reads_the_summary_and_the_locks_bounded_and_typed(tmp_path, summary, lock, words):
    """`build.py test --out` with a summary.json of `[]`, or a lock path of /dev/zero, was a traceback."""
    out = tmp_path / "build"
    out.mkdir()
    if lock == "lock.json":
        (tmp_path / "lock.json").write_text(json.dumps({"env": {"a": 1}}))
        lock = str(tmp_path / "lock.json")
    entry = {"variant": "v", "status": "built", "image_id": "sha256:" + "1" * 64, "lock": lock}
    doc = summary if summary is not None else dict(SUMMARY, variants=[entry])
    (out / "summary.json").write_text(json.dumps(doc))
    res = build_py("test", "--out", out)
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert words in res.err, res.err


@pytest.mark.parametrize(
    "record, key",
    [
        ({"digest": ["sha256:a"]}, "key 'digest'"),
        ({"channels": 7}, "key 'channels'"),
        ({"channels": [{"digest": 5}]}, "key 'channels[0].digest'"),
        ({"index": []}, "key 'index'"),
        ({"index": {"manifests": 3}}, "key 'index.manifests'"),
    ],
)
def test_prune_refuses_a_record_of_the_wrong_types_before_it_touches_the_engine(tmp_path, record, key):
    """prune tracebacked on a record whose digest, channels or index had the wrong type. The records are
    read before the engine is asked: DOCKER_HOST points at nothing here."""
    records = tmp_path / "releases"
    (records / "v").mkdir(parents=True)
    path = records / "v" / "r1.json"
    path.write_text(json.dumps(record))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(SUMMARY))
    argv = ["prune", "--summary", summary, "--records", records, "--dry-run", "--engine-only"]
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    proc = build_py_process(*argv, env=env, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{path}: {key}" in proc.stderr, proc.stderr


def test_prune_of_an_age_past_any_date_and_records_that_are_no_folder_are_exit_2(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    res = build_py("prune", "--older-than", "999999w", "--dry-run", "--engine-only")
    assert res.rc == 2 and "key '--older-than'" in res.err and "longer than 100 years" in res.err, res.err
    fifo = _fifo(tmp_path)
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    argv = ["prune", "--summary", tmp_path / "summary.json", "--records", fifo, "--dry-run", "--engine-only"]
    proc = build_py_process(*argv, env=env, timeout=60)
    assert (
        proc.returncode == 2
        and f"{fifo}: key '--records': the release records folder is not a folder" in proc.stderr
    )


def test_a_json_input_nested_deeper_than_the_stack_is_exit_2_naming_it(tmp_path):
    """Attack on the JSON every verb reads (imagebuild/jsonfile.read_json): 100 000 nested arrays (200 KB)
    were a RecursionError traceback from json.loads (exit 1) for a --summary, a --checks report, a lock."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    res = build_py("release", "--summary", deep, "--tag", "r1", "--dry-run", "--registry", "127.0.0.1:9")
    assert res.rc == 2 and "Traceback" not in res.err and str(deep) in res.err, res.err
    assert "nested too deep" in res.err
