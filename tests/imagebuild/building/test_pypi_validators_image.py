"""PyPI's `validators` (the import name the tool's validator package had before issue 30's rename) in a
training image's requirements: the image builds, and in it both `import validators` (theirs, from the
requirements) and `python -m efa_validators` (ours, the copy every image carries) run, with no network.

The wheel comes as the user-steps test's six does: the build's pip fetches it by its hash-pinned line."""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py, validators
from paths import ROOT
from userproject import SIX_HASHED, project

# validators 0.34.0, pure Python with no dependencies (its METADATA lists only an extra): the sha256 of
# validators-0.34.0-py3-none-any.whl as PyPI serves it (`pip download --no-deps --only-binary :all:
# validators==0.34.0`, then sha256sum, December 2026).
VALIDATORS_SHA = "c804b476e3e6d3786fa07a30073a4ef694e617805eb1946ceee3fe5a9b8b1321"
REQUIREMENTS = SIX_HASHED + f"validators==0.34.0 \\\n    --hash=sha256:{VALIDATORS_SHA}\n"
LOG = ROOT / "tests" / "fixtures" / "logs" / "gdr-disabled-p4d.log"  # a failing verdict: rc 1, findings

IN_IMAGE = """\
python3 -c 'import validators, efa_validators
print(validators.__version__, validators.__file__, efa_validators.__file__)
print(validators.url("https://example.org/"), bool(validators.url("not a url")))'
echo ---; python3 -m efa_validators --help
echo ---; printf '%s' "$LOG" | python3 -m efa_validators parse -; echo "rc=$?"
"""


@pytest.fixture
def repo(docker_client):
    """A repository name no other test or helper uses; its images are removed at the end."""
    name = f"efa-image-build-test/pypi-validators-{uuid.uuid4().hex[:12]}"
    yield name
    for image in docker_client.images.list(name=name):
        docker_client.images.remove(image.id, force=True)


@pytest.mark.docker
@pytest.mark.slow
def test_pypis_validators_and_efa_validators_both_run_in_the_image(tmp_path, docker_client, local_base, repo):
    path = project(tmp_path, REQUIREMENTS, base=local_base, repo=repo)
    out = tmp_path / "build"
    res = build_py("build", "--matrix", path, "--out", out, "--builder", "classic", "--plain")
    log = out / "usersteps" / "build.log"
    assert res.rc == 0, res.err + (log.read_text()[-3000:] if log.exists() else "")
    entry = json.loads((out / "summary.json").read_text())["variants"][0]
    image = docker_client.images.get(entry["image_id"])
    assert any(t.startswith(f"{repo}:") for t in image.tags), image.tags

    text = LOG.read_text()
    said = docker_client.containers.run(
        image.id, ["bash", "-c", IN_IMAGE], environment={"LOG": text}, network_disabled=True, remove=True
    ).decode()
    imported, helped, parsed = said.split("---\n")
    lines = imported.splitlines()
    assert len(lines) == 2 and len(lines[0].split()) == 3, imported  # else a traceback: the import failed
    version, theirs, ours = lines[0].split()
    assert version == "0.34.0", imported
    assert theirs.endswith("/validators/__init__.py") and "/usr/local/lib/python3" in theirs, theirs
    assert ours == "/opt/efa-image-build/efa_validators/__init__.py", ours
    assert lines[1] == "True False", imported  # theirs works, not only imports
    assert "node-check" in helped and "parse" in helped, helped
    host = validators("parse", "-", stdin=text)  # the same code on the host: the same report, the same rc
    assert host.rc == 1 and parsed == f"{host.out}rc={host.rc}\n", parsed
