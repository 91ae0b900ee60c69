"""What a team expects of a CLI it installs (issue 30, item 5): --version from the package metadata, every
usage line named `efa-image-build`, global -v/-q/--log-level, "did you mean" for verbs, variants,
cluster-file keys and instance types, reports a CI can publish (0644), and a project config
(`[tool.efa-image-build]` in pyproject.toml) with flags over config over defaults.

`build.py test` printing each failed check with its reason on stdout is pinned by
tests/imagebuild/check/test_checks.py (`fail    env-forbidden` in the process's stdout); shell completion, by
the shells themselves, by tests/imagebuild/test_completion.py.
"""

from __future__ import annotations

import json
import os
import stat
from importlib import metadata
from pathlib import Path

import pytest
from cli import build_py, build_py_process, validators
from paths import ROOT

from imagebuild.cli import COMMAND_NAMES, PROG

LOCAL = ROOT / "matrix.local.yaml"


def test_version_is_the_installed_distributions():
    proc = build_py_process("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"efa-image-build {metadata.version('efa-image-build')}"


@pytest.mark.parametrize("verb", COMMAND_NAMES)
def test_every_verbs_help_is_named_as_the_console_script(verb):
    got = build_py(verb, "--help")
    assert got.rc == 0 and got.out.startswith(f"usage: {PROG} {verb} "), got.out[:200]
    assert "-q" in got.out and "--log-level" in got.out


def test_a_mistyped_verb_gets_the_close_one_and_exit_2():
    got = build_py("rendr", "--out", "x")
    assert got.rc == 2 and "unknown command 'rendr'; did you mean 'render'?" in got.err
    got = build_py("zzzzzz")
    assert got.rc == 2 and "commands: init, list, render" in got.err


def test_a_mistyped_variant_gets_the_close_one():
    got = build_py("list", "--matrix", LOCAL, "--variant", "local-debian-ncl2.27")
    assert got.rc == 2 and "did you mean 'local-debian-nccl2.27'?" in got.err


def test_quiet_hides_progress_but_not_errors_and_verbose_says_where_settings_came_from(tmp_path):
    summary = tmp_path / "s.json"
    summary.write_text(
        json.dumps(
            {"schema": "efa-image-build/build-summary/v1", "variants": [{"variant": "x", "status": "failed"}]}
        )
    )
    argv = ("push", "--summary", summary, "--registry", "127.0.0.1:9")
    loud = build_py(*argv)
    assert loud.rc == 2 and "skip x: status 'failed'" in loud.err and "no built variant" in loud.err
    for quiet in (("-q",), ("--log-level", "error"), ("--log-level=warning",)):
        got = build_py(*quiet, *argv)  # before the verb
        assert got.rc == 2 and "skip x" not in got.err and "no built variant" in got.err, quiet
    after = build_py(*argv, "-q")  # after it
    assert "skip x" not in after.err and "no built variant" in after.err
    verbose = build_py("-v", "list", "--matrix", LOCAL)
    assert verbose.rc == 0 and "config: no pyproject.toml with [tool.efa-image-build]" in verbose.err
    assert "config:" not in build_py("list", "--matrix", LOCAL).err
    assert build_py("-v", "-q", "list").rc == 2  # one level


def test_validator_reports_are_0644_not_mkstemps_0600(tmp_path):
    log = ROOT / "tests" / "data" / "nccl"
    sample = next(iter(sorted(log.rglob("*.log")))) if log.is_dir() else None
    if sample is None:
        sample = tmp_path / "empty.log"
        sample.write_text("")
    old = os.umask(0o022)
    try:
        got = validators("parse", sample, "--instance-type", "p5.48xlarge", "--json", tmp_path / "r.json")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").exists(), got.err
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644


# ---------------------------------------------------------------- project config

TEAM_MATRIX = """\
format: efa-image-build/matrix/v1
variants:
  - name: team-image
    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
    packages: [python3=3.11.2-1+b1]
"""


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "matrix.yaml").write_text(TEAM_MATRIX)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "team"\n\n[tool.efa-image-build]\n' + table)
    (tmp_path / "sub").mkdir()
    return tmp_path


