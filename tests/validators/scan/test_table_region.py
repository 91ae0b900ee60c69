"""A footerless nccl-tests table ends at its own emitter's first plain text line, and nowhere else."""

from __future__ import annotations

from typing import List

from efa_validators.analyze import analyze, analyze_paths

P = "[1,0]<stdout>:"
HEADER = [
    "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
    "#       size         count      type   redop    root" + "     time   algbw   busbw #wrong" * 2,
    "#        (B)    (elements)" + " " * 31 + "(us)  (GB/s)  (GB/s)" + " " * 12 + "(us)  (GB/s)  (GB/s)",
]
RESULT = "    10.00    1.00    1.88       0"


def row(size: int) -> str:
    return f"{size:>12} {size // 4:>13}     float     sum      -1" + RESULT * 2


def table(between: List[str]) -> List[str]:
    lines = [P + h for h in HEADER] + [P + row(1024), P + row(2048)]
    return lines + between + [P + row(4096)]


def rows_of(lines: List[str]) -> int:
    nt = analyze(lines)["nccl_tests"]
    return len(nt["rows"]) if nt else 0


def test_same_emitter_text_line_ends_the_table() -> None:
    assert rows_of(table([P + "Training starts"])) == 2


def test_other_ranks_stderr_and_unprefixed_lines_do_not_end_it() -> None:
    for between in (["[1,3]<stdout>:Training starts"], ["[1,0]<stderr>:warning: slow"], ["Training starts"]):
        assert rows_of(table(between)) == 3, between


def test_the_file_path_agrees_with_the_streaming_path(tmp_path) -> None:
    for between in ([P + "Training starts"], ["[1,3]<stdout>:hello"]):
        log = tmp_path / "t.log"
        lines = table(between)
        log.write_text("\n".join(lines) + "\n")
        from_file = analyze_paths([str(log)])["nccl_tests"]
        assert len(from_file["rows"]) == rows_of(lines)
