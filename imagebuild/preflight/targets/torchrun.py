"""The `torchrun` recipe: a script run on every node (one torchrun per node) and a verdict over every
node's log, for fleets that start one process per node."""

from __future__ import annotations

from typing import Any, Dict

from imagebuild.components import torch
from imagebuild.errors import UserError
from imagebuild.preflight import quoting
from imagebuild.preflight.launch import (
    TORCH_PORT,
    image_args,
    master_host,
    nccl_env,
    probe_argv,
    validator_argv,
)

# The torchrun script's proof that its output folder is shared: node 0 writes it, the others wait for it
SHARED_MARKER = ".written-by-node-0"
SHARED_WAIT = 300  # seconds a node waits for node 0's marker (nodes are started by hand or a scheduler)


def torchrun_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """A script for clusters that start one process per node (a plain fleet, a custom scheduler): `run`
    on every node with NODE_RANK=0..nodes-1 starts torchrun's ranks of the torch probe under the validator,
    each node keeping its log in a directory every node sees; `verdict` on one node, once all have run,
    judges every node's log together (one node sees only its own ranks).

    The output folder must be one folder every node sees (`verdict` reads all nodes' logs from it): node 0
    leaves a marker there and every other node waits, bounded, for it, refusing to start (exit 2) on a
    folder that is not shared, before any rank runs."""
    q = quoting.word
    gpus, nodes = cluster["gpus_per_node"], cluster["nodes"]
    python = lock.get("python") or "python3"
    master = master_host(cluster, "torchrun")
    out_dir = q(cluster["output_dir"]) if cluster.get("output_dir") else '"$PWD"'
    node = validator_argv(lock, cluster, ["--exit-by", "command", "--log", "@LOG@", "--"])
    for flag in ("--instance-type", "--nodes"):  # one node cannot judge the job: `verdict` does
        i = node.index(flag)
        del node[i : i + 2]
    torchrun = ["torchrun", "--nnodes", str(nodes), "--node_rank", "@RANK@", "--nproc_per_node", str(gpus)]
    torchrun += ["--master_addr", master, "--master_port", TORCH_PORT]
    words = probe_argv(lock, cluster)
    torchrun += ["-m"] + words[words.index("-m") + 1 :]
    run = " ".join(q(w) for w in node + torchrun)
    run = run.replace("@LOG@", '"$PREFLIGHT_OUT/node-$NODE_RANK.log"').replace("@RANK@", '"$NODE_RANK"')
    parse = [q(python), "-m", "efa_validators", "parse", '"$PREFLIGHT_OUT"/node-*.log']
    parse += [q(w) for w in image_args(cluster)]
    parse += ["--instance-type", q(cluster["instance_type"]), "--nodes", str(nodes)]
    parse += ["--json", '"$PREFLIGHT_OUT/report.json"', "--markdown", '"$PREFLIGHT_OUT/report.md"']
    lines = [
        "#!/bin/bash",
        "# torch all-reduce pre-flight over %d node(s) x %d GPU(s), inside the image." % (nodes, gpus),
        quoting.comment(
            "  on every node:   NODE_RANK=<0..%d> $0 run     (node 0 is %s)" % (nodes - 1, master)
        ),
        "#   then on one:     $0 verdict",
        "# PREFLIGHT_OUT must be one folder every node sees (a shared file system): node 0 marks it, and",
        "# every other node refuses to start unless it sees that mark within PREFLIGHT_SHARED_WAIT seconds.",
        "set -uo pipefail",
        "export PREFLIGHT_OUT=%s/%s" % (out_dir, q(cluster["name"])),
        "export NCCL_DEBUG=INFO",
    ]
    for name, value in nccl_env(lock):
        if value is not None:
            lines.append("export %s=%s" % (name, q(value)))
    lines += [
        'case "${1:-}" in',
        "  run)",
        '    : "${NODE_RANK:?set NODE_RANK (0 to %d)}"' % (nodes - 1),
        '    mkdir -p "$PREFLIGHT_OUT" || exit 2',
        '    marker="$PREFLIGHT_OUT/%s"' % SHARED_MARKER,
        '    if [ "$NODE_RANK" = 0 ]; then',
        '      printf \'%s\\n\' "${HOSTNAME:-node-0}" > "$marker" || exit 2',
        "    else",
        "      waited=0",
        '      until [ -s "$marker" ]; do',
        '        if [ "$waited" -ge "${PREFLIGHT_SHARED_WAIT:-%d}" ]; then' % SHARED_WAIT,
        '          echo "$PREFLIGHT_OUT is not shared with node 0 (no $marker after ${waited}s):'
        ' give output_dir a folder every node sees" >&2',
        "          exit 2",
        "        fi",
        "        sleep 1; waited=$((waited + 1))",
        "      done",
        "    fi",
        "    exec %s ;;" % run,
        "  verdict)",
        "    exec %s ;;" % " ".join(parse),
        '  *) echo "usage: NODE_RANK=N $0 run | $0 verdict" >&2; exit 2 ;;',
        "esac",
        "",
    ]
    return "\n".join(lines)


def torch_only(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    if not (lock.get("components") or {}).get(torch.NAME):
        raise UserError(
            f"the torchrun recipe runs the torch probe; variant {lock.get('name')!r} has no torch",
            key="components.torch",
            hint="use --print mpirun, sbatch or mpijob (nccl-tests, or the torch probe under that launcher)",
        )
    return torchrun_script(dict(lock, components={torch.NAME: lock["components"][torch.NAME]}), cluster)
