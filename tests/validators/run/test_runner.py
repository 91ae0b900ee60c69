"""The runner, end to end through `python -m efa_validators run`: real processes, real mpirun, real signals.

Faults are each bounded in time (the runner's own limits are a few seconds; subprocess timeouts back them
up) and every test checks that nothing it started is still running afterwards."""

from __future__ import annotations

import shlex

import cli
import pytest
from preflight_util import (
    GOOD_EFA,
    MPIRUN,
    SOCKET_FALLBACK,
    assert_none_left,
    finding,
    load,
    marker,
    replay,
    run_cli,
    unique_sleep,
)

from efa_validators.replay import MARK


def test_done_when_sleep_timeout_is_a_hang_in_bounded_time(tmp_path):
    """Issue 5 done-when: `run --timeout 5 -- sleep 60` returns within ~7 s, fail, hang, nothing left."""
    nap = unique_sleep(60)
    out = tmp_path / "r.json"
    proc, wall = run_cli(["run", "--timeout", "5", "--json", str(out), "--", "sleep", nap], timeout=30)
    assert wall < 7.5, wall
    assert proc.returncode == 1, proc.stderr
    report = load(out)
    assert report["verdict"] == "fail"
    hang = finding(report, "hang")
    assert hang is not None and hang["severity"] == "error"
    assert "total timeout of 5s" in hang["message"]
    assert report["run"]["killed"] == "timeout"
    assert report["run"]["kill_signal"] == "term"
    assert_none_left(nap)


