"""The Slurm `sbatch` recipe: every step in the image through pyxis, one validator per rank, then one
verdict over every rank's log."""

from __future__ import annotations

from typing import Any, Dict, Optional

from imagebuild.errors import UserError
from imagebuild.preflight import quoting
from imagebuild.preflight.cluster import enroot_image
from imagebuild.preflight.launch import (
    MNNVL_TYPES,
    PMIX_ENV,
    TORCH_PORT,
    TORCH_PROBE,
    image_args,
    nccl_env,
    need,
    probe,
    probe_argv,
    validator_argv,
)

JSON_MARK = "@PREFLIGHT_OUT@"  # where -J's folder goes: "$PREFLIGHT_OUT", expanded by the batch shell


def sbatch_script(lock: Dict[str, Any], cluster: Dict[str, Any]) -> str:
    """An sbatch script whose every step runs in the image (pyxis), never the image's Python on the host.

    Step 1, one task per GPU: each task's validator runs its nccl-tests rank under the watchdog and keeps
    the rank's log (`--exit-by command`: one rank sees only itself). Step 2, one task: `validators parse`
    over every rank's log gives the verdict, the script's exit code (a failed step 1 cannot pass).
    Flags as awsome-distributed-training micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch.
    """
    image = enroot_image(need(cluster, "container_image", "sbatch"))
    q = quoting.word
    gpus = cluster["gpus_per_node"]
    imex = _slurm_imex(cluster)
    segment = _slurm_segment(cluster)
    python = lock.get("python") or "python3"
    head = [
        "#!/bin/bash",
        "#SBATCH --job-name=%s" % q(cluster["name"]),
        "#SBATCH --nodes=%d" % cluster["nodes"],
        "#SBATCH --ntasks-per-node=%d" % gpus,
        "#SBATCH --exclusive",
        "#SBATCH --wait-all-nodes=1",
        "#SBATCH --output=%x-%j.out",
    ]
    if segment:
        head.append("#SBATCH --segment=%d" % segment)
    if cluster.get("request_gpus"):
        head.append("#SBATCH --gpus-per-node=%d" % gpus)
    if cluster.get("partition"):
        head.append("#SBATCH --partition=%s" % q(cluster["partition"]))
    if cluster.get("account"):
        head.append("#SBATCH --account=%s" % q(cluster["account"]))
    out_dir = q(cluster["output_dir"]) if cluster.get("output_dir") else '"$PWD"'
    body = [
        "set -uo pipefail",
        "# a directory every node sees: each rank's log, then the report",
        'export PREFLIGHT_OUT=%s/"preflight-${SLURM_JOB_ID}"' % out_dir,
        'mkdir -p "$PREFLIGHT_OUT"',
        "export NCCL_DEBUG=INFO",
        "export %s=%s" % PMIX_ENV,
    ]
    for name, value in nccl_env(lock):
        if value is not None:
            body.append("export %s=%s" % (name, q(value)))
    mounts = '/dev/infiniband:/dev/infiniband,"$PREFLIGHT_OUT":"$PREFLIGHT_OUT"'
    if imex:
        body += [
            "# multi-node NVLink: the job's IMEX channel, from Slurm's switch/nvidia_imex",
            "if ! ls %s/channel* >/dev/null 2>&1; then" % IMEX_CHANNELS,
            "  echo 'no IMEX channel in %s: the cluster needs SwitchType=switch/nvidia_imex' >&2"
            % IMEX_CHANNELS,
            "  exit 2",
            "fi",
            "export NCCL_MNNVL_ENABLE=1",
        ]
        mounts += ",%s:%s" % (IMEX_CHANNELS, IMEX_CHANNELS)
    if probe(lock) == TORCH_PROBE:  # rank 0 is the first node's first task (srun's block distribution)
        body.append('export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"')
        body.append("export MASTER_PORT=%s" % TORCH_PORT)
    body += [
        "# pyxis: every step runs in the image (enroot < 4.0 wants registry#repo:tag). Nodes that already",
        "# run inside the image, without pyxis: CONTAINER=()",
        "CONTAINER=(%s)"
        % " ".join(
            [
                q("--container-image=%s" % image),
                "--container-mounts=" + mounts,
                "--no-container-remap-root",
            ]
        ),
    ]
    rank_cmd = validator_argv(lock, cluster, ["--exit-by", "command", "--log", "@LOG@", "--"])
    for flag in ("--instance-type", "--nodes"):  # one rank cannot judge the job: step 2 does
        i = rank_cmd.index(flag)
        del rank_cmd[i : i + 2]
    inner = " ".join(q(w) for w in rank_cmd).replace("@LOG@", '"$PREFLIGHT_OUT/rank-$SLURM_PROCID.log"')
    step1 = ["srun", '"${CONTAINER[@]}"', "--mpi=pmix", "--cpu-bind=none", "-l", "sh", "-c"]
    # nccl-tests' -J (a relative name) in the job's shared folder, not rank 0's container working folder
    probe_words = probe_argv(lock, dict(cluster, _json_dir=JSON_MARK))
    step1 += [q('exec %s "$@"' % inner), "rank"] + [
        '"$PREFLIGHT_OUT"/' + q(a[len(JSON_MARK) + 1 :]) if a.startswith(JSON_MARK + "/") else q(a)
        for a in probe_words
    ]
    parse = [q(python), "-m", "efa_validators", "parse", '"$PREFLIGHT_OUT"/rank-*.log']
    parse += [q(w) for w in image_args(cluster)]
    parse += ["--instance-type", q(cluster["instance_type"]), "--nodes", str(cluster["nodes"])]
    parse += ["--json", '"$PREFLIGHT_OUT/report.json"', "--markdown", '"$PREFLIGHT_OUT/report.md"']
    step2 = ["srun", '"${CONTAINER[@]}"', "--nodes=1", "--ntasks=1"] + parse
    tail = [
        "run_rc=0",
        " ".join(step1) + " || run_rc=$?",
        "verdict_rc=0",
        " ".join(step2) + " || verdict_rc=$?",
        'echo "report: $PREFLIGHT_OUT/report.json (ranks exit $run_rc, verdict exit $verdict_rc)"',
        'if [ "$verdict_rc" -eq 0 ] && [ "$run_rc" -ne 0 ]; then exit 1; fi',
        'exit "$verdict_rc"',
    ]
    return "\n".join(head + [""] + body + [""] + tail + [""])


