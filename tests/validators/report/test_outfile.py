"""efa_validators.report.outfile: a report file appears whole or not at all (parse and pre-flight write
through
it)."""

import os

import pytest

from efa_validators.report import jsonout, outfile


def test_a_failing_writer_leaves_no_file_and_no_temp(tmp_path):
    target = tmp_path / "r.json"

    def half(write):
        write('{"verdict": ')
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        outfile.write_whole(str(target), half)
    assert os.listdir(tmp_path) == []


def test_an_old_report_stays_until_the_new_one_is_whole(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old\n")

    def half(write):
        write("new")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        outfile.write_whole(str(target), half)
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["r.json"]
    outfile.write_whole(str(target), jsonout.document({"b": 1, "a": [True]}))
    assert target.read_text() == '{\n  "a": [\n    true\n  ],\n  "b": 1\n}\n'
