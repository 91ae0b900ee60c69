"""A pre-flight cluster file every recipe loads (two p5 nodes, each launcher's keys), for the tests that
change one key of it and load or print it."""

from __future__ import annotations

from pathlib import Path

import yaml

CLUSTER = {
    "nodes": 2,
    "instance_type": "p5.48xlarge",
    "container_image": "reg.example.com/img:1",
    "hosts": ["n1", "n2"],
    "partition": "gpu",
    "account": "team",
    "name": "efa-preflight",
    "namespace": "default",
    "master_addr": "n1",
}


def write_cluster(folder: Path, doc: dict) -> str:
    """`doc` as `folder`/cluster.yaml, its keys in the order given (a test finds a key's line by it)."""
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)
