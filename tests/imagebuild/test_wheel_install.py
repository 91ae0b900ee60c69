"""The tool a team installs, not a repository it forks (issue 30, done when): the wheel, installed into a
fresh venv, runs from a folder that holds only a matrix and its training code (no checkout of the tool, no
PYTHONPATH) and renders, builds, checks and pushes one variant to a real registry; then PyPI's
`validators==0.34.0` goes into the same venv and every verb still runs (the validator's import name is
efa_validators: nothing of the tool is shadowed). A training requirement that would install the tool itself
is refused at load, at its line."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from cli import build_py, installed_process
from paths import ROOT
from services import RUN
from wheelvenv import VERSION, Venv

from imagebuild.adapters.registry import RegistryAPI
from imagebuild.cli import COMMANDS

pytest_plugins = ["services_fixtures"]
VARIANT = "local-debian-nccl2.27"  # the lightest local variant: the local base, Debian's packages, wheels


def _run(venv: Venv, cwd: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return installed_process(venv.bin, *argv, cwd=cwd, env=venv.env(), timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (
        f"{proc.args}: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _team_repo(where: Path, repo: str) -> Path:
    """A team's repository: matrix.local.yaml as its matrix.yaml (the default name), the checks file and the
    training code it names; its own repository name, so nothing here shares a tag with another test."""
    where.mkdir()
    text = (ROOT / "matrix.local.yaml").read_text()
    assert text.count('tags: ["efa-image-build/{name}:local-{content_hash}"]') == 1
    (where / "matrix.yaml").write_text(
        text.replace('"efa-image-build/{name}:local-{content_hash}"', f'"{repo}:{{name}}-{{content_hash}}"')
    )
    shutil.copy2(ROOT / "checks.local.yaml", where / "checks.local.yaml")
    shutil.copytree(ROOT / "examples" / "training", where / "examples" / "training")
    return where


@pytest.fixture
def cleanup_repo(docker_client):
    repo = f"efa-image-build-test/wheel-{RUN}-{uuid.uuid4().hex[:8]}"
    yield repo
    for image in docker_client.images.list():  # its own tags, and the registry refs push tagged it with
        for tag in image.tags:
            if tag.startswith(repo + ":") or f"/{repo}:" in tag:
                docker_client.images.remove(tag)


def _python(venv: Venv, cwd: Path, *argv: str) -> str:
    """The venv's own python (no PYTHONPATH): what it prints, after it exits 0."""
    cmd = [str(venv.bin / "python"), *argv]
    return _ok(subprocess.run(cmd, capture_output=True, text=True, env=venv.env(), timeout=60, cwd=cwd))


def test_the_wheel_carries_what_the_tool_reads(wheel_venv, tmp_path):
    """Templates, catalog, the validators, the CI examples: in the installed package, and read from there."""
    code = "import imagebuild, efa_validators; print(imagebuild.__file__, efa_validators.__file__)"
    package, validators = (Path(p).parent for p in _python(wheel_venv, tmp_path, "-c", code).split())
    assert wheel_venv.root in package.parents and validators.parent == package.parent
    wanted = [
        "catalog/components.yaml",
        "ci/github-actions.yml",
        "ci/buildspec.yml",
        "building/inspect_probe.sh",
    ]
    assert [rel for rel in wanted if not (package / rel).is_file()] == []
    templates = ROOT / "Dockerfile.templates"
    shipped = sorted(str(p.relative_to(templates)) for p in templates.rglob("*.j2"))
    assert sorted(
        str(p.relative_to(package / "templates")) for p in (package / "templates").rglob("*.j2")
    ) == (shipped)


