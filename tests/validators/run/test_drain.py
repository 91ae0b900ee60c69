"""`python -m efa_validators drain` (issue 33, item 2): the scheduler's commands for the nodes a node-check or
a sweep named, printed, and run with --apply (here through a recorded kubectl; the real Slurm is in
test_drain_docker.py)."""

import json
import os
import shlex
import stat

import pytest
from cli import validators_process
from paths import ROOT

from efa_validators.run import drain

TRANSCRIPT = ROOT / "tests" / "fixtures" / "drain" / "kubectl-transcript.txt"
SINFO = ROOT / "tests" / "fixtures" / "drain" / "sinfo-transcript.txt"
HOST = "ip-10-1-77-12.ec2.internal"


def _node_check(host=HOST, verdict="fail"):
    return {
        "schema": "efa-image-build/node-check/v1",
        "host": host,
        "verdict": verdict,
        "checks": [
            {"name": "gpu-row-remap", "status": "fail", "detail": "GPU 1 (00000000:64:00.0): a row remap is "
             "pending: drain, then reset the GPU to apply it", "evidence": []},
            {"name": "gpu-xid", "status": "fail", "detail": "Xid 63 on 0000:64:00\n\x1b[31mnext line",
             "evidence": []},
            {"name": "memlock", "status": "pass", "detail": "unlimited", "evidence": []},
        ],
    }  # fmt: skip


def _sweep(implicated, suspects=(), replay=True):
    return {
        "schema": "efa-image-build/report/v1",
        "replay": replay,
        "verdict": "fail",
        "findings": [{"id": "bad-node", "severity": "error", "message": "implicated by elimination: %s"
                      % ",".join(implicated), "hosts": list(implicated)}],
        "pairwise": {"implicated": list(implicated), "suspects": list(suspects), "cleared": []},
    }  # fmt: skip


def _write(tmp_path, name, report):
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return str(path)


def test_slurm_drain_names_the_failed_check_on_one_line():
    found = drain.bad_nodes([("n.json", _node_check()), ("ok.json", _node_check("ip-10-1-2-3", "pass"))])
    [argv] = drain.commands(found, "slurm")
    assert argv[:4] == ["scontrol", "update", "nodename=" + HOST, "state=drain"]
    reason = argv[4]
    assert reason.startswith("reason=efa-image-build: gpu-row-remap: GPU 1") and reason.endswith("(+1 more)")
    assert "\n" not in reason and "\x1b" not in reason and len(reason) <= len("reason=") + drain.REASON_MAX
    assert [n["host"] for n in found["nodes"]] == [HOST]  # a passing node is left alone


def test_the_printed_kubernetes_commands_are_the_recorded_transcripts():
    found = drain.bad_nodes([("n.json", _node_check())])
    printed = drain.shell_lines(drain.commands(found, "kubernetes")).splitlines()
    recorded = [line[2:] for line in TRANSCRIPT.read_text().splitlines() if line.startswith("$ ")]
    assert printed == recorded


