"""Users' own steps: the training requirements installed at build time (hash-checked when the file has
hashes) in a stage that a code-only change does not rerun, and `build_steps` run before the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli import build_py
from userproject import REPO, SIX_HASHED, SIX_SHA, project

from imagebuild.errors import UserError
from imagebuild.matrix.load import load
from imagebuild.matrix.requirements import KEY, RequirementsFile, scan
from imagebuild.render.dockerfile import dockerfile

# ---- the requirements file, read at load time --------------------------------------------------------------


def test_scan_counts_requirements_and_sees_hash_mode():
    empty = scan("# only a comment\n\n", "r.txt")
    assert (empty.requirements, empty.hashed) == (0, False)
    plain = scan("--index-url https://pypi.org/simple\nsix==1.16.0  # pinned\nidna==3.7\n", "r.txt")
    assert (plain.requirements, plain.hashed) == (2, False)
    hashed = scan(SIX_HASHED + "idna==3.7 --hash=sha256:" + "0" * 64 + "\n", "r.txt")
    assert (hashed.requirements, hashed.hashed) == (2, True)


@pytest.mark.parametrize(
    "text,line,words",
    [
        (SIX_HASHED + "# a comment\nidna==3.7\n", 4, "no --hash="),
        ("six==1.16.0\n-r other.txt\n", 2, "`-r` is not supported"),
        ("six==1.16.0\n\n--constraint=c.txt\n", 3, "`--constraint` is not supported"),
        ("-e .\n", 1, "`-e` is not supported"),
        ("./pkg\n", 1, "local path"),
    ],
)
def test_scan_refuses_what_the_requirements_stage_cannot_do(text, line, words):
    with pytest.raises(UserError) as err:
        scan(text, "training/requirements.txt")
    assert err.value.line == line and err.value.key == "training.requirements"
    assert words in err.value.message


HASH = "--hash=sha256:" + "0" * 64


@pytest.mark.parametrize(
    "text,line,words",
    [
        ("--constr c.txt\n", 1, "`--constr` is not supported (pip reads it as `--constraint`)"),
        ("six==1.16.0\n--constr=c.txt\n", 2, "(pip reads it as `--constraint`)"),
        ("-cc.txt\n", 1, "`-c` is not supported (pip reads it as `--constraint`)"),
        ("-c\tc.txt\n", 1, "`-c` is not supported"),
        ("--pre -c c.txt\n", 1, "`-c` is not supported"),
        ("--requirem other.txt\n", 1, "(pip reads it as `--requirement`)"),
        ("--edit .\n", 1, "(pip reads it as `--editable`)"),
        ("six==1.16.0\n--con\\\nstraint c.txt\n", 2, "`--constraint` is not supported"),
        ("six==1.16.0\n  -\\\nr other.txt\n", 2, "`-r` is not supported"),
        ("# x \\\nsix==1.16.0\n-r a.txt \\\n # y\n", 3, "`-r` is not supported"),
        ("--con c.txt\n", 1, "`--con` is ambiguous to pip (--config-settings, --constraint)"),
        ("--frob\n", 1, "pip has no option `--frob`"),
        ("--pre=yes\n", 1, "takes no value"),
        ("-c\n", 1, "`-c` (--constraint) needs a value"),
        ("--index-url 'https://a\n", 1, "pip cannot split the options"),
        ("-f ./wheels\n", 1, "`-f` './wheels' (pip reads it as `--find-links`) is not an http(s) URL"),
        ("--ind=file:///srv/simple\n", 1, "is not an http(s) URL"),
        ("${OPTS}\n", 1, "${OPTS}: pip replaces it"),
        ("--require-hashes\nsix==1.16.0\n", 2, "no --hash= but the file says --require-hashes"),
        ("--require-h\nsix==1.16.0\n", 2, "no --hash= but the file says --require-hashes"),
        (f"six==1.16.0 --has {HASH[7:]}\nidna==3.7\n", 2, "no --hash= but others do"),
    ],
)
def test_scan_reads_pip_options_as_pip_does_in_every_spelling(text, line, words):
    """Abbreviations, joined or apart values, continuations inside an option: a refusal holds for each
    spelling pip accepts (issue 23, item 9)."""
    with pytest.raises(UserError) as err:
        scan(text, "training/requirements.txt")
    assert (err.value.file, err.value.line, err.value.key) == ("training/requirements.txt", line, KEY)
    assert words in err.value.message, err.value.message


@pytest.mark.parametrize(
    "line,url",
    [
        ("pkg @ file:///abs/path", "file:///abs/path"),
        ("pkg@file:///abs/pkg-1.0-py3-none-any.whl", "file:///abs/pkg-1.0-py3-none-any.whl"),
        ("pkg @file:../x", "file:../x"),
        ("pkg@ file://localhost/srv/pkg", "file://localhost/srv/pkg"),
        ("pkg @ FILE:///abs/path", "FILE:///abs/path"),
        ("pkg[extra] @ file:///abs/path ; python_version >= '3.8'", "file:///abs/path"),
        ("pkg [a,b]@file:///abs/path", "file:///abs/path"),
        ("my.pkg_2 @ git+file:///srv/repo.git@v1", "git+file:///srv/repo.git@v1"),
        ("pkg @ ../x", "../x"),
        ("pkg @ /abs/path --hash=sha256:" + "0" * 64, "/abs/path"),
    ],
)
def test_scan_refuses_a_direct_reference_to_a_local_path_in_every_spelling(line, url):
    """PEP 508 `name @ url`: nothing from outside the training folder enters the image. This env's pip
    (23.2, packaging 21.3) reads the file: spellings as file links and rejects the others as bad URLs; newer
    packaging (22+) takes any URL word, so each is refused here whichever pip the image carries."""
    with pytest.raises(UserError) as err:
        scan("six==1.16.0\n" + line + "\n", "training/requirements.txt")
    assert (err.value.file, err.value.line, err.value.key) == ("training/requirements.txt", 2, KEY)
    assert f"direct reference to a local path {url!r}" in err.value.message, err.value.message


def test_scan_accepts_a_direct_reference_to_a_remote_url():
    text = (
        "pkg @ https://example.invalid/pkg-1.0-py3-none-any.whl\n"
        "other[x]@git+https://example.invalid/other.git@v1\n"
        "third @ git+ssh://git@example.invalid/third.git\n"
    )
    assert scan(text, "r.txt") == RequirementsFile(3, False)


@pytest.mark.parametrize(
    "line,words", [("pkg @ file:///etc", "direct reference"), ("pkg-1.0-py3-none-any.whl", "local path")]
)
def test_a_local_file_is_exit_2_naming_file_line_and_key(tmp_path, line, words):
    path = project(tmp_path, "six==1.16.0\n" + line + "\n")
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 2 and "Traceback" not in res.err
    where = f"{tmp_path / 'training' / 'requirements.txt'}:2: key 'training.requirements': {words}"
    assert where in res.err, res.err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "line,tool",
    [
        ("efa-image-build==0.1.0", "efa-image-build"),
        ("EFA_Image.Build[attest]>=0.1", "efa-image-build"),
        ("efa_validators", "efa-validators"),
        ("Efa.Validators ; python_version >= '3.8'", "efa-validators"),
        ("efa-validators==1.0 --hash=sha256:" + "0" * 64, "efa-validators"),
        ("https://example.invalid/w/efa_validators-1.0-py3-none-any.whl", "efa-validators"),
        ("https://example.invalid/s/efa-image-build-0.1.0.tar.gz", "efa-image-build"),
        ("git+https://example.invalid/org/efa-image-build.git@v0.1.0", "efa-image-build"),
        ("git+https://example.invalid/org/tools.git#egg=efa_validators", "efa-validators"),
        ("mine @ https://example.invalid/w/efa_image_build-0.1.0-py3-none-any.whl", "efa-image-build"),
    ],
)
def test_a_requirement_that_installs_the_tool_is_exit_2_at_its_line(tmp_path, line, tool):
    """Its efa_validators would shadow the image's own copy (issue 30, item 2): refused at load, not found
    by the image checks after a build."""
    path = project(tmp_path, "six==1.16.0\n" + line + "\n")
    res = build_py("list", "--matrix", str(path))
    assert res.rc == 2 and "Traceback" not in res.err, res
    where = f"{tmp_path / 'training' / 'requirements.txt'}:2: key 'training.requirements': "
    assert where in res.err and f"installs {tool}, the tool's own package" in res.err, res.err


def test_pypis_validators_and_names_like_the_tools_are_not_refused():
    """Since the rename the validator's import name is efa_validators: PyPI's `validators` shadows nothing."""
    text = (
        "validators==0.34.0\nefa-image-builder==1.0\nefa-validators-extra==2\n"
        "https://example.invalid/w/validators-0.34.0-py3-none-any.whl\n"
        "mine @ https://example.invalid/w/mine-1.0.tar.gz\n"
    )
    assert scan(text, "r.txt") == RequirementsFile(5, False)


def test_scan_accepts_what_pip_accepts_in_any_spelling():
    text = (
        "--ind https://pypi.org/simple\n--extra https://example.invalid/simple\n-f https://example.invalid/w\n"
        "--only-b :all:\n--pre\n"
        f"six==1.16.0 --has {HASH[7:]}\n"
        f"idna==3.7 \\\n    {HASH}\n"
    )
    assert scan(text, "r.txt") == RequirementsFile(2, True)


# Spellings pip's own reader (the pip of this environment) is asked about: what it reads as -r, -c or -e the
# loader refuses at the same line, and what it reads as anything else the loader lets through.
ORACLE = [
    "--constr c.txt", "--constra=c.txt", "-cc.txt", "-c c.txt", "--pre -c c.txt", "--requireme x.txt",
    "-rx.txt", "--edita .", "-e.", "--index-url https://pypi.org/simple -c c.txt",
    "six==1.16.0 --hash=sha256:" + "0" * 64, "--prefer-b", "--pre", "--no-ind", "-i https://pypi.org/simple",
    "--con\\\nstraint c.txt", "-\\\nc c.txt", "# -c c.txt", "six==1.16.0 # -r x.txt",
    "--pre # \\\n-c c.txt",
]  # fmt: skip


@pytest.mark.parametrize("text", ORACLE)
def test_the_loader_refuses_exactly_what_pips_own_reader_reads_as_another_file(text):
    from pip._internal.req.req_file import get_line_parser, preprocess

    pip_lines = [(n, get_line_parser(None)(line)[1]) for n, line in preprocess(text + "\n")]
    pip_refused = [n for n, opts in pip_lines if opts.requirements or opts.constraints or opts.editables]
    if not pip_refused:
        scan(text + "\n", "r.txt")
        return
    with pytest.raises(UserError) as err:
        scan(text + "\n", "r.txt")
    assert err.value.line == pip_refused[0] and "is not supported" in err.value.message


# Requirement words pip reads as a local archive or path though they have no `./`: a bare archive name, a
# relative path, either with extras or markers.
LOCAL_FILES = [
    ("pkg-1.0-py3-none-any.whl", "pkg-1.0-py3-none-any.whl"),
    ("dist/pkg.whl", "dist/pkg.whl"),
    ("pkg-1.0.tar.gz", "pkg-1.0.tar.gz"),
    ("pkg.zip", "pkg.zip"),
    ("PKG-1.0.TAR.BZ2", "PKG-1.0.TAR.BZ2"),
    ("pkg-1.0.tgz[extra]", "pkg-1.0.tgz[extra]"),
    ("pkg-1.0-py3-none-any.whl; python_version >= '3.8'", "pkg-1.0-py3-none-any.whl"),
    ("wheels/pkg", "wheels/pkg"),
    ("git+file:///srv/repo.git", "git+file:///srv/repo.git"),
]


@pytest.mark.parametrize("line,path", LOCAL_FILES)
def test_scan_refuses_a_local_archive_or_path_without_dot_slash(line, path):
    """pip takes a word ending in an archive's extension as a file, `./` or not."""
    with pytest.raises(UserError) as err:
        scan("six==1.16.0\n" + line + " --hash=sha256:" + "0" * 64 + "\n", "training/requirements.txt")
    assert (err.value.file, err.value.line, err.value.key) == ("training/requirements.txt", 2, KEY)
    assert f"local path {path!r}" in err.value.message, err.value.message