def test_idle_timeout_keeps_partial_log_and_each_rank_tail(tmp_path):
    log, out = tmp_path / "run.log", tmp_path / "r.json"
    cmd = MPIRUN + ["-np", "3"] + replay(str(GOOD_EFA), "--rank-filter", "--hang-after", "4")
    proc, wall = run_cli(
        [
            "run",
            "--quiet",
            "--idle-timeout",
            "2",
            "--timeout",
            "60",
            "--log",
            str(log),
            "--json",
            str(out),
            "--",
        ]
        + cmd,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert wall < 20
    report = load(out)
    # the runner's own comes after the log's `hang` (header, no result row): findings are cause first
    hang = [f for f in report["findings"] if f["id"] == "hang"][-1]
    assert "no output for 2s" in hang["message"]
    kept = log.read_text().splitlines()
    tagged = [line for line in kept if line.startswith("[1,") and MARK not in line]
    assert len(tagged) == 12  # 3 ranks x 4 lines, all kept (rank 0 also printed the replay's MARK)
    ranks = {r["rank"]: r for r in report["run"]["rank_output"]}
    assert {0, 1, 2} <= set(ranks)
    assert [ranks[r]["lines"] for r in (0, 1, 2)] == [5, 4, 4]
    # the evidence carries each rank's last lines, with their line numbers in the kept log
    ev_ranks = {e["text"][:6] for e in hang["evidence"]}
    assert {"[1,0]<", "[1,1]<", "[1,2]<"} <= ev_ranks
    for e in hang["evidence"]:
        assert kept[e["line"] - 1] == e["text"]
    assert_none_left(str(GOOD_EFA))


def test_launcher_not_found_is_usage_error_and_writes_nothing(tmp_path):
    out = tmp_path / "r.json"
    proc, _ = run_cli(["run", "--json", str(out), "--", "no-such-launcher-h5", "-np", "2"], timeout=30)
    assert proc.returncode == 2
    assert "launcher 'no-such-launcher-h5' not found on PATH" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_no_command_is_usage_error():
    proc, _ = run_cli(["run", "--timeout", "3"], timeout=30)
    assert proc.returncode == 2
    assert "no command given" in proc.stderr


def test_bad_timeout_value_is_usage_error():
    proc, _ = run_cli(["run", "--timeout", "-1", "--", "true"], timeout=30)
    assert proc.returncode == 2
    assert "must be a finite number > 0" in proc.stderr


def test_output_stops_mid_line_then_hangs(tmp_path):
    log, out = tmp_path / "run.log", tmp_path / "r.json"
    cmd = replay(str(GOOD_EFA), "--hang-after", "5", "--mid-line")
    proc, _ = run_cli(
        ["run", "--quiet", "--idle-timeout", "1.5", "--log", str(log), "--json", str(out), "--"] + cmd,
        timeout=30,
    )
    assert proc.returncode == 1
    report = load(out)
    assert finding(report, "hang")
    assert report["run"]["partial_line"] is True
    kept = log.read_text().splitlines()
    assert kept.pop(0) == MARK  # the replay says what it is first
    full = GOOD_EFA.read_text().splitlines()
    assert kept[:5] == full[:5]
    assert len(kept) == 6 and full[5].startswith(kept[5]) and kept[5] != full[5]
    assert_none_left(str(GOOD_EFA))


def test_output_cut_mid_line_at_exit_is_flagged(tmp_path):
    out = tmp_path / "r.json"
    cmd = replay(str(GOOD_EFA), "--exit-after", "3", "--mid-line")
    proc, _ = run_cli(["run", "--quiet", "--timeout", "20", "--json", str(out), "--"] + cmd, timeout=30)
    report = load(out)
    assert finding(report, "output-cut")
    assert report["run"]["exit_code"] == 0
    assert report["verdict"] != "pass"  # three header lines prove nothing about EFA
    assert proc.returncode in (1, 3)


def test_timeout_shorter_than_startup(tmp_path):
    out = tmp_path / "r.json"
    cmd = MPIRUN + ["-np", "2"] + replay(str(GOOD_EFA), "--start-delay", "30")
    proc, wall = run_cli(["run", "--quiet", "--timeout", "1", "--json", str(out), "--"] + cmd, timeout=30)
    assert proc.returncode == 1
    assert wall < 8
    report = load(out)
    hang = finding(report, "hang")
    assert hang and "start-up did not finish" in hang["message"]
    assert report["run"]["lines"] == 0
    assert_none_left(str(GOOD_EFA))


def test_sigterm_ignored_escalates_to_sigkill(tmp_path):
    out = tmp_path / "r.json"
    cmd = replay(str(GOOD_EFA), "--hang-after", "2", "--ignore-term")
    proc, wall = run_cli(
        ["run", "--quiet", "--idle-timeout", "1", "--grace", "1", "--json", str(out), "--"] + cmd, timeout=30
    )
    assert proc.returncode == 1
    report = load(out)
    assert report["run"]["kill_signal"] == "kill"
    assert wall < 10
    assert_none_left(str(GOOD_EFA))


def test_children_left_behind_are_ended(tmp_path):
    nap = unique_sleep(120)
    out = tmp_path / "r.json"
    proc, wall = run_cli(
        [
            "run",
            "--quiet",
            "--timeout",
            "30",
            "--json",
            str(out),
            "--",
            "sh",
            "-c",
            "sleep %s & echo started" % nap,
        ],
        timeout=30,
    )
    report = load(out)
    left = finding(report, "leftover-processes")
    assert left is not None, report["findings"]
    assert report["run"]["leftover_pids"]
    assert wall < 10
    assert_none_left(nap)
    assert proc.returncode in (1, 3)


def test_rank_that_dies_is_named(tmp_path):
    """Rank 1 exits 7: the report names rank 1 when Open MPI says which rank it was, else the launcher
    and the code (Open MPI 4.1 does not always print the rank: see test_launchers)."""
    out = tmp_path / "r.json"
    cmd = (
        MPIRUN
        + ["-np", "3"]
        + replay(str(GOOD_EFA), "--rank-filter", "--exit-after", "5", "--exit-code", "7", "--only-rank", "1")
    )
    proc, _ = run_cli(["run", "--quiet", "--timeout", "60", "--json", str(out), "--"] + cmd, timeout=60)
    assert proc.returncode == 1
    report = load(out)
    assert report["verdict"] == "fail"
    assert report["run"]["exit_code"] == 7
    died = finding(report, "rank-exit")
    if died is None:
        launcher = finding(report, "launcher-exit")
        assert launcher is not None and "mpirun exited with code 7" in launcher["message"], report["findings"]
    else:
        assert died["rank"] == 1
        assert "rank 1" in died["message"] and "exit code 7" in died["message"]
        assert report["run"]["failed_ranks"][0]["exit_code"] == 7
    assert_none_left(str(GOOD_EFA))


def test_one_rank_hangs_under_mpirun(tmp_path):
    out = tmp_path / "r.json"
    tag = marker()
    cmd = (
        MPIRUN
        + ["-np", "3"]
        + replay(str(GOOD_EFA), "--rank-filter", "--hang-after", "6", "--only-rank", "2", "--speed", "200")
        + ["--start-delay", "0", "--exit-code", "0"]
    )
    proc, wall = run_cli(
        ["run", "--quiet", "--idle-timeout", "2", "--timeout", "60", "--json", str(out), "--"]
        + cmd
        + ["--only-rank", "2"],
        timeout=60,
        env={"H5_TEST_MARK": tag},
    )
    assert proc.returncode == 1
    assert wall < 30
    report = load(out)
    assert finding(report, "hang")
    tails = {r["rank"]: r["last_lines"] for r in report["run"]["rank_output"]}
    assert len([x for x in tails[2] if x.startswith("[1,2]")]) == 6
    assert_none_left(str(GOOD_EFA))


def test_nccl_debug_info_is_forced_and_reaches_ranks(tmp_path):
    out, log = tmp_path / "r.json", tmp_path / "run.log"
    cmd = MPIRUN + ["-np", "2", "sh", "-c", 'echo "debug=$NCCL_DEBUG"']
    run_cli(
        ["run", "--quiet", "--timeout", "30", "--log", str(log), "--json", str(out), "--"] + cmd,
        timeout=60,
        env={"NCCL_DEBUG": "WARN"},
    )
    report = load(out)
    lines = log.read_text().splitlines()
    assert sorted(lines) == ["[1,0]<stdout>:debug=INFO", "[1,1]<stdout>:debug=INFO"]
    assert any("NCCL_DEBUG=WARN replaced by INFO" in n for n in report["run"]["notes"])
    assert report["run"]["command"][:4] == ["mpirun", "--tag-output", "-x", "NCCL_DEBUG"]


def test_no_inject_runs_command_exactly(tmp_path):
    out = tmp_path / "r.json"
    cmd = MPIRUN + ["-np", "1", "true"]
    run_cli(["run", "--quiet", "--no-inject", "--json", str(out), "--"] + cmd, timeout=60)
    assert load(out)["run"]["command"] == cmd


def test_rank_logs_split_per_rank(tmp_path):
    """Each rank's file holds exactly the lines mpirun tagged with that rank, tag removed, in order.
    (Open MPI tags each chunk it reads, so fast ranks' lines arrive in pieces: the runner rejoins them,
    and neither the log nor a rank file may then hold a tag in the middle of a line.)"""
    ranks, log = tmp_path / "ranks", tmp_path / "run.log"
    cmd = MPIRUN + ["-np", "2"] + replay(str(GOOD_EFA), "--rank-filter")
    run_cli(
        [
            "run",
            "--quiet",
            "--rank-logs",
            str(ranks),
            "--log",
            str(log),
            "--json",
            str(tmp_path / "r.json"),
            "--",
        ]
        + cmd,
        timeout=60,
    )
    combined = log.read_text().splitlines()
    for rank in (0, 1):
        tag = "[1,%d]<stdout>:" % rank
        expected = [line[len(tag) :] for line in combined if line.startswith(tag)]
        got = (ranks / ("rank-%d.log" % rank)).read_text().splitlines()
        assert got == expected and len(got) > 50
        assert not any("]<stdout>:" in g for g in got)
    assert not any("]<stdout>:" in line[5:] for line in combined)


def test_repeat_runs_each_time_and_reports_all(tmp_path):
    out = tmp_path / "r.json"
    cmd = replay(str(GOOD_EFA), "--exit-after", "1")
    run_cli(
        ["run", "--quiet", "--repeat", "3", "--log", str(tmp_path / "x.log"), "--json", str(out), "--"] + cmd
    )
    report = load(out)
    assert [r["run"] for r in report["runs"]] == [1, 2, 3]
    assert {r["log"] for r in report["runs"]} == {str(tmp_path / ("x.%d.log" % i)) for i in (1, 2, 3)}
    for i in (1, 2, 3):  # the replay's MARK, then the one recorded line
        assert (tmp_path / ("x.%d.log" % i)).read_text().count("\n") == 2


def test_a_flaky_repeat_leads_with_the_root_cause_not_flaky(tmp_path):
    """`--repeat 2`: the first run replays the good log, the second the socket-fallback one. The series
    report keeps REPLAY first, then the root cause `parse` names (plugin-missing); `flaky` follows it as
    its consequence, so the lead sentence names the cause."""
    out, seen = tmp_path / "r.json", tmp_path / "seen"
    script = 'm=$1; shift; if [ -e "$m" ]; then exec "$@"; fi; touch "$m"; exec ' + shlex.join(
        replay(str(GOOD_EFA))
    )
    cmd = ["sh", "-c", script, "sh", str(seen)] + replay(str(SOCKET_FALLBACK))
    proc, _ = run_cli(
        ["run", "--repeat", "2", "--instance-type", "p5.48xlarge", "--nodes", "2"]
        + ["--log", str(tmp_path / "x.log"), "--json", str(out), "--"]
        + cmd,
        timeout=60,
    )
    report = load(out)
    assert [r["verdict"] for r in report["runs"]] == ["pass", "fail"], report["runs"]
    ids = [f["id"] for f in report["findings"]]
    assert ids[:2] == ["replay", "plugin-missing"], ids
    flaky = finding(report, "flaky")
    assert flaky is not None and flaky["caused_by"] == "plugin-missing"
    assert ids.index("flaky") < ids.index("avg-busbw-is-not-plateau")
    lead = [line for line in proc.stdout.splitlines() if line.startswith("root cause:")]
    assert lead and "(plugin-missing)" in lead[0], proc.stdout


def _run_report(tmp_path, options, command, timeout=60):
    """`validators run --quiet OPTIONS --json r.json -- COMMAND`: (the process, the report it wrote)."""
    out = tmp_path / "r.json"
    proc, _ = run_cli(["run", "--quiet", *options, "--json", str(out), "--", *command], timeout=timeout)
    return proc, load(out)


def test_pairwise_needs_placeholder():
    proc, _ = run_cli(["run", "--pairwise", "a", "b", "--", "true"])
    assert proc.returncode == 2
    assert "{hosts}" in proc.stderr


def test_pairwise_ring_names_the_failing_pairs(tmp_path):
    """A command that fails whenever host c is in the pair: c's two pairs fail, a-b is the other."""
    script = 'case "{hosts}" in *c*) echo "pair {hosts} broken"; exit 5;; esac; echo "pair {hosts} ok"'
    proc, report = _run_report(
        tmp_path, ["--plan", "fixed", "--pairwise", "a", "b", "c"], ["sh", "-c", script]
    )
    pairs = {tuple(p["hosts"]): p["verdict"] for p in report["pairwise"]["pairs"]}
    assert pairs[("b", "c")] == "fail" and pairs[("c", "a")] == "fail"
    assert pairs[("a", "b")] != "fail"
    assert report["verdict"] == "fail" and proc.returncode == 1
    # a-b's "ok" line proves nothing to the parser (unknown), so c cannot be named a suspect by elimination


def _replayed_by_four_ranks(tmp_path, log, *options, timeout=60):
    """`validators run --quiet OPTIONS` of 4 mpirun ranks replaying `log` (rank-filtered): (proc, report)."""
    return _run_report(tmp_path, options, MPIRUN + ["-np", "4"] + replay(str(log), "--rank-filter"), timeout)


def test_replayed_good_efa_log_passes(tmp_path):
    proc, report = _replayed_by_four_ranks(
        tmp_path, GOOD_EFA, "--instance-type", "p5.48xlarge", "--nodes", "2"
    )
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]
    assert proc.returncode == 0
    assert report["efa"] is True and report["gdr"] is True


