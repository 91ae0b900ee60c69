"""Where render finds the files the tool ships (imagebuild/render/shipped.py): in a checkout, its top-level
folders; a broken install is exit 2 naming where it looked, never a TemplateNotFound traceback. The
installed wheel's side is tests/imagebuild/test_wheel_install.py."""

from __future__ import annotations

import pytest
from paths import ROOT

from imagebuild.errors import UserError
from imagebuild.render import shipped


def test_a_checkout_reads_its_own_folders():
    assert shipped.templates() == ROOT / "Dockerfile.templates"
    assert shipped.ci_examples() == ROOT / "examples" / "ci"
    assert shipped.validators() == (ROOT / "validators" / "efa_validators").resolve()


def test_missing_files_are_a_user_error_naming_each_place(tmp_path):
    places = (tmp_path / "in-the-package", tmp_path / "in-a-checkout")
    with pytest.raises(UserError) as err:
        shipped._first("Dockerfile templates", places)  # noqa: SLF001
    assert all(str(p) in str(err.value) for p in places) and "reinstall efa-image-build" in str(err.value)
