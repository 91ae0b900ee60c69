"""The CI examples run as written, every command in order, against real services.

GitHub Actions (the build job): each `run:` step goes to bash (`-e -o pipefail`) in a fresh copy of the
project's tracked files, with the job's `env:` and the `${{ }}` expressions filled from the values below.
Each `uses:` step is checked for what it would do (the files an upload or a JUnit report names exist); an
action the test does not know fails the test, so a new step cannot slip through unrun.

AWS CodeBuild (buildspec.yml): run as CodeBuild runs it, twice: the batch's build (MODE=build) and the
release build (MODE=release) over its artifacts as the secondary source `builds`. Each run gets the
buildspec's `env.variables`, its `parameter-store` values read from moto's SSM with the real aws CLI,
CodeBuild's own variables, and every command of its phases in order in one POSIX shell (buildspec 0.2);
`artifacts:` and `reports:` are collected as CodeBuild would. AWS calls (SSM, Secrets Manager, the ECR
login token, S3) reach moto's server through AWS_ENDPOINT_URL; `aws ecr get-login-password | docker login`
logs in to a real registry whose password is moto's token; images go to a real registry with htpasswd auth
(IMAGE_REGISTRY, its login from moto's Secrets Manager). The ECR push itself is not run: moto's ECR hands out
a registry host that does not exist.

In both, two things are replaced, and only these: `pip` (the test venv already has the project's
dependencies; installing into it would change a shared venv, so the shim records the call and checks it
installs this project) and `MATRIX`/`VARIANT` (matrix.local.yaml and its variant local-debian-nccl2.27: the
one variant that builds without GPUs or private bases).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml
from paths import ROOT
from services import RUN

from imagebuild.adapters.registry import Credentials, RegistryAPI

pytest_plugins = ["services_fixtures"]
VARIANT = "local-debian-nccl2.27"
NO_OP_ACTIONS = {  # what each does on a hosted runner, and why it has nothing to do here
    "actions/checkout": "the copy made below is the checkout",
    "actions/setup-python": "this interpreter is first on PATH",
    "aws-actions/configure-aws-credentials": "IMAGE_REGISTRY is set: no AWS call is made",
    "aws-actions/amazon-ecr-login": "the local variant's base is local: no private registry",
    "actions/cache": "the artifact cache is shared with the project's own (.cache)",
}


def _expr(text: str, values: dict) -> str:
    def one(m: re.Match) -> str:
        key = m.group(1).strip()
        if key not in values:
            raise AssertionError(f"the test has no value for the expression {key!r}")
        return values[key]

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def _condition(cond: str) -> bool:
    known = {"github.event_name != 'pull_request'": True, "always()": True}
    assert cond.strip() in known, f"unknown step condition {cond!r}"
    return known[cond.strip()]


def _checkout(dest: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (ROOT / ".cache" / "artifacts").mkdir(parents=True, exist_ok=True)
    (dest / ".cache").symlink_to(ROOT / ".cache")
    return dest


def _shims(bindir: Path, calls: Path) -> dict:
    bindir.mkdir()
    python = bindir / "python"  # a script, not a link: through a link the venv would not be found
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    pip = bindir / "pip"
    pip.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1 $2 $3" = "install -e ." ] || exit 9\n')
    pip.chmod(0o755)
    aws = Path(sys.executable).with_name("aws")  # the pinned awscli of the test extra, not one on PATH
    if aws.is_file():
        (bindir / "aws").write_text(f'#!/bin/sh\nexec "{aws}" "$@"\n')
        (bindir / "aws").chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.docker
@pytest.mark.slow
def test_github_build_job_runs_as_written_against_a_registry(docker_client, local_base, registry, tmp_path):
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    job = doc["jobs"]["build"]
    values = {
        "matrix.variant": VARIANT,
        "vars.AWS_REGION": "us-east-1",
        "vars.IMAGE_REGISTRY": f"{registry.host}/efa-ci-example",
        "vars.BASE_REGISTRY": "",
        "vars.BASE_REGISTRY_ACCOUNT": "",
        "secrets.AWS_ROLE_ARN": "",
        "hashFiles('matrix.yaml', 'imagebuild/catalog/**')": "x",
    }
    work = _checkout(tmp_path / "checkout")
    calls = tmp_path / "pip-calls"
    env = dict(os.environ, **_shims(tmp_path / "bin", calls))
    env.pop("PYTHONPATH", None)  # the checkout's code, not this worktree's: python runs build.py from there
    env.update({k: _expr(str(v), values) for k, v in job["env"].items()})
    env["MATRIX"] = "matrix.local.yaml"
    ran, checked = [], []
    for step in job["steps"]:
        if "if" in step and not _condition(step["if"]):
            continue
        if "uses" in step:
            action = step["uses"].split("@")[0]
            args = {k: _expr(str(v), values) for k, v in (step.get("with") or {}).items()}
            if action == "actions/upload-artifact":
                for pattern in args["path"].split():
                    assert glob.glob(str(work / pattern)), f"upload-artifact: nothing matches {pattern}"
            elif action == "mikepenz/action-junit-report":
                assert (work / args["report_paths"]).is_file()
            else:
                assert action in NO_OP_ACTIONS, f"step uses {action}: tell this test what it does"
            checked.append(action)
            continue
        script = _expr(step["run"], values)
        proc = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (
            f"step {step.get('name', script)!r}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        ran.append(step.get("name") or script.split()[0])
    assert calls.read_text().split("\n")[0] == "install -e ."
    assert len(ran) == 5 and "actions/upload-artifact" in checked
    summary = json.loads((work / "build" / "summary.json").read_text())
    entry = next(e for e in summary["variants"] if e["variant"] == VARIANT)
    assert entry["status"] in ("built", "skipped") and entry["digest"].startswith("sha256:")
    assert entry["pushed"] and all(p.startswith(f"{registry.host}/efa-ci-example/") for p in entry["pushed"])
    report = json.loads((work / "build" / "test-report.json").read_text())
    assert report["images"][0]["passed"] and report["images"][0]["image_id"] == entry["image_id"]


# -- AWS CodeBuild ------------------------------------------------------------------------------------------
PHASES = ("install", "pre_build", "build", "post_build")  # CodeBuild's order
RUNTIMES = {"python"}  # runtime-versions the test has: this interpreter is first on PATH
ENV_KEYS = {"variables", "parameter-store", "exported-variables"}  # secrets-manager etc.: teach the test


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


def _ssm_value(name: str, env: dict) -> str:
    """One Parameter Store value, read as CodeBuild reads it before the build: from SSM (moto's)."""
    proc = subprocess.run(
        ["aws", "ssm", "get-parameter", "--name", name, "--query", "Parameter.Value", "--output", "text"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"parameter-store {name}: not in SSM ({proc.stderr.strip()[-500:]})"
    return proc.stdout.strip()


def _codebuild_run(doc: dict, src: Path, env: dict, overrides: dict, tmp: Path) -> list:
    """One CodeBuild build of `doc` in `src`: the environment it would get, then its phases. Returns the
    names of the commands that ran (all of them, or the test has failed with the output)."""
    assert set(doc["env"]) <= ENV_KEYS, f"env: teach the test {set(doc['env']) - ENV_KEYS}"
    run_env = dict(env, CODEBUILD_SRC_DIR=str(src))
    run_env.update({k: str(v) for k, v in doc["env"]["variables"].items()})
    run_env.update({k: _ssm_value(name, env) for k, name in doc["env"]["parameter-store"].items()})
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
    docker_client, local_base, auth_registry, image_registry, ecr_token_registry, aws, tmp_path
):
    """The batch build of the local variant (MODE=build), then the release build over its combined
    artifacts (MODE=release): every command runs and passes, the image is pushed to IMAGE_REGISTRY, and the
    release promotes its digest there and writes the record to S3."""
    doc = yaml.safe_load((ROOT / "examples" / "ci" / "buildspec.yml").read_text())
    assert doc["version"] == 0.2
    listed = doc["batch"]["build-matrix"]["dynamic"]["env"]["variables"]["VARIANT"]
    assert isinstance(listed, list) and listed, "the batch matrix lists no VARIANT"
    if not Path(sys.executable).with_name("aws").is_file():
        pytest.fail("the aws CLI of the test extra is missing: pip install -e '.[test]'")
    # what the projects' owner put in AWS before the first build (moto's here)
    bucket = f"efa-cb-{RUN}"
    boto = {"endpoint_url": aws.endpoint_url, "region_name": "us-east-1"}
    boto3.client("s3", **boto).create_bucket(Bucket=bucket)
    ssm = boto3.client("ssm", **boto)
    ssm.put_parameter(Name="/efa-image-build/base-registry", Value=ecr_token_registry.host, Type="String")
    ssm.put_parameter(Name="/efa-image-build/release-s3", Value=f"s3://{bucket}/records", Type="String")
    login = {"username": auth_registry.user, "password": auth_registry.password}
    secret_id = doc["env"]["variables"]["REGISTRY_SECRET"]
    boto3.client("secretsmanager", **boto).create_secret(Name=secret_id, SecretString=json.dumps(login))

    calls = tmp_path / "pip-calls"
    env = dict(os.environ, **_shims(tmp_path / "bin", calls))
    env.pop("PYTHONPATH", None)  # the checkout's code, not this worktree's
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
    build_src = _checkout(tmp_path / "build-src")
    overrides = {"VARIANT": VARIANT, "MATRIX": "matrix.local.yaml", "IMAGE_REGISTRY": image_registry}
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
    release_src = _checkout(tmp_path / "release-src")
    overrides = {"MODE": "release", "IMAGE_REGISTRY": image_registry}
    release_env = dict(env, CODEBUILD_BUILD_ID=f"efa-images-release:{RUN}")
    release_env["CODEBUILD_SRC_DIR_builds"] = str(combined)
    (tmp_path / "run-release").mkdir()
    _codebuild_run(doc, release_src, release_env, overrides, tmp_path / "run-release")
    released = _artifacts(doc, release_src)
    unmatched = [p for p in doc["artifacts"]["files"] if not built[p] and not released[p]]
    assert not unmatched, f"artifacts: nothing matches {unmatched} in either build"

    assert calls.read_text().split("\n")[:2] == ["install -e .", "install -e ."]
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
