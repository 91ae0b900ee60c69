"""`build.py preflight`: print the launch recipe that runs the image's validator on a cluster
(`--print mpirun|sbatch|mpijob --cluster FILE`), or run the pre-flight as a SageMaker job (`--sagemaker`,
delegated to imagebuild.preflight.sagemaker)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from imagebuild.commands import add_aws_args, add_matrix_args, add_verb
from imagebuild.errors import UserError

if TYPE_CHECKING:
    from imagebuild.preflight.sagemaker import SageMakerOptions


def register(sub) -> None:
    p = add_verb(
        sub,
        "preflight",
        "Print the command that runs the image's validator around nccl-tests (or, in an image "
        "without them, the torch all-reduce probe) on a cluster (--print mpirun|sbatch|mpijob|torchrun "
        "--cluster FILE --image REPO@sha256:D; examples in examples/cluster/), or run the pre-flight as a "
        "SageMaker training job (--sagemaker). A variant with neither, or a cluster it was not built for, "
        "is refused.",
    )
    add_matrix_args(p)
    p.add_argument(
        "--print", dest="recipe", choices=("mpirun", "sbatch", "mpijob", "torchrun"), help="recipe to print"
    )
    p.add_argument("--cluster", metavar="FILE", help="cluster description YAML (nodes, instance_type, ...)")
    p.add_argument("--lock", metavar="FILE", help="a variant.lock.json instead of --matrix/--variant")
    p.add_argument("--sagemaker", action="store_true", help="run the pre-flight as a SageMaker training job")
    add_sagemaker_args(p)
    p.set_defaults(func=run)


def add_sagemaker_args(parser: argparse.ArgumentParser) -> None:
    """The options `build.py preflight --sagemaker` needs."""
    from imagebuild.preflight import sagemaker

    g = parser.add_argument_group("SageMaker (with --sagemaker)")
    g.add_argument(
        "--image",
        help="the image by digest (repo@sha256:...): SageMaker runs it; a printed recipe passes it to the "
        "validator, so the report names it and a release can match it",
    )
    g.add_argument("--instance-type", help="e.g. p5.48xlarge (the ml. prefix is added)")
    g.add_argument("--nodes", type=int, default=None, help="instance count (default 2: EFA needs two nodes)")
    g.add_argument("--role-arn", help="IAM role SageMaker assumes for the job")
    g.add_argument("--max-run", type=int, default=3600, help="MaxRuntimeInSeconds (default 3600)")
    g.add_argument("--output-s3", help="s3:// URI for the job output (required by CreateTrainingJob)")
    g.add_argument("--checkpoint-s3", help="s3:// URI for checkpoints (optional)")
    g.add_argument("--job-name", help="training job name (default efa-preflight-<time>)")
    g.add_argument(
        "--probe",
        choices=sorted(sagemaker.PROBES),
        default=sagemaker.SageMakerOptions.probe,
        help="torch (default): one torchrun over all instances (the training job's own NCCL, over EFA); "
        "nccl-tests-mpi: nccl-tests over EFA across the instances under mpirun (images without torch; "
        "a key pair made for the job travels as an input channel and is deleted after); "
        "nccl-tests: all_reduce_perf on each instance alone",
    )
    g.add_argument(
        "--probe-command",
        default=None,
        help="command the validator runs instead of --probe's ({gpus}, {nodes}, {sm_...} placeholders)",
    )
    g.add_argument("--volume-size", type=int, default=100, help="GB of EBS per instance (default 100)")
    add_aws_args(g, "AWS region", attempts_help=None)
    g.add_argument(
        "--out", default="build/preflight", help="folder for the reports (default build/preflight)"
    )
    g.add_argument("--poll", type=float, default=30.0, help="seconds between status polls (default 30)")
    g.add_argument(
        "--wait-slack", type=float, default=3600.0, help="extra wait beyond --max-run (default 3600)"
    )
    g.add_argument("--skip-quota-check", action="store_true", help="do not ask Service Quotas first")
    g.add_argument(
        "--dry-run", action="store_true", help="print the CreateTrainingJob request and touch nothing"
    )


def sagemaker_options(args: argparse.Namespace) -> SageMakerOptions:
    """The SageMaker flags as data."""
    from imagebuild.preflight.sagemaker import SageMakerOptions

    return SageMakerOptions(
        image=args.image,
        instance_type=args.instance_type,
        nodes=args.nodes,
        role_arn=args.role_arn,
        max_run=args.max_run,
        output_s3=args.output_s3,
        checkpoint_s3=args.checkpoint_s3,
        job_name=args.job_name,
        probe=args.probe,
        probe_command=args.probe_command,
        volume_size=args.volume_size,
        region=args.region,
        endpoint_url=args.endpoint_url,
        out=args.out,
        poll=args.poll,
        wait_slack=args.wait_slack,
        skip_quota_check=args.skip_quota_check,
        dry_run=args.dry_run,
    )


def run(args: argparse.Namespace) -> int:
    if args.sagemaker:
        from imagebuild.preflight.sagemaker import run_sagemaker_preflight

        return run_sagemaker_preflight(sagemaker_options(args))
    if not args.recipe:
        raise UserError(
            "say what to print", key="--print", hint="--print mpirun|sbatch|mpijob --cluster FILE"
        )
    if not args.cluster:
        raise UserError("a cluster description is needed", key="--cluster")
    from imagebuild import pipeline

    request = pipeline.RecipeRequest(
        recipe=args.recipe,
        cluster=args.cluster,
        lock=args.lock,
        matrix=args.matrix,
        variants=tuple(args.variant),
        image=args.image,
    )
    sys.stdout.write(pipeline.recipe(request))
    return 0
