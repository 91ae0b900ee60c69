"""`python -m efa_validators drain` (issue 33, item 2): the scheduler's commands for the nodes a node-check or
a sweep named, printed, and run with --apply (here through a recorded kubectl; the real Slurm is in
test_drain_docker.py)."""

import json
import os
import shlex

import pytest
from cli import validators_process
from paths import ROOT
from preflight_util import fake_tools

from efa_validators.run import drain

TRANSCRIPT = ROOT / "tests" / "fixtures" / "drain" / "kubectl-transcript.txt"
SINFO = ROOT / "tests" / "fixtures" / "drain" / "sinfo-transcript.txt"
HOST = "ip-10-1-77-12.ec2.internal"


def _node_check(host=HOST, verdict="fail", node=HOST, remedies=("reset-gpu", "reset-gpu", "configure")):
    """A node-check report as node-check writes it: each failing check with its remedy class (None passes);
    `remedies` None: a report from before remedies (no key at all); `node` None: no NODE_NAME was set."""
    checks = [
        {"name": "gpu-row-remap", "status": "fail", "detail": "GPU 1 (00000000:64:00.0): a row remap is "
         "pending: drain, then reset the GPU to apply it", "evidence": []},
        {"name": "gpu-xid", "status": "fail", "detail": "Xid 48 on 0000:64:00\n\x1b[31mnext line",
         "evidence": []},
        {"name": "gpu-persistence", "status": "fail", "detail": "persistence mode disabled on 8 GPUs: "
         "nvidia-smi -pm 1", "evidence": []},
        {"name": "memlock", "status": "pass", "detail": "unlimited", "evidence": []},
    ]  # fmt: skip
    for c, remedy in zip(checks, list(remedies or ()) + [None]):
        if remedies is not None:
            c["remedy"] = remedy
    report = {"schema": "efa-image-build/node-check/v1", "host": host, "verdict": verdict, "checks": checks}
    if node is not None:
        report["node"] = node
    return report


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
    assert reason.startswith("reason=efa-image-build: reset-gpu: gpu-row-remap: GPU 1")
    assert reason.endswith("(+2 more)")
    assert "\n" not in reason and "\x1b" not in reason and len(reason) <= len("reason=") + drain.REASON_MAX
    assert [n["host"] for n in found["nodes"]] == [HOST]  # a passing node is left alone


def test_the_printed_kubernetes_commands_are_the_recorded_transcripts():
    """The first recorded command is the check that the name is a node (run before any other with --apply)."""
    found = drain.bad_nodes([("n.json", _node_check(host="preflight-worker-0"))], by_node=True)
    printed = drain.shell_lines(drain.commands(found, "kubernetes")).splitlines()
    recorded = [line[2:] for line in TRANSCRIPT.read_text().splitlines() if line.startswith("$ ")]
    assert recorded[0] == drain.shell_lines([drain.kubectl_node_argv(HOST)]).strip()
    assert printed == recorded[1:]