def test_the_config_names_the_matrix_and_a_flag_wins(tmp_path, monkeypatch):
    root = _project(tmp_path, 'matrix = "images/matrix.yaml"\nout = "out"\n')
    monkeypatch.chdir(root / "sub")  # found from a subfolder, paths relative to the pyproject.toml
    got = build_py("-v", "list", "--json")
    assert got.rc == 0, got.err
    assert {v["matrix"] for v in json.loads(got.out)} == {"matrix.yaml"}
    matrix = root / "images" / "matrix.yaml"
    assert f"config: {root / 'pyproject.toml'} [tool.efa-image-build]: matrix = {matrix}" in got.err
    rendered = build_py("render")
    assert rendered.rc == 0 and (root / "out" / "team-image" / "Dockerfile").is_file()
    flag = build_py("list", "--matrix", "nothing-here.yaml")  # the flag, not the config
    assert flag.rc == 2 and "nothing-here.yaml" in flag.err


def test_no_config_beyond_the_git_root(tmp_path, monkeypatch):
    _project(tmp_path, 'matrix = "images/matrix.yaml"\n')
    inner = tmp_path / "sub" / "repo"
    (inner / ".git").mkdir(parents=True)
    monkeypatch.chdir(inner)
    got = build_py("-v", "list")
    assert got.rc == 2 and "config: no pyproject.toml" in got.err  # the default matrix.yaml, not there


@pytest.mark.parametrize(
    "table, line, key, words",
    [
        ('matirx = "m.yaml"\n', 5, "tool.efa-image-build.matirx", "did you mean 'matrix'?"),
        ("cache = 3\n", 5, "tool.efa-image-build.cache", "must be a non-empty string"),
        ('registry = "https://u:pw@reg.example:5000"\n', 5, "tool.efa-image-build.registry", "no login"),
        ('matrix = "a\n', 5, None, "not valid TOML"),
    ],
)
def test_bad_config_is_exit_2_naming_file_line_and_key(tmp_path, monkeypatch, table, line, key, words):
    root = _project(tmp_path, table)
    monkeypatch.chdir(root)
    got = build_py("list")
    assert got.rc == 2 and "Traceback" not in got.err
    assert f"{root / 'pyproject.toml'}:{line}" in got.err and words in got.err, got.err
    if key:
        assert f"key '{key}'" in got.err
    assert "u:pw@" not in got.err


def _project_file(tmp_path: Path, text: str) -> Path:
    """`_project`, with the whole pyproject.toml as given (a form TOML allows for the table)."""
    root = _project(tmp_path, "")
    (root / "pyproject.toml").write_text(text)
    return root


SAME = 'matrix = "images/matrix.yaml"\nout = "out"\n'


@pytest.mark.parametrize(
    "text",
    [
        '[tool."efa-image-build"]\n' + SAME,
        "[ tool . 'efa-image-build' ]  # literal quotes, spaces\n" + SAME,
        '[tool."efa\\u002Dimage-build"]\n' + SAME,  # an escape in a quoted key: the same key
        '[project]\nname = "team"\n\n[tool]\nefa-image-build.matrix = "images/matrix.yaml"\n'
        'efa-image-build.out = "out"\n',
        'tool.efa-image-build.matrix = "images/matrix.yaml"\ntool."efa-image-build".out = "out"\n'
        '[project]\nname = "team"\n',
        '[tool]\nefa-image-build = { matrix = "images/matrix.yaml", out = "out" }\n',
    ],
    ids=["quoted", "literal-quoted", "escaped", "dotted-under-tool", "dotted-top", "inline"],
)
def test_every_toml_form_of_the_table_is_read_the_same(tmp_path, monkeypatch, text):
    """The table was found by a regular expression on `[tool.efa-image-build]` lines: dotted keys, inline
    tables and other quotings of the same key were silently ignored. TOML's parser reads them all alike."""
    root = _project_file(tmp_path, text)
    monkeypatch.chdir(root / "sub")
    got = build_py("-v", "list", "--json")
    assert got.rc == 0, got.err
    matrix = root / "images" / "matrix.yaml"
    assert f"config: {root / 'pyproject.toml'} [tool.efa-image-build]: matrix = {matrix}" in got.err
    assert [v["name"] for v in json.loads(got.out)] == ["team-image"]


