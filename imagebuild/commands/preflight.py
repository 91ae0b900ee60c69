"""`build.py preflight`: print the launch recipe that runs the image's validator on a cluster
(`--print mpirun|sbatch|mpijob --cluster FILE`), or run the pre-flight as a SageMaker job (`--sagemaker`,
delegated to imagebuild.sagemaker)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict

from imagebuild.cli import add_matrix_args
from imagebuild.components import nccl_tests
from imagebuild.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "preflight",
        help="print launch recipes for the pre-flight, or run it on SageMaker",
        description="Print the command that runs the image's validator around nccl-tests on a cluster "
        "(--print mpirun|sbatch|mpijob --cluster FILE; examples in examples/cluster/), or run the "
        "pre-flight as a SageMaker training job (--sagemaker). A recipe is refused for a variant without "
        "the nccl-tests binary it calls.",
    )
    add_matrix_args(p)
    p.add_argument("--print", dest="recipe", choices=("mpirun", "sbatch", "mpijob"), help="recipe to print")
    p.add_argument("--cluster", metavar="FILE", help="cluster description YAML (nodes, instance_type, ...)")
    p.add_argument("--lock", metavar="FILE", help="a variant.lock.json instead of --matrix/--variant")
    p.add_argument("--sagemaker", action="store_true", help="run the pre-flight as a SageMaker training job")
    sm = _sagemaker()
    if sm is not None:
        sm.add_sagemaker_args(p)
    p.set_defaults(func=run)


def _sagemaker() -> Any:
    try:
        from imagebuild import sagemaker
    except ImportError:
        return None
    return sagemaker if hasattr(sagemaker, "run_sagemaker_preflight") else None


def _lock(args: argparse.Namespace) -> Dict[str, Any]:
    if args.lock:
        try:
            with open(args.lock, encoding="utf-8") as fh:
                lock = json.load(fh)
        except OSError as err:
            raise UserError(f"cannot read lock: {err.strerror}", file=args.lock) from None
        except ValueError as err:
            raise UserError(f"not JSON: {err}", file=args.lock, key="--lock") from None
        if not isinstance(lock, dict) or "env" not in lock:
            raise UserError("not a variant lock (no 'env')", file=args.lock, key="--lock")
        return lock
    from imagebuild.matrix import load

    variants = load(args.matrix, args.variant)
    if len(variants) != 1:
        raise UserError(
            f"{len(variants)} variants in {args.matrix}: choose one with --variant",
            key="--variant",
            hint=", ".join(v.name for v in variants[:10]),
        )
    return variants[0].to_lock()


def require_nccl_tests(lock: Dict[str, Any], source: str) -> None:
    """Every recipe runs `<nccl_tests prefix>/bin/all_reduce_perf`: refuse a variant that lacks it."""
    if not (lock.get("components") or {}).get(nccl_tests.NAME):
        from imagebuild import recipes

        raise UserError(
            f"variant {lock.get('name')!r} has no nccl_tests component: the recipe would call "
            f"{recipes.nccl_tests_binary(lock)}, which is not in its image",
            file=source,
            key="components.nccl_tests",
            hint="choose a variant with nccl_tests (`build.py list` shows the components), "
            "or add nccl_tests to this variant in the matrix",
        )


def run(args: argparse.Namespace) -> int:
    if args.sagemaker:
        sm = _sagemaker()
        if sm is None:
            raise UserError("SageMaker pre-flight is not available in this build", key="--sagemaker")
        return int(sm.run_sagemaker_preflight(args) or 0)
    if not args.recipe:
        raise UserError(
            "say what to print", key="--print", hint="--print mpirun|sbatch|mpijob --cluster FILE"
        )
    if not args.cluster:
        raise UserError("a cluster description is needed", key="--cluster")
    from imagebuild import recipes

    lock = _lock(args)
    require_nccl_tests(lock, args.lock or args.matrix)
    cluster = recipes.load_cluster(args.cluster)
    text = recipes.render(args.recipe, lock, cluster)
    sys.stdout.write(text)
    return 0
