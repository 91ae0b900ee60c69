"""What to do with the nodes a pre-flight names: the scheduler's own drain, printed, or run when asked.

Why: a sweep that names a bad host among 256 is only half the job; the team then types the drain by hand,
late at night, into a scheduler that accepts anything. Here the reports decide which nodes, and each
scheduler gets the command its documentation gives:
- Slurm: `scontrol update nodename=N state=drain reason=...` (scontrol(1), "State=DRAIN" with "Reason=").
- Kubernetes: `kubectl cordon N` and `kubectl taint nodes N efa-image-build/preflight=<check>:NoSchedule`
  (kubectl reference; a taint value is a label value: 63 characters of [A-Za-z0-9._-]), the full reason
  in an annotation.
- SageMaker HyperPod: `aws sagemaker batch-replace-cluster-nodes` / `batch-reboot-cluster-nodes
  --cluster-name C --node-ids i-...` (API BatchReplaceClusterNodes / BatchRebootClusterNodes: EC2
  instance ids, at most 25 a request): replace for hardware (GPU, EFA), reboot for the rest.
- anything else: a JSON list of {host, reasons, action} to feed the scheduler's own health hook.

Which nodes: a node-check report whose verdict is fail (its host), and the hosts a sweep (`run --pairwise`,
`--bisect`) implicated by elimination. Suspects (not proven) are listed, never drained. A REPLAY report
drains nothing for real unless the caller says the replay is meant (tests do): it proves nothing about a
cluster. Pure but `apply`.
"""

import re
import shlex
import subprocess
from typing import Any, Dict, List, Optional, Sequence, Tuple

from efa_validators.report.printable import printable

SCHEDULERS = ("slurm", "kubernetes", "hyperpod", "json")
PREFIX = "efa-image-build"
TAINT_KEY = "efa-image-build/preflight"
REASON_MAX = 200  # a Slurm reason is shown by sinfo -R: keep it one readable line
HYPERPOD_BATCH = 25  # BatchReplaceClusterNodes / BatchRebootClusterNodes: up to 25 nodes a request
# host names as schedulers take them (RFC 1123 labels, dotted); anything else is refused, never quoted in
_HOST = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
# A node name Slurm reads as every node: `scontrol update nodename=ALL` (any case) drained all three nodes of
# the test Slurm (22.05, tests/fixtures/launchers/slurm-start.sh). A report never names it as one host.
_EVERY_NODE = "all"
_INSTANCE_ID = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")  # the API's NodeId pattern
_HARDWARE = (
    "gpu",
    "efa-devices",
    "dev-infiniband",
    "gdr-capability",
    "nvidia-kernel-driver",
    "bad-node",
    "slow-node",
)


class DrainError(ValueError):
    """A report or an option this module cannot act on: the CLI prints it and exits 2."""