def test_apply_runs_exactly_the_printed_commands_through_kubectl(tmp_path):
    """--apply runs each printed command, in order, no shell: a recorded kubectl on PATH answers from the
    transcript and logs the argv it was given."""
    calls = tmp_path / "calls"
    kubectl = (
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
    env = fake_tools(tmp_path / "bin", {"kubectl": kubectl})
    report = _write(tmp_path, "n.json", _node_check())
    proc = validators_process("drain", report, "--for", "kubernetes", "--apply", env=env)
    assert proc.returncode == 1, proc.stderr  # nodes were named (and drained)
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    recorded = [
        shlex.split(line[2:]) for line in TRANSCRIPT.read_text().splitlines() if line.startswith("$ ")
    ]
    assert ran == recorded
    assert "cordoned" in proc.stdout and "annotated" in proc.stdout and "error" not in proc.stderr


def test_hyperpod_reboots_hosts_a_sweep_implicated_by_instance_id_in_batches_of_25():
    """A sweep implicates by elimination: not proof of hardware, so HyperPod reboots (the issue: it asked for
    a replace, which destroys the instance volumes)."""
    hosts = ["node%d" % i for i in range(30)]
    found = drain.bad_nodes([("s.json", _sweep(hosts, replay=False))])
    ids = {h: "i-%017x" % (0xABC0 + i) for i, h in enumerate(hosts)}
    argvs = drain.commands(found, "hyperpod", "my-cluster", ids)
    assert [a[2] for a in argvs] == ["batch-reboot-cluster-nodes"] * 2
    assert [len(a) - 6 for a in argvs] == [25, 5] and argvs[0][3:6] == [
        "--cluster-name",
        "my-cluster",
        "--node-ids",
    ]
    assert sorted(w for a in argvs for w in a[6:]) == sorted(ids.values())
    assert all("not proof of hardware" in n["why"] for n in found["nodes"])


def test_suspects_are_listed_never_drained_and_json_lists_the_nodes(tmp_path):
    report = _write(tmp_path, "s.json", _sweep(["h3"], suspects=["h5", "h3"], replay=False))
    proc = validators_process("drain", report, "--for", "json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and [n["host"] for n in out["nodes"]] == ["h3"]
    assert [s["host"] for s in out["suspects"]] == ["h5"] and out["nodes"][0]["action"] == "reboot-node"
    empty = _write(tmp_path, "ok.json", _node_check(verdict="pass"))
    proc = validators_process("drain", empty, "--for", "slurm")
    assert proc.returncode == 0 and "no node to drain" in proc.stdout


def test_replay_reports_are_printed_as_replay_and_never_applied_without_replay_ok(tmp_path):
    report = _write(tmp_path, "s.json", _sweep(["h3"], replay=True))
    printed = validators_process("drain", report, "--for", "slurm")
    assert (
        printed.returncode == 1
        and "REPLAY" in printed.stdout
        and "'reason=efa-image-build: reboot-node: REPLAY bad-node" in printed.stdout
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
        ([sweep, "--for", "slurm", "--mark", "condition"], "--mark condition is for --for kubernetes"),
        ([sweep, "--for", "kubernetes", "--mark", "label"], "invalid choice"),
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
    calls = tmp_path / "calls"
    sinfo = (
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
    scontrol = (
        "#!/usr/bin/env python3\nimport json, sys\nopen(%r, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        % str(calls)
    )
    return fake_tools(tmp_path / "bin", {"sinfo": sinfo, "scontrol": scontrol}), calls


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


# --- issue 39 item 3: the action in proportion to each check's remedy class -------------------------------

ONLY = {
    "configure": ("configure", "configure", "configure"),
    "reset-gpu": ("reset-gpu", "configure", "configure"),
    "reboot-node": ("reboot-node", "reset-gpu", "configure"),
    "replace-hardware": ("reset-gpu", "replace-hardware", "configure"),
}
INSTANCE = "i-0123456789abcdef0"


def _plan(scheduler, report, **kw):
    found = drain.bad_nodes([("n.json", report)], by_node=scheduler in drain.KUBERNETES)
    return found, drain.commands(found, scheduler, "my-cluster", {HOST: INSTANCE}, **kw)


@pytest.mark.parametrize("scheduler", ["hyperpod", "hyperpod-slurm", "hyperpod-eks"])
@pytest.mark.parametrize(
    "remedies",
    [
        ONLY["configure"],
        ONLY["reset-gpu"],
        ONLY["reboot-node"],
        None,  # a report from before remedies
        ("melt-down", 7, "configure"),  # remedies this version does not know
    ],
)
def test_no_hyperpod_plan_replaces_a_node_without_a_replace_hardware_check(scheduler, remedies):
    """The issue: `drain --for hyperpod` asked HyperPod to replace (destroying the instance volumes) for a
    setting, a pending row remap a GPU reset clears, or a device not mounted in."""
    found, argvs = _plan(scheduler, _node_check(remedies=remedies))
    words = " ".join(" ".join(a) for a in argvs)
    assert "replace" not in words.lower(), argvs
    if remedies == ONLY["configure"]:
        assert argvs == [] and found["nodes"][0]["remedy"] == "configure"
    else:
        assert "reboot" in words.lower(), argvs


def test_an_old_or_unknown_remedy_is_read_as_reset_gpu_and_said_so():
    old = drain.bad_nodes([("old.json", _node_check(remedies=None))])["nodes"][0]
    odd = drain.bad_nodes([("odd.json", _node_check(remedies=("replace-everything", None, None)))])["nodes"][
        0
    ]
    for node, said in ((old, "no remedy in the report"), (odd, "remedy 'replace-everything' unknown here")):
        assert node["remedy"] == "reset-gpu" and node["why"].startswith(said), node
        assert "read as reset-gpu, the mildest class that takes the node out of service" in node["why"]


def test_a_replace_hardware_check_replaces_on_each_hyperpod_form():
    report = _node_check(remedies=ONLY["replace-hardware"])
    _, api = _plan("hyperpod", report)
    assert api == [["aws", "sagemaker", "batch-replace-cluster-nodes", "--cluster-name", "my-cluster",
                    "--node-ids", INSTANCE]]  # fmt: skip
    _, slurm = _plan("hyperpod-slurm", report)
    assert slurm == [["scontrol", "update", "node=" + HOST, "state=fail", "reason=Action:Replace"]]
    _, eks = _plan("hyperpod-eks", _node_check(host="worker-0", remedies=ONLY["replace-hardware"]))
    label = "sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement"
    assert eks[0] == ["kubectl", "label", "node", HOST, "--overwrite", label]
    assert eks[1][:5] == ["kubectl", "annotate", "node", HOST, "--overwrite"]
    assert "replace-hardware: gpu-xid" in eks[1][5]  # the most severe check first, whatever the order


def test_hyperpod_slurm_asks_for_its_own_reboot_or_replace_by_the_exact_reason():
    """HyperPod Slurm starts its recovery from `state=fail reason="Action:Reboot"` (or Replace), the exact
    word: the evidence goes to the printed plan, never into that reason."""
    for remedies, action in ((ONLY["reset-gpu"], "Reboot"), (ONLY["reboot-node"], "Reboot"),
                             (ONLY["replace-hardware"], "Replace")):  # fmt: skip
        _, argvs = _plan("hyperpod-slurm", _node_check(remedies=remedies))
        assert argvs == [["scontrol", "update", "node=" + HOST, "state=fail", "reason=Action:" + action]]
    sweep = drain.bad_nodes([("s.json", _sweep(["ip-10-1-2-3"], replay=False))])
    assert drain.commands(sweep, "hyperpod-slurm")[0][-1] == "reason=Action:Reboot"
    assert drain.commands(drain.bad_nodes([("n.json", _node_check(remedies=ONLY["configure"]))]),
                          "hyperpod-slurm") == []  # fmt: skip


def test_configure_is_never_a_drain_on_any_scheduler():
    report = _node_check(remedies=ONLY["configure"])
    for scheduler in drain.SCHEDULERS:
        assert _plan(scheduler, report)[1] == [], scheduler
    found = drain.bad_nodes([("n.json", report)])
    assert drain.as_json(found)["nodes"][0]["action"] == "configure"
    lines = drain.plan_lines(found, "slurm")
    assert len(lines) == 3 and all(": configure: " in line for line in lines)
    assert (
        "gpu-persistence: persistence mode disabled on 8 GPUs: nvidia-smi -pm 1: a setting to fix" in lines[2]
    )


def test_the_plan_is_printed_first_and_configure_applies_nothing(tmp_path):
    env, calls = _recorded_slurm(tmp_path)
    mixed = _write(tmp_path, "m.json", _node_check(host="node3"))
    printed = validators_process("drain", mixed, "--for", "slurm", env=env, timeout=30)
    lines = printed.stdout.splitlines()
    assert printed.returncode == 1 and lines[0].startswith("# node3: reset-gpu: drain (reversible"), lines
    assert "# node3: configure: gpu-persistence:" in lines[1] and "never drained" in lines[1]
    assert lines[2].startswith(
        "scontrol update nodename=node3 state=drain 'reason=efa-image-build: reset-gpu:"
    )
    applied = validators_process("drain", mixed, "--for", "slurm", "--apply", env=env, timeout=30)
    assert applied.returncode == 1 and applied.stdout.splitlines()[:2] == lines[:2], applied.stdout
    [argv] = [json.loads(line) for line in calls.read_text().splitlines()]
    assert argv[:3] == ["update", "nodename=node3", "state=drain"]
    calls.unlink()
    setting = _write(tmp_path, "c.json", _node_check(host="node3", remedies=ONLY["configure"]))
    for scheduler in ("slurm", "hyperpod-slurm"):
        proc = validators_process("drain", setting, "--for", scheduler, "--apply", env=env, timeout=30)
        assert proc.returncode == 1 and "configure: gpu-persistence" in proc.stdout, proc.stderr
        assert not calls.exists() and "scontrol" not in proc.stdout  # a setting: no scontrol ran


def _recorded_kubectl(tmp_path, nodes):
    """A PATH with a kubectl that logs the argv it got and answers `get node NAME -o name` as an API server
    with `nodes` would (node/NAME, or NotFound and exit 1); every other command: exit 0."""
    calls = tmp_path / "kcalls"
    kubectl = (
        "#!/usr/bin/env python3\nimport json, sys\nargv = sys.argv[1:]\n"
        "open(%r, 'a').write(json.dumps(argv) + '\\n')\n"
        "if argv[:2] == ['get', 'node']:\n"
        "    if argv[2] in %r:\n        print('node/' + argv[2]); sys.exit(0)\n"
        "    print('Error from server (NotFound): nodes \"%%s\" not found' %% argv[2], file=sys.stderr)\n"
        "    sys.exit(1)\n" % (str(calls), list(nodes))
    )
    return fake_tools(tmp_path / "kbin", {"kubectl": kubectl}), calls


@pytest.mark.parametrize("scheduler", ["kubernetes", "hyperpod-eks"])
def test_kubernetes_targets_the_node_never_the_pod(tmp_path, scheduler):
    """A report whose host is the pod's name and carries no node is refused, saying how to give the node;
    with --apply, a name the API server does not give back as a node is refused before anything acts."""
    pod = _write(tmp_path, "pod.json", _node_check(host="nccl-tests-worker-0", node=None))
    proc = validators_process("drain", pod, "--for", scheduler, timeout=20)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "host 'nccl-tests-worker-0'" in proc.stderr and "NODE_NAME" in proc.stderr
    assert "spec.nodeName" in proc.stderr and "kubectl" not in proc.stdout
    # the same report acts on the host where the host is the node (Slurm)
    assert "nodename=nccl-tests-worker-0" in validators_process("drain", pod, "--for", "slurm").stdout

    env, calls = _recorded_kubectl(tmp_path, nodes=[HOST])
    good = _write(tmp_path, "good.json", _node_check(host="nccl-tests-worker-0"))
    stale = _write(tmp_path, "stale.json", _node_check(host="w1", node="ip-10-9-9-9.ec2.internal"))
    proc = validators_process("drain", good, stale, "--for", scheduler, "--apply", env=env, timeout=30)
    assert proc.returncode == 2 and "host 'ip-10-9-9-9.ec2.internal': kubectl exited 1" in proc.stderr
    assert "NotFound" in proc.stderr and proc.stderr.rstrip().endswith("nothing drained"), proc.stderr
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    assert all(argv[:2] == ["get", "node"] for argv in ran) and len(ran) == 2  # asked, nothing acted on
    calls.unlink()
    proc = validators_process("drain", good, "--for", scheduler, "--apply", env=env, timeout=30)
    assert proc.returncode == 1 and "error" not in proc.stderr, proc.stderr
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    assert ran[0] == ["get", "node", HOST, "-o", "name"] and all(HOST in argv for argv in ran)
    assert len(ran) == (4 if scheduler == "kubernetes" else 3)


def test_a_kubectl_answer_that_is_not_that_one_node_is_no_node():
    assert drain.not_a_node("n1", 0, "node/n1\n") is None
    assert "did not name it as one node" in drain.not_a_node("n1", 0, "node/n1\nnode/n2\n")
    assert "did not name it" in drain.not_a_node("n1", 0, "")
    assert "exited 1" in drain.not_a_node("n1", 1, 'Error from server (NotFound): nodes "n1" not found')
    assert "could not run" in drain.not_a_node("n1", None, "[Errno 2] No such file or directory")


def test_the_condition_form_is_a_status_patch_built_as_json():
    """--mark condition: cordon, then a NodeCondition in node-problem-detector's shape on the status
    subresource; the message is a report's text (quotes, a newline, braces) and stays one JSON string."""
    report = _node_check(host="w0", remedies=("reboot-node", "reset-gpu", "configure"))
    report["checks"][0]["detail"] = 'a "quoted" }], "status": "False" {\nsecond line'
    found, argvs = _plan("kubernetes", report, mark="condition", now="2026-12-06T04:00:00Z")
    assert argvs[0] == ["kubectl", "cordon", HOST] and len(argvs) == 2
    assert argvs[1][:6] == ["kubectl", "patch", "node", HOST, "--subresource=status", "--type=strategic"]
    assert argvs[1][6] == "-p"
    [condition] = json.loads(argvs[1][7])["status"]["conditions"]
    assert condition == {
        "type": "EfaImageBuildPreflightFailed",
        "status": "True",
        "reason": "RebootNode",
        "message": drain.reason_of(found["nodes"][0], False),
        "lastHeartbeatTime": "2026-12-06T04:00:00Z",
        "lastTransitionTime": "2026-12-06T04:00:00Z",
    }
    assert '"quoted"' in condition["message"] and "\n" not in condition["message"]
    with pytest.raises(drain.DrainError, match="--mark condition is for --for kubernetes"):
        _plan("slurm", report, mark="condition")


def test_hostile_node_names_are_refused_as_host_names_are(tmp_path):
    cases = [
        (
            _node_check(node="ip-10-1-2-3\nscontrol update nodename=ALL state=down"),
            "kubernetes",
            "not a host",
        ),
        (_node_check(node="ip-10-1-2-3 --all"), "kubernetes", "not a host name"),
        (_node_check(node="ALL"), "hyperpod-eks", "every node"),
        (_node_check(host="All"), "hyperpod-slurm", "every node"),
        (_node_check(host="a b"), "hyperpod-slurm", "not a host name"),
        (_node_check(host="a\nb"), "hyperpod", "not a host name"),
    ]
    for i, (report, scheduler, words) in enumerate(cases):
        path = _write(tmp_path, "h%d.json" % i, report)
        proc = validators_process("drain", path, "--for", scheduler, "--cluster", "c", timeout=20)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stdout == "", proc.stdout


def test_node_check_reports_the_kubernetes_node_from_node_name(tmp_path):
    """The downward API's spec.nodeName arrives as NODE_NAME: the report carries it as `node`."""
    from efa_validators.node import nodecheck

    env = {"EFA_IMAGE_LOCK": str(tmp_path / "none"), "NODE_NAME": "ip-10-1-77-12.ec2.internal"}
    report = nodecheck.run_checks(env=env, root=str(tmp_path), dcgm_level=0)
    assert report["node"] == "ip-10-1-77-12.ec2.internal"
    assert nodecheck.run_checks(env={"EFA_IMAGE_LOCK": "x"}, root=str(tmp_path), dcgm_level=0)["node"] is None


def test_a_check_name_from_a_report_never_forges_a_line_of_the_printed_plan():
    """Attack on issue 39 item 3's plan: a configure finding's check name was printed raw, so a report whose
    check name held a newline put a command of its own among the printed scontrol lines (`drain ... | sh`
    ran it) and an ESC sequence reached the terminal. Every plan line is now one line, controls escaped."""
    report = _node_check(host="node3")
    report["checks"][2]["name"] = "memlock\nscontrol update nodename=node9 state=down reason=x\n\x1b]2;t\x07#"
    report["checks"][0]["name"] = "gpu-row-remap\r\u202e"
    found = drain.bad_nodes([("n.json", report)])
    lines = drain.plan_lines(found, "slurm")
    assert len(lines) == 2 and all(line.startswith("# node3: ") for line in lines), lines
    assert not any(ch in "".join(lines) for ch in "\n\r\x1b\x07\u202e"), lines
    assert "memlock\\x0ascontrol update nodename=node9" in lines[1]


def test_a_report_of_many_failing_checks_is_read_in_linear_work(monkeypatch):
    """Attack on issue 39 item 3's ordering: each failing check re-sorted its node's reasons, so a report of n
    checks cost n^2/2 severity look-ups (20 000 checks, 1.5 MB: 29 s; the 64 MiB a report may be: hours).
    Counted, not timed: the look-ups grow with n, and the order is still most severe first, report order
    within a class."""
    calls = []
    real = drain.severity
    monkeypatch.setattr(drain, "severity", lambda remedy: calls.append(1) or real(remedy))
    n = 2000
    kinds = ("configure", "reset-gpu")
    checks = [{"name": "c%d" % i, "status": "fail", "detail": "d", "remedy": kinds[i % 2]} for i in range(n)]
    checks.append({"name": "last", "status": "fail", "detail": "d", "remedy": "reboot-node"})
    report = {"schema": "efa-image-build/node-check/v1", "host": "node3", "verdict": "fail", "checks": checks}
    [node] = drain.bad_nodes([("n.json", report)])["nodes"]
    assert len(calls) <= 4 * (n + 1), len(calls)
    assert node["remedy"] == "reboot-node" and [r["check"] for r in node["reasons"][:3]] == [
        "last",
        "c1",
        "c3",
    ]
    assert node["reasons"][-1]["check"] == "c%d" % (n - 2)
