"""What to do with the nodes a pre-flight names, in proportion to the evidence: printed, or run when asked.

Why: a sweep that names a bad host among 256 is only half the job; the team then types the drain by hand,
late at night, into a scheduler that accepts anything. Here the reports decide which nodes and how far to go.
Each failing node-check check carries its remedy class (efa_validators.node.nodecheck REMEDIES, mildest
first: configure, reset-gpu, reboot-node, replace-hardware); a node's action is its most severe one:
- configure (a setting or software to fix and rerun): never a drain, a reboot or a replace, on any scheduler.
  It is printed as a finding with its fix: a drain for a setting a rerun fixes is out of proportion, and an
  image's setting is not the node's at all.
- reset-gpu, reboot-node: take the node out of service reversibly (Slurm drain, Kubernetes cordon) or ask
  HyperPod for a reboot, never a replace.
- replace-hardware: the only class HyperPod is asked to replace a node for (a replace destroys the
  instance's volumes, and a p5/p6 may not come back).
A check with no remedy (a report from before remedies) or one this version does not know is read as
reset-gpu, the mildest class that takes the node out of service, and the plan says so: never a replace.
A host a sweep implicated (`run --pairwise` bad-node, `--bisect` slow-node) is implicated by elimination,
not proven faulty hardware: reboot-node at most, said so.

Each scheduler gets the command its documentation gives:
- Slurm: `scontrol update nodename=N state=drain reason=...` (scontrol(1), "State=DRAIN" with "Reason="),
  the class in the reason.
- SageMaker HyperPod, Slurm orchestrator: `scontrol update node=N state=fail reason=Action:Replace` (or
  `Action:Reboot`): HyperPod reads that exact reason and starts its own replace or reboot ("Manually replace
  or reboot a node", https://docs.aws.amazon.com/sagemaker/latest/dg/
  sagemaker-hyperpod-resiliency-slurm-replace-faulty-instance.html). The reason is exactly that word.
- SageMaker HyperPod, any orchestrator: `aws sagemaker batch-replace-cluster-nodes` /
  `batch-reboot-cluster-nodes --cluster-name C --node-ids i-...` (API BatchReplaceClusterNodes /
  BatchRebootClusterNodes: EC2 instance ids, at most 25 a request; a replace destroys all instance volumes).
- SageMaker HyperPod, EKS orchestrator: `kubectl label node N --overwrite
  sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement` (or
  `UnschedulablePendingReboot`): the labels HyperPod's automatic node recovery acts on, where the cluster
  has it enabled ("Resilience-related Kubernetes labels by SageMaker HyperPod",
  https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html;
  "Manually quarantine, replace, or reboot a node",
  https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-manual.html).
- Kubernetes, `--mark taint` (default): `kubectl cordon N` and `kubectl taint nodes N
  efa-image-build/preflight=<class>:NoSchedule` (kubectl reference; a taint value is a label value: 63
  characters of [A-Za-z0-9._-]), the full reason in an annotation.
- Kubernetes, `--mark condition`: `kubectl cordon N` and a NodeCondition `EfaImageBuildPreflightFailed`
  (status "True", reason the class in CamelCase, message the reason) set by a strategic merge patch of the
  node's status subresource: NodeStatus.conditions merges by `type` (kubernetes/api@3fed8b5a
  core/v1/types.go NodeStatus.Conditions, patchMergeKey type), and the shape is node-problem-detector's
  (a condition type named for the problem, a CamelCase reason, a message: kubernetes/node-problem-detector
  @3c6bb436 config/custom-plugin-monitor.json; its permanent rules hold such a condition "True" while the
  problem lasts).
  EKS's AcceleratedHardwareReady is deliberately not written: it is the EKS node monitoring agent's own
  condition, and node auto repair acts on it after 10 minutes with Replace or Reboot by the condition's
  reason, Reboot only on managed node groups (or Karpenter 1.15+ behind a feature gate): on EKS Auto Mode
  and Karpenter it replaces (https://docs.aws.amazon.com/eks/latest/userguide/node-repair.html), so a
  reset or reboot class would replace the node.
- anything else: a JSON list of {host, action, why, reasons} to feed the scheduler's own health hook.

Kubernetes targets the node, never the pod: in a pod the host name is the pod's, so a node-check report is
acted on by its `node` (env NODE_NAME, from the pod's spec.nodeName through the downward API), and one
without it is refused. Which nodes: a node-check report whose verdict is fail, and the hosts a sweep
implicated. Suspects (not proven) are listed, never acted on. A REPLAY report acts on nothing for real
unless the caller says the replay is meant (tests do): it proves nothing about a cluster. Pure but `apply`.
"""

