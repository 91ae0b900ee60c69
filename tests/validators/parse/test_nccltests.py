"""nccl-tests output parser: the project's own fixtures in every format, the -J JSON, and property tests."""

from __future__ import annotations

import json
from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import ROOT, TESTS

from efa_validators.parse.nccltests import NcclTestsParser
from efa_validators.parse.nccltests_json import NcclTestsJsonError, load_json_output
from efa_validators.parse.nccltests_result import PLATEAU_MIN_BYTES, collective_from_binary

FIXTURES = TESTS / "fixtures" / "nccltests"


def parse_text(text: str, source: str = "t.log") -> Optional[dict]:
    p = NcclTestsParser()
    for i, line in enumerate(text.splitlines(), 1):
        p.feed(line, i, source)
    return p.result()


def parse_fixture(name: str) -> dict:
    data = (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")
    result = parse_text(data, name)
    assert result is not None
    return result


def fixture_rows(name: str) -> list:
    """Row lines counted independently of the parser: lines in the table that start with a size."""
    return [
        line
        for line in (FIXTURES / name).read_text(errors="replace").splitlines()
        if line[:12].strip().isdigit()
    ]


def test_new_format_full_run():
    r = parse_fixture("new-allreduce-2node.log")
    assert r["collective"] == "all_reduce" and r["collective_source"] == "binary"
    assert r["nccl_tests_version"] == "2.19.6"
    assert (r["nthread"], r["ngpus"], r["min_bytes"], r["max_bytes"]) == (1, 1, 8, 16 << 30)
    assert (r["step"], r["step_kind"], r["warmup_iters"], r["iters"], r["check"]) == (2, "factor", 5, 20, 1)
    assert len(r["ranks"]) == 16 and r["hosts"] == ["node-a", "node-b"]
    assert r["ranks"][9] == {
        "rank": 9,
        "group": 0,
        "pid": 31009,
        "host": "node-b",
        "device": 1,
        "pci": "0000:20:00",
        "name": "NVIDIA H100 80GB HBM3",
        "file": "new-allreduce-2node.log",
        "line": 15,
    }
    assert r["devices"] == ["NVIDIA H100 80GB HBM3"]
    assert r["columns"][:5] == ["size", "count", "type", "redop", "root"]
    assert r["columns"].count("busbw") == 2
    assert len(r["rows"]) == 32 and r["rows"][0]["size"] == 8 and r["rows"][-1]["size"] == 16 << 30
    last = r["rows"][-1]
    assert last["count"] == (16 << 30) // 4 and last["type"] == "float" and last["redop"] == "sum"
    assert last["root"] == -1
    assert set(last["out_of_place"]) == {"time", "algbw", "busbw", "wrong"}
    assert last["out_of_place"]["wrong"] == 0 and last["in_place"]["busbw"] > 400
    # the row keeps where it came from, for evidence
    lines = (FIXTURES / "new-allreduce-2node.log").read_text().splitlines()
    assert lines[last["line"] - 1].strip() == last["text"]
    assert r["out_of_bounds"] == 0 and r["out_of_bounds_ok"] is True
    assert r["avg_busbw"] == pytest.approx(189.302) and r["wrong"] == 0 and r["wrong_unseen_rows"] == 0
    assert r["truncated"] is False and r["additional_tables"] == []


def test_plateau_is_the_best_row_at_or_above_1gib_not_the_average():
    r = parse_fixture("new-allreduce-2node.log")
    big = [
        max(row["out_of_place"]["busbw"], row["in_place"]["busbw"])
        for row in r["rows"]
        if row["size"] >= PLATEAU_MIN_BYTES
    ]
    assert r["plateau_busbw"] == max(big)
    assert r["plateau_size"] >= PLATEAU_MIN_BYTES and "1 GiB" in r["plateau_rule"]
    assert r["avg_busbw"] < r["plateau_busbw"] / 2  # why the average is not judged


def test_plateau_below_1gib_uses_largest_size_and_says_so():
    r = parse_fixture("new-allreduce-small-max.log")
    assert r["rows"][-1]["size"] == 64 << 20
    assert r["plateau_size"] == 64 << 20
    cell = r["rows"][-1][r["plateau_placement"]]
    assert r["plateau_busbw"] == cell["busbw"]
    assert "largest size" in r["plateau_rule"]


def test_old_format_error_column_without_group_and_without_redop_root():
    r = parse_fixture("old-allgather-error-column.log")
    assert r["collective"] == "all_gather"  # from the command line echoed before the table
    assert r["columns"] == ["size", "count", "type"] + ["time", "algbw", "busbw", "error"] * 2
    assert r["old_error_column"] is True
    assert r["ranks"][0]["group"] is None and r["ranks"][0]["pci"] == "0x10"
    assert r["ranks"][15]["host"] == "ip-10-1-0-12"
    row = r["rows"][0]
    assert row["redop"] is None and row["root"] is None and row["type"] == "float"
    assert row["out_of_place"]["error"] == 0.0 and row["out_of_place"]["wrong"] is None
    assert r["wrong"] is None  # the old error column is a deviation, not a count
    assert len(r["rows"]) == len(fixture_rows("old-allgather-error-column.log"))
    assert r["check"] == 1 and r["out_of_bounds"] == 0


@pytest.mark.parametrize(
    "name, prefix, collective",
    [
        ("old-broadcast.log", ["size", "count", "type", "root"], None),
        ("old-reduce.log", ["size", "count", "type", "redop", "root"], "reduce"),
        ("old-sendrecv.log", ["size", "count", "type"], None),
        ("old-allreduce-redop-only.log", ["size", "count", "type", "redop"], "all_reduce"),
    ],
)
def test_old_per_collective_column_sets(name, prefix, collective):
    r = parse_fixture(name)
    assert r["columns"][: len(prefix)] == prefix and r["columns"][len(prefix)] == "time"
    assert len(r["rows"]) == len(fixture_rows(name)) > 0
    assert r["collective"] == collective
    row = r["rows"][-1]
    assert (row["root"] is not None) == ("root" in prefix)
    assert (row["redop"] is not None) == ("redop" in prefix)


def test_check_off_reads_na_as_none():
    r = parse_fixture("new-broadcast-check-off.log")
    assert r["check"] == 0 and r["ngpus"] == 8 and r["step"] == 4
    assert all(row["out_of_place"]["wrong"] is None for row in r["rows"])
    assert r["wrong"] is None and r["wrong_unseen_rows"] == 2 * len(r["rows"])
    assert r["rows"][0]["redop"] == "none" and r["rows"][0]["root"] == 0
    assert r["collective"] is None  # broadcast, scatter and gather share this column set


def test_truncated_table_keeps_rows_and_says_truncated():
    r = parse_fixture("new-allreduce-truncated-hang.log")
    assert r["truncated"] is True
    assert r["rows"][-1]["size"] == 64 << 20
    assert r["out_of_bounds"] is None and r["avg_busbw"] is None


def test_out_of_bounds_failed_and_wrong_counts():
    r = parse_fixture("new-allreduce-oob-failed.log")
    assert r["out_of_bounds"] == 7 and r["out_of_bounds_ok"] is False
    assert r["wrong"] == 7
    bad = [row["size"] for row in r["rows"] if row["out_of_place"]["wrong"] or row["in_place"]["wrong"]]
    assert bad == [1 << 20, 1 << 24]


def test_interleaved_cut_and_glued_lines_never_become_rows():
    name = "new-allreduce-interleaved.log"
    r = parse_fixture(name)
    sizes = [row["size"] for row in r["rows"]]
    assert sizes == sorted(set(sizes))  # no duplicate from the cut or the glued copy
    assert len(sizes) == 28  # 8 B .. 1 GiB
    assert r["skipped_lines"] == 2
    assert r["truncated"] is False and r["out_of_bounds"] == 0


def test_newest_layout_cputime_per_iteration_and_timestamp():
    r = parse_fixture("newest-reduce-scatter-periter-timestamp.log")
    assert r["collective"] == "reduce_scatter"
    assert "i_cv%" in r["columns"] and "timestamp" in r["columns"] and "cputime" in r["columns"]
    row = r["rows"][0]
    assert row["type"] == "half" and row["out_of_place"]["time"] == pytest.approx(65.52)
    assert row["out_of_place"]["i_p99"] == pytest.approx(70.76)
    assert row["timestamp"] == "2026-11-30 09:10:00"
    assert row["in_place"]["busbw"] == pytest.approx(15.50)
    assert len(r["ranks"]) == 32 and len(r["hosts"]) == 4
    assert r["avg_busbw_check"] == "OK"


def test_two_tables_in_one_log_and_nonfinite_values():
    r = parse_fixture("two-tests-allreduce-allgather.log")
    assert r["collective"] == "all_reduce" and r["rows"][0]["size"] == 1 << 20
    assert len(r["additional_tables"]) == 1
    second = r["additional_tables"][0]
    assert second["collective"] == "all_gather"
    nan_row = [row for row in second["rows"] if row["size"] == 1 << 28][0]
    assert nan_row["out_of_place"] == {"time": None, "algbw": None, "busbw": None, "wrong": 0}
    assert nan_row["nonfinite"] == 3 and second["nonfinite"] == 3
    assert second["avg_busbw"] == pytest.approx(120.4)


def test_collective_inferred_from_busbw_ratio_only_when_unambiguous():
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong"
    )
    cells = "5000.0  214.75  {bw}      0   5000.0  214.75  {bw}      0"
    row_ar = "  1073741824     268435456     float     sum      -1   " + cells.format(bw="402.65")
    row_ag = "  1073741824     16777216     float    none      -1   " + cells.format(bw="201.33")
    assert parse_text(header + "\n" + row_ar)["collective"] == "all_reduce"
    assert parse_text(header + "\n" + row_ar)["collective_source"] == "busbw/algbw ratio"
    assert parse_text(header + "\n" + row_ag)["collective"] is None


