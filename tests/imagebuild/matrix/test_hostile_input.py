"""Hostile and unlucky input to `build.py`: each case is exit 2 naming the file (and line and key where there
is one), never a hang, a traceback or a half-written output; nothing secret reaches a build context or a log.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import cli
import pytest
from cli import BUILD_PY, VALIDATORS
from paths import IMPORT_PATH, ROOT
from services import free_port

from imagebuild.building.artifacts import ArtifactCache, ArtifactError
from imagebuild.errors import UserError
from imagebuild.matrix import expand as matrix_mod
from imagebuild.matrix.load import load
from imagebuild.variant import Artifact

VARIANT = "local-debian-nccl2.27"
HEAD = """\
defaults:
  base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
  cuda: "12.8"
"""
COMPONENTS = """\
    components:
      nccl: {version: "2.27.7", method: wheel}
"""


def build_py(*args, timeout=60, **kw):
    """build.py in a child, bounded in time: a hang fails the test instead of stalling the suite."""
    return cli.build_py_process(*args, timeout=timeout, **kw)


def project(tmp_path: Path, name: str = "m.yaml") -> Path:
    """matrix.local.yaml with its training folder, copied where the test may change them."""
    shutil.copytree(ROOT / "examples" / "training", tmp_path / "examples" / "training")
    shutil.copy(ROOT / "checks.local.yaml", tmp_path)  # its checks_file
    path = tmp_path / name
    path.write_text((ROOT / "matrix.local.yaml").read_text())
    return path


def render(path: Path, out: Path) -> tuple:
    rc, _out, err = cli.build_py("render", "--matrix", path, "--out", out, "--variant", VARIANT)
    return rc, err


def written(out: Path) -> list:
    return sorted(str(p) for p in out.rglob("*")) if out.exists() else []


# -- (1) the build context: regular files from inside the matrix's folder only ----------------------------
@pytest.mark.parametrize("target", ["file", "folder"])
def test_a_symlink_in_the_training_folder_is_refused_and_its_target_never_copied(tmp_path, target):
    path = project(tmp_path)
    secret = tmp_path / "outside" / "credentials"
    secret.parent.mkdir()
    secret.write_text("aws_secret_access_key = H13-NOT-A-REAL-KEY\n")
    link = tmp_path / "examples" / "training" / "config.ini"
    link.symlink_to(secret if target == "file" else secret.parent)
    out = tmp_path / "build"
    rc, err = render(path, out)
    assert rc == 2
    assert f"{link}: key 'training.source_dir': a symlink" in err and "Traceback" not in err
    assert written(out) == []


def test_a_hard_link_to_a_file_outside_the_training_folder_is_refused(tmp_path):
    """The same leak as a symlink out, by another door (issue 23, item 8)."""
    path = project(tmp_path)
    secret = tmp_path / "outside" / "credentials"
    secret.parent.mkdir()
    secret.write_text("aws_secret_access_key = H13-NOT-A-REAL-KEY\n")
    link = tmp_path / "examples" / "training" / "config.ini"
    os.link(secret, link)
    out = tmp_path / "build"
    rc, err = render(path, out)
    assert rc == 2 and "Traceback" not in err
    assert f"{link}: key 'training.source_dir': a hard link to a file outside the training folder" in err
    assert written(out) == []


def test_hard_links_that_all_lie_inside_the_training_folder_are_copied(tmp_path):
    path = project(tmp_path)
    train = tmp_path / "examples" / "training"
    (train / "sub").mkdir()
    os.link(train / "train.py", train / "sub" / "same.py")
    out = tmp_path / "build"
    assert render(path, out)[0] == 0
    copied = out / VARIANT / "context" / "training"
    assert (copied / "sub" / "same.py").read_bytes() == (train / "train.py").read_bytes()


def test_a_fifo_in_the_training_folder_is_refused_without_hanging(tmp_path):
    path = project(tmp_path)
    fifo = tmp_path / "examples" / "training" / "pipe"
    os.mkfifo(fifo)
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "build"), "--variant", VARIANT)
    assert res.returncode == 2, res.stderr
    assert f"{fifo}: key 'training.source_dir': not a regular file (a FIFO)" in res.stderr
    assert not (tmp_path / "build" / VARIANT).exists()


@pytest.mark.parametrize("source_dir", ["../..", "examples/../../x", ".."])
def test_a_source_dir_leaving_the_matrix_folder_is_refused(tmp_path, source_dir):
    path = project(tmp_path)
    text = path.read_text().replace("source_dir: examples/training", f"source_dir: {source_dir}")
    path.write_text(text)
    line = text.splitlines().index(f"    source_dir: {source_dir}") + 1
    with pytest.raises(UserError) as err:
        load(str(path))
    assert str(err.value).startswith(f"{path}:{line}: key 'training.source_dir': ")
    assert "leaves the matrix's folder" in str(err.value)


def test_a_source_dir_symlinked_outside_is_refused(tmp_path):
    path = project(tmp_path)
    shutil.move(str(tmp_path / "examples" / "training"), str(tmp_path.parent / f"{tmp_path.name}-elsewhere"))
    (tmp_path / "examples" / "training").symlink_to(tmp_path.parent / f"{tmp_path.name}-elsewhere")
    try:
        rc, err = render(path, tmp_path / "build")
    finally:
        shutil.rmtree(tmp_path.parent / f"{tmp_path.name}-elsewhere")
    assert rc == 2 and "outside the matrix's folder" in err and "training.source_dir" in err
    assert written(tmp_path / "build") == []


def test_the_context_is_listed_with_sha256_in_context_manifest(tmp_path):
    path = project(tmp_path)
    out = tmp_path / "build"
    assert render(path, out)[0] == 0
    vdir = out / VARIANT
    doc = json.loads((vdir / "context.manifest.json").read_text())
    listed = {e["path"]: e for e in doc["files"]}
    on_disk = {str(p.relative_to(vdir / "context")) for p in (vdir / "context").rglob("*") if p.is_file()}
    assert set(listed) == on_disk
    train = (tmp_path / "examples" / "training" / "train.py").read_bytes()
    assert listed["training/train.py"]["sha256"] == hashlib.sha256(train).hexdigest()
    assert listed["training/train.py"]["size"] == len(train)


# -- (2) injection by file name, (8) labels the tool owns, URLs that name no file -------------------------
def test_a_matrix_file_name_with_a_newline_cannot_add_a_dockerfile_instruction(tmp_path):
    path = project(tmp_path, "m\nRUN touch pwned\n.yaml")
    out = tmp_path / "build"
    rc, err = render(path, out)
    assert rc == 2 and "line break or control character" in err
    assert written(out) == []


@pytest.mark.parametrize(
    "key",
    ["org.efa-image-build.lock", "org.efa-image-build.variant", "org.efa-image-build.nccl.version",
     "org.opencontainers.image.title", "io.github.efa-image-build.lock",
     "org.efa-image-build.base.digest", "org.efa-image-build.base.image-id", "org.efa-image-build.layout",
     "org.efa-image-build.context-hash", "org.efa-image-build.check", "org.efa-image-build.inspect",
     "org.efa-image-build.aws-ofi-nccl.version", "org.efa-image-build.cuda.version"],
)  # fmt: skip
def test_labels_the_tool_owns_cannot_be_overridden(tmp_path, key):
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + f"variants:\n  - name: d\n    labels:\n      {key}: mine\n" + COMPONENTS)
    with pytest.raises(UserError) as err:
        load(str(path))
    assert str(err.value).startswith(
        f"{path}:7: key 'labels.{key}': label '{key}' belongs to efa-image-build"
    )


def test_a_forged_base_digest_label_is_exit_2_naming_file_line_and_key(tmp_path):
    """A forged base digest in the image would be what a skipped rebuild reports as its base (issue 23, 6)."""
    path = project(tmp_path)
    text = path.read_text()
    head = "  - name: local-debian-nccl{nccl}\n"
    assert head in text
    path.write_text(
        text.replace(head, head + "    labels: {org.efa-image-build.base.digest: 'sha256:forged'}\n")
    )
    line = (
        path.read_text().splitlines().index("    labels: {org.efa-image-build.base.digest: 'sha256:forged'}")
        + 1
    )
    out = tmp_path / "build"
    rc, err = render(path, out)
    assert rc == 2 and "Traceback" not in err
    assert f"{path}:{line}: key 'labels.org.efa-image-build.base.digest': label " in err
    assert written(out) == []


def test_every_label_the_tool_sets_is_named_in_one_place_and_refused_to_the_matrix():
    """The guard's list is the labels' definitions: no other module spells a label of the tool's namespace,
    and every label the builder adds is one the matrix may not set."""
    from imagebuild import variant
    from imagebuild.building import baseid
    from imagebuild.variant import BASE_DIGEST_LABEL, BASE_ID_LABEL, HASH_LABEL, VARIANT_LABEL

    for path in sorted((ROOT / "imagebuild").rglob("*.py")):
        if path == ROOT / "imagebuild" / "variant.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                spelled = node.value.startswith((variant.TOOL_PREFIX, variant.LEGACY_PREFIX))
                assert not spelled, (
                    f"{path}:{node.lineno} spells a tool label; name it in imagebuild/variant.py"
                )
    added = baseid.base_labels("sha256:" + "a" * 64, "sha256:" + "b" * 64)
    added |= {HASH_LABEL: "h", VARIANT_LABEL: "v"}
    assert len(added) == 4 and all(variant.is_tool_label(k) for k in added)
    # an unknown base is written empty, over the labels the image inherits from its base (which may be forged)
    unknown = baseid.base_labels(None, None)
    assert set(unknown) == {BASE_DIGEST_LABEL, BASE_ID_LABEL} and not any(unknown.values())
    assert not variant.is_tool_label("org.efa-image-build.channel")
    assert not variant.is_tool_label("org.efa-image-build..version")


def test_a_label_of_the_tool_namespace_it_does_not_set_stays_free(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        HEAD + "variants:\n  - name: d\n    labels: {org.efa-image-build.channel: beta}\n" + COMPONENTS
    )
    assert dict(load(str(path))[0].labels)["org.efa-image-build.channel"] == "beta"


@pytest.mark.parametrize(
    "url", ["https://x.org/", "https://x.org/a/..", "https://x.org/a/.", "https://x.org"]
)
def test_a_url_naming_no_file_is_refused(tmp_path, url):
    path = tmp_path / "m.yaml"
    source = f"{{url: '{url}', sha256: '{'a' * 64}'}}"
    comp = f"    components:\n      nccl: {{version: '2.27.7', source: {source}}}\n"
    path.write_text(HEAD + "variants:\n  - name: d\n" + comp)
    with pytest.raises(UserError) as err:
        load(str(path))
    assert str(err.value).startswith(f"{path}:7: key 'components.nccl.source.url': the URL names no usable")


# -- (6) bounded work ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_a_special_file_as_matrix_is_refused_without_hanging(tmp_path, kind):
    path = tmp_path / "m.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path = Path(kind)
    res = build_py(
        "render", "--matrix", str(path), "--out", str(tmp_path / "build"), preexec_fn=_small_memory
    )
    assert res.returncode == 2 and f"{path}: not a regular file" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "build").exists()


def test_a_huge_matrix_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "m.yaml"
    with open(path, "wb") as fh:
        fh.truncate(64 * 1024 * 1024)  # sparse: costs no disk
    with pytest.raises(UserError, match="file too large"):
        load(str(path))


def test_huge_axes_are_refused_before_they_are_crossed(tmp_path):
    values = "{" + ", ".join(f'"{i}": {{}}' for i in range(100)) + "}"
    path = tmp_path / "m.yaml"
    axes = f"    axes: {{a: {values}, b: {values}, c: {values}, d: {values}}}\n"
    path.write_text(HEAD + "variants:\n  - name: v{a}-{b}-{c}-{d}\n" + axes + COMPONENTS)
    # in a child with 2 GiB of address space: crossing 10**8 combinations must fail there, not here
    res = build_py("list", "--matrix", str(path), preexec_fn=_small_memory)
    assert res.returncode == 2, res.stderr[-2000:]
    assert f"error: {path}:6: key 'variants[0].axes': the axes make more than 1000" in res.stderr


def _small_memory():
    resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))


@pytest.mark.parametrize("digits", [4301, 30])
def test_huge_integers_are_refused(tmp_path, digits):
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + f"variants:\n  - name: d\n    options: {{jobs: {'9' * digits}}}\n" + COMPONENTS)
    with pytest.raises(UserError) as err:
        load(str(path))
    assert str(err.value).startswith(f"{path}:6: number too large")


def test_a_3000_deep_extends_chain_is_refused(tmp_path):
    chain = "templates:\n  c0: {}\n" + "".join(f"  c{i}: {{extends: [c{i - 1}]}}\n" for i in range(1, 3000))
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + chain + "variants:\n  - name: d\n    extends: [c2999]\n" + COMPONENTS)
    with pytest.raises(UserError, match="more than 100 levels deep") as err:
        load(str(path))
    assert err.value.key == "extends"


def test_a_28_level_extends_diamond_is_expanded_once_per_template(tmp_path, monkeypatch):
    """Each level's template extends two that both extend the level below: 2**28 paths, 85 templates."""
    t = "templates:\n  t0: {env: {NCCL_DEBUG: INFO}}\n"
    for i in range(1, 29):
        t += f"  a{i}: {{extends: [t{i - 1}], labels: {{com.example.a: '{i}'}}}}\n"
        t += f"  b{i}: {{extends: [t{i - 1}]}}\n  t{i}: {{extends: [a{i}, b{i}]}}\n"
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + t + "variants:\n  - name: d\n    extends: [t28]\n" + COMPONENTS)
    calls = []
    real = matrix_mod.copy_dict

    def counted(src, keys):
        calls.append(1)
        assert len(calls) < 10_000, "expansion is not memoised"
        return real(src, keys)

    monkeypatch.setattr(matrix_mod, "copy_dict", counted)
    (v,) = load(str(path))
    assert len(calls) <= 3 * 85 + 10  # linear in the templates
    assert dict(v.labels)["com.example.a"] == "28" and ("NCCL_DEBUG", "INFO") in {
        (e.name, e.value) for e in v.env
    }