import json
import re
import shlex
import subprocess
from typing import Any, Dict, List, Optional, Sequence, Tuple

from efa_validators.node.nodecheck import REMEDIES
from efa_validators.report.printable import printable

SCHEDULERS = ("slurm", "kubernetes", "hyperpod", "hyperpod-slurm", "hyperpod-eks", "json")
KUBERNETES = ("kubernetes", "hyperpod-eks")  # act on Kubernetes node objects: the report's `node`
MARKS = ("taint", "condition")  # --for kubernetes: how the node is marked beside the cordon
PREFIX = "efa-image-build"
TAINT_KEY = "efa-image-build/preflight"
CONDITION_TYPE = (
    "EfaImageBuildPreflightFailed"  # node-problem-detector's shape: "True" while the problem holds
)
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"  # HyperPod EKS: its recovery reads these values
HEALTH_VALUE = {"replace": "UnschedulablePendingReplacement", "reboot": "UnschedulablePendingReboot"}
SLURM_ACTION = {"replace": "Action:Replace", "reboot": "Action:Reboot"}  # HyperPod Slurm: the exact reason
REASON_MAX = 200  # a Slurm reason is shown by sinfo -R: keep it one readable line
HYPERPOD_BATCH = 25  # BatchReplaceClusterNodes / BatchRebootClusterNodes: up to 25 nodes a request
CONFIGURE, RESET, REBOOT, REPLACE = REMEDIES  # mildest first: the index is the severity
UNCLASSIFIED = RESET  # a failing check without a known remedy: the mildest class that takes the node out
SWEEP_AT_MOST = REBOOT  # a host a sweep implicated: not proof of hardware
# host names as schedulers take them (RFC 1123 labels, dotted); anything else is refused, never quoted in
_HOST = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
# A node name Slurm reads as every node: `scontrol update nodename=ALL` (any case) drained all three nodes of
# the test Slurm (22.05, tests/fixtures/launchers/slurm-start.sh). A report never names it as one host.
_EVERY_NODE = "all"
_INSTANCE_ID = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")  # the API's NodeId pattern
NO_NODE = (
    "the report has no 'node' (the Kubernetes node name): its host %r is what node-check saw, in a pod the "
    "pod's name, never acted on as a node; set NODE_NAME from the pod's spec.nodeName through the downward "
    "API (env: - name: NODE_NAME, valueFrom: fieldRef: fieldPath: spec.nodeName) and rerun node-check"
)


class DrainError(ValueError):
    """A report or an option this module cannot act on: the CLI prints it and exits 2."""