def test_no_nccl_tests_output_is_none():
    assert parse_text("node:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\nhello\n") is None
    assert parse_text("") is None


def test_rows_before_any_header_are_ignored():
    text = "           8             2     float     sum      -1    12.9    0.00    0.00      0"
    text += "    12.8    0.00    0.00      0"
    assert parse_text(text) is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("mpirun -np 16 /opt/nccl-tests/build/all_reduce_perf -b 8", "all_reduce"),
        ("./build/reduce_scatter_perf_mpi -b 8", "reduce_scatter"),
        ("srun ./alltoall_perf", "alltoall"),
        ("/x/reduce_perf -b 1", "reduce"),
        ("my_all_reduce_perf_tool", None),
        ("all_reduce performance", None),
    ],
)
def test_collective_from_binary(text, expected):
    assert collective_from_binary(text) == expected


# -- -J JSON ------------------------------------------------------------------------------------------


def test_json_v3_maps_to_the_same_object():
    r = load_json_output(str(FIXTURES / "allreduce-v3.json"))
    assert r["source"] == "json" and r["collective"] == "all_reduce" and r["nccl_version"] == "2.27.3"
    assert (r["nthread"], r["ngpus"], r["min_bytes"], r["max_bytes"]) == (1, 1, 8, 8 << 30)
    assert (r["step"], r["step_kind"], r["iters"], r["warmup_iters"], r["check"]) == (2, "factor", 20, 5, 1)
    assert len(r["ranks"]) == 16 and r["hosts"] == ["p5-0", "p5-1"]
    assert r["ranks"][3]["pci"] == "0000:40:00" and r["devices"] == ["NVIDIA H100 80GB HBM3"]
    assert len(r["rows"]) == 31 and r["rows"][0]["root"] == -1 and r["rows"][0]["redop"] == "sum"
    assert r["rows"][-1]["out_of_place"]["wrong"] == 0
    assert r["out_of_bounds"] == 0 and r["out_of_bounds_ok"] is True
    assert r["avg_busbw"] > 0 and r["avg_busbw_check"] is None
    assert r["plateau_size"] >= PLATEAU_MIN_BYTES and r["wrong"] == 0 and r["truncated"] is False
    # same shape as the text reader
    text = parse_fixture("new-allreduce-2node.log")
    assert set(text) - set(r) == set()


