"""The project config lookup is bounded (issue 41, hostile input round five, item 2).

Outside a git repository the lookup walked every parent to `/` and read each pyproject.toml whole before
judging its owner: a 2 GB sparse /tmp/pyproject.toml cost every run under /tmp 4 GB. Now a candidate's
metadata (type, owner and mode, size) is judged before a byte is read, at most MAX_BYTES are read, and the
walk stops at the first boundary: a folder with .git, the home directory, a mount point."""

from __future__ import annotations

import resource
from pathlib import Path

from cli import build_py, build_py_process
from fifo import returns_without_blocking

from imagebuild.errors import UserError
from imagebuild.settings import project

MEMORY_LIMIT = 1 << 30  # the child's address space: a whole read of the sparse file cannot fit


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def test_a_huge_sparse_pyproject_in_a_parent_fails_fast_naming_it(tmp_path):
    """2 GiB of holes in a parent folder, no repository around: exit 2 naming the file, in bounded memory
    (main read it whole: a MemoryError traceback under this limit)."""
    big = _sparse(tmp_path / "pyproject.toml", 2 << 30)
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    got = build_py_process("list", cwd=str(work), preexec_fn=_limit_memory, timeout=60)
    assert got.returncode == 2, got.stderr[-2000:]
    assert f"{big}: not read: {2 << 30} bytes, over the {project.MAX_BYTES}" in got.stderr
    assert "Traceback" not in got.stderr


def test_the_size_is_judged_before_a_byte_is_read(tmp_path, monkeypatch):
    big = _sparse(tmp_path / "pyproject.toml", project.MAX_BYTES + 1)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: opened.append(str(f)) or real_open(f, *a, **k))
    try:
        project.find(tmp_path, home=tmp_path)
    except UserError as err:
        assert err.file == str(big) and "over the" in str(err)
    else:
        raise AssertionError("a file over the cap was not refused")
    assert str(big) not in opened


def test_no_config_above_the_home_directory(tmp_path, monkeypatch):
    """A config above the user's home is not this user's project: the walk stops at home."""
    (tmp_path / "pyproject.toml").write_text('[tool.efa-image-build]\nout = "o"\n')
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    assert project.find(home / "work", home=home) is None
    assert project.find(tmp_path / "home", home=tmp_path / "elsewhere") == tmp_path / "pyproject.toml"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home / "work")
    got = build_py("-v", "list")
    assert "config: no pyproject.toml with [tool.efa-image-build]" in got.err, got.err
    (home / "pyproject.toml").write_text('[tool.efa-image-build]\nout = "o"\n')  # home itself still counts
    got = build_py("-v", "list")
    assert f"config: {home / 'pyproject.toml'}" in got.err, got.err


def test_no_config_beyond_a_mount_point(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.efa-image-build]\nout = "o"\n')
    mount = tmp_path / "mnt"
    (mount / "work").mkdir(parents=True)
    assert project.find(mount / "work", home=tmp_path / "elsewhere") == tmp_path / "pyproject.toml"
    monkeypatch.setattr(project, "_mount_point", lambda folder: folder == mount)
    assert project.find(mount / "work", home=tmp_path / "elsewhere") is None


def test_a_mount_point_is_seen():
    assert project._mount_point(Path("/proc")) is True  # procfs, mounted on the root filesystem
    assert project._mount_point(Path("/proc/self").resolve()) is False


def test_a_fifo_or_a_device_named_pyproject_is_never_opened(tmp_path):
    import os

    os.mkfifo(tmp_path / "pyproject.toml")  # opening it for reading would block for ever
    assert project.find(tmp_path, home=tmp_path) is None


def test_a_candidate_swapped_for_a_fifo_after_its_checks_is_not_read(tmp_path, monkeypatch):
    """Attack on issue 41 item 2's bounded lookup: a candidate was judged by its path (type, owner, size) and
    then opened by its path again, so a FIFO put in its place between the two (a parent such as /tmp is
    anyone's) blocked every run under it for ever in open(). The open, non-blocking descriptor is judged
    now. The swap is simulated: the path checks see a regular file."""
    import os

    regular = tmp_path / "regular.toml"
    regular.write_text("[tool.efa-image-build]\n")
    regular.chmod(0o644)
    fifo = tmp_path / "pyproject.toml"
    os.mkfifo(fifo)
    real_stat = Path.stat

    def as_if_a_file(self, *a, **kw):
        return real_stat(regular if str(self) == str(fifo) else self, *a, **kw)

    monkeypatch.setattr(Path, "stat", as_if_a_file)
    got = returns_without_blocking(
        lambda: project._bounded_bytes(fifo), fifo, "the lookup blocked opening a FIFO in a parent folder"
    )
    assert got is None  # not a regular file: not read, not ours to judge


def test_a_config_that_grew_after_its_stat_is_refused_by_what_the_descriptor_says(tmp_path, monkeypatch):
    """The size is judged again on the open descriptor (run.smallfile's read_small): a file that was small at
    its stat and is over MAX_BYTES by the read is refused, naming the file, not read whole."""
    import pytest

    small = tmp_path / "small.toml"
    small.write_text("[tool.efa-image-build]\n")
    small.chmod(0o644)
    grown = _sparse(tmp_path / "pyproject.toml", project.MAX_BYTES + 1)
    grown.chmod(0o644)
    real_stat = Path.stat

    def as_if_small(self, *a, **kw):
        return real_stat(small if str(self) == str(grown) else self, *a, **kw)

    monkeypatch.setattr(Path, "stat", as_if_small)
    with pytest.raises(UserError, match=f"not read: over the {project.MAX_BYTES} bytes") as err:
        project._bounded_bytes(grown)
    assert err.value.file == str(grown)
