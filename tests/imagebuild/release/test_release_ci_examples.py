"""The CI examples users copy (examples/ci/): every `efa-image-build` line in them parses with the real CLI,
the fan-out is fed by `efa-image-build list --json`, JUnit is wired in, no registry host is written in them,
they install this version's wheel, and only their publishing path pushes, signs and releases (signed)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from imagebuild.cli import make_parser

# anything shaped like a host name (name.name...tld), or a 12-digit AWS account id: none may be written there
HOST_PATTERNS = (r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|io|net|org|aws|cn|dev|cloud)\b", r"\b\d{12}\b")


def _commands(text: str):
    """Each `efa-image-build ...` invocation, with line continuations joined and CI variables filled."""
    joined = re.sub(r"\\\n\s*", " ", text)
    for m in re.finditer(r"efa-image-build ([a-z][^\n|;&>]*)", joined):
        line = m.group(1)
        line = re.sub(r"\$\{\{[^}]*\}\}", "1", line)  # GitHub expressions (a number fits any flag)
        line = line.replace('"${args[@]}"', "").replace("$args", "")
        for dest in ('"${dest[@]}"', '"$@"'):  # where images go: --ecr or --registry HOST
            line = line.replace(dest, "--ecr")
        line = line.replace('--image "$image"', "--image x/y@sha256:" + "0" * 64)
        line = line.replace('"${ref%:*}@${digest}"', "x/y@sha256:" + "0" * 64)
        line = line.replace("$WHICH", "--variant v")  # buildspec: every variant, or the one VARIANT names
        line = re.sub(r"\$\{?[A-Za-z_][A-Za-z_0-9]*\}?", "X", line)  # shell variables
        yield line.strip()


@pytest.mark.parametrize("name", ["github-actions.yml", "buildspec.yml"])
def test_every_tool_line_parses(project_root, name):
    text = (project_root / "examples" / "ci" / name).read_text()
    parser = make_parser()
    verbs = set(parser._subparsers._group_actions[0].choices)  # noqa: SLF001
    seen = set()
    for line in _commands(text):
        argv = shlex.split(line)
        if argv[0] not in verbs:  # a verb another part of the project has not registered yet
            continue
        seen.add(argv[0])
        parser.parse_args(argv)  # argparse exits (SystemExit) on an unknown flag
    assert {"build", "test", "push", "release"} <= seen | {"list"}  # build renders: no render step needed


def test_no_registry_host_is_written(project_root):
    for path in [*(project_root / "examples" / "ci").iterdir(), project_root / "docs" / "release.md"]:
        text = path.read_text()
        for pattern in HOST_PATTERNS:
            assert not re.search(pattern, text), f"{path.name}: {pattern}"


def test_github_matrix_is_fed_by_build_py_list_and_release_gathers(project_root):
    doc = yaml.safe_load((project_root / "examples" / "ci" / "github-actions.yml").read_text())
    jobs = doc["jobs"]
    plan = " ".join(s.get("run", "") for s in jobs["plan"]["steps"])
    assert "efa-image-build list --json > variants.json\n" in plan  # its status ends the step
    assert jobs["build"]["strategy"]["matrix"]["variant"] == "${{ fromJSON(needs.plan.outputs.variants) }}"
    assert "build" in jobs["release"]["needs"]
    release = " ".join(s.get("run", "") for s in jobs["release"]["steps"])
    assert "--summary" in release and "--checks" in release and "download-artifact" in str(jobs["release"])
    junit = [s for s in jobs["build"]["steps"] if "junit" in str(s.get("uses", ""))]
    assert junit and junit[0]["with"]["report_paths"] == "build/test-report.xml"


@pytest.mark.parametrize("name", ["github-actions.yml", "buildspec.yml"])
def test_the_examples_name_no_matrix(project_root, name):
    """Issue 42 item 1: the project config's matrix (else matrix.yaml) is the one; a CI file that names it
    (MATRIX, --matrix) overrides a team's `[tool.efa-image-build] matrix` and fails its plan."""
    text = (project_root / "examples" / "ci" / name).read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    for word in ("--matrix", "MATRIX"):
        assert not [line for line in lines if word in line], word


