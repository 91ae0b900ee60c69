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


def test_a_target_that_is_no_regular_file_is_written_through_never_replaced(tmp_path):
    """Attack on every --json/--junit/--markdown target: the temp file was renamed over the target whatever
    it was, so `parse LOG --json /dev/null` (a health hook runs as root) replaced /dev/null with a regular
    file for the whole machine, as it would /dev/stdout's link. A target that exists and is not a regular
    file (a device, a FIFO, a link to one) is now written through, as a shell's `>` does. Shown on a FIFO."""
    import os
    import stat

    from efa_validators.report import outfile

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the write end opens at once
    try:
        outfile.write_whole(str(fifo), '{"verdict": "pass"}\n')
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
        assert os.read(reader, 1000) == b'{"verdict": "pass"}\n'
    finally:
        os.close(reader)
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]  # no temp file left beside it