def test_json_v1_typo_keys_and_bare_inf():
    r = load_json_output(str(FIXTURES / "allreduce-v1-typo-inf.json"))
    assert r["avg_busbw"] is not None and r["json_version"] == 1
    first = r["rows"][0]["in_place"]
    assert first["algbw"] is None and first["busbw"] is None
    assert r["rows"][0]["nonfinite"] == 2
    assert r["nonfinite"] == 2


def test_json_cut_file_is_a_clear_error(tmp_path):
    with pytest.raises(NcclTestsJsonError) as err:
        load_json_output(str(FIXTURES / "allreduce-cut.json"))
    assert "allreduce-cut.json" in str(err.value) and "not valid JSON" in str(err.value)
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"hello": 1}))
    with pytest.raises(NcclTestsJsonError, match="results"):
        load_json_output(str(other))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"size": "big"}]}))
    with pytest.raises(NcclTestsJsonError, match=r"results\[0\]\.size"):
        load_json_output(str(bad))
    with pytest.raises(NcclTestsJsonError, match="cannot read"):
        load_json_output(str(tmp_path / "missing.json"))


# -- properties ---------------------------------------------------------------------------------------

_REAL = (FIXTURES / "new-allreduce-2node.log").read_text()
_ROW_TEXTS = {line.strip() for line in fixture_rows("new-allreduce-2node.log")}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=120), max_size=40))
def test_random_junk_never_crashes_and_never_invents_rows(lines):
    p = NcclTestsParser()
    for i, line in enumerate(lines, 1):
        p.feed(line, i)
    r = p.result()
    if r is not None:
        for row in r["rows"]:
            assert row["text"] in {line.strip() for line in lines}


