"""The GitHub Actions example's build job, run as written: every step in order, against a real registry.

Each `run:` step goes to bash (`-e -o pipefail`) in a fresh copy of the project's tracked files, with the
job's `env:` and the `${{ }}` expressions filled from the values below. Two things are replaced, and only
these: `pip` (the test venv already has the project's dependencies; installing into it would change a
shared venv, so the shim records the call and checks it installs this project) and the workflow's
`MATRIX` (matrix.local.yaml: the one matrix whose variant builds without GPUs or private bases). Each
`uses:` step is checked for what it would do (the files an upload or a JUnit report names exist); an
action the test does not know fails the test, so a new step cannot slip through unrun.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import ROOT

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