def test_codebuild_batch_builds_every_variant_as_shipped(project_root):
    """Issue 42: the buildspec no longer ships this project's own variant list (a team had to edit it
    before it ran): one build of every variant, `VARIANT: all`."""
    doc = yaml.safe_load((project_root / "examples" / "ci" / "buildspec.yml").read_text())
    listed = doc["batch"]["build-matrix"]["dynamic"]["env"]["variables"]["VARIANT"]
    assert listed == ["all"]
    assert doc["reports"]["efa-image-checks"]["file-format"] == "JUNITXML"
    assert doc["batch"]["combine-artifacts"] is True


def test_codebuild_goes_to_ecr_unless_image_registry_is_set(project_root):
    """The run test (test_ci_examples_run.py) takes the IMAGE_REGISTRY branch: moto's ECR has no registry
    to push to. This pins the other one: by default build, push, attest and release go to ECR (whose push,
    attest and release lines test_attest_ecr.py runs in-process against its ECR registry stand-in)."""
    doc = yaml.safe_load((project_root / "examples" / "ci" / "buildspec.yml").read_text())
    assert doc["env"]["variables"]["IMAGE_REGISTRY"] == ""
    (build,) = doc["phases"]["build"]["commands"]
    assert 'set -- --ecr --region "$AWS_REGION"' in build.split("else", 1)[1]
    joined = re.sub(r"\\\n\s*", " ", build)
    for verb in ("build", "push", "attest"):
        (line,) = [m for m in re.findall(r"efa-image-build (\S+) ([^\n]*)", joined) if m[0] == verb]
        assert line[1].endswith('"$@"'), f"{verb} does not take the destination flags: {line[1]}"
    (release,) = re.findall(r"efa-image-build release ([^\n]*)", joined)
    assert '"$@"' in release and "--require-signed" in release  # where the images went: ECR by default


@pytest.mark.parametrize("name", ["github-actions.yml", "buildspec.yml"])
def test_the_examples_install_this_versions_wheel_never_a_checkout(project_root, name):
    from wheelvenv import VERSION

    text = (project_root / "examples" / "ci" / name).read_text()
    assert f"TOOL: efa-image-build[attest]=={VERSION}" in text
    assert re.findall(r"pip install (\S+)", text) and set(re.findall(r"pip install (\S+)", text)) == {
        '"$TOOL"'
    }
    assert "build.py" not in text and "-e ." not in text


def test_github_pull_requests_build_and_check_only():
    """Every step that needs AWS, a registry or a secret runs only off pull requests; the build gets no
    destination there; main signs and the release requires the signature."""
    from paths import ROOT

    doc = yaml.safe_load((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    publishing = "github.event_name != 'pull_request'"
    assert doc["env"]["PUBLISH"] == "${{ " + publishing + " }}"
    assert doc["jobs"]["build"]["env"]["IMAGE_REGISTRY"].startswith("${{ " + publishing + " && ")
    for step in doc["jobs"]["build"]["steps"]:
        text = str(step)
        if any(
            w in text for w in ("aws-actions/", "efa-image-build push", "efa-image-build attest", "secrets.")
        ):
            assert step.get("if") == publishing, step
    (build,) = [
        s["run"] for s in doc["jobs"]["build"]["steps"] if "efa-image-build build" in s.get("run", "")
    ]
    assert "dest=()" in build and 'if [ "$PUBLISH" = true ]' in build
    for job in ("preflight", "release"):
        assert publishing in doc["jobs"][job]["if"]
    release = " ".join(s.get("run", "") for s in doc["jobs"]["release"]["steps"])
    assert '--require-signed "$RUNNER_TEMP/signing.pub.pem"' in release