def test_replayed_socket_fallback_fails_with_remedy(tmp_path):
    proc, report = _replayed_by_four_ranks(
        tmp_path, SOCKET_FALLBACK, "--instance-type", "p5.48xlarge", "--nodes", "2"
    )
    assert proc.returncode == 1 and report["verdict"] == "fail"
    assert report["efa"] is False
    remedies = " ".join(f.get("remedy") or "" for f in report["findings"])
    assert "LD_LIBRARY_PATH" in remedies


def test_pairwise_with_known_good_implicates_the_bad_node(tmp_path):
    """Pairs with node c replay the socket-fallback log, the others the good one: c is implicated."""
    script = (
        'case "{hosts}" in *c*) log=%s;; *) log=%s;; esac; exec mpirun --allow-run-as-root --oversubscribe '
        '--tag-output -np 2 python3 -m efa_validators.replay --rank-filter "$log"'
        % (SOCKET_FALLBACK, GOOD_EFA)
    )
    options = ["--instance-type", "p5.48xlarge", "--pairwise", "a", "b", "c", "d", "--known-good", "a"]
    proc, report = _run_report(tmp_path, options, ["sh", "-c", script], timeout=120)
    assert report["pairwise"]["implicated"] == ["c"]
    assert set(report["pairwise"]["cleared"]) == {"a", "b", "d"}
    bad = finding(report, "bad-node")
    assert bad and bad["hosts"] == ["c"]
    assert proc.returncode == 1