def _clean(text: str, limit: int = REASON_MAX) -> str:
    """One line a scheduler shows: every control character (newline, ESC, C1, direction overrides) escaped
    as the terminal output escapes it (report.printable), then cut."""
    flat = printable(text.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def bad_nodes(reports: Sequence[Tuple[str, Dict[str, Any]]]) -> Dict[str, Any]:
    """{"nodes": [{host, reasons: [{check, detail, source}], hardware}], "suspects": [...], "replay": bool}
    from (file name, report) pairs. Raises DrainError on a report of no known kind, a host list that is not
    a list, or a bad host name (a suspect too: it is printed)."""
    nodes: Dict[str, Dict[str, Any]] = {}
    suspects: List[Dict[str, Any]] = []
    replay = False

    def add(host: Any, check: str, detail: str, source: str) -> None:
        if not isinstance(host, str) or not _HOST.fullmatch(host):
            raise DrainError("%s: host %r is not a host name a scheduler takes" % (source, host))
        if host.lower() == _EVERY_NODE:
            raise DrainError(
                "%s: host %r is every node to Slurm (nodename=ALL): never drained" % (source, host)
            )
        entry = nodes.setdefault(host, {"host": host, "reasons": [], "hardware": False})
        entry["reasons"].append({"check": check, "detail": _clean(detail), "source": source})
        entry["hardware"] = entry["hardware"] or check.startswith(_HARDWARE)

    for source, report in reports:
        if not isinstance(report, dict):
            raise DrainError("%s: not a report (a JSON object)" % source)
        run = report.get("run")
        replay = replay or bool(report.get("replay") or (isinstance(run, dict) and run.get("replay")))
        if str(report.get("schema", "")).startswith(PREFIX + "/node-check/"):
            if report.get("verdict") == "fail":
                for c in _listed(report, "checks", source):
                    if isinstance(c, dict) and c.get("status") == "fail":
                        add(report.get("host"), str(c.get("name")), str(c.get("detail", "")), source)
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
                add(host, "bad-node" if kind == "pairwise" else "slow-node",
                    str(finding.get("message") or "implicated by the %s sweep" % kind), source)  # fmt: skip
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
    first = node["reasons"][0]
    more = " (+%d more)" % (len(node["reasons"]) - 1) if len(node["reasons"]) > 1 else ""
    return _clean(
        "%s: %s%s: %s%s" % (PREFIX, "REPLAY " if replay else "", first["check"], first["detail"], more)
    )


def _taint_value(check: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]", "-", check)[:63].strip("-._")
    return value or "failed"


def commands(
    found: Dict[str, Any],
    scheduler: str,
    cluster: Optional[str] = None,
    instance_ids: Optional[Dict[str, str]] = None,
) -> List[List[str]]:
    """The argv of every command that acts on `found` for `scheduler` (json: none). Pure."""
    if scheduler not in SCHEDULERS:
        raise DrainError("--for must be one of %s" % ", ".join(SCHEDULERS))
    out: List[List[str]] = []
    replay = found["replay"]
    if scheduler == "slurm":
        for node in found["nodes"]:
            out.append(["scontrol", "update", "nodename=" + node["host"], "state=drain",
                        "reason=" + reason_of(node, replay)])  # fmt: skip
    elif scheduler == "kubernetes":
        for node in found["nodes"]:
            host, check = node["host"], node["reasons"][0]["check"]
            out.append(["kubectl", "cordon", host])
            out.append(["kubectl", "taint", "nodes", host, "--overwrite",
                        "%s=%s:NoSchedule" % (TAINT_KEY, _taint_value(check))])  # fmt: skip
            out.append(["kubectl", "annotate", "node", host, "--overwrite",
                        "%s-reason=%s" % (TAINT_KEY, reason_of(node, replay))])  # fmt: skip
    elif scheduler == "hyperpod":
        if not cluster:
            raise DrainError("--for hyperpod needs --cluster NAME (the HyperPod cluster's name or ARN)")
        ids = instance_ids or {}
        missing = [
            n["host"]
            for n in found["nodes"]
            if n["host"] not in ids and not _INSTANCE_ID.fullmatch(n["host"])
        ]
        if missing:
            raise DrainError("--for hyperpod acts on EC2 instance ids: give --instance-id HOST=i-... for %s"
                             % ", ".join(missing))  # fmt: skip
        for verb, hardware in (("batch-replace-cluster-nodes", True), ("batch-reboot-cluster-nodes", False)):
            chosen = [ids.get(n["host"], n["host"]) for n in found["nodes"] if n["hardware"] == hardware]
            for i in range(0, len(chosen), HYPERPOD_BATCH):
                out.append(["aws", "sagemaker", verb, "--cluster-name", cluster, "--node-ids",
                            *chosen[i : i + HYPERPOD_BATCH]])  # fmt: skip
    return out


def parse_instance_ids(pairs: Sequence[str]) -> Dict[str, str]:
    ids = {}
    for pair in pairs:
        host, sep, node_id = pair.partition("=")
        if not sep or not _HOST.fullmatch(host) or not _INSTANCE_ID.fullmatch(node_id):
            raise DrainError("--instance-id %r: want HOST=i-<8 or 17 hex digits>" % pair)
        ids[host] = node_id
    return ids


def as_json(found: Dict[str, Any]) -> Dict[str, Any]:
    """The list any other scheduler's health hook can read."""
    return {
        "schema": PREFIX + "/drain/v1",
        "replay": found["replay"],
        "nodes": [
            {
                "host": n["host"],
                "action": "replace" if n["hardware"] else "reboot",
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
    """Before any scontrol runs: each host to drain is exactly one Slurm node (`not_one_node`), all of them
    checked first; else DrainError naming each host that is not, with its report and why: none drained."""
    checked = apply([sinfo_argv(node["host"]) for node in found["nodes"]], timeout)
    problems = []
    for node, (_, rc, output) in zip(found["nodes"], checked):
        why = not_one_node(node["host"], rc, output)
        if why:
            problems.append("%s: host %r: %s" % (node["reasons"][0]["source"], node["host"], why))
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
