"""The team's own checks in the matrix (`checks:`, `checks_file:`): inheritance, the lock, the schema, and
bad definitions refused with exit 2 naming file, line and key (in the matrix or in the checks file)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli import build_py
from paths import ROOT

from imagebuild.components.lock import variant_from_lock
from imagebuild.matrix.load import load

MATRIX = """\
defaults:
  base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
  cuda: "12.8"
  components:
    nccl: {version: "2.27.7", method: wheel}
  checks_file: team-checks.yaml
templates:
  with_hello:
    checks:
      hello:
        command: sh
        args: [-c, echo hello]
        expected_output: ['^hello$']
variants:
  - name: v
    extends: [with_hello]
    checks:
      tmp-sticky: {path: /tmp, permissions: drwxrwxrwt}
      from-file-dropped: null
  - name: w
"""
CHECKS_FILE = """\
checks:
  from-file: {metadata: {workdir: /opt/ml/code, env: {SAGEMAKER_PROGRAM: train.py}}}
  from-file-dropped: {path: /nowhere, should_exist: false}
"""


def write(tmp_path: Path, matrix: str = MATRIX, checks: str = CHECKS_FILE) -> Path:
    (tmp_path / "team-checks.yaml").write_text(textwrap.dedent(checks))
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(matrix))
    return path


def test_checks_inherit_from_the_file_defaults_and_templates_and_null_drops_one(tmp_path):
    v, w = load(str(write(tmp_path)))
    assert [c.name for c in v.checks] == ["from-file", "hello", "tmp-sticky"]
    assert [c.name for c in w.checks] == ["from-file", "from-file-dropped"]
    lock = v.to_lock()["checks"]
    assert lock["hello"] == {"command": "sh", "args": ["-c", "echo hello"], "expected_output": ["^hello$"]}
    assert lock["from-file"]["metadata"]["env"] == {"SAGEMAKER_PROGRAM": "train.py"}
    assert w.to_lock()["checks"]["from-file-dropped"] == {"path": "/nowhere", "should_exist": False}
    assert variant_from_lock(json.loads(v.lock_json())) == v  # the lock carries them back, unchanged


def test_a_variant_without_checks_keeps_the_lock_it_had(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.split("templates:")[0].replace("  checks_file: team-checks.yaml\n", ""))
    path.write_text(path.read_text() + "variants:\n  - name: plain\n")
    (plain,) = load(str(path))
    assert plain.checks == () and "checks" not in plain.to_lock()


def test_the_local_matrix_has_real_checks_on_the_variant_the_demo_builds():
    v = load(str(ROOT / "matrix.local.yaml"), ["local-debian-nccl2.27"])[0]
    kinds = {c.name: next(k for k in ("command", "path", "metadata") if k in c.spec) for c in v.checks}
    assert kinds == {
        "training-entry-point-runs": "command",
        "entry-point-file": "path",
        "sagemaker-code-dir": "metadata",
    }


def test_the_json_schema_describes_the_checks_section():
    res = build_py("schema")
    assert res.rc == 0, res.err
    doc = json.loads(res.out)
    spec = doc["$defs"]["CheckSpec"]["properties"]
    for key in ("command", "args", "exit_code", "expected_output", "excluded_output", "path", "should_exist",
                "permissions", "expected_contents", "excluded_contents", "metadata"):  # fmt: skip
        assert key in spec, key
    meta = doc["$defs"]["CheckMetadataSpec"]["properties"]
    assert set(meta) == {"env", "labels", "entrypoint", "cmd", "workdir", "user"}
    body = doc["$defs"]["VariantBody"]["properties"]
    assert "checks" in body and "checks_file" in body


# (name, matrix text, checks-file text, file that is named, line, key, words in the message)
BAD = [
    (
        "two-kinds",
        MATRIX.replace("tmp-sticky: {path: /tmp,", "tmp-sticky: {command: ls, path: /tmp,"),
        CHECKS_FILE,
        "m.yaml",
        18,
        "variants[0].checks.tmp-sticky",
        "exactly one of command, path, metadata (got command, path)",
    ),
    (
        "no-kind",
        MATRIX.replace("tmp-sticky: {path: /tmp, permissions: drwxrwxrwt}", "tmp-sticky: {description: x}"),
        CHECKS_FILE,
        "m.yaml",
        18,
        "variants[0].checks.tmp-sticky",
        "exactly one of command, path, metadata",
    ),
    (
        "command-key-on-a-file-check",
        MATRIX.replace("permissions: drwxrwxrwt", "exit_code: 0"),
        CHECKS_FILE,
        "m.yaml",
        18,
        "variants[0].checks.tmp-sticky",
        "exit_code only applies to a command check",
    ),
    (
        "bad-regex-in-a-template",
        MATRIX.replace("'^hello$'", "'^hel(lo$'"),
        CHECKS_FILE,
        "m.yaml",
        13,
        "templates.with_hello.checks.hello.expected_output[0]",
        "not a valid regular expression",
    ),
    (
        "exit-code-not-a-number",
        MATRIX.replace("args: [-c, echo hello]", "args: [-c, echo hello]\n        exit_code: zero"),
        CHECKS_FILE,
        "m.yaml",
        13,
        "templates.with_hello.checks.hello.exit_code",
        "expected a whole number",
    ),
    (
        "timeout-zero",
        MATRIX.replace("args: [-c, echo hello]", "args: [-c, echo hello]\n        timeout: 0"),
        CHECKS_FILE,
        "m.yaml",
        13,
        "templates.with_hello.checks.hello.timeout",
        "greater than or equal to 1",
    ),
    (
        "timeout-over-the-bound",
        MATRIX.replace("args: [-c, echo hello]", "args: [-c, echo hello]\n        timeout: 601"),
        CHECKS_FILE,
        "m.yaml",
        13,
        "templates.with_hello.checks.hello.timeout",
        "less than or equal to 600",
    ),
    (
        "timeout-not-a-number",
        MATRIX.replace("args: [-c, echo hello]", "args: [-c, echo hello]\n        timeout: 10s"),
        CHECKS_FILE,
        "m.yaml",
        13,
        "templates.with_hello.checks.hello.timeout",
        "expected a whole number",
    ),
    (
        "timeout-on-a-file-check",
        MATRIX.replace("permissions: drwxrwxrwt", "timeout: 5"),
        CHECKS_FILE,
        "m.yaml",
        18,
        "variants[0].checks.tmp-sticky",
        "timeout only applies to a command check",
    ),
    (
        "bad-permissions",
        MATRIX.replace("drwxrwxrwt", "'rwxr-xr-x'"),
        CHECKS_FILE,
        "m.yaml",
        18,
        "variants[0].checks.tmp-sticky.permissions",
        "permission string",
    ),
    (
        "bad-check-name",
        MATRIX.replace("tmp-sticky:", "Tmp Sticky:"),
        CHECKS_FILE,
        "m.yaml",
        18,
        "variants[0].checks.Tmp Sticky",
        "is not a valid check name",
    ),
    (
        "unknown-key-in-the-file",
        MATRIX,
        CHECKS_FILE.replace("should_exist: false", "shouldExist: false"),
        "team-checks.yaml",
        3,
        "checks.from-file-dropped.shouldExist",
        "unknown key 'shouldExist'",
    ),
    (
        "unknown-metadata-key-in-the-file",
        MATRIX,
        CHECKS_FILE.replace("workdir: /opt/ml/code", "wrokdir: /opt/ml/code"),
        "team-checks.yaml",
        2,
        "checks.from-file.metadata.wrokdir",
        "did you mean 'workdir'?",
    ),
    (
        "file-missing",
        MATRIX.replace("team-checks.yaml", "nope.yaml"),
        CHECKS_FILE,
        "m.yaml",
        6,
        "checks_file",
        "is not a file next to the matrix",
    ),
    (
        "file-outside",
        MATRIX.replace("team-checks.yaml", "../team-checks.yaml"),
        CHECKS_FILE,
        "m.yaml",
        6,
        "checks_file",
        "leaves the matrix's folder",
    ),
    ("file-not-a-mapping", MATRIX, "- a\n- b\n", "team-checks.yaml", 1, None, "a mapping with a `checks:`"),
    (
        "file-with-more-than-checks",
        MATRIX,
        CHECKS_FILE + "variants: []\n",
        "team-checks.yaml",
        4,
        "variants",
        "unknown key 'variants'",
    ),
]


@pytest.mark.parametrize("case,matrix,checks,named,line,key,words", BAD, ids=[b[0] for b in BAD])
def test_a_bad_check_definition_is_exit_2_naming_file_line_and_key(
    tmp_path, case, matrix, checks, named, line, key, words
):
    path = write(tmp_path, matrix, checks)
    out = tmp_path / "out"
    res = build_py("render", "--matrix", path, "--out", out)
    assert res.rc == 2, res.err
    assert "Traceback" not in res.err and res.err.count("error:") == 1, res.err
    assert f"{tmp_path / named}:{line}:" in res.err, res.err
    if key:
        assert f"key '{key}'" in res.err, res.err
    assert words in res.err, res.err
    assert not out.exists()


def test_a_checks_file_that_is_a_symlink_out_of_the_matrix_folder_is_refused(tmp_path):
    """issue 32, item 3: the `../` check was textual and isfile follows links, so `team-checks.yaml ->
    /elsewhere/checks.yaml` put the outside file's checks into the lock and the image's label."""
    inside, outside = tmp_path / "matrix", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    (outside / "checks.yaml").write_text(textwrap.dedent(CHECKS_FILE))
    path = write(inside)
    (inside / "team-checks.yaml").unlink()
    (inside / "team-checks.yaml").symlink_to(outside / "checks.yaml")
    out = tmp_path / "out"
    res = build_py("render", "--matrix", path, "--out", out)
    assert res.rc == 2 and "Traceback" not in res.err, res.err
    assert f"{path}:6:" in res.err and "key 'checks_file'" in res.err, res.err
    assert "leaves the matrix's folder through a symlink" in res.err
    assert not out.exists()
    (inside / "sub").mkdir()  # a link that stays inside the folder is fine
    (inside / "sub" / "real.yaml").write_text(textwrap.dedent(CHECKS_FILE))
    (inside / "team-checks.yaml").unlink()
    (inside / "team-checks.yaml").symlink_to(inside / "sub" / "real.yaml")
    assert build_py("render", "--matrix", path, "--out", out).rc == 0
