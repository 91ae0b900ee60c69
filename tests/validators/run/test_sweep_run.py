"""The sweep through `python -m efa_validators run`: each round's tests at once, each a whole run with its own
log and watchdog, the replay stand-in printing a good or a bad log by which hosts the test was given.

Concurrency is asserted from the report's structure (every test of a round started before any ended, from
the times each test recorded), never from wall-clock thresholds. Every test here is REPLAY."""

from __future__ import annotations

import os

from preflight_util import (
    GOOD_EFA,
    SLOW_EFA,
    SOCKET_FALLBACK,
    assert_none_left,
    finding,
    load,
    marker,
    run_cli,
)

from efa_validators.replay import MARK

PY = os.environ.get("PYTHON_FOR_TESTS") or __import__("sys").executable


def _template(bad: str, bad_log, extra: str = "", when: str = "") -> list:
    """sh -c: replay `bad_log` when host `bad` is in the test (and `when` holds), the good log otherwise."""
    test = 'case ",{hosts}," in *,%s,*) %s;; *) false;; esac' % (bad, when or "true")
    script = 'if %s; then log=%s; else log=%s; fi; exec %s -m efa_validators.replay %s "$log"' % (
        test,
        bad_log,
        GOOD_EFA,
        PY,
        extra,
    )
    return ["sh", "-c", script]


def _sweep(tmp_path, hosts, template, *flags, timeout=120):
    out = tmp_path / "r.json"
    cmd = ["run", "--quiet", "--instance-type", "p5.48xlarge", "--log", str(tmp_path / "s.log")]
    cmd += ["--json", str(out), *flags, *hosts, "--", *template]
    proc, _ = run_cli(cmd, timeout=timeout)
    return proc, load(out)


def _assert_rounds_ran_at_once(rounds):
    for record in rounds:
        tests = record["tests"]
        hosts = [h for t in tests for h in t["hosts"]]
        assert len(hosts) == len(set(hosts)), record  # disjoint
        if len(tests) > 1:  # every test of the round started before any of them ended
            assert max(t["started_s"] for t in tests) < min(t["ended_s"] for t in tests), record
            assert record["all_at_once"] and record["max_at_once"] == len(tests)


def test_a_bad_host_among_eight_is_implicated_in_two_rounds_of_concurrent_pairs(tmp_path):
    hosts = ["h%d" % i for i in range(8)]
    template = _template("h5", SOCKET_FALLBACK, "--start-delay 1.5")
    proc, report = _sweep(tmp_path, hosts, template, "--pairwise")
    pw = report["pairwise"]
    assert pw["implicated"] == ["h5"] and pw["suspects"] == []
    assert set(pw["cleared"]) == set(hosts) - {"h5"}
    assert [len(r["tests"]) for r in pw["rounds"]] == [4, 2]
    first, second = pw["rounds"]
    assert [t["hosts"] for t in first["tests"]] == [["h0", "h1"], ["h2", "h3"], ["h4", "h5"], ["h6", "h7"]]
    assert [t["verdict"] for t in first["tests"]] == ["pass", "pass", "fail", "pass"]
    assert first["conclusion"]["suspects"] == ["h4", "h5"] and first["conclusion"]["implicated"] == []
    assert {tuple(t["hosts"]): t["verdict"] for t in second["tests"]} == {
        ("h0", "h4"): "pass",
        ("h1", "h5"): "fail",
    }
    assert second["conclusion"]["implicated"] == ["h5"]
    _assert_rounds_ran_at_once(pw["rounds"])
    logs = [log for r in pw["rounds"] for t in r["tests"] for log in t["logs"]]
    assert len(set(logs)) == 6  # each test its own log
    for log in logs:
        assert open(log, encoding="utf-8").readline().rstrip("\n") == MARK
    bad = finding(report, "bad-node")
    assert bad["hosts"] == ["h5"] and "2 round(s)" in bad["message"]
    assert {e["file"] for e in bad["evidence"]} <= set(logs) and len(bad["evidence"]) == 2
    assert "socket-fallback" in " ".join(first["tests"][2]["findings"])
    assert report["replay"] is True and finding(report, "flaky") is None
    assert proc.returncode == 1
    assert "REPLAY" in proc.stdout and "round 2: 2 test(s), 2 at once" in proc.stdout


def test_parallel_bounds_how_many_tests_run_at_once(tmp_path):
    hosts = ["a", "b", "c", "d", "e", "f"]
    proc, report = _sweep(tmp_path, hosts, _template("c", SOCKET_FALLBACK), "--parallel", "1", "--pairwise")
    pw = report["pairwise"]
    assert pw["implicated"] == ["c"]
    for record in pw["rounds"]:
        assert record["max_at_once"] == 1
        ordered = sorted(record["tests"], key=lambda t: t["started_s"])
        for before, after in zip(ordered, ordered[1:]):
            assert before["ended_s"] <= after["started_s"]