@pytest.mark.parametrize(
    "text, line, key, words",
    [
        (
            '[project]\nname = "t"\n\n[[tool.efa-image-build]]\n' + SAME,
            4,
            "tool.efa-image-build",
            "is an array of tables",
        ),
        (
            '[tool]\nx = 1\nefa-image-build = "images/matrix.yaml"\n',
            3,
            "tool.efa-image-build",
            "must be a table, got str",
        ),
        (
            'tool.efa-image-build.cache = 3\n[project]\nname = "t"\n',
            1,
            "tool.efa-image-build.cache",
            "must be a non-empty string",
        ),
        (
            '[tool]\n"efa-image-build".matirx = "m.yaml"\n',
            2,
            "tool.efa-image-build.matirx",
            "did you mean 'matrix'?",
        ),
        (
            '[tool]\nefa-image-build = { out = "o", cache = 3 }\n',
            2,
            "tool.efa-image-build.cache",
            "must be a non-empty string",
        ),
        (
            '[tool."efa-image-build"]\n"ma\\u001b[2Jtrix" = "m"\n',
            2,
            "tool.efa-image-build.ma\\x1b[2Jtrix",
            "unknown key",
        ),
        ('[project]\nname = "t"\n[[tool]]\nefa-image-build.out = "o"\n', 3, "tool", "is an array of tables"),
    ],
    ids=[
        "array-of-tables",
        "not-a-table",
        "dotted-top",
        "dotted-quoted",
        "inline",
        "escaped-key",
        "tool-array",
    ],
)
def test_a_bad_table_in_any_form_is_exit_2_naming_file_line_and_key(
    tmp_path, monkeypatch, text, line, key, words
):
    root = _project_file(tmp_path, text)
    monkeypatch.chdir(root)
    got = build_py("list")
    assert got.rc == 2 and "Traceback" not in got.err and "\x1b" not in got.err, got.err
    assert f"{root / 'pyproject.toml'}:{line}: key '{key}': " in got.err and words in got.err, got.err


def test_a_pyproject_that_is_not_toml_is_judged_only_where_it_names_the_table(tmp_path, monkeypatch):
    """Another tool's broken pyproject.toml is not ours to judge (no config); one naming the table is."""
    root = _project_file(tmp_path, '[project]\nname = "team\n')
    monkeypatch.chdir(root)
    got = build_py("-v", "list")
    assert "config: no pyproject.toml" in got.err and "not valid TOML" not in got.err, got.err
    (root / "pyproject.toml").write_text('[project]\nname = "team"\n[tool.efa-image-build\nout = "o"\n')
    got = build_py("list")
    assert got.rc == 2 and f"{root / 'pyproject.toml'}:3: not valid TOML" in got.err, got.err


def test_the_registry_from_config_and_image_registry_over_it(tmp_path, monkeypatch):
    root = _project(tmp_path, 'registry = "127.0.0.1:9/team"\n')
    monkeypatch.chdir(root)
    summary = root / "s.json"
    summary.write_text(json.dumps({"schema": "efa-image-build/build-summary/v1", "variants": []}))
    monkeypatch.delenv("IMAGE_REGISTRY", raising=False)
    got = build_py("-v", "push", "--summary", summary)
    assert "registry = 127.0.0.1:9/team" in got.err and "no registry given" not in got.err
    monkeypatch.setenv("IMAGE_REGISTRY", "127.0.0.1:8")
    got = build_py("-v", "push", "--summary", summary)
    assert "registry = " not in got.err  # the CI setting wins
    monkeypatch.delenv("IMAGE_REGISTRY")
    ecr = build_py("-v", "push", "--summary", summary, "--ecr", "--region", "us-east-1",
                   "--endpoint-url", "http://127.0.0.1:9")  # fmt: skip
    assert "not allowed with argument" not in ecr.err  # --ecr and the config's registry do not clash