# Slurm's own IMEX support: with SwitchType=switch/nvidia_imex (Slurm 24.11+) slurmctld gives each job a
# channel and every step of the job (batch step included) gets /dev/nvidia-caps-imex-channels/channelN.
# [SchedMD/slurm src/plugins/switch/nvidia_imex/switch_nvidia_imex.c switch_p_setup_special_steps and
# _stepd_setup_imex_channel, commit 19f81310; testsuite IMEX_CHANNEL_PATH = /dev/nvidia-caps-imex-channels]
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"


def _slurm_imex(cluster: Dict[str, Any]) -> bool:
    """Whether the sbatch script uses the job's IMEX channel; a GB200 cluster that lacks one is refused:
    NCCL over multi-node NVLink cannot start without it, and the pre-flight would fail for a reason no
    image fix can change."""
    if cluster["instance_type"] not in MNNVL_TYPES:
        return False
    if cluster.get("imex") is True:
        return True
    lines = cluster.get("_lines") or {}
    raise UserError(
        "%s GPUs share one NVLink domain across nodes: NCCL needs the job's IMEX channel, and the cluster "
        "file does not say Slurm gives one" % cluster["instance_type"],
        file=cluster.get("_file"),
        line=lines.get("imex", lines.get("instance_type")),
        key="imex",
        hint="with SwitchType=switch/nvidia_imex in slurm.conf (Slurm 24.11+) each job gets a channel: "
        "say imex: true; without it run the pre-flight on EKS (--print mpijob, a ComputeDomain)",
    )


# One NVLink domain per job on Slurm: with TopologyPlugin=topology/block the allocator picks the smallest
# block level (BlockSizes) that can satisfy the job, and `--segment=<n>` sets the size of the segments an
# allocation is made of: nodes must be divisible by it when larger, and it has no effect when all nodes fit
# in one segment
# [SchedMD/slurm doc/html/topology.shtml "Block Topology" and "User Options", doc/man/man1/sbatch.1 --segment,
# commit 284c3b95f08a2dc2478499837b03355e1b9c5c75]. Each segment is placed as a job of its own size
# (src/plugins/topology/block/eval_nodes_block.c, same commit: rem_nodes = segment_size before the block level
# is chosen), so with one NVLink domain per base block a segment no larger than a domain stays in one.
# sbatch has --segment from Slurm 24.05 (doc/man/man1/sbatch.1 commit 6b48b165, first in slurm-24-05-0-1);
# a GB200 cluster with imex: true runs 24.11+ (switch/nvidia_imex) and has it.


def _slurm_segment(cluster: Dict[str, Any]) -> Optional[int]:
    """`--segment` for a multi-node NVLink job: the whole job when it fits one NVLink domain (one base block,
    the smallest level that satisfies it), else one domain per segment. A GB200 cluster file that does not
    say how many nodes a domain holds is refused, as is a node count a domain size does not divide: either
    job could straddle NVLink domains, where NCCL's multi-node NVLink cannot reach, and fail or pass for a
    reason that is not the image's."""
    lines = cluster.get("_lines") or {}
    domain = cluster.get("nvlink_domain_nodes")
    if cluster["instance_type"] not in MNNVL_TYPES:
        if domain is not None:
            raise UserError(
                "%s has no NVLink domain across nodes" % cluster["instance_type"],
                file=cluster.get("_file"),
                line=lines.get("nvlink_domain_nodes"),
                key="nvlink_domain_nodes",
                hint="drop it (only for %s)" % ", ".join(sorted(MNNVL_TYPES)),
            )
        return None
    if not domain:
        raise UserError(
            "%s GPUs share an NVLink domain across nodes, and the cluster file does not say how many nodes "
            "one holds: without it the job could straddle two domains" % cluster["instance_type"],
            file=cluster.get("_file"),
            line=lines.get("instance_type"),
            key="nvlink_domain_nodes",
            hint="with TopologyPlugin=topology/block and one base block per NVLink domain (topology.conf "
            "BlockName=... Nodes=..., BlockSizes), say nvlink_domain_nodes: <nodes in a base block>; "
            "the script then asks --segment",
        )
    nodes = cluster["nodes"]
    if nodes <= domain:
        return nodes
    if nodes % domain:
        raise UserError(
            "nodes: %d is more than one NVLink domain (%d nodes) and not a whole number of domains: Slurm's "
            "--segment needs the node count divisible by the segment size" % (nodes, domain),
            file=cluster.get("_file"),
            line=lines.get("nodes"),
            key="nodes",
            hint="ask for at most %d nodes, or a multiple of %d" % (domain, domain),
        )
    return domain