def test_the_adaptive_plan_without_any_clearing_pass(tmp_path):
    """As the fixed ring test in test_runner.py: a plain `echo ok` proves nothing (unknown), so c's two
    failing pairs never name it; the adaptive plan still tests each host against new partners."""
    out = tmp_path / "r.json"
    script = 'case "{hosts}" in *c*) echo "pair {hosts} broken"; exit 5;; esac; echo "pair {hosts} ok"'
    run_cli(["run", "--quiet", "--pairwise", "a", "b", "c", "--json", str(out), "--", "sh", "-c", script])
    pw = load(out)["pairwise"]
    pairs = {tuple(p["hosts"]): p["verdict"] for p in pw["pairs"]}
    assert pairs == {("a", "b"): "unknown", ("a", "c"): "fail", ("b", "c"): "fail"}
    assert pw["implicated"] == [] and pw["cleared"] == [] and "c" in pw["suspects"]
    assert len(pw["rounds"]) == 3


def test_a_hanging_pair_is_ended_by_its_own_watchdog_and_the_host_implicated(tmp_path):
    tag = marker()
    log = tmp_path / ("%s.log" % tag)  # the replay's command line holds the marker: found if left behind
    log.write_text(GOOD_EFA.read_text())
    script = 'case ",{hosts}," in *,h3,*) x="--hang-after 5";; *) x="";; esac; '
    script += "exec %s -m efa_validators.replay $x %s"
    template = ["sh", "-c", script % (PY, log)]
    hosts = ["h0", "h1", "h2", "h3"]
    proc, report = _sweep(tmp_path, hosts, template, "--timeout", "3", "--grace", "1", "--pairwise")
    pw = report["pairwise"]
    assert pw["implicated"] == ["h3"], pw["pairs"]
    hung = [t for r in pw["rounds"] for t in r["tests"] if "h3" in t["hosts"]]
    assert len(hung) == 2 and all("hang" in t["findings"] for t in hung)
    others = [t for r in pw["rounds"] for t in r["tests"] if "h3" not in t["hosts"]]
    assert others and all(t["verdict"] == "pass" for t in others)
    for record in pw["rounds"]:  # in each round the good pair ended at its own pace, not the hung one's
        by = {"h3" in t["hosts"]: t["ended_s"] for t in record["tests"]}
        assert by[False] < by[True]
    assert proc.returncode == 1
    assert_none_left(tag)


def test_bisection_finds_a_slow_host_that_passes_in_pairs(tmp_path):
    """h2 makes a job of 4 or more hosts slow (busbw a third of the expected) but passes in pairs: the
    pair sweep clears everyone; bisection names h2, at the scale of half the job, in 4 rounds."""
    hosts = ["h%d" % i for i in range(8)]
    template = _template("h2", SLOW_EFA, when="[ {nhosts} -ge 4 ]")
    _proc, pairs = _sweep(tmp_path, hosts, template, "--pairwise")
    assert pairs["pairwise"]["implicated"] == [] and set(pairs["pairwise"]["cleared"]) == set(hosts)
    assert pairs["verdict"] == "pass" and len(pairs["pairwise"]["rounds"]) == 1

    proc, report = _sweep(tmp_path, hosts, template, "--bisect")
    bis = report["bisect"]
    assert bis["implicated"] == ["h2"] and set(bis["cleared"]) == set(hosts) - {"h2"}
    rounds = bis["rounds"]
    assert [len(t["hosts"]) for r in rounds for t in r["tests"]][:3] == [8, 4, 4]
    assert rounds[0]["tests"][0]["slow"] is True and rounds[0]["tests"][0]["busbw_plateau"] < 200
    last = {tuple(t["under_test"]): t for t in rounds[-1]["tests"]}
    assert last[("h2",)]["verdict"] == "fail" and last[("h2",)]["slow"] is True
    assert len(last[("h2",)]["hosts"]) == 4  # one host beside three cleared ones: the scale kept
    assert all(set(t["filler"]) <= set(rounds[-2]["conclusion"]["cleared"]) for t in rounds[-1]["tests"])
    assert len(rounds) == 4
    _assert_rounds_ran_at_once(rounds)
    slow = finding(report, "slow-node")
    assert slow["hosts"] == ["h2"] and slow["evidence"]
    assert report["replay"] is True and report["verdict"] == "fail" and proc.returncode == 1


def test_sweep_usage_errors_before_anything_runs(tmp_path):
    for args, word in (
        (["--bisect", "a", "b", "--", "echo", "{hosts}"], "--instance-type"),
        (["--instance-type", "p5.48xlarge", "--bisect", "a", "b", "--", "echo", "{host1}"], "{hostfile}"),
        (["--pairwise", "a", "b", "--bisect", "a", "b", "--", "echo", "{hosts}"], "one"),
        (["--parallel", "2", "--", "echo", "x"], "--parallel"),
        (["--plan", "fixed", "--", "echo", "x"], "--plan"),
    ):
        proc, _ = run_cli(["run", "--quiet", *args])
        assert proc.returncode == 2 and word in proc.stderr, (args, proc.stderr)
