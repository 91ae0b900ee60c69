"""The CI examples run as written, every command in order, against real services, in a team's repository
that holds only its matrix, checks and training code: the tool is the wheel built from this tree, installed
into a fresh venv (tests/wheelvenv.py), never a checkout.

GitHub Actions: each `run:` step goes to bash (`-e -o pipefail`, the workflow's `shell: bash`) in that
repository, with the workflow's and the job's `env:` and the `${{ }}` expressions filled from the values
below. Each `uses:` step is checked for what it would do (the files an upload or a JUnit report names exist);
an action the test does not know fails the test, so a new step cannot slip through unrun.

AWS CodeBuild (buildspec.yml): run as CodeBuild runs it: the buildspec's `env.variables`, CodeBuild's own
variables, and every command of its phases in order in one POSIX shell (buildspec 0.2); `artifacts:` and
`reports:` are collected as CodeBuild would. On the main path AWS calls (SSM, Secrets Manager, the ECR login
token, S3) reach moto's server through AWS_ENDPOINT_URL; `aws ecr get-login-password | docker login` logs in
to a real registry whose password is moto's token; images go to a real registry with htpasswd auth
(IMAGE_REGISTRY, its login from moto's Secrets Manager). The ECR push itself is not run: moto's ECR hands out
a registry host that does not exist.

The pull-request path of each runs with no AWS credentials, no AWS endpoint, no registry login and an `aws`
that fails the run if it is called: build and check only.

The team's repository is what `efa-image-build init` writes, as a team adapts it (issue 42): its starter
variant on a local base and with a repository of this session's own names (BASE, TEAM_REPO), so the engine
holds no base and no build of those names when the module starts (`clean_engine` checks, and removes them
after). Two layouts: init's (matrix.yaml at the top, no project config) and one whose matrix lives in
images/ and is named by `[tool.efa-image-build]` in pyproject.toml. Nothing in the CI files names the matrix:
they run as copied, and a step makes the local base (`efa-image-build base`: debootstrap; the first run of
the module makes it, the later ones find it by name). Each `uses:` step is named in NO_OP_ACTIONS with what
stands in for it. One thing is replaced, and only it: `pip` (the wheel is installed already; the shim
records the call and checks it installs this version of the tool).
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest
import yaml
from cli import installed_process
from paths import ROOT
from services import RUN
from wheelvenv import VERSION, Venv

from imagebuild.adapters.registry import Credentials, RegistryAPI
from imagebuild.commands.init import WORKFLOW

pytest_plugins = ["services_fixtures"]
VARIANT = "debian-nccl2.27"  # init's starter variant
TOOL = f"efa-image-build[attest]=={VERSION}"  # what the examples install: this tree's version
TEAM_REPO = f"efa-image-build-test/ci-{RUN}"  # the images' repository in the team's matrix (one per session)
BASE = f"localbase/debian:ci-{RUN}"  # the starter's local base, under a name no earlier run made
NO_OP_ACTIONS = {  # what each does on a hosted runner, and what stands in for it here
    "actions/checkout": "the team repository made below (init's files) is the checkout",
    "actions/setup-python": "this interpreter is first on PATH",
    "aws-actions/configure-aws-credentials": "IMAGE_REGISTRY is set: no AWS call is made",
    "aws-actions/amazon-ecr-login": "the starter's base is local, made by the base step: no private registry",
    "actions/cache": "the project's own artifact cache (.cache, linked in) is what a restore gives",
}


def _expr(text: str, values: dict) -> str:
    def one(m: re.Match) -> str:
        key = m.group(1).strip()
        if key not in values:
            raise AssertionError(f"the test has no value for the expression {key!r}")
        return values[key]

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def _condition(cond: str, pull_request: bool) -> bool:
    known = {
        "github.event_name != 'pull_request'": not pull_request,
        "always()": True,
        "vars.RUN_PREFLIGHT == 'true'": False,  # the SageMaker pre-flight is not asked for here
    }
    assert cond.strip() in known, f"unknown step condition {cond!r}"
    return known[cond.strip()]


def _team_repo(dest: Path, venv: Venv, layout: str = "init", more: str = "") -> Path:
    """A team's repository as `efa-image-build init` (the wheel's) writes it, adapted as a team would: the
    starter's base and image repository get this session's names (BASE, TEAM_REPO), and `more` (lines of
    `defaults:`, as a team adds channels or labels) after its tags. layout "config": the
    matrix and checks moved to images/, named by `[tool.efa-image-build]` in pyproject.toml. The artifact
    cache the project's own runs fill is linked in (.cache, as actions/cache restores it)."""
    made = installed_process(venv.bin, "init", dest, env=venv.env(), timeout=120)
    assert made.returncode == 0, made.stderr
    matrix = dest / "matrix.yaml"
    text = matrix.read_text()
    default_base = "localbase/debian:bookworm-minbase"
    tags = '  # tags: ["my-team/training:{name}-{content_hash}"]'
    assert text.count(default_base) == 1 and text.count(tags) == 1
    text = text.replace(default_base, BASE).replace(
        tags, f'  tags: ["{TEAM_REPO}:{{name}}-{{content_hash}}"]' + more
    )
    matrix.write_text(text)
    if layout == "config":
        (dest / "images").mkdir()
        matrix.rename(dest / "images" / "matrix.yaml")
        (dest / "checks.yaml").rename(dest / "images" / "checks.yaml")
        (dest / "pyproject.toml").write_text('[tool.efa-image-build]\nmatrix = "images/matrix.yaml"\n')
    (ROOT / ".cache" / "artifacts").mkdir(parents=True, exist_ok=True)
    (dest / ".cache").symlink_to(ROOT / ".cache")
    return dest