@pytest.mark.docker
@pytest.mark.slow
def test_the_installed_wheel_renders_builds_checks_and_pushes_from_a_team_repo(
    wheel_venv, docker_client, local_base, registry, cleanup_repo, tmp_path
):
    venv = wheel_venv
    repo = _team_repo(tmp_path / "team", cleanup_repo)

    # the same files as a checkout renders: the templates and validators the wheel carries are the tree's
    _ok(_run(venv, repo, "render", "--variant", VARIANT))  # default matrix: ./matrix.yaml
    checkout = build_py(
        "render", "--matrix", repo / "matrix.yaml", "--variant", VARIANT, "--out", tmp_path / "co"
    )
    assert checkout.rc == 0, checkout
    for name in ("Dockerfile", "context.manifest.json", "variant.lock.json"):
        assert (repo / "build" / VARIANT / name).read_bytes() == (
            tmp_path / "co" / VARIANT / name
        ).read_bytes()
    # paths in the matrix are the matrix file's, wherever the command runs
    _ok(
        _run(
            venv,
            tmp_path,
            "render",
            "--matrix",
            "team/matrix.yaml",
            "--variant",
            VARIANT,
            "--out",
            "elsewhere",
        )
    )
    assert (tmp_path / "elsewhere" / VARIANT / "context" / "training" / "train.py").is_file()

    _ok(_run(venv, repo, "build", "--variant", VARIANT, "--plain", timeout=1500))
    tested = _ok(
        _run(venv, repo, "test", "--variant", VARIANT, "--junit", "build/test-report.xml", timeout=600)
    )
    assert f"PASS {VARIANT}" in tested, tested
    where = f"{registry.host}/efa-wheel-{RUN}"
    _ok(_run(venv, repo, "push", "--variant", VARIANT, "--registry", where, timeout=600))
    entry = json.loads((repo / "build" / "summary.json").read_text())["variants"][0]
    assert entry["variant"] == VARIANT and entry["pushed"], entry
    ref = entry["pushed"][0]
    name = ref.split("@")[0].rsplit(":", 1)[0].split("/", 1)[1]
    assert RegistryAPI(registry.host).manifest(name, entry["digest"]).digest == entry["digest"]


def test_pypis_validators_beside_the_tool_shadows_nothing(wheel_venv, tmp_path):
    venv = wheel_venv
    repo = _team_repo(tmp_path / "team", f"efa-image-build-test/wheel-{RUN}")
    venv.pip("install", "--quiet", "validators==0.34.0")
    code = "import validators as v, efa_validators as e; print(v.__version__, v.__file__, e.__file__)"
    version, theirs, ours = _python(venv, repo, "-c", code).split()
    assert version == "0.34.0" and Path(theirs).parent != Path(ours).parent
    assert _ok(_run(venv, repo, "--help")).count("\n") > len(COMMANDS)
    for verb, _module, _help in COMMANDS:
        assert f"{verb}" in _ok(_run(venv, repo, verb, "--help")), verb
    assert "node-check" in _python(venv, repo, "-m", "efa_validators", "--help")
    assert VARIANT in _ok(_run(venv, repo, "list"))
    _ok(_run(venv, repo, "render", "--variant", VARIANT))

    # in the image's requirements: PyPI's validators passes, the tool itself is refused at its line
    reqs = repo / "examples" / "training" / "requirements.txt"
    lines = reqs.read_text().splitlines()
    reqs.write_text("\n".join([*lines, "validators==0.34.0"]) + "\n")
    _ok(_run(venv, repo, "list"))
    reqs.write_text("\n".join([*lines, "validators==0.34.0", f"efa-image-build=={VERSION}"]) + "\n")
    refused = _run(venv, repo, "list")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused
    where = f"examples/training/requirements.txt:{len(lines) + 2}: key 'training.requirements'"
    assert f"{where}: 'efa-image-build=={VERSION}' installs" in refused.stderr, refused.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_the_init_starter_builds_and_passes_its_checks_from_the_wheel(
    wheel_venv, docker_client, local_base, cleanup_repo, tmp_path
):
    """`init` from the installed wheel in an empty folder, then build and test as the starter says: its one
    variant builds here and its checks (checks.yaml's included) pass. Its commented `tags:` line is taken,
    so the image has a name no other test uses."""
    repo = tmp_path / "repo"
    _ok(_run(wheel_venv, tmp_path, "init", "repo"))
    matrix = repo / "matrix.yaml"
    text = matrix.read_text()
    assert text.count('  # tags: ["my-team/training:{name}-{content_hash}"]\n') == 1
    matrix.write_text(
        text.replace(
            '  # tags: ["my-team/training:{name}-{content_hash}"]',
            f'  tags: ["{cleanup_repo}:{{name}}-{{content_hash}}"]',
        )
    )
    _ok(_run(wheel_venv, repo, "build", "--plain", timeout=1500))
    tested = _ok(_run(wheel_venv, repo, "test", timeout=600))
    assert "PASS debian-nccl2.27" in tested, tested
    report = json.loads((repo / "build" / "test-report.json").read_text())
    custom = {
        c["name"]: c["status"] for c in report["images"][0]["checks"] if c["name"].startswith("custom:")
    }
    assert custom == {"custom:validators-run": "pass", "custom:python-is-debian": "pass"}, custom
