"""run.smallfile: a file over the cap is TooLarge (still a NotAFile to the callers that catch that), a FIFO
is NotAFile and never opened for a blocking read; imagebuild's project config words the first apart."""

from __future__ import annotations

import os

import pytest

from efa_validators.run.smallfile import NotAFile, TooLarge, read_small


def test_a_file_over_the_cap_is_too_large_and_still_not_a_file(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(TooLarge, match="file too large"):
        read_small(str(big), 10)
    with pytest.raises(NotAFile):
        read_small(str(big), 10)
    assert read_small(str(big), 11) == b"x" * 11


def test_a_fifo_is_not_a_file_and_not_too_large(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotAFile) as err:
        read_small(str(fifo))
    assert not isinstance(err.value, TooLarge) and "not a regular file" in str(err.value)
