"""Each file format passed between the stages has one owner module (its schema id, reader and writer);
the copies are gone, and resolve no longer imports matrix (the import cycle is broken)."""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest
from paths import ROOT

OWNERS = {
    "efa-image-build/lock/v1": "imagebuild/variant.py",
    "org.efa-image-build.lock": "imagebuild/variant.py",
    "efa-image-build/build-summary/v1": "imagebuild/building/summary.py",
    "efa-image-build/check-report/v1": "imagebuild/check/report.py",
    "efa-image-build/report/v1": "efa_validators/run/report.py",
}


def _literals(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


@pytest.mark.parametrize("schema", sorted(OWNERS))
def test_a_format_id_is_written_in_its_owner_only(schema):
    """imagebuild/ spells each format id once, in its owner; others import it from there."""
    where = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "imagebuild").rglob("*.py") if schema in set(_literals(p))
    )
    owner = OWNERS[schema]
    assert where == ([owner] if owner.startswith("imagebuild/") else []), where


def test_the_owners_round_trip(tmp_path):
    from dataclasses import dataclass

    from imagebuild.building import summary
    from imagebuild.check import report as checkreport
    from imagebuild.errors import UserError

    @dataclass
    class Result:
        variant: str
        status: str

    path = tmp_path / "summary.json"
    summary.write_summary(path, [Result("b", "built")])
    summary.write_summary(path, [Result("a", "failed")])  # merged: b is kept
    assert [e["variant"] for e in summary.load_summary(path)["variants"]] == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temp file left

    class Image:
        def to_json(self) -> dict:
            return {"variant": "a", "passed": True}

    report = tmp_path / "test-report.json"
    checkreport.write_report([Image()], report)
    images = checkreport.gather_check_reports([report])["images"]
    assert images == [{"variant": "a", "passed": True, "report_path": str(report)}]
    with pytest.raises(UserError, match="not a static check report"):
        checkreport.load_check_report(path)
    with pytest.raises(UserError, match="not a build summary"):
        summary.load_summary(report)


def test_a_json_write_never_follows_a_link_planted_at_a_temporary_name(tmp_path):
    """The writer used the fixed name `.tmp-<name>` and wrote through a symlink planted there (onto any file
    the user can write) before renaming the link over the target. Now: a new file of a name no one can
    guess, made exclusively; the planted link and its target are left as they were, nothing else is left."""
    from imagebuild.errors import UserError
    from imagebuild.jsonfile import write_json_atomic

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / ".tmp-summary.json")
    old = os.umask(0o022)
    try:
        write_json_atomic(out / "summary.json", {"b": 1, "a": [2]})
    finally:
        os.umask(old)
    assert victim.read_text() == "precious\n"
    assert os.readlink(out / ".tmp-summary.json") == str(victim)
    written = out / "summary.json"
    assert not written.is_symlink() and json.loads(written.read_text()) == {"a": [2], "b": 1}
    assert written.read_text() == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert stat.S_IMODE(written.stat().st_mode) == 0o644  # published: the mode a plain open() gives
    assert sorted(p.name for p in out.iterdir()) == [".tmp-summary.json", "summary.json"]
    # a write that fails (the target is a folder: the rename fails) is exit 2 naming it, no temp file left
    (out / "dir.json").mkdir()
    with pytest.raises(UserError, match="cannot write") as err:
        write_json_atomic(out / "dir.json", {})
    assert err.value.file == str(out / "dir.json")
    assert sorted(p.name for p in out.iterdir()) == [".tmp-summary.json", "dir.json", "summary.json"]


def test_lock_from_labels_reads_either_label_and_refuses_what_is_not_a_lock():
    from imagebuild.variant import LOCK_LABELS, lock_from_labels

    assert lock_from_labels({LOCK_LABELS[1]: '{"name": "x"}'}) == {"name": "x"}
    assert lock_from_labels({LOCK_LABELS[0]: "", LOCK_LABELS[1]: '{"name": "y"}'}) == {"name": "y"}
    assert lock_from_labels({LOCK_LABELS[0]: "[1]"}) is None
    assert lock_from_labels({LOCK_LABELS[0]: "{not json"}) is None
    assert lock_from_labels(None) is None


def test_resolve_does_not_import_matrix():
    tree = ast.parse((ROOT / "imagebuild" / "matrix" / "resolve.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "imagebuild.matrix.load" not in imported


def test_a_json_target_that_is_no_regular_file_is_written_through_never_replaced(tmp_path):
    """Attack on every JSON file build.py writes (write_json_atomic: a summary, a check report): the temp file
    was renamed over the target whatever it was, so a target of /dev/null (a CI job that discards the
    report, often as root) replaced /dev/null with a regular file for the whole machine. A target that exists
    and is not a regular file once links are followed is written through, as a shell's `>` does; a folder
    is still exit 2. Shown on a FIFO."""
    from imagebuild.jsonfile import write_json_atomic

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the write end opens at once
    try:
        write_json_atomic(fifo, {"a": 1})
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
        assert os.read(reader, 1000) == b'{\n  "a": 1\n}\n'
    finally:
        os.close(reader)
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]  # no temp file left beside it
