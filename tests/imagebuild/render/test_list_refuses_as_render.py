"""`list` refuses what `render` refuses (issue 30, item 4): a CI plan job fans out over `list --json`, so a
matrix every build job would then fail to render must fail the plan, with the same exit status and message.
Refusals that only rendering finds (the training folder's files, the env linter) are the ones that matter:
loading alone passes them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli import build_py

MATRIX = """\
format: efa-image-build/matrix/v1
variants:
  - name: lt
    base: {{image: localbase/debian:bookworm-minbase, kind: local, os: debian12, python: /usr/bin/python3}}
    packages: [python3=3.11.2-1+b1]
    cuda: "12.8"
    components:
      cuda_runtime: {{version: "12.8.90", method: wheel}}
      nccl: {{version: "2.27.7", method: wheel}}
    env: {env}
    training: {{source_dir: training, entry_point: train.py}}
    tags: ["efa-image-build-test/lt:{{name}}-{{content_hash}}"]
"""


def _project(tmp_path: Path, env: str = "{}") -> Path:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "train.py").write_text("print(1)\n")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX.format(env=env))
    return matrix


def _symlink_out(tmp_path: Path) -> Path:
    matrix = _project(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("not for an image\n")
    os.symlink(secret, tmp_path / "training" / "leak")
    return matrix


def _forced_algorithm(tmp_path: Path) -> Path:
    return _project(tmp_path, env="{NCCL_ALGO: Ring}")  # an env-linter error with NCCL >= 2.12


@pytest.mark.parametrize(
    "make, rc, says",
    [(_symlink_out, 2, "training/leak"), (_forced_algorithm, 1, "NCCL_ALGO=Ring")],
    ids=["symlink-in-training-code", "env-linter-error"],
)
def test_list_refuses_what_render_refuses(tmp_path, make, rc, says):
    matrix = make(tmp_path)
    out = tmp_path / "out"
    listed = build_py("list", "--matrix", matrix)
    as_json = build_py("list", "--json", "--matrix", matrix)
    rendered = build_py("render", "--matrix", matrix, "--out", out)
    assert rendered.rc == rc and says in rendered.err, rendered
    assert listed.rc == rc and as_json.rc == rc, (listed, as_json)
    assert listed.err.splitlines()[-1] == rendered.err.splitlines()[-1]
    assert listed.out == as_json.out == "" and not out.exists()


def test_list_passes_what_render_passes(tmp_path):
    matrix = _project(tmp_path)
    listed = build_py("list", "--matrix", matrix)
    rendered = build_py("render", "--matrix", matrix, "--out", tmp_path / "out")
    assert listed.rc == rendered.rc == 0, (listed, rendered)
    assert listed.out.splitlines()[1].split()[0] == "lt"
    assert not (tmp_path / "build").exists()  # list wrote nothing