# ---------------------------------------------------------------- did you mean: cluster files, instance types


def _cluster(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_a_mistyped_cluster_key_or_instance_type_gets_the_close_one(tmp_path):
    from imagebuild.errors import UserError
    from imagebuild.preflight.recipes import load_cluster

    with pytest.raises(UserError) as err:
        load_cluster(str(_cluster(tmp_path, "nodes: 2\ninstance_typ: p5.48xlarge\n")))
    assert (err.value.line, err.value.key) == (2, "instance_typ")
    assert "did you mean 'instance_type'?" in str(err.value)
    with pytest.raises(UserError) as err:
        load_cluster(str(_cluster(tmp_path, "nodes: 2\ninstance_type: p5.48xlarg\n")))
    assert (err.value.line, err.value.key) == (2, "instance_type")
    assert "did you mean 'p5.48xlarge'" in str(err.value) and "gpus_per_node" in str(err.value)


def test_sagemaker_refuses_an_unknown_instance_type_before_paying_for_nodes():
    from imagebuild.errors import UserError
    from imagebuild.preflight.sagemaker import SageMakerOptions, build_request

    opts = SageMakerOptions(
        image="r/i@sha256:" + "a" * 64,
        instance_type="ml.p5.48xlarg",
        role_arn="arn:aws:iam::123456789012:role/x",
        output_s3="s3://b/o",
    )
    with pytest.raises(UserError) as err:
        build_request(opts)
    assert err.value.key == "--instance-type" and "did you mean p5.48xlarge" in str(err.value)


def test_a_config_another_user_could_write_is_not_read(tmp_path, monkeypatch):
    from imagebuild.settings.project import trusted

    root = _project(tmp_path, 'registry = "127.0.0.1:9/team"\n')
    config = root / "pyproject.toml"
    monkeypatch.chdir(root)
    config.chmod(0o666)
    got = build_py("list")
    assert got.rc == 2 and f"{config}: key 'tool.efa-image-build': not read: writable by others" in got.err
    config.chmod(0o644)
    assert trusted(config) is None
    if os.getuid() == 0:  # root may hand the file to another user: then root does not read it
        os.chown(config, 4242, -1)
        got = build_py("list")
        assert got.rc == 2 and "not read: owned by uid 4242, not by this user (uid 0)" in got.err
    else:  # the file is ours: another user (not root) would not read it
        mine = os.getuid()
        assert trusted(config, uid=mine + 1) == f"owned by uid {mine}, not by this user (uid {mine + 1})"


def test_root_through_sudo_reads_the_config_of_the_user_who_ran_sudo(tmp_path, monkeypatch):
    """Issue 42 item 1: CI runs `sudo efa-image-build base` in the runner user's checkout; root then reads
    that user's pyproject.toml (SUDO_UID), and still not another user's."""
    from imagebuild.settings.project import trusted

    config = _project(tmp_path, 'registry = "127.0.0.1:9/team"\n') / "pyproject.toml"
    if os.getuid() == 0:
        os.chown(config, 4242, -1)
    owner = config.stat().st_uid
    monkeypatch.delenv("SUDO_UID", raising=False)
    assert trusted(config, uid=0) == f"owned by uid {owner}, not by this user (uid 0)" or owner == 0
    monkeypatch.setenv("SUDO_UID", str(owner))
    assert trusted(config, uid=0) is None
    monkeypatch.setenv("SUDO_UID", str(owner + 1))
    assert trusted(config, uid=0) == f"owned by uid {owner}, not by this user (uid 0)"
    assert trusted(config, uid=owner + 7) is not None  # SUDO_UID counts for root only
