"""The image fixture of the recipe-running tests (tests/twohost.py says which): a plugin module
(`pytest_plugins = ["twohost_fixtures"]` in those tests), since a conftest.py in tests/validators/run/ would
shadow the `conftest` module other tests import from."""

from __future__ import annotations

import pytest
from twohost import build_image


@pytest.fixture(scope="session")
def dlc_extend_image(docker_client, local_base, tmp_path_factory) -> str:
    """matrix.local.yaml's local-dlc-layout-extend, built (or reused by its content tag) once."""
    return build_image(tmp_path_factory.mktemp("dlc-extend") / "build")