# Requirement words pip's own reader (parse_req_from_line) is asked about: what it reads as a local file the
# loader refuses, and what it reads as a project or a remote URL the loader lets through.
REQUIREMENT_ORACLE = [line for line, _path in LOCAL_FILES if "/" not in line] + [
    "dist/pkg-1.0-py3-none-any.whl",
    "torch==2.3.0",
    'pkg[extra]>=1; python_version>"3.8"',
    "name @ https://example.invalid/pkg-1.0-py3-none-any.whl",
    "https://example.invalid/pkg-1.0.tar.gz",
    "zope.interface>=5",
    "x.tar.zip",
]


@pytest.mark.parametrize("line", REQUIREMENT_ORACLE)
def test_the_loader_refuses_exactly_what_pips_own_reader_reads_as_a_local_file(line):
    from pip._internal.req.constructors import parse_req_from_line

    link = parse_req_from_line(line, None).link
    if link is None or link.scheme != "file":
        assert scan(line + "\n", "r.txt") == RequirementsFile(1, False)
        return
    with pytest.raises(UserError) as err:
        scan(line + "\n", "r.txt")
    assert err.value.line == 1 and "local path" in err.value.message


def test_an_abbreviated_constraint_is_exit_2_naming_file_line_and_key(tmp_path):
    path = project(tmp_path, "six==1.16.0\n--constr c.txt\n")
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 2 and "Traceback" not in res.err
    where = f"{tmp_path / 'training' / 'requirements.txt'}:2: key 'training.requirements': `--constr`"
    assert where in res.err, res.err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_bad_requirements_exit_2_naming_file_and_line(tmp_path):
    path = project(tmp_path, "six==1.16.0\n-r more.txt\n")
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    rc = res.rc
    err = res.err
    assert rc == 2 and "Traceback" not in err
    assert f"{tmp_path / 'training' / 'requirements.txt'}:2" in err and "key 'training.requirements'" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "step,words",
    [
        ('"echo a\\necho b"', "one line"),
        ('"make \\\\"', "backslash"),
        ('"  "', "empty build step"),
    ],
)
def test_bad_build_step_exit_2_with_line_and_key(tmp_path, step, words):
    path = project(tmp_path, "six==1.16.0\n")
    text = path.read_text().replace(
        "      - python3 -c 'import six; print(six.__version__)' > /opt/six-version", f"      - {step}"
    )
    path.write_text(text)
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    rc = res.rc
    err = res.err
    assert rc == 2 and "Traceback" not in err
    assert f"{path}:9" in err and "key 'variants[0].build_steps[0]'" in err and words in err, err