@pytest.mark.parametrize(
    "name, efa, gdr, verdict",
    [
        ("01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log", True, True, None),
        (
            "55-ec2-p4d-1node-ofi1.17.1-init-failed-sendrecv-socket-fallback-deepspeed.log",
            False,
            None,
            "fail",
        ),
    ],
)
def test_real_public_logs_replayed_under_mpirun(tmp_path, nccl_logs_dir, name, efa, gdr, verdict):
    """The shared corpus (read by path, never copied) printed by 4 real ranks: the runner's rank split and
    rejoining must not change what the log says (its meta: efa/gdr)."""
    _, report = _replayed_by_four_ranks(
        tmp_path, nccl_logs_dir / name, "--instance-type", "p4d.24xlarge", timeout=120
    )
    assert report["run"]["exit_code"] == 0
    assert report["efa"] is efa
    if gdr is not None:
        assert report["gdr"] is gdr
    if verdict is not None:
        assert report["verdict"] == verdict
    assert report["verdict"] != "pass" or efa


def test_unwritable_log_is_usage_error_before_anything_runs(tmp_path):
    nap = unique_sleep(30)
    proc, wall = run_cli(["run", "--log", str(tmp_path / "no" / "such" / "x.log"), "--", "sleep", nap])
    assert proc.returncode == 2 and "--log" in proc.stderr and "Traceback" not in proc.stderr
    assert wall < 5
    assert_none_left(nap)


