"""Bandwidth judgement: pass only on evidence, fail on counter-evidence, unknown otherwise."""

from __future__ import annotations

from paths import TESTS

from efa_validators.judge.bandwidth import judge
from efa_validators.judge.profiles import get_profile
from efa_validators.parse.nccltests import NcclTestsParser
from efa_validators.parse.nccltests_json import load_json_output

FIXTURES = TESTS / "fixtures" / "nccltests"
P5 = get_profile("p5.48xlarge")


def parsed(name: str) -> dict:
    p = NcclTestsParser()
    text = (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")
    for i, line in enumerate(text.splitlines(), 1):
        p.feed(line, i, name)
    result = p.result()
    assert result is not None
    return result


def statuses(checks):
    return {c["name"]: c["status"] for c in checks}


def ids(findings):
    return {f["id"] for f in findings}


def test_healthy_two_node_run_passes_with_evidence():
    nt = parsed("new-allreduce-2node.log")
    checks, findings = judge(nt, P5, 2, 16)
    assert statuses(checks) == {"busbw-plateau": "pass", "wrong-zero": "pass", "out-of-bounds": "pass"}
    plateau = checks[0]
    assert "% of wire speed 750 GB/s" in plateau["detail"] and "expected >= 438.3" in plateau["detail"]
    ev = plateau["evidence"][0]
    assert ev["file"] == "new-allreduce-2node.log" and str(nt["plateau_size"]) in ev["text"]
    assert all(c["evidence"] for c in checks)
    assert "avg-busbw-is-not-plateau" in ids(findings)
    assert not [f for f in findings if f["severity"] == "error"]


def test_nodes_and_ranks_read_from_rank_lines_when_not_given():
    checks, _ = judge(parsed("new-allreduce-2node.log"), P5, None, None)
    assert statuses(checks)["busbw-plateau"] == "pass"
    assert "2 node(s) from the '# Rank' lines" in checks[0]["detail"]


def test_slow_run_fails_with_an_error_finding_and_remedy():
    checks, findings = judge(parsed("new-allreduce-2node-slow.log"), P5, 2, 16)
    assert statuses(checks)["busbw-plateau"] == "fail"
    err = [f for f in findings if f["id"] == "busbw-below-expected"][0]
    assert err["severity"] == "error" and err["remedy"] and err["evidence"][0]["line"] > 0


def test_same_slow_p5_run_is_more_than_p4d_nics_can_carry():
    """The slow p5 run's 114.94 GB/s is 123% of what 2 x p4d's 400 Gbps can carry (93.75 GB/s busbw at 16
    ranks): above the wire is not a real measurement, whatever the expected floor (issue 23, item 1)."""
    checks, findings = judge(parsed("new-allreduce-2node-slow.log"), get_profile("p4d.24xlarge"), 2, 16)
    assert statuses(checks)["busbw-plateau"] == "fail"
    assert "above the wire speed: not a real measurement" in checks[0]["detail"]
    above = [f for f in findings if f["id"] == "busbw-above-wire"][0]
    assert above["severity"] == "error" and "123% of the wire speed 94 GB/s" in above["message"]
    assert "not a real measurement" in above["message"] and "114.94" in above["evidence"][0]["text"]


def test_single_node_never_passes_efa_bandwidth():
    checks, findings = judge(parsed("new-allreduce-1node.log"), P5, None, None)
    assert statuses(checks)["busbw-plateau"] == "unknown"
    assert "single node" in checks[0]["detail"] and "single-node-run" in ids(findings)


def test_missing_inputs_are_unknown_never_pass():
    nt = parsed("new-allreduce-2node.log")
    assert statuses(judge(nt, None, 2, 16)[0])["busbw-plateau"] == "unknown"
    checks, findings = judge(None, P5, 2, 16)
    assert set(statuses(checks).values()) == {"unknown"} and findings == []
    stripped = dict(nt, hosts=[], ranks=[])
    checks, _ = judge(stripped, P5, None, None)
    assert statuses(checks)["busbw-plateau"] == "unknown" and "node count unknown" in checks[0]["detail"]
    nocoll = dict(nt, collective=None)
    assert statuses(judge(nocoll, P5, 2, 16)[0])["busbw-plateau"] == "unknown"


def test_small_max_size_below_floor_is_unknown_with_a_warning():
    checks, findings = judge(parsed("new-allreduce-small-max.log"), P5, 2, 16)
    assert statuses(checks)["busbw-plateau"] == "unknown"
    assert "busbw-plateau-not-reached" in ids(findings)


def test_out_of_bounds_and_wrong_fail():
    checks, findings = judge(parsed("new-allreduce-oob-failed.log"), P5, 2, 16)
    st = statuses(checks)
    assert st["wrong-zero"] == "fail" and st["out-of-bounds"] == "fail"
    wrong = [f for f in findings if f["id"] == "nccl-tests-wrong-results"][0]
    assert len(wrong["evidence"]) == 2 and "7 wrong elements" in wrong["message"]
    assert "nccl-tests-out-of-bounds" in ids(findings)


def test_check_off_is_unknown_for_both_data_checks():
    checks, _ = judge(parsed("new-broadcast-check-off.log"), get_profile("p4de.24xlarge"), 1, 8)
    st = statuses(checks)
    assert st["wrong-zero"] == "unknown" and st["out-of-bounds"] == "unknown"


def test_old_error_column_judged_by_nccl_tests_own_tolerance():
    checks, _ = judge(parsed("old-allgather-error-column.log"), P5, 2, 16)
    st = statuses(checks)
    assert st["wrong-zero"] == "pass" and "x (nranks - 1) = 15" in checks[1]["detail"]
    assert st["out-of-bounds"] == "pass"
    assert st["busbw-plateau"] == "unknown"  # all_gather: no published reference


def _old_table(error: str, dtype: str = "float", ranks: bool = True) -> dict:
    """The old-format fixture with its 1 MiB row's out-of-place deviation (and type) replaced."""
    p = NcclTestsParser()
    text = (FIXTURES / "old-allgather-error-column.log").read_text()
    for i, line in enumerate(text.splitlines(), 1):
        if not ranks and line.startswith("#   Rank"):
            continue
        if line.split()[:1] == ["1048576"]:
            parts = line.split()
            parts[2], parts[6] = dtype, error
            line = "  " + "  ".join(parts)
        p.feed(line, i, "old.log")
    return p.result()


def test_old_error_column_deviation_over_tolerance_fails():
    # float over 16 ranks: tolerance 1e-5 x 15 = 1.5e-4 (nccl-tests DeltaMaxValue before 2022-08)
    checks, findings = judge(_old_table("3e-04"), P5, 2, 16)
    assert statuses(checks)["wrong-zero"] == "fail"
    bad = [f for f in findings if f["id"] == "nccl-tests-wrong-results"][0]
    assert bad["evidence"][0]["text"].split()[0] == "1048576"


def test_old_error_column_integers_must_be_exact():
    assert statuses(judge(_old_table("1e+00", "int32"), P5, 2, 16)[0])["wrong-zero"] == "fail"
    assert statuses(judge(_old_table("0e+00", "int32"), P5, 2, 16)[0])["wrong-zero"] == "pass"


def test_old_error_column_unknown_when_it_cannot_tell():
    # tolerance 1.5e-4; one printed digit: 9e-05 is below 9.5e-5, 2e-04 anywhere in 1.5e-4 .. 2.5e-4
    assert statuses(judge(_old_table("9e-05"), P5, 2, 16)[0])["wrong-zero"] == "pass"
    assert statuses(judge(_old_table("2e-04"), P5, 2, 16)[0])["wrong-zero"] == "unknown"
    assert statuses(judge(_old_table("3e-04"), P5, 2, 16)[0])["wrong-zero"] == "fail"
    assert statuses(judge(_old_table("N/A"), P5, 2, 16)[0])["wrong-zero"] == "unknown"
    assert statuses(judge(_old_table("0e+00", "float8"), P5, 2, 16)[0])["wrong-zero"] == "unknown"
    assert statuses(judge(_old_table("0e+00", ranks=False), P5, 2, 16)[0])["wrong-zero"] == "unknown"


def test_truncated_run_out_of_bounds_unknown_and_finding():
    checks, findings = judge(parsed("new-allreduce-truncated-hang.log"), P5, 2, 16)
    st = statuses(checks)
    assert st["out-of-bounds"] == "unknown" and "truncated" in checks[2]["detail"]
    trunc = [f for f in findings if f["id"] == "nccl-tests-truncated"][0]
    assert trunc["evidence"][0]["text"].startswith("67108864")
    # the rows before the hang already reach the floor at 64 MiB: that much is proven; the run as a
    # whole cannot pass because out-of-bounds stays unknown
    assert st["busbw-plateau"] == "pass" and "below 1 GiB" in checks[0]["detail"]


def test_nonfinite_values_fail_wrong_zero():
    nt = parsed("two-tests-allreduce-allgather.log")["additional_tables"][0]
    checks, findings = judge(nt, P5, 2, 16)
    assert statuses(checks)["wrong-zero"] == "fail"
    assert "Inf/NaN" in [f for f in findings if f["id"] == "nccl-tests-wrong-results"][0]["message"]


def test_interleaved_rows_warn():
    _, findings = judge(parsed("new-allreduce-interleaved.log"), P5, 2, 16)
    assert "nccl-tests-unreadable-rows" in ids(findings)


def test_json_output_is_judged_the_same_way():
    nt = load_json_output(str(FIXTURES / "allreduce-v3.json"))
    checks, _ = judge(nt, P5, None, None)
    assert statuses(checks) == {"busbw-plateau": "pass", "wrong-zero": "pass", "out-of-bounds": "pass"}


def test_every_finding_has_the_contract_fields():
    for name in (
        "new-allreduce-oob-failed.log",
        "new-allreduce-truncated-hang.log",
        "new-allreduce-1node.log",
    ):
        _, findings = judge(parsed(name), P5, None, None)
        assert findings
        for f in findings:
            assert set(f) >= {"id", "severity", "message", "evidence", "remedy"}
            assert f["severity"] in ("error", "warning", "info")
            for e in f["evidence"]:
                assert set(e) == {"file", "line", "text"}


def test_hang_before_rows_is_unknown_with_a_finding():
    checks, findings = judge(parsed("new-allreduce-hang-before-rows.log"), P5, 2, 16)
    assert set(statuses(checks).values()) == {"unknown"}
    got = ids(findings)
    assert "nccl-tests-no-results" in got and "nccl-tests-failure" in got


def test_a_corrupted_second_table_fails_the_data_check():
    nt = parsed("two-tests-allreduce-allgather.log")
    checks, findings = judge(nt, P5, 2, 16)
    st = statuses(checks)
    assert st["wrong-zero"] == "fail" and "table 2 (all_gather): fail" in checks[1]["detail"]
    assert st["out-of-bounds"] == "pass"  # both tables printed 0 OK
    assert st["busbw-plateau"] == "pass"  # judged on the first table (all_reduce)
    assert "nccl-tests-wrong-results" in ids(findings)


def test_node_count_that_disagrees_with_the_rank_lines_is_a_finding():
    _, findings = judge(parsed("new-allreduce-2node.log"), P5, 4, None)
    f = [x for x in findings if x["id"] == "nccl-tests-node-count-mismatch"][0]
    assert "node-a, node-b" in f["message"] and f["evidence"][0]["line"] == 6
    _, findings = judge(parsed("new-allreduce-2node.log"), P5, 2, None)
    assert "nccl-tests-node-count-mismatch" not in ids(findings)