# ---- where the layers go -----------------------------------------------------------------------------------


def test_layers_requirements_then_steps_then_code(tmp_path):
    (v,) = load(str(project(tmp_path, SIX_HASHED)))
    assert v.training.install_requirements and v.training.require_hashes
    text = dockerfile(v)
    stage = text.index("FROM system AS requirements")
    runtime = text.index("AS runtime")
    assert stage < runtime
    req_stage = text[stage:runtime]
    assert "COPY training/requirements.txt" in req_stage and "COPY training " not in req_stage
    assert "--require-hashes" in req_stage and "certs/build-ca.crt" in req_stage
    final = text[runtime:]
    order = [
        final.index("COPY --from=requirements /tmp/requirements/root/ /"),
        final.index("RUN python3 -c 'import six; print(six.__version__)' > /opt/six-version"),
        final.index("COPY training /opt/ml/code"),
    ]
    assert order == sorted(order)
    assert "build-ca" not in final  # the CA never reaches the image


def test_unhashed_file_installs_without_require_hashes_and_comment_only_file_installs_nothing(tmp_path):
    (v,) = load(str(project(tmp_path, "six==1.16.0\n")))
    text = dockerfile(v)
    assert "AS requirements" in text and "--require-hashes" not in text
    (v,) = load(str(project(tmp_path, "# torch comes with the base\n")))
    assert not v.training.install_requirements
    assert "AS requirements" not in dockerfile(v)


