"""A small training project with a hash-pinned requirement, shared by the user-steps and cache-mount tests."""

from __future__ import annotations

import os
from pathlib import Path

# six 1.16.0, a tiny pure-Python wheel: the sha256 of six-1.16.0-py2.py3-none-any.whl as PyPI serves it
# (`pip download --no-deps --only-binary :all: six==1.16.0`, then sha256sum). The first build may come
# from the engine's layer cache, so what the image holds is asked of the image itself.
SIX_SHA = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"
SIX_HASHED = f"six==1.16.0 \\\n    --hash=sha256:{SIX_SHA}\n"
REPO = f"efa-image-build-test/usersteps-{os.getpid()}"

MATRIX = """\
format: efa-image-build/matrix/v1
variants:
  - name: usersteps
    base: {{image: {base}, kind: local, os: debian12}}
    packages: [python3=3.11.2-1+b1]
    options: {{build_ca: true}}
    training: {{source_dir: training, entry_point: train.py, requirements: requirements.txt}}
    build_steps:
      - python3 -c 'import six; print(six.__version__)' > /opt/six-version
    tags: ["{repo}:probe-{{content_hash}}"]
"""


def project(
    tmp_path: Path, requirements: str, base: str = "localbase/debian:bookworm-minbase", repo: str = REPO
) -> Path:
    """The project's matrix, its training folder holding `requirements`; its image is tagged `repo`."""
    (tmp_path / "training").mkdir(exist_ok=True)
    (tmp_path / "training" / "train.py").write_text("print('v1')\n")
    (tmp_path / "training" / "requirements.txt").write_text(requirements)
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.format(base=base, repo=repo))
    return path
