"""Names checked with a pattern ending in `$` accepted a trailing newline (issue 41, hostile input round five,
item 5): `$` matches before a final "\\n", so `re.match(r"^...$", "efa-preflight\\n")` matched. A cluster
file's `name: "efa-preflight\\n"` printed an MPIJob whose name held a newline, and a partition or host with
one was refused only at print time, naming --lock instead of the cluster file's line and key. Every such
check is a fullmatch now."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from clusterfile import CLUSTER

from imagebuild.building.artifacts import artifacts_from_lock
from imagebuild.building.bake import TARGET_NAME
from imagebuild.errors import UserError
from imagebuild.preflight import quoting, recipes
from imagebuild.preflight import sagemaker as smk

BASE = dict(CLUSTER, hugepages="5120Mi")


@pytest.mark.parametrize(
    "key, value",
    [
        ("name", "efa-preflight\n"),
        ("namespace", "default\n"),
        ("partition", "gpu\n"),
        ("account", "team\n"),
        ("hosts", ["n1\n", "n2"]),
        ("master_addr", "n1\n"),
        ("hugepages", "5120Mi\n"),
        ("instance_type", "p5.48xlarge\n"),
    ],
)
def test_a_trailing_newline_is_refused_at_load_naming_file_line_and_key(tmp_path, key, value):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(dict(BASE, **{key: value}), sort_keys=False))
    with pytest.raises(UserError) as err:
        recipes.load_cluster(str(path))
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if text.startswith(key))
    assert (err.value.file, err.value.key, err.value.line) == (str(path), key, line), err.value


@pytest.mark.parametrize(
    "place, good",
    [("host", "n1"), ("instance_type", "p5.48xlarge"), ("k8s_name", "efa-preflight"),
     ("k8s_label_key", "node.kubernetes.io/instance-type"), ("k8s_label_value", "p5"),
     ("slurm_name", "gpu"), ("env_name", "NCCL_DEBUG"), ("quantity", "5120Mi")],
)  # fmt: skip
def test_no_place_takes_a_value_with_a_trailing_newline(place, good):
    assert quoting.why_not(good, place) is None
    assert quoting.why_not(good + "\n", place) is not None


def test_sagemaker_role_and_job_name_with_a_trailing_newline_are_refused():
    opts = smk.SageMakerOptions(image="r/i@sha256:" + "a" * 64, instance_type="p5.48xlarge",
                                role_arn="arn:aws:iam::123456789012:role/pf\n", job_name="pf")  # fmt: skip
    with pytest.raises(UserError) as err:
        smk.build_request(opts)
    assert err.value.key == "--role-arn"
    opts = dataclasses.replace(opts, role_arn="arn:aws:iam::123456789012:role/pf", job_name="pf\n")
    with pytest.raises(UserError) as err:
        smk.build_request(opts)
    assert err.value.key == "--job-name"


def test_artifact_pins_and_names_with_a_trailing_newline_are_refused():
    good = {"kind": "url", "url": "https://example.com/a.tar", "sha256": "a" * 64}
    assert artifacts_from_lock({"components": {"c": {"artifacts": [good]}}})
    for bad, key in (
        (dict(good, sha256="a" * 64 + "\n"), "sha256"),
        (dict(good, file="a.tar\n"), "file"),
        ({"kind": "git", "url": "https://example.com/r.git", "commit": "b" * 40 + "\n"}, "commit"),
    ):
        with pytest.raises(UserError) as err:
            artifacts_from_lock({"components": {"c": {"artifacts": [bad]}}})
        assert err.value.key == f"components.c.artifacts[0].{key}"
    assert TARGET_NAME.fullmatch("v1") and not TARGET_NAME.fullmatch("v1\n")
