"""`init` (issue 30, item 1): a starter matrix, checks file and CI workflow in an empty repository, which
the other verbs then read as they are; never an overwrite, never a write through a link."""

from __future__ import annotations

import os
import resource

import pytest
import yaml
from cli import build_py, build_py_process
from paths import ROOT

from imagebuild.commands.init import WORKFLOW

WRITTEN = ("matrix.yaml", "checks.yaml", WORKFLOW)


def test_init_writes_a_starter_the_other_verbs_read(tmp_path):
    repo = tmp_path / "repo"
    res = build_py("init", repo)
    assert res.rc == 0, res
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file()) == sorted(WRITTEN)
    shipped = (ROOT / "examples" / "ci" / "github-actions.yml").read_bytes()
    assert (repo / WORKFLOW).read_bytes() == shipped
    listed = build_py("list", "--matrix", repo / "matrix.yaml")
    assert listed.rc == 0 and listed.out.splitlines()[1].split()[0] == "debian-nccl2.27", listed
    rendered = build_py("render", "--matrix", repo / "matrix.yaml", "--out", tmp_path / "out")
    assert rendered.rc == 0, rendered
    lock = yaml.safe_load((tmp_path / "out" / "debian-nccl2.27" / "variant.lock.json").read_text())
    assert set(lock["checks"]) >= {"validators-run", "python-is-debian"}, lock["checks"]


def test_the_starter_pins_are_the_local_matrixs():
    """The starter's one variant builds where matrix.local.yaml's does: the same base, packages and stack."""
    from imagebuild.commands.init import STARTER_MATRIX

    starter = yaml.safe_load(STARTER_MATRIX)["defaults"]
    local = yaml.safe_load((ROOT / "matrix.local.yaml").read_text())["defaults"]
    for key in ("base", "cuda", "packages", "components"):
        assert starter[key] == local[key], key


def test_init_never_overwrites_and_writes_nothing_when_one_file_exists(tmp_path):
    (tmp_path / "checks.yaml").write_text("mine\n")
    res = build_py("init", tmp_path)
    assert res.rc == 2 and "Traceback" not in res.err, res
    assert f"{tmp_path / 'checks.yaml'}: key 'init': already exists" in res.err
    assert (tmp_path / "checks.yaml").read_text() == "mine\n"
    assert sorted(os.listdir(tmp_path)) == ["checks.yaml"]


def test_a_second_init_changes_nothing(tmp_path):
    assert build_py("init", tmp_path).rc == 0
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    res = build_py("init", tmp_path)
    assert res.rc == 2 and f"{tmp_path / 'matrix.yaml'}: key 'init'" in res.err, res
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()} == before


def test_init_never_writes_through_a_link_out_of_the_repository(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(outside, repo / ".github")
    res = build_py("init", repo)
    assert res.rc == 2 and f"{repo / '.github'}: key 'init'" in res.err, res
    assert os.listdir(outside) == [] and sorted(os.listdir(repo)) == [".github"]


def test_init_into_a_file_is_exit_2(tmp_path):
    (tmp_path / "f").write_text("x")
    res = build_py("init", tmp_path / "f")
    assert res.rc == 2 and f"{tmp_path / 'f'}: key 'DIR': is not a folder" in res.err, res


def _file_size_limit(limit: int):
    """For the child: files larger than `limit` bytes cannot be written (EFBIG; Python ignores SIGXFSZ)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "empty-folder"])
def test_a_refused_init_leaves_no_new_path(tmp_path, existing):
    """A write that fails half way (here: a file size limit between the matrix's size and the workflow's, so
    two files and .github/workflows are made before the third write fails) is exit 2 naming the file, and
    what init wrote and made is gone again: no file, no folder, not DIR nor the folders above it."""
    from imagebuild.commands.init import starter_files

    sizes = {rel: len(data) for rel, data in starter_files().items()}
    limit = 8192
    assert sizes["matrix.yaml"] < limit and sizes["checks.yaml"] < limit < sizes[WORKFLOW], sizes
    repo = tmp_path / "new" / "repo"
    if existing:
        repo.mkdir(parents=True)
    before = sorted(tmp_path.rglob("*"))
    proc = build_py_process("init", repo, preexec_fn=_file_size_limit(limit), timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{repo / WORKFLOW}: key 'init': cannot write: File too large; nothing written" in proc.stderr
    assert sorted(tmp_path.rglob("*")) == before


def test_init_under_a_file_is_exit_2_before_any_folder_is_made(tmp_path):
    (tmp_path / "f").write_text("x")
    res = build_py("init", tmp_path / "f" / "new" / "repo")
    assert res.rc == 2 and f"{tmp_path / 'f'}: key 'DIR': is not a folder" in res.err, res
    assert sorted(os.listdir(tmp_path)) == ["f"] and (tmp_path / "f").read_text() == "x"


def test_base_makes_the_local_bases_the_matrix_names(tmp_path):
    """Issue 42 item 1: on a fresh runner no base exists; `efa-image-build base` with a matrix (the project
    config's) plans every local base its variants build FROM, by the names the matrix gives them."""
    from imagebuild.building.localbase import matrix_bases
    from imagebuild.commands.init import STARTER_MATRIX

    (tmp_path / "matrix.yaml").write_text(STARTER_MATRIX.replace("bookworm-minbase", "ci-unique"))
    (tmp_path / "checks.yaml").write_text("checks: {}\n")
    assert matrix_bases(str(tmp_path / "matrix.yaml")) == [
        ("localbase/debian:ci-unique", "debian", "linux/amd64")
    ]
    local = matrix_bases(str(ROOT / "matrix.local.yaml"))
    assert ("localbase/dlc-layout:bookworm-2nccl-torch", "dlc", "linux/amd64") in local
    assert ("localbase/al2023-dlc-layout:standin-bookworm-sshd", "al2023-standin", "linux/amd64") in local
    assert matrix_bases(str(ROOT / "matrix.yaml")) == []  # DLC and CUDA bases are pulled, never made
    res = build_py("base", "--matrix", tmp_path / "matrix.yaml", "--variant", "debian-nccl2.2")
    assert res.rc == 2 and "did you mean 'debian-nccl2.27'?" in res.err, res


def test_a_starter_whose_local_base_is_missing_names_the_verb_that_makes_it():
    """Issue 42 item 1: the starter on a fresh runner failed with "identity could not be confirmed" and a
    hint about registries; a local base is made, and the hint says by what."""
    from imagebuild.building.artifacts import ArtifactCache
    from imagebuild.building.baseid import unconfirmed_message
    from imagebuild.building.options import BuildOptions
    from imagebuild.cli import PROG

    opts = BuildOptions(cache=ArtifactCache(ROOT / ".cache" / "none"))
    local = {"base": {"image": "localbase/debian:ci-unique", "kind": "local"}}
    said = unconfirmed_message(opts.base_of(None, local))
    assert f"`{PROG} base` makes every local base the matrix names" in said and "docker login" not in said
    pulled = {"base": {"image": "team/cuda:12", "kind": "cuda"}}
    assert f"{PROG} base" not in unconfirmed_message(opts.base_of(None, pulled))