def test_apply_runs_exactly_the_printed_commands_through_kubectl(tmp_path):
    """--apply runs each printed command, in order, no shell: a recorded kubectl on PATH answers from the
    transcript and logs the argv it was given."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    kubectl = bindir / "kubectl"
    kubectl.write_text(
        "#!/usr/bin/env python3\n"
        "# recorded kubectl: answers each command with the transcript's reply, logs the argv it got\n"
        "import json, shlex, sys\n"
        "argv = ['kubectl'] + sys.argv[1:]\n"
        "open(%r, 'a').write(json.dumps(argv) + '\\n')\n"
        "lines = open(%r).read().splitlines()\n"
        "for i, line in enumerate(lines):\n"
        "    if line.startswith('$ ') and shlex.split(line[2:]) == argv:\n"
        "        print(lines[i + 1]); sys.exit(0)\n"
        "print('error: not in the transcript', file=sys.stderr); sys.exit(1)\n"
        % (str(calls), str(TRANSCRIPT))
    )
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    report = _write(tmp_path, "n.json", _node_check())
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"]))
    proc = validators_process("drain", report, "--for", "kubernetes", "--apply", env=env)
    assert proc.returncode == 1, proc.stderr  # nodes were named (and drained)
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    recorded = [
        shlex.split(line[2:]) for line in TRANSCRIPT.read_text().splitlines() if line.startswith("$ ")
    ]
    assert ran == recorded
    assert "cordoned" in proc.stdout and "annotated" in proc.stdout and "error" not in proc.stderr


def test_hyperpod_replaces_hardware_faults_by_instance_id_in_batches_of_25():
    hosts = ["node%d" % i for i in range(30)]
    found = drain.bad_nodes([("s.json", _sweep(hosts, replay=False))])
    ids = {h: "i-%017x" % (0xABC0 + i) for i, h in enumerate(hosts)}
    argvs = drain.commands(found, "hyperpod", "my-cluster", ids)
    assert [a[2] for a in argvs] == ["batch-replace-cluster-nodes"] * 2  # bad-node: EFA or GPU hardware
    assert [len(a) - 6 for a in argvs] == [25, 5] and argvs[0][3:6] == [
        "--cluster-name",
        "my-cluster",
        "--node-ids",
    ]
    assert sorted(w for a in argvs for w in a[6:]) == sorted(ids.values())


def test_suspects_are_listed_never_drained_and_json_lists_the_nodes(tmp_path):
    report = _write(tmp_path, "s.json", _sweep(["h3"], suspects=["h5", "h3"], replay=False))
    proc = validators_process("drain", report, "--for", "json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and [n["host"] for n in out["nodes"]] == ["h3"]
    assert [s["host"] for s in out["suspects"]] == ["h5"] and out["nodes"][0]["action"] == "replace"
    empty = _write(tmp_path, "ok.json", _node_check(verdict="pass"))
    proc = validators_process("drain", empty, "--for", "slurm")
    assert proc.returncode == 0 and "no node to drain" in proc.stdout


def test_replay_reports_are_printed_as_replay_and_never_applied_without_replay_ok(tmp_path):
    report = _write(tmp_path, "s.json", _sweep(["h3"], replay=True))
    printed = validators_process("drain", report, "--for", "slurm")
    assert (
        printed.returncode == 1
        and "REPLAY" in printed.stdout
        and "'reason=efa-image-build: REPLAY bad-node" in printed.stdout
    )
    applied = validators_process("drain", report, "--for", "slurm", "--apply")
    assert applied.returncode == 2 and "REPLAY" in applied.stderr and "scontrol" not in applied.stdout


def test_bad_input_is_exit_2_naming_it_never_a_traceback_or_a_hang(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    hostile = _write(tmp_path, "h.json", _node_check(host="a;touch /tmp/x"))
    comma = _write(tmp_path, "c.json", _sweep(["a,evil"], replay=False))
    every = _write(tmp_path, "all.json", _node_check(host="All"))  # scontrol: nodename=ALL is every node
    sweep = _write(tmp_path, "s.json", _sweep(["h3"], replay=False))
    cases = [
        ([str(fifo), "--for", "slurm"], "not a regular file"),
        (["/dev/zero", "--for", "slurm"], "not a regular file"),
        ([str(tmp_path), "--for", "slurm"], str(tmp_path)),
        ([_write(tmp_path, "l.json", [1, 2]), "--for", "slurm"], "not a report"),
        ([_write(tmp_path, "o.json", {"verdict": "fail"}), "--for", "slurm"], "neither a node-check"),
        ([hostile, "--for", "slurm"], "not a host name"),
        ([comma, "--for", "slurm"], "not a host name"),
        ([every, "--for", "slurm"], "every node to Slurm"),
        ([sweep, "--for", "hyperpod", "--cluster", "c"], "--instance-id"),
        ([sweep, "--for", "hyperpod", "--cluster", "c;x"], "--cluster"),
        ([sweep, "--for", "hyperpod", "--cluster", "c",
          "--instance-id", "h3=i-zz"], "--instance-id"),
    ]  # fmt: skip
    for args, word in cases:
        proc = validators_process("drain", *args, timeout=20)
        assert proc.returncode == 2 and word in proc.stderr and "Traceback" not in proc.stderr, (
            args,
            proc.stderr,
        )


def test_a_malformed_sweep_is_exit_2_naming_the_key_never_hosts_made_of_its_letters(tmp_path):
    """A host list that is a string or an object is refused, not walked into hosts `a`, `b`, `c`; a suspect is
    printed, so one that is no host name (a newline and a command after it) is refused before any output."""
    sweep = _sweep(["h3"], replay=False)
    letters = dict(sweep, pairwise={"implicated": "abc", "suspects": []})
    keys = dict(sweep, pairwise={"implicated": {"h1": 1}})
    shell = dict(
        sweep, pairwise={"implicated": ["h3"], "suspects": ["x\nscontrol update nodename=ALL state=down"]}
    )
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    cases = [
        (_write(tmp_path, "letters.json", letters), "key 'pairwise.implicated' is str, not a list"),
        (_write(tmp_path, "keys.json", keys), "key 'pairwise.implicated' is dict, not a list"),
        (_write(tmp_path, "shell.json", shell), "key 'pairwise.suspects'"),
        (str(deep), "nested too deep"),
    ]
    for path, words in cases:
        proc = validators_process("drain", path, "--for", "slurm", timeout=20)
        assert proc.returncode == 2 and path in proc.stderr and words in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "scontrol" not in proc.stdout, proc.stdout


def test_odd_but_harmless_fields_do_not_crash_the_drain():
    """`run` that is not an object and a finding id that is not a name (a list) are read around."""
    sweep = dict(_sweep(["h3"], replay=False), run="x")
    sweep["findings"] = [{"id": ["bad-node"]}, *sweep["findings"]]
    [argv] = drain.commands(drain.bad_nodes([("s.json", sweep)]), "slurm")
    assert argv[2] == "nodename=h3" and "implicated by elimination: h3" in argv[4]


def _recorded_slurm(tmp_path):
    """A PATH with a recorded sinfo (answers from the transcript of the real test Slurm) and an scontrol that
    only logs the argv it got: (env, the log)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    sinfo = bindir / "sinfo"
    sinfo.write_text(
        "#!/usr/bin/env python3\n"
        "# recorded sinfo: prints the transcript's lines after the command it was given\n"
        "import shlex, sys\n"
        "argv = ['sinfo'] + sys.argv[1:]\n"
        "lines = open(%r).read().splitlines()\n"
        "for i, line in enumerate(lines):\n"
        "    if line.startswith('$ ') and shlex.split(line[2:]) == argv:\n"
        "        for reply in lines[i + 1:]:\n"
        "            if reply.startswith('$ '):\n"
        "                break\n"
        "            print(reply)\n"
        "        sys.exit(0)\n"
        "print('error: not in the transcript', file=sys.stderr); sys.exit(1)\n" % str(SINFO)
    )
    scontrol = bindir / "scontrol"
    scontrol.write_text(
        "#!/usr/bin/env python3\nimport json, sys\nopen(%r, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        % str(calls)
    )
    for tool in (sinfo, scontrol):
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return dict(os.environ, PATH="%s:%s" % (bindir, os.environ["PATH"])), calls