@settings(max_examples=120, deadline=None)
@given(st.integers(min_value=0, max_value=len(_REAL)))
def test_truncation_at_any_byte_keeps_only_real_rows(cut):
    r = parse_text(_REAL[:cut])
    if r is None:
        return
    for row in r["rows"]:
        assert row["text"] in _ROW_TEXTS or _REAL[:cut].endswith(row["text"])
    if cut < len(_REAL) - 200:
        assert r["truncated"] is True or r["rows"] == []
    assert r["plateau_busbw"] is None or r["plateau_busbw"] <= max(
        row["in_place"]["busbw"] for row in parse_text(_REAL)["rows"]
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_REAL.splitlines()), max_size=80), st.randoms(use_true_random=False))
def test_shuffled_real_lines_never_crash_and_rows_are_real(lines, rnd):
    rnd.shuffle(lines)
    r = parse_text("\n".join(lines))
    if r is not None:
        assert all(row["text"] in _ROW_TEXTS for row in r["rows"])


def _python38():
    """A working Python 3.8 (env PYTHON38, python3.8 on PATH, or a pyenv build), else None."""
    import glob
    import os
    import shutil
    import subprocess

    candidates = [os.environ.get("PYTHON38"), shutil.which("python3.8")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python")))
    for exe in filter(None, candidates):
        try:
            probe = [exe, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"]
            ok = subprocess.run(probe, capture_output=True, timeout=30)
        except OSError:
            continue
        if ok.returncode == 0:
            return exe
    return None


_PY38 = _python38()


@pytest.mark.skipif(_PY38 is None, reason="no Python 3.8 interpreter here")
def test_parser_profiles_and_judge_run_on_python38():
    """validators/ is copied into images whose Python may be 3.8: run the modules there, for real."""
    import subprocess

    code = (
        "import sys; sys.path.insert(0, 'validators');"
        "from efa_validators.parse.nccltests import NcclTestsParser;"
        "from efa_validators.parse.nccltests_json import load_json_output;"
        "from efa_validators.judge.bandwidth import judge;"
        "from efa_validators.judge.profiles import get_profile;"
        "p = NcclTestsParser();"
        "[p.feed(l, i, 'f') for i, l in enumerate(open(sys.argv[1]).read().splitlines(), 1)];"
        "c, f = judge(p.result(), get_profile('p5.48xlarge'), 2, None);"
        "j = load_json_output(sys.argv[2]);"
        "print(sys.version_info[:2], [x['status'] for x in c], len(j['rows']))"
    )
    res = subprocess.run(
        [
            _PY38,
            "-c",
            code,
            str(FIXTURES / "new-allreduce-2node.log"),
            str(FIXTURES / "allreduce-v3.json"),
        ],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "(3, 8) ['pass', 'pass', 'pass'] 31"


def test_hang_before_rows_keeps_parameters_ranks_and_failure():
    r = parse_fixture("new-allreduce-hang-before-rows.log")
    assert r["rows"] == [] and r["columns"] == [] and r["truncated"] is False
    assert len(r["ranks"]) == 16 and r["max_bytes"] == 16 << 30 and r["collective"] == "all_reduce"
    assert r["failures"] and "Test NCCL failure" in r["failures"][0]["text"]
    assert r["failures"][0]["line"] == 24


def test_parameters_and_ranks_belong_to_their_own_table():
    r = parse_fixture("two-tests-allreduce-allgather.log")
    second = r["additional_tables"][0]
    assert r["max_bytes"] == 2 << 30 and second["max_bytes"] == 1 << 30
    assert len(r["ranks"]) == 16 and second["ranks"] == []  # the second test printed no devices


def test_table_count_is_bounded():
    one = (FIXTURES / "old-sendrecv.log").read_text()
    p = NcclTestsParser()
    lineno = 0
    for _ in range(NcclTestsParser.MAX_TABLES + 5):
        for line in one.splitlines():
            lineno += 1
            p.feed(line, lineno)
    r = p.result()
    assert len(r["additional_tables"]) == NcclTestsParser.MAX_TABLES - 1 and r["tables_dropped"] == 5


def test_units_line_is_kept_and_a_unit_change_is_not_judged():
    r = parse_fixture("new-allreduce-2node.log")
    assert r["units"] == ["(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "(GB/s)"]
    from efa_validators.judge.bandwidth import judge
    from efa_validators.judge.profiles import get_profile

    text = (FIXTURES / "new-allreduce-2node.log").read_text().replace("(GB/s)", "(MB/s)")
    other = parse_text(text)
    checks, _ = judge(other, get_profile("p5.48xlarge"), 2, 16)
    assert checks[0]["status"] == "unknown" and "not GB/s" in checks[0]["detail"]


def test_a_header_cut_short_defines_no_table():
    full = (FIXTURES / "new-allreduce-2node.log").read_text().splitlines()
    i = next(n for n, line in enumerate(full) if "busbw" in line)
    cut = full[i][: full[i].index("#wrong") + 6]  # out-of-place block complete, in-place missing
    assert "#wrong" in cut and cut.count("busbw") == 1
    r = parse_text("\n".join(full[:i] + [cut] + full[i + 1 :]))
    assert r["rows"] == [] and r["columns"] == []


_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 1 << 40), st.floats(allow_nan=False), st.text(max_size=6)
)
_json_cell = st.one_of(
    _json_scalar,
    st.dictionaries(
        st.sampled_from(["time", "cpu_time", "alg_bw", "bus_bw", "nwrong"]), _json_scalar, max_size=5
    ),
)
_json_result = st.one_of(
    _json_scalar,
    st.fixed_dictionaries(
        {},
        optional={
            "size": _json_scalar,
            "count": _json_scalar,
            "type": _json_scalar,
            "redop": _json_scalar,
            "root": _json_scalar,
            "out_of_place": _json_cell,
            "in_place": _json_cell,
        },
    ),
)
_json_doc = st.one_of(
    _json_scalar,
    st.fixed_dictionaries(
        {"results": st.one_of(_json_scalar, st.lists(_json_result, max_size=4))},
        optional={
            "config": st.one_of(
                _json_scalar,
                st.dictionaries(st.sampled_from(["ngpus", "devices", "step_factor"]), _json_scalar),
            ),
            "args": st.one_of(_json_scalar, st.lists(_json_scalar, max_size=2)),
            "out_of_bounds": st.one_of(
                _json_scalar, st.dictionaries(st.sampled_from(["count", "okay"]), _json_scalar)
            ),
            "average_bus_bandwidth": st.one_of(
                _json_scalar, st.dictionaries(st.sampled_from(["bandwidth", "okay"]), _json_scalar)
            ),
            "nccl_version": _json_scalar,
            "errors": st.one_of(_json_scalar, st.lists(_json_scalar, max_size=2)),
        },
    ),
)


@settings(max_examples=200, deadline=None)
@given(_json_doc)
def test_any_json_document_maps_or_is_a_clear_error(doc):
    from efa_validators.parse.nccltests_json import from_json_document

    try:
        r = from_json_document(doc, "x.json")
    except NcclTestsJsonError as err:
        assert str(err).startswith("x.json")
        return
    assert isinstance(r["rows"], list) and all(isinstance(row["size"], int) for row in r["rows"])