def _clean(text: str, limit: int = REASON_MAX) -> str:
    """One line a scheduler shows: every control character (newline, ESC, C1, direction overrides) escaped
    as the terminal output escapes it (report.printable), then cut."""
    flat = printable(text.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def severity(remedy: str) -> int:
    return REMEDIES.index(remedy)


def remedy_of(check: Dict[str, Any]) -> Tuple[str, str]:
    """(the class a failing check asks for, why it was read so: "" when the report said it). A missing or
    unknown remedy (a report from before remedies, or a newer one) is read as the mildest class that takes
    the node out of service, never as replace-hardware."""
    remedy = check.get("remedy")
    if isinstance(remedy, str) and remedy in REMEDIES:
        return remedy, ""
    said = (
        "no remedy in the report" if remedy is None else "remedy %s unknown here" % _clean(repr(remedy), 40)
    )
    return UNCLASSIFIED, "%s: read as %s, the mildest class that takes the node out of service" % (
        said,
        UNCLASSIFIED,
    )


def hyperpod_verb(remedy: str) -> Optional[str]:
    """What HyperPod is asked for: replace only for replace-hardware; reboot for reset-gpu and reboot-node
    (HyperPod resets no single GPU: a reboot is the mildest it has); nothing for configure."""
    if remedy == REPLACE:
        return "replace"
    return "reboot" if remedy in (RESET, REBOOT) else None


def _name(value: Any, source: str, what: str = "host") -> str:
    if not isinstance(value, str) or not _HOST.fullmatch(value):
        raise DrainError("%s: %s %r is not a host name a scheduler takes" % (source, what, value))
    if value.lower() == _EVERY_NODE:
        raise DrainError(
            "%s: %s %r is every node to Slurm (nodename=ALL): never drained" % (source, what, value)
        )
    return value


def bad_nodes(reports: Sequence[Tuple[str, Dict[str, Any]]], by_node: bool = False) -> Dict[str, Any]:
    """{"nodes": [{host, remedy, why, reasons: [{check, detail, source, remedy, read_as}]}],
    "suspects": [...], "replay": bool} from (file name, report) pairs; a node's remedy is its most severe
    reason's, and its reasons are listed most severe first. `by_node` (Kubernetes): a node-check report is
    named by its `node`, and one without it is refused (NO_NODE). Raises DrainError on a report of no known
    kind, a host list that is not a list, or a bad host or node name (a suspect too: it is printed)."""
    nodes: Dict[str, Dict[str, Any]] = {}
    suspects: List[Dict[str, Any]] = []
    replay = False

    def add(host: str, check: str, detail: str, source: str, remedy: str, read_as: str, node: Any) -> None:
        entry = nodes.setdefault(host, {"host": host, "reasons": [], "remedy": CONFIGURE, "why": ""})
        if node is not None:
            entry["node"] = node
        entry["reasons"].append(
            {"check": check, "detail": _clean(detail), "source": source, "remedy": remedy, "read_as": read_as}
        )

    for source, report in reports:
        if not isinstance(report, dict):
            raise DrainError("%s: not a report (a JSON object)" % source)
        run = report.get("run")
        replay = replay or bool(report.get("replay") or (isinstance(run, dict) and run.get("replay")))
        if str(report.get("schema", "")).startswith(PREFIX + "/node-check/"):
            if report.get("verdict") != "fail":
                continue
            host = _name(report.get("host"), source)
            node = report.get("node")
            node = None if node is None else _name(node, source, "node")
            if by_node and node is None:
                raise DrainError("%s: %s" % (source, NO_NODE % host))
            for c in _listed(report, "checks", source):
                if isinstance(c, dict) and c.get("status") == "fail":
                    remedy, read_as = remedy_of(c)
                    add(node if by_node else host, str(c.get("name")), str(c.get("detail", "")), source,
                        remedy, read_as, node)  # fmt: skip
            continue
        sweeps = [(k, report[k]) for k in ("pairwise", "bisect") if isinstance(report.get(k), dict)]
        if not sweeps:
            raise DrainError(
                "%s: neither a node-check report nor a sweep report (run --pairwise/--bisect)" % source
            )
        findings = {
            str(f.get("id")): f for f in _listed(report, "findings", source) if isinstance(f, dict)
        }  # fmt: skip
        for kind, section in sweeps:
            finding = findings.get("bad-node" if kind == "pairwise" else "slow-node") or {}
            implicated = _listed(section, "implicated", source, kind + ".")
            for host in implicated:
                add(_name(host, source), "bad-node" if kind == "pairwise" else "slow-node",
                    str(finding.get("message") or "implicated by the %s sweep" % kind), source, SWEEP_AT_MOST,
                    "implicated by elimination in the %s sweep, not proof of hardware: %s at most, then "
                    "node-check on it" % (kind, SWEEP_AT_MOST), None)  # fmt: skip
            for host in _listed(section, "suspects", source, kind + "."):
                if not isinstance(host, str) or not _HOST.fullmatch(host):  # printed: never a line of its own
                    raise DrainError(
                        "%s: key '%s.suspects': %r is not a host name a scheduler takes"
                        % (source, kind, host)
                    )
                if host not in implicated:
                    suspects.append(
                        {"host": host, "source": source, "why": "suspect, not proven: not drained"}
                    )
    for entry in nodes.values():  # sorted once (a sort per reason was n^2/2 look-ups: 29 s for 20 000)
        entry["reasons"].sort(key=lambda r: -severity(r["remedy"]))  # stable: report order within a class
        entry["remedy"] = entry["reasons"][0]["remedy"]
        entry["why"] = entry["reasons"][0]["read_as"]
    return {"nodes": [nodes[h] for h in sorted(nodes)], "suspects": suspects, "replay": replay}


def _listed(section: Dict[str, Any], key: str, source: str, within: str = "") -> List[Any]:
    """`section[key]` as the list a report holds there (absent: empty); a string or an object is refused,
    never walked letter by letter or key by key into host names."""
    value = section.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DrainError("%s: key '%s%s' is %s, not a list" % (source, within, key, type(value).__name__))
    return value


def reason_of(node: Dict[str, Any], replay: bool) -> str:
    """One line: the class, then the most severe check and its detail, and how many more."""
    first = node["reasons"][0]
    more = " (+%d more)" % (len(node["reasons"]) - 1) if len(node["reasons"]) > 1 else ""
    return _clean(
        "%s: %s: %s%s: %s%s"
        % (PREFIX, node["remedy"], "REPLAY " if replay else "", first["check"], first["detail"], more)
    )


def _camel(remedy: str) -> str:
    """A NodeCondition reason is one CamelCase word (Kubernetes API conventions): reset-gpu -> ResetGpu."""
    return "".join(part.capitalize() for part in remedy.split("-"))


def condition_patch(remedy: str, message: str, now: str) -> str:
    """The strategic merge patch of a node's status that sets CONDITION_TYPE, as JSON (json.dumps: the
    message is a report's text, never formatted into JSON by hand)."""
    condition = {
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": _camel(remedy),
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return json.dumps({"status": {"conditions": [condition]}}, sort_keys=True, separators=(",", ":"))


def acted_on(found: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The nodes any scheduler acts on: every class but configure (a setting is fixed, not drained)."""
    return [n for n in found["nodes"] if n["remedy"] != CONFIGURE]


def commands(
    found: Dict[str, Any],
    scheduler: str,
    cluster: Optional[str] = None,
    instance_ids: Optional[Dict[str, str]] = None,
    mark: str = "taint",
    now: str = "1970-01-01T00:00:00Z",
) -> List[List[str]]:
    """The argv of every command that acts on `found` for `scheduler` (json: none; a configure-only node:
    none). `now` stamps a NodeCondition (RFC 3339). Pure."""
    if scheduler not in SCHEDULERS:
        raise DrainError("--for must be one of %s" % ", ".join(SCHEDULERS))
    if mark not in MARKS or (mark != "taint" and scheduler != "kubernetes"):
        raise DrainError("--mark %s is for --for kubernetes (one of %s)" % (mark, ", ".join(MARKS)))
    out: List[List[str]] = []
    replay = found["replay"]
    nodes = acted_on(found)
    if scheduler == "slurm":
        for node in nodes:
            out.append(["scontrol", "update", "nodename=" + node["host"], "state=drain",
                        "reason=" + reason_of(node, replay)])  # fmt: skip
    elif scheduler == "hyperpod-slurm":
        for node in nodes:
            action = SLURM_ACTION[hyperpod_verb(node["remedy"]) or "reboot"]
            out.append(["scontrol", "update", "node=" + node["host"], "state=fail", "reason=" + action])
    elif scheduler == "kubernetes":
        for node in nodes:
            host = node["host"]
            out.append(["kubectl", "cordon", host])
            if mark == "condition":
                patch = condition_patch(node["remedy"], reason_of(node, replay), now)
                out.append(["kubectl", "patch", "node", host, "--subresource=status", "--type=strategic",
                            "-p", patch])  # fmt: skip
                continue
            out.append(["kubectl", "taint", "nodes", host, "--overwrite",
                        "%s=%s:NoSchedule" % (TAINT_KEY, node["remedy"])])  # fmt: skip
            out.append(["kubectl", "annotate", "node", host, "--overwrite",
                        "%s-reason=%s" % (TAINT_KEY, reason_of(node, replay))])  # fmt: skip
    elif scheduler == "hyperpod-eks":
        for node in nodes:
            host, verb = node["host"], hyperpod_verb(node["remedy"]) or "reboot"
            out.append(["kubectl", "label", "node", host, "--overwrite",
                        "%s=%s" % (HEALTH_LABEL, HEALTH_VALUE[verb])])  # fmt: skip
            out.append(["kubectl", "annotate", "node", host, "--overwrite",
                        "%s-reason=%s" % (TAINT_KEY, reason_of(node, replay))])  # fmt: skip
    elif scheduler == "hyperpod":
        if not cluster:
            raise DrainError("--for hyperpod needs --cluster NAME (the HyperPod cluster's name or ARN)")
        ids = instance_ids or {}
        missing = [n["host"] for n in nodes if n["host"] not in ids and not _INSTANCE_ID.fullmatch(n["host"])]
        if missing:
            raise DrainError("--for hyperpod acts on EC2 instance ids: give --instance-id HOST=i-... for %s"
                             % ", ".join(missing))  # fmt: skip
        for verb in ("replace", "reboot"):
            chosen = [ids.get(n["host"], n["host"]) for n in nodes if hyperpod_verb(n["remedy"]) == verb]
            for i in range(0, len(chosen), HYPERPOD_BATCH):
                out.append(["aws", "sagemaker", "batch-%s-cluster-nodes" % verb, "--cluster-name", cluster,
                            "--node-ids", *chosen[i : i + HYPERPOD_BATCH]])  # fmt: skip
    return out


# what each scheduler does for a class that is acted on: the plan's words
_ACTION_WORDS = {
    "slurm": lambda r: "drain (reversible: scontrol update state=resume)",
    "hyperpod-slurm": lambda r: (
        "state=fail reason=%s (HyperPod %ss it)"
        % (SLURM_ACTION[hyperpod_verb(r) or "reboot"], hyperpod_verb(r) or "reboot")
    ),
    "kubernetes": lambda r: "cordon, marked with the class (reversible: kubectl uncordon)",
    "hyperpod-eks": lambda r: (
        "label %s=%s (HyperPod %ss it where automatic node recovery is on)"
        % (HEALTH_LABEL, HEALTH_VALUE[hyperpod_verb(r) or "reboot"], hyperpod_verb(r) or "reboot")
    ),
    "hyperpod": lambda r: "batch-%s-cluster-nodes" % (hyperpod_verb(r) or "reboot"),
    "json": lambda r: r,
}


def plan_lines(found: Dict[str, Any], scheduler: str) -> List[str]:
    """The plan, one comment line per node and one per configure finding, printed before any command:
    what is done to each node and why, and each setting to fix with its detail. Every field a report gave is
    `_clean`: a newline in a check's name printed a line of its own among the commands (`| sh` ran it)."""
    lines = []
    for node in found["nodes"]:
        first = node["reasons"][0]
        if node["remedy"] != CONFIGURE:
            what = _clean("%s: %s" % (first["check"], first["detail"]), 160)
            why = "; " + node["why"] if node["why"] else ""
            action = _ACTION_WORDS[scheduler](node["remedy"])
            lines.append("# %s: %s: %s: %s%s" % (node["host"], node["remedy"], action, what, why))
        for reason in node["reasons"]:
            if reason["remedy"] == CONFIGURE:
                lines.append(
                    "# %s: configure: %s: %s: a setting to fix, then rerun node-check (never drained, "
                    "rebooted or replaced for it)"
                    % (node["host"], _clean(reason["check"], 80), reason["detail"])
                )
    return lines


def parse_instance_ids(pairs: Sequence[str]) -> Dict[str, str]:
    ids = {}
    for pair in pairs:
        host, sep, node_id = pair.partition("=")
        if not sep or not _HOST.fullmatch(host) or not _INSTANCE_ID.fullmatch(node_id):
            raise DrainError("--instance-id %r: want HOST=i-<8 or 17 hex digits>" % pair)
        ids[host] = node_id
    return ids


def as_json(found: Dict[str, Any]) -> Dict[str, Any]:
    """The list any other scheduler's health hook can read: each node's class is its action."""
    return {
        "schema": PREFIX + "/drain/v1",
        "replay": found["replay"],
        "nodes": [
            {
                "host": n["host"],
                **({"node": n["node"]} if "node" in n else {}),
                "action": n["remedy"],
                "why": n["why"],
                "reason": reason_of(n, found["replay"]),
                "reasons": n["reasons"],
            }
            for n in found["nodes"]
        ],  # fmt: skip
        "suspects": found["suspects"],
    }


def shell_lines(argvs: List[List[str]]) -> str:
    return "".join(" ".join(shlex.quote(word) for word in argv) + "\n" for argv in argvs)


def sinfo_argv(host: str) -> List[str]:
    """sinfo(1): one line per node (-N), no header (-h), the nodes named by -n, each as its name (%N)."""
    return ["sinfo", "-N", "-h", "-n", host, "-o", "%N"]


def not_one_node(host: str, rc: Optional[int], output: str) -> Optional[str]:
    """Why `host` is not exactly one Slurm node, from what `sinfo_argv(host)` said (exit code or None when it
    could not run, its output); None when sinfo names that one node and nothing else. Pure.

    Why: `scontrol update nodename=X` takes X as a node list, and on the test Slurm (slurm-wlm 22.05.8,
    tests/fixtures/launchers/slurm-start.sh with `NodeSet=rack1 Nodes=node1,node2` added to slurm.conf)
    `nodename=rack1` drained node1 and node2, while `sinfo -N -h -n rack1 -o %N` printed nothing (as for
    a name no node has). A name sinfo does not print back as itself, alone, is never drained."""
    if rc is None:
        return "sinfo could not run (%s): it cannot be confirmed as one node" % _clean(output, 120)
    if rc != 0:
        return "sinfo exited %d (%s): it cannot be confirmed as one node" % (rc, _clean(output, 120))
    names = sorted({line.strip() for line in output.splitlines() if line.strip()})
    if names == [host]:
        return None
    if not names:
        return (
            "no Slurm node has that name (a NodeSet or another name scontrol reads as several nodes, or a "
            "node this cluster lacks)"
        )
    return "Slurm reads it as %d nodes (%s), not as one" % (len(names), _clean(", ".join(names), 120))


def confirm_slurm_nodes(found: Dict[str, Any], timeout: float = 30.0) -> None:
    """Before any scontrol runs: each host to act on is exactly one Slurm node (`not_one_node`), all of them
    checked first; else DrainError naming each host that is not, with its report and why: none drained."""
    nodes = acted_on(found)
    checked = apply([sinfo_argv(node["host"]) for node in nodes], timeout)
    _refuse([(node, not_one_node(node["host"], rc, output)) for node, (_, rc, output) in zip(nodes, checked)])


def kubectl_node_argv(name: str) -> List[str]:
    """`kubectl get node NAME -o name`: prints `node/NAME` for a node, fails (NotFound) for anything else."""
    return ["kubectl", "get", "node", name, "-o", "name"]


def not_a_node(name: str, rc: Optional[int], output: str) -> Optional[str]:
    """Why `name` is not a Kubernetes node, from what `kubectl_node_argv(name)` said (exit code or None when
    it could not run, its output); None when kubectl printed `node/NAME` and nothing else. Pure.

    Why: in a pod the host name is the pod's, and `kubectl cordon <pod>` fails only after the plan was
    printed and the other nodes acted on; a name the API server does not give back as a node is never
    acted on."""
    if rc is None:
        return "kubectl could not run (%s): it cannot be confirmed as a node" % _clean(output, 120)
    if rc != 0:
        return "kubectl exited %d (%s): not a node of this cluster (a pod's name?)" % (
            rc,
            _clean(output, 120),
        )
    if [line.strip() for line in output.splitlines() if line.strip()] == ["node/" + name]:
        return None
    return "kubectl did not name it as one node (%s)" % _clean(output, 120)


def confirm_kube_nodes(found: Dict[str, Any], timeout: float = 30.0) -> None:
    """Before any kubectl acts: each name is a node of the cluster (`not_a_node`), all checked first; else
    DrainError naming each that is not: nothing is acted on."""
    nodes = acted_on(found)
    checked = apply([kubectl_node_argv(node["host"]) for node in nodes], timeout)
    _refuse([(node, not_a_node(node["host"], rc, output)) for node, (_, rc, output) in zip(nodes, checked)])


def _refuse(verdicts: List[Tuple[Dict[str, Any], Optional[str]]]) -> None:
    problems = [
        "%s: host %r: %s" % (node["reasons"][0]["source"], node["host"], why) for node, why in verdicts if why
    ]
    if problems:
        raise DrainError("; ".join(problems) + "; nothing drained")


def apply(argvs: List[List[str]], timeout: float = 60.0) -> List[Tuple[List[str], Optional[int], str]]:
    """Run each command (no shell), in order, each bounded in time: (argv, exit code or None, output)."""
    done = []
    for argv in argvs:
        try:
            proc = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
            done.append((argv, proc.returncode, proc.stdout.decode("utf-8", "replace")))
        except (OSError, subprocess.TimeoutExpired) as err:
            done.append((argv, None, str(err)))
    return done