def test_apply_drains_nothing_unless_every_name_is_exactly_one_slurm_node(tmp_path):
    """A NodeSet's name (or a node the cluster lacks) as a host: scontrol would drain the whole set. --apply
    asks sinfo for each name first (the recorded answers of the real test Slurm; the real one is in
    test_drain_docker.py) and, unless each is that one node, drains none, the good ones neither."""
    env, calls = _recorded_slurm(tmp_path)
    mixed = _write(tmp_path, "m.json", _sweep(["node3", "rack1", "node9"], replay=False))
    proc = validators_process("drain", mixed, "--for", "slurm", "--apply", env=env, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "%s: host 'rack1': no Slurm node has that name (a NodeSet" % mixed in proc.stderr, proc.stderr
    assert "host 'node9'" in proc.stderr and "host 'node3'" not in proc.stderr
    assert proc.stderr.rstrip().endswith("nothing drained") and not calls.exists()
    assert "scontrol" not in proc.stdout
    # printed only, nothing is asked or run; one real node is drained with --apply
    assert validators_process("drain", mixed, "--for", "slurm", env=env).returncode == 1
    good = _write(tmp_path, "g.json", _sweep(["node3"], replay=False))
    proc = validators_process("drain", good, "--for", "slurm", "--apply", env=env, timeout=30)
    assert proc.returncode == 1, proc.stderr
    [argv] = [json.loads(line) for line in calls.read_text().splitlines()]
    assert argv[:3] == ["update", "nodename=node3", "state=drain"]


def test_a_name_sinfo_does_not_give_back_as_itself_alone_is_not_one_node():
    assert drain.not_one_node("node3", 0, "node3\nnode3\n") is None  # a node in two partitions: two lines
    assert "2 nodes (node1, node2)" in drain.not_one_node("rack1", 0, "node1\nnode2\n")
    assert "no Slurm node" in drain.not_one_node("rack1", 0, "")
    assert "exited 1" in drain.not_one_node("node3", 1, "slurm_load_partitions: Unable to contact")
    assert "could not run" in drain.not_one_node("node3", None, "[Errno 2] No such file or directory")
    # a hostlist expression never gets this far: it is no host name
    with pytest.raises(drain.DrainError, match="not a host name"):
        drain.bad_nodes([("s.json", _sweep(["node[1-3]"], replay=False))])