def _shims(bindir: Path, calls: Path, venv: Venv, aws: bool = True) -> dict:
    """pip records its call (the wheel is installed already); the venv's bin comes next on PATH (its
    `efa-image-build` and `python`), as after `pip install` on a runner. `aws`: the pinned awscli of the
    test extra; without it, an `aws` that fails the run (the pull-request path must make no AWS call)."""
    bindir.mkdir()
    pip = bindir / "pip"
    pip.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$*" = "install {TOOL}" ] || exit 9\n')
    pip.chmod(0o755)
    pinned = Path(sys.executable).with_name("aws")  # the pinned awscli of the test extra, not one on PATH
    if aws and not pinned.is_file():
        pytest.fail("the aws CLI of the test extra is missing: pip install -e '.[test]'")
    body = f'exec "{pinned}" "$@"' if aws else 'echo "aws $* on the pull-request path" >&2; exit 97'
    (bindir / "aws").write_text(f"#!/bin/sh\n{body}\n")
    (bindir / "aws").chmod(0o755)
    return {"PATH": os.pathsep.join([str(bindir), str(venv.bin), os.environ["PATH"]])}


def _no_credentials(tmp: Path) -> dict:
    """The environment of a pull request's run: no AWS variable, no registry login, no docker login."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REGISTRY_", "IMAGE_REGISTRY"))}
    env.pop("PYTHONPATH", None)  # the wheel's code, not this worktree's
    (tmp / "docker-config").mkdir()
    env.update(
        AWS_CONFIG_FILE=str(tmp / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp / "no-aws-credentials"),
        DOCKER_CONFIG=str(tmp / "docker-config"),
    )
    return env


@pytest.fixture(scope="module")
def team_images(docker_client):
    """A clean engine for the team's names: no base called BASE and no image of TEAM_REPO when the module
    starts; both removed after it (every test builds the same content on the same base)."""

    def ours():
        return [t for i in docker_client.images.list() for t in i.tags if t == BASE or TEAM_REPO in t]

    assert ours() == [], "the engine holds the team's names already: not a fresh runner"
    yield TEAM_REPO
    for tag in ours():
        docker_client.images.remove(tag)


def _github_values(pull_request: bool, image_registry: str = "", signing_key: str = "") -> dict:
    """The `${{ }}` expressions of the workflow, as GitHub fills them for a push to main or a pull request
    (which gets no secrets)."""
    return {
        "matrix.variant": VARIANT,
        "github.event_name != 'pull_request'": "false" if pull_request else "true",
        "github.event_name != 'pull_request' && vars.IMAGE_REGISTRY || ''": ""
        if pull_request
        else image_registry,
        "vars.AWS_REGION": "us-east-1",
        "vars.IMAGE_REGISTRY": image_registry,
        "vars.BASE_REGISTRY": "",
        "vars.BASE_REGISTRY_ACCOUNT": "",
        "secrets.AWS_ROLE_ARN": "",
        "secrets.SIGNING_KEY": "" if pull_request else signing_key,
    }


def _github_job(
    doc: dict, job: str, values: dict, work: Path, env: dict, pull_request: bool, artifacts: dict = None
) -> tuple:
    """Every step of `job` whose condition holds, in order: (names of the `run:` steps, actions checked).
    `artifacts`: name -> folder of what the earlier jobs uploaded, which download-artifact copies in."""
    env = dict(env)
    env.update({k: _expr(str(v), values) for k, v in (doc.get("env") or {}).items()})
    env.update({k: _expr(str(v), values) for k, v in (doc["jobs"][job].get("env") or {}).items()})
    assert "MATRIX" not in env, "the workflow names the matrix: the project config's is the one (issue 42)"
    values = dict(values)  # each step's outputs join it (`steps.ID.outputs.KEY`)
    shell = doc["defaults"]["run"]["shell"]
    assert shell == "bash", "the test runs steps as GitHub's `shell: bash` (bash -eo pipefail)"
    ran, checked = [], []
    for step in doc["jobs"][job]["steps"]:
        if "if" in step and not _condition(step["if"], pull_request):
            continue
        if "uses" in step:
            action = step["uses"].split("@")[0]
            args = {k: _expr(str(v), values) for k, v in (step.get("with") or {}).items()}
            if action == "actions/upload-artifact":
                for pattern in args["path"].split():
                    assert glob.glob(str(work / pattern)), f"upload-artifact: nothing matches {pattern}"
            elif action == "actions/download-artifact":  # the artifacts of the earlier jobs, copied in
                pattern = args.get("pattern") or args["name"]
                found = {n: f for n, f in (artifacts or {}).items() if fnmatch.fnmatch(n, pattern)}
                assert found, f"download-artifact: no artifact {pattern}"
                for name, folder in found.items():
                    shutil.copytree(folder, work / args["path"] / name)
            elif action == "mikepenz/action-junit-report":
                assert (work / args["report_paths"]).is_file()
            else:
                assert action in NO_OP_ACTIONS, f"step uses {action}: tell this test what it does"
            checked.append(action)
            continue
        step_env = dict(env, **{k: _expr(str(v), values) for k, v in (step.get("env") or {}).items()})
        assert "--matrix" not in step["run"], f"{step.get('name')}: names the matrix"
        if "id" in step:  # its own GITHUB_OUTPUT file, as a runner gives each step
            step_env["GITHUB_OUTPUT"] = str(work.parent / f"output-{job}-{step['id']}")
        script = _expr(step["run"], values)
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script],
            cwd=work,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (
            f"{job} step {step.get('name', script)!r}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        ran.append(step.get("name") or script.split()[0])
        if "id" in step:
            outputs = _github_output(Path(step_env["GITHUB_OUTPUT"]))
            values.update({f"steps.{step['id']}.outputs.{k}": v for k, v in outputs.items()})
            if env.get("GITHUB_OUTPUT"):  # the job's outputs file, as the test reads it
                with open(env["GITHUB_OUTPUT"], "a") as f:
                    f.writelines(f"{k}={v}\n" for k, v in outputs.items())
    return ran, checked


def _keys(folder: Path) -> tuple:
    """An ed25519 key pair as PEM text (the team's signing key and its public half)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (folder / "signing.pub.pem").write_bytes(public)
    return private, folder / "signing.pub.pem"


def _github_output(path: Path) -> dict:
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["init", "config"])
def test_github_pull_request_runs_as_written_with_no_credentials(
    docker_client, wheel_venv, team_images, tmp_path, layout
):
    """The plan job, then the build job of a pull request: no secret, no AWS, no registry. It makes the
    local base, builds and checks; nothing is pushed or signed. "init": the workflow init wrote, in init's
    layout, on an engine with no base of the starter's name (the base step makes it: debootstrap); "config":
    the example, in a repository whose matrix is images/matrix.yaml by its project config."""
    work = _team_repo(tmp_path / "repo", wheel_venv, layout)
    workflow = work / WORKFLOW if layout == "init" else ROOT / "examples" / "ci" / "github-actions.yml"
    doc = yaml.safe_load(workflow.read_text())
    calls = tmp_path / "pip-calls"
    env = _no_credentials(tmp_path)
    env.update(_shims(tmp_path / "bin", calls, wheel_venv, aws=False))
    env.update(GITHUB_OUTPUT=str(tmp_path / "github-output"), RUNNER_TEMP=str(tmp_path / "runner-temp"))
    (tmp_path / "runner-temp").mkdir()
    values = _github_values(pull_request=True)
    ran, _ = _github_job(doc, "plan", values, work, env, pull_request=True)
    assert len(ran) == 2
    variants = json.loads(_github_output(tmp_path / "github-output")["variants"])
    assert VARIANT in variants, variants
    ran, checked = _github_job(doc, "build", values, work, env, pull_request=True)
    assert len(ran) == 5 and "actions/upload-artifact" in checked, ran  # pip, base, cache key, build, test
    assert docker_client.images.get(BASE)  # the base step made the starter's base
    assert "aws-actions/configure-aws-credentials" not in checked
    assert calls.read_text().splitlines() == [f"install {TOOL}"] * 2
    summary = json.loads((work / "build" / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == VARIANT)
    assert entry["status"] in ("built", "skipped") and not entry.get("pushed"), entry
    report = json.loads((work / "build" / "test-report.json").read_text())
    assert report["images"][0]["passed"] and report["images"][0]["image_id"] == entry["image_id"]


def test_github_plan_fails_on_a_matrix_render_refuses(wheel_venv, tmp_path):
    """The plan job's list step fails where `render` would (a symlink out of the training folder): no
    build job is ever fanned out over a matrix every one of them would fail to render."""
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    work = _team_repo(tmp_path / "repo", wheel_venv)
    matrix = work / "matrix.yaml"
    commented = "  # training:\n  #   source_dir: training\n  #   entry_point: train.py\n"
    assert commented in matrix.read_text()
    matrix.write_text(matrix.read_text().replace(commented, commented.replace("# ", "")))
    (work / "training").mkdir()
    (work / "training" / "train.py").write_text("print('hi')\n")
    (work / "training" / "requirements.txt").write_text("")
    os.symlink("/etc/hostname", work / "training" / "leak")
    env = _no_credentials(tmp_path)
    env.update(_shims(tmp_path / "bin", tmp_path / "pip-calls", wheel_venv, aws=False))
    env.update(GITHUB_OUTPUT=str(tmp_path / "github-output"), RUNNER_TEMP=str(tmp_path))
    with pytest.raises(AssertionError, match="training/leak"):
        _github_job(doc, "plan", _github_values(pull_request=True), work, env, pull_request=True)
    assert (
        not (tmp_path / "github-output").exists()
        or "variants" not in (tmp_path / "github-output").read_text()
    )


@pytest.mark.docker
@pytest.mark.slow
def test_github_build_job_runs_as_written_against_a_registry(
    docker_client, registry, wheel_venv, team_images, tmp_path
):
    """A push to main: build, check, push by digest, attest (SBOM + signed provenance, which verifies), then
    the release job on a runner of its own, which makes the channel `dev` of the team's matrix. Then a second
    push to main, of changed content, on fresh runners (new folders, nothing local: no build/releases, no
    records folder, the release records only in the registry): it releases and moves `dev`, and its record
    knows where from."""
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    private, public = _keys(tmp_path)
    where = f"{registry.host}/efa-ci-example-{RUN}"
    values = _github_values(pull_request=False, image_registry=where, signing_key=private)
    values.update(
        {"vars.SIGNING_PUBLIC_KEY": public.read_text(), "vars.RELEASE_S3": "", "vars.RUN_PREFLIGHT": ""}
    )
    calls = tmp_path / "pip-calls"
    env = dict(os.environ, **_shims(tmp_path / "bin", calls, wheel_venv))
    env.pop("PYTHONPATH", None)  # the wheel's code, not this worktree's
    api = RegistryAPI(registry.host)
    repository = f"efa-ci-example-{RUN}/{TEAM_REPO}"

    def main_run(n: int, more: str) -> tuple:
        """One push to main: the build job, then the release job, each in a folder of its own."""
        run = tmp_path / f"run-{n}"
        run.mkdir()
        env["RUNNER_TEMP"] = str(run / "runner-temp")
        (run / "runner-temp").mkdir()
        work = _team_repo(run / "repo", wheel_venv, "config", more)
        ran, checked = _github_job(doc, "build", values, work, env, pull_request=False)
        # pip, base, cache key, build, test, push, attest, jq
        assert len(ran) == 8 and "actions/upload-artifact" in checked, ran
        assert os.listdir(run / "runner-temp") == []  # the private key left with its step
        summary = json.loads((work / "build" / "summary.json").read_text())
        entry = next(e for e in summary["variants"] if e["variant"] == VARIANT)
        assert entry["status"] in ("built", "skipped") and entry["digest"].startswith("sha256:")
        assert entry["pushed"] and all(p.startswith(f"{where}/") for p in entry["pushed"])
        report = json.loads((work / "build" / "test-report.json").read_text())
        assert report["images"][0]["passed"] and report["images"][0]["image_id"] == entry["image_id"]

        # the release job, on a runner of its own: the build job's artifact is all it has
        uploaded = run / "artifact"
        for rel in ("summary.json", "test-report.json", "test-report.xml"):
            (uploaded / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(work / "build" / rel, uploaded / rel)
        release_work = _team_repo(run / "release-repo", wheel_venv, "config", more)
        sha = f"{n}" * 40
        env.update(GITHUB_REF_TYPE="branch", GITHUB_SHA=sha, GITHUB_STEP_SUMMARY=str(run / "step-summary"))
        artifacts = {f"build-{VARIANT}": uploaded}
        ran, checked = _github_job(doc, "release", values, release_work, env, False, artifacts)
        assert len(ran) == 3 and "actions/download-artifact" in checked, ran  # pip, release, notes
        tag = f"{VARIANT}-{sha}"
        assert api.manifest(repository, tag).digest == entry["digest"]
        assert tag in (run / "step-summary").read_text()
        assert not (release_work / "build" / "releases").exists()  # no record left on the runner
        return work, entry

    channels = "\n  channels: [dev]"
    work, first = main_run(1, channels)
    image = first["pushed"][0].split("@")[0].rsplit(":", 1)[0] + "@" + first["digest"]
    verify = installed_process(
        wheel_venv.bin, "verify", image, "--key", public, env=wheel_venv.env(), timeout=300
    )
    assert verify.returncode == 0, f"{verify.stdout[-2000:]}\n{verify.stderr[-2000:]}"
    assert api.manifest(repository, "dev").digest == first["digest"]

    # the second push to main, of other content (a label), on runners that hold nothing of the first
    _work, second = main_run(2, channels + f'\n  labels: {{org.example.run: "{RUN}-2"}}')
    assert second["digest"] != first["digest"]
    assert api.manifest(repository, "dev").digest == second["digest"]  # the channel moved
    assert api.manifest(repository, f"{VARIANT}-{'1' * 40}").digest == first["digest"]  # release tags stay
    assert calls.read_text().splitlines() == [f"install {TOOL}"] * 4
    from imagebuild.release.registryrecords import RegistryRecordStore

    store = RegistryRecordStore(SimpleNamespace(api=lambda host: api), [f"{registry.host}/{repository}"])
    latest = store.latest(VARIANT)
    assert latest["digest"] == second["digest"] and latest["previous"]["digest"] == first["digest"]
    (dev,) = latest["channels"]
    assert dev["tag"] == "dev" and dev["history"][-1]["from"] == first["digest"]


# -- AWS CodeBuild ------------------------------------------------------------------------------------------
PHASES = ("install", "pre_build", "build", "post_build")  # CodeBuild's order
RUNTIMES = {"python"}  # runtime-versions the test has: this interpreter is first on PATH
ENV_KEYS = {"variables", "exported-variables"}  # parameter-store, secrets-manager: teach the test


def _codebuild_script(doc: dict, done: Path) -> tuple:
    """Every command of the buildspec's phases, in order, as one POSIX sh script (buildspec 0.2 runs them
    in one shell instance). After each: a non-zero status ends the shell, as it fails the phase in
    CodeBuild; a zero one appends the command's number to `done`, so the test knows which ones ran."""
    phases = doc["phases"]
    assert set(phases) <= set(PHASES), f"unknown phases {set(phases) - set(PHASES)}"
    names, parts = [], []
    for phase in PHASES:
        spec = phases.get(phase) or {}
        assert set(spec) <= {"runtime-versions", "commands"}, f"{phase}: teach the test {sorted(spec)}"
        assert set(spec.get("runtime-versions") or {}) <= RUNTIMES, spec["runtime-versions"]
        for command in spec.get("commands") or []:
            i = len(names)
            lines = [s.strip() for s in command.splitlines() if s.strip() and s.strip() != "set -e"]
            names.append(f"{phase} command {i + 1} ({lines[0][:60]}...)")
            parts.append(
                f'{command.rstrip()}\n__cb_rc=$?\n[ "$__cb_rc" -eq 0 ] || exit "$__cb_rc"\n'
                f"echo {i} >> {shlex.quote(str(done))}\n"
            )
    return "".join(parts), names


def _codebuild_run(doc: dict, src: Path, env: dict, overrides: dict, tmp: Path) -> list:
    """One CodeBuild build of `doc` in `src`: the environment it would get, then its phases. Returns the
    names of the commands that ran (all of them, or the test has failed with the output)."""
    assert set(doc["env"]) <= ENV_KEYS, f"env: teach the test {set(doc['env']) - ENV_KEYS}"
    run_env = dict(env, CODEBUILD_SRC_DIR=str(src))
    run_env.update({k: str(v) for k, v in doc["env"]["variables"].items()})
    run_env.update(overrides)  # the project's environment variables and the batch matrix's win
    done = tmp / "done"
    script, names = _codebuild_script(doc, done)
    (tmp / "buildspec.sh").write_text(script)
    proc = subprocess.run(
        ["sh", str(tmp / "buildspec.sh")], cwd=src, env=run_env, capture_output=True, text=True, timeout=1200
    )
    ran = [int(x) for x in done.read_text().split()] if done.exists() else []
    failed = names[len(ran)] if len(ran) < len(names) else "(none: the shell itself failed)"
    assert proc.returncode == 0 and ran == list(range(len(names))), (
        f"MODE={run_env['MODE']}: command {failed!r} failed ({proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return names


def _artifacts(doc: dict, src: Path) -> dict:
    """What CodeBuild would upload: each `artifacts.files` pattern under base-directory -> the files it
    matched (relative paths)."""
    base = src / doc["artifacts"]["base-directory"]
    found = {}
    for pattern in doc["artifacts"]["files"]:
        hits = [Path(p) for p in glob.glob(str(base / pattern), recursive=True)]
        found[pattern] = sorted(str(p.relative_to(base)) for p in hits if p.is_file())
    return found


def _check_reports(doc: dict, src: Path) -> None:
    """Each report group's files exist and are what their format says (JUnit XML here)."""
    import xml.etree.ElementTree as ET

    for name, group in doc["reports"].items():
        assert group["file-format"] == "JUNITXML", f"report {name}: teach the test {group['file-format']}"
        for pattern in group["files"]:
            hits = glob.glob(str(src / group["base-directory"] / pattern), recursive=True)
            assert hits, f"report {name}: nothing matches {pattern}"
            for path in hits:
                assert ET.parse(path).getroot().tag in ("testsuites", "testsuite"), path


@pytest.fixture
def image_registry(auth_registry, docker_client):
    """IMAGE_REGISTRY for the CodeBuild runs: this session's namespace in the htpasswd registry. Afterwards
    the engine's tags for it (push tags the local image) are removed; the image stays under its own tags."""
    where = f"{auth_registry.host}/efa-cb-{RUN}"
    yield where
    for image in docker_client.images.list():
        for tag in image.tags:
            if tag.startswith(where + "/"):
                docker_client.images.remove(tag)


@pytest.mark.docker
@pytest.mark.slow
def test_codebuild_buildspec_runs_as_written(
    docker_client,
    auth_registry,
    image_registry,
    ecr_token_registry,
    aws,
    wheel_venv,
    team_images,
    tmp_path,
):
    """The batch build of the local variant (MODE=build), then the release build over its combined
    artifacts (MODE=release): every command runs and passes, the image is pushed to IMAGE_REGISTRY, and the
    release promotes its digest there and writes the record to S3."""
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "buildspec.yml").read_text())
    assert doc["version"] == 0.2
    listed = doc["batch"]["build-matrix"]["dynamic"]["env"]["variables"]["VARIANT"]
    assert isinstance(listed, list) and listed, "the batch matrix lists no VARIANT"
    # what the projects' owner put in AWS before the first build (moto's here)
    bucket = f"efa-cb-{RUN}"
    boto = {"endpoint_url": aws.endpoint_url, "region_name": "us-east-1"}
    boto3.client("s3", **boto).create_bucket(Bucket=bucket)
    ssm = boto3.client("ssm", **boto)
    ssm.put_parameter(Name="/efa-image-build/base-registry", Value=ecr_token_registry.host, Type="String")
    ssm.put_parameter(Name="/efa-image-build/release-s3", Value=f"s3://{bucket}/records", Type="String")
    private, public = _keys(tmp_path)
    names = doc["env"]["variables"]
    ssm.put_parameter(Name=names["SIGNING_PUBLIC_KEY_PARAMETER"], Value=public.read_text(), Type="String")
    login = {"username": auth_registry.user, "password": auth_registry.password}
    secrets = boto3.client("secretsmanager", **boto)
    secrets.create_secret(Name=names["REGISTRY_SECRET"], SecretString=json.dumps(login))
    secrets.create_secret(Name=names["SIGNING_SECRET"], SecretString=private)

    calls = tmp_path / "pip-calls"
    env = dict(os.environ, **_shims(tmp_path / "bin", calls, wheel_venv))
    env.pop("PYTHONPATH", None)  # the wheel's code, not this worktree's
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    env.update(
        AWS_ENDPOINT_URL=aws.endpoint_url,  # every AWS call of the run goes to moto: the CLI's and boto3's
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),  # the CLI refuses /dev/null; a missing file is none
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        DOCKER_CONFIG=str(tmp_path / "docker-config"),  # the docker login lands here, never in ~/.docker
        CODEBUILD_RESOLVED_SOURCE_VERSION=sha,
    )
    build_id = f"efa_images_{RUN}_1"  # the batch build's identifier: its folder in the combined artifacts

    # 1. the batch's build of one variant
    build_src = _team_repo(tmp_path / "build-src", wheel_venv, "config")
    overrides = {
        "VARIANT": listed[0],
        "IMAGE_REGISTRY": image_registry,
    }  # the batch's first build, as shipped
    build_env = dict(env, CODEBUILD_BUILD_ID=f"efa-images:{RUN}-1", CODEBUILD_BATCH_BUILD_IDENTIFIER=build_id)
    (tmp_path / "run-build").mkdir()
    _codebuild_run(doc, build_src, build_env, overrides, tmp_path / "run-build")
    _check_reports(doc, build_src)
    config = json.loads((tmp_path / "docker-config" / "config.json").read_text())
    assert ecr_token_registry.host in config["auths"], "docker login to BASE_REGISTRY left no login"
    built = _artifacts(doc, build_src)
    combined = tmp_path / "combined"  # the batch's combined artifacts: one folder per build identifier
    base = build_src / doc["artifacts"]["base-directory"]
    for rel in {f for files in built.values() for f in files}:
        (combined / build_id / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(base / rel, combined / build_id / rel)
    summary = json.loads((build_src / "build" / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == VARIANT)
    assert entry["digest"].startswith("sha256:")
    assert entry["pushed"] and all(p.startswith(image_registry + "/") for p in entry["pushed"])

    # 2. the release build, with those artifacts as the secondary source "builds"
    release_src = _team_repo(tmp_path / "release-src", wheel_venv, "config")
    overrides = {"MODE": "release", "IMAGE_REGISTRY": image_registry}
    release_env = dict(env, CODEBUILD_BUILD_ID=f"efa-images-release:{RUN}")
    release_env["CODEBUILD_SRC_DIR_builds"] = str(combined)
    (tmp_path / "run-release").mkdir()
    _codebuild_run(doc, release_src, release_env, overrides, tmp_path / "run-release")
    released = _artifacts(doc, release_src)
    unmatched = [p for p in doc["artifacts"]["files"] if not built[p] and not released[p]]
    assert not unmatched, f"artifacts: nothing matches {unmatched} in either build"

    assert calls.read_text().splitlines() == [f"install {TOOL}"] * 2
    s3 = boto3.client("s3", **boto)
    record = json.loads(s3.get_object(Bucket=bucket, Key=f"records/{VARIANT}/latest.json")["Body"].read())
    assert record["variant"] == VARIANT and record["digest"] == entry["digest"]
    tag = f"{VARIANT}-{sha}"
    api = RegistryAPI(auth_registry.host, Credentials(**login))
    for repo in record["repositories"]:
        assert tag in repo["tags"]
        host, _, name = repo["repository"].partition("/")
        assert host == auth_registry.host, f"released outside IMAGE_REGISTRY: {repo['repository']}"
        assert api.manifest(name, tag).digest == entry["digest"]
    # what release --require-signed checked, as a user checks it: the digest's provenance verifies
    image = f"{record['repositories'][0]['repository']}@{entry['digest']}"
    login_env = wheel_venv.env(REGISTRY_USERNAME=login["username"], REGISTRY_PASSWORD=login["password"])
    verify = installed_process(wheel_venv.bin, "verify", image, "--key", public, env=login_env, timeout=300)
    assert verify.returncode == 0, f"{verify.stdout[-2000:]}\n{verify.stderr[-2000:]}"


@pytest.mark.docker
@pytest.mark.slow
def test_codebuild_pull_request_runs_as_written_with_no_credentials(
    docker_client, wheel_venv, team_images, tmp_path
):
    """A pull request's webhook build (MODE=build): no AWS variable or endpoint, an `aws` that fails the run,
    no registry. It builds and checks the variant; nothing is pushed or signed, no docker login is made."""
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "buildspec.yml").read_text())
    calls = tmp_path / "pip-calls"
    env = _no_credentials(tmp_path)
    env.update(_shims(tmp_path / "bin", calls, wheel_venv, aws=False))
    env.update(CODEBUILD_WEBHOOK_EVENT="PULL_REQUEST_UPDATED", CODEBUILD_BUILD_ID=f"efa-images:{RUN}-pr")
    src = _team_repo(tmp_path / "src", wheel_venv, "config")
    (tmp_path / "run").mkdir()
    listed = doc["batch"]["build-matrix"]["dynamic"]["env"]["variables"]["VARIANT"]
    _codebuild_run(doc, src, env, {"VARIANT": listed[0]}, tmp_path / "run")
    _check_reports(doc, src)
    assert calls.read_text().splitlines() == [f"install {TOOL}"]
    assert os.listdir(tmp_path / "docker-config") == []  # no login was made
    summary = json.loads((src / "build" / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == VARIANT)
    assert entry["status"] in ("built", "skipped") and not entry.get("pushed"), entry
    report = json.loads((src / "build" / "test-report.json").read_text())
    assert report["images"][0]["passed"] and report["images"][0]["image_id"] == entry["image_id"]


def test_codebuild_pull_request_never_releases(wheel_venv, tmp_path):
    """The release project started by a pull request's webhook stops in `install`, before any AWS call."""
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "buildspec.yml").read_text())
    env = _no_credentials(tmp_path)
    env.update(_shims(tmp_path / "bin", tmp_path / "pip-calls", wheel_venv, aws=False))
    env.update(CODEBUILD_WEBHOOK_EVENT="PULL_REQUEST_CREATED", CODEBUILD_BUILD_ID=f"efa-images-release:{RUN}")
    src = _team_repo(tmp_path / "src", wheel_venv)
    (tmp_path / "run").mkdir()
    with pytest.raises(AssertionError, match="never releases"):
        _codebuild_run(doc, src, env, {"MODE": "release"}, tmp_path / "run")