def test_hang_report_in_junit_and_markdown(tmp_path):
    junit, md = tmp_path / "r.xml", tmp_path / "r.md"
    nap = unique_sleep(30)
    proc, _ = run_cli(
        ["run", "--timeout", "1", "--junit", str(junit), "--markdown", str(md), "--", "sleep", nap]
    )
    assert proc.returncode == 1
    import xml.etree.ElementTree as ET

    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["run-completed"].find("failure") is not None
    assert "hang" in md.read_text()
    assert_none_left(nap)


def test_image_digest_is_recorded_for_the_release_gate(tmp_path):
    """`--image REF@sha256:D` lands in the report, where `build.py release --require-preflight` looks."""
    import json
    import subprocess

    from imagebuild.release.record import preflight_names

    digest = "sha256:" + "ab" * 32
    out = tmp_path / "r.json"
    cmd = [*cli.VALIDATORS, "run", "--quiet", "--timeout", "20", "--json", str(out)]
    proc = subprocess.run(
        cmd + ["--image", "reg/x:1@" + digest, "--", "true"], capture_output=True, timeout=60
    )
    report = json.loads(out.read_text())
    # with the lock the image carries: none here (no /opt/efa-image-build/variant.lock.json on this host)
    assert report["image"] == {"ref": "reg/x:1@" + digest, "digest": digest, "lock": None}
    lock = tmp_path / "variant.lock.json"
    lock.write_text(json.dumps({"name": "v1", "components": {}}))
    env = dict(__import__("os").environ, EFA_IMAGE_LOCK=str(lock))
    subprocess.run(
        cmd + ["--image", "reg/x:1@" + digest, "--", "true"], capture_output=True, timeout=60, env=env
    )
    from efa_validators.run.imagebind import lock_sha256

    found = json.loads(out.read_text())["image"]["lock"]
    assert found["name"] == "v1" and found["sha256"] == lock_sha256({"name": "v1", "components": {}})
    assert preflight_names(report, digest, None) and not preflight_names(report, "sha256:" + "cd" * 32, None)
    assert proc.returncode in (1, 3)  # `true` prints no NCCL: never a pass
    bad = subprocess.run(cmd + ["--image", "reg/x:1", "--", "true"], capture_output=True, timeout=60)
    assert bad.returncode == 2 and b"sha256" in bad.stderr