# ---- a real build: installed, hash-checked, cached ---------------------------------------------------------


def _steps(log: str) -> dict:
    """Classic builder log -> {step text: whether it came from the cache}."""
    out, current = {}, None
    for line in log.splitlines():
        m = re.match(r"Step \d+/\d+ : (.*)", line)
        if m:
            current = m.group(1)
            out[current] = False
        elif current and line.strip() == "---> Using cache":
            out[current] = True
    return out


@pytest.fixture
def cleanup(docker_client):
    yield
    for image in docker_client.images.list():
        if any(t.startswith(REPO) for t in image.tags):
            for t in image.tags:
                docker_client.images.remove(t, force=True)


def _build(path: Path, out: Path) -> int:
    return build_py("build", "--matrix", str(path), "--out", str(out), "--builder", "classic", "--plain").rc


@pytest.mark.docker
@pytest.mark.slow
def test_build_installs_hashed_requirements_and_code_change_keeps_the_pip_layer(
    tmp_path, docker_client, local_base, cleanup
):
    path = project(tmp_path, SIX_HASHED, base=local_base)
    out = tmp_path / "build"
    assert _build(path, out) == 0, (out / "usersteps" / "build.log").read_text()[-3000:]
    entry = json.loads((out / "summary.json").read_text())["variants"][0]
    first = docker_client.images.get(f"{REPO}:probe-{entry['context_hash'][:12]}")
    base_id = docker_client.images.get(local_base).id
    assert entry["base_image_id"] == base_id  # what the base tag was when this image was built
    assert first.labels["org.efa-image-build.base.image-id"] == base_id
    probe = docker_client.containers.run(
        first.id,
        [
            "bash",
            "-c",
            "cat /opt/six-version; python3 -c 'import six; print(six.__file__)'; "
            "ls /usr/local/share/ca-certificates 2>&1; python3 -m pip --version 2>&1; true",
        ],
        remove=True,
        network_disabled=True,
    ).decode()
    assert probe.splitlines()[0] == "1.16.0"  # the build step ran after the requirements
    assert "/usr/local/lib/python3" in probe  # six from the requirements, in the interpreter's path
    assert "No such file" in probe and "No module named pip" in probe  # no CA, no pip in the image

    (tmp_path / "training" / "train.py").write_text("print('v2')\n")  # a code-only change
    assert _build(path, out) == 0
    steps = _steps((out / "usersteps" / "build.log").read_text())
    pip = [s for s in steps if "-m pip install" in s]
    assert pip and all(steps[s] for s in pip), steps
    assert steps["COPY --from=requirements /tmp/requirements/root/ /"] is True
    assert steps["COPY training /opt/ml/code"] is False
    entry2 = json.loads((out / "summary.json").read_text())["variants"][0]
    second = docker_client.images.get(f"{REPO}:probe-{entry2['context_hash'][:12]}")  # new content, new tag
    assert second.id != first.id
    # the layers up to the training code are the same layers (a rerun pip writes new files: new diff ids)
    layers1, layers2 = first.attrs["RootFS"]["Layers"], second.attrs["RootFS"]["Layers"]
    shared = next(i for i, (a, b) in enumerate(zip(layers1, layers2)) if a != b)
    assert 1 <= len(layers1) - shared <= 4, (shared, len(layers1))  # the code layer and the few after it

    (tmp_path / "training" / "requirements.txt").write_text(SIX_HASHED.replace(SIX_SHA, "0" * 64))
    assert _build(path, out) == 1  # a wrong hash fails the build
    log = (out / "usersteps" / "build.log").read_text()
    assert "DO NOT MATCH THE HASHES" in log, log[-2000:]
