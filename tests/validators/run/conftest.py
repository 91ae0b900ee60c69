"""The image the recipe-running tests of this folder share (tests/twohost.py): built once per session."""

from __future__ import annotations

import pytest
from twohost import build_image


@pytest.fixture(scope="session")
def dlc_extend_image(docker_client, local_base, tmp_path_factory) -> str:
    """matrix.local.yaml's local-dlc-layout-extend, built (or reused by its content tag) once."""
    return build_image(tmp_path_factory.mktemp("dlc-extend") / "build")