# -- output paths, pipes, optional dependencies -------------------------------------------------------------
def _small_fsize(limit: int = 2048):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit is EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_full_disk_under_out_is_exit_2_with_the_path_and_leaves_the_old_output(tmp_path):
    path = project(tmp_path)
    out = tmp_path / "build"
    assert render(path, out)[0] == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (tmp_path / "examples" / "training" / "big.bin").write_bytes(b"x" * 8192)
    res = build_py(
        "render", "--matrix", str(path), "--out", str(out), "--variant", VARIANT, preexec_fn=_small_fsize
    )
    assert res.returncode == 2, res.stderr
    assert f"error: {out}: key '--out': cannot write: File too large" in res.stderr
    assert "Traceback" not in res.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_full_disk_under_report_markdown_is_exit_2_with_the_path(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps({"verdict": "pass", "checks": [{"name": "efa", "status": "pass"}]}))
    md = tmp_path / "r.md"
    res = build_py("report", str(rep), "--markdown", str(md), preexec_fn=lambda: _small_fsize(16))
    assert res.returncode == 2, res.stderr
    assert f"error: {md}: key '--markdown': cannot write: File too large" in res.stderr
    assert not md.exists() and list(tmp_path.iterdir()) == [rep]


def test_an_out_that_is_a_file_is_exit_2_with_the_path(tmp_path):
    path = project(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, err = render(path, blocker / "build")
    assert rc == 2 and str(blocker / "build") in err and "key '--out'" in err


@pytest.mark.parametrize(
    "command, argv",
    [
        (BUILD_PY, ["list", "--matrix", "matrix.local.yaml"]),
        (VALIDATORS, ["parse", "tests/fixtures/logs/gdr-disabled-p4d.log"]),
    ],
)
def test_a_reader_that_went_away_ends_quietly(command, argv):
    """`| head`: the reader closes the pipe before the writer is done; no traceback, 141 as `cat` gives."""
    env = dict(os.environ, PYTHONPATH=IMPORT_PATH)
    proc = subprocess.Popen(
        [*command, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # nobody reads: the first write that reaches the pipe fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""


def test_report_plot_without_matplotlib_is_exit_2_with_the_install_hint(tmp_path, monkeypatch):
    rep = tmp_path / "r.json"
    row = {"size": 8, "count": 2, "type": "float", "redop": "sum", "root": -1,
           "out_of_place": {"time_us": 1.0, "algbw": 1.0, "busbw": 1.0, "wrong": 0},
           "in_place": {"time_us": 1.0, "algbw": 1.0, "busbw": 1.0, "wrong": 0}}  # fmt: skip
    rep.write_text(json.dumps({"verdict": "pass", "nccl_tests": {"collective": "all_reduce", "rows": [row]}}))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    rc, _out, err = cli.build_py("report", rep, "--plot", tmp_path / "p.png")
    assert rc == 2
    assert "key '--plot': --plot needs matplotlib" in err and "pip install 'efa-image-build[plot]'" in err
    assert not (tmp_path / "p.png").exists()


# -- (7) credentials in URLs --------------------------------------------------------------------------------
def test_credentials_in_a_mirror_url_never_reach_a_message_or_log(tmp_path):
    said = []
    mirror = f"http://h13user:H13-TOKEN-do-not-print@127.0.0.1:{free_port()}/"
    cache = ArtifactCache(tmp_path / "cache", mirror=mirror, say=said.append)
    art = Artifact(component="nccl", kind="url", filename="a.tgz", url="https://x.org/a.tgz", sha256="a" * 64)
    with pytest.raises((ArtifactError, UserError)) as err:
        cache.ensure(art)
    text = str(err.value) + "\n".join(said)
    assert "127.0.0.1" in text and "***@127.0.0.1" in text
    assert "H13-TOKEN" not in text and "h13user" not in text


def test_user_errors_redact_credentials_wherever_they_appear():
    err = UserError("cannot fetch https://u:s3cret@host/x", file="m.yaml", hint="try git+https://t0k@h/r")
    assert "s3cret" not in str(err) and "t0k" not in str(err) and "https://***@host/x" in str(err)
