"""pre-flight launch recipes: a recipe rendered for a variant's lock."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from imagebuild.errors import UserError


@dataclass(frozen=True)
class RecipeRequest:
    recipe: str  # mpirun | sbatch | mpijob
    cluster: str  # cluster description YAML
    lock: Optional[str] = None  # a variant.lock.json instead of the matrix's one variant
    matrix: str = "matrix.yaml"
    variants: Sequence[str] = ()
    image: Optional[str] = None  # REPO@sha256:D the report will name (else the cluster's pinned image)


def recipe(req: RecipeRequest) -> str:
    """The launch recipe that runs the image's validator around nccl-tests on the described cluster."""
    from imagebuild.preflight import recipes

    lock = _recipe_lock(req)
    try:
        recipes.probe(lock)  # nccl-tests, else the torch probe; neither is bad input
    except UserError as err:
        raise UserError(err.message, file=req.lock or req.matrix, key=err.key, hint=err.hint) from None
    cluster = recipes.load_cluster(req.cluster)
    recipes.check_target(lock, cluster)  # the cluster's own mismatch first: no digest would fix it
    return recipes.render(req.recipe, lock, recipes.bind_image(cluster, req.image))


def _recipe_lock(req: RecipeRequest) -> Dict[str, Any]:
    """The lock a recipe is for: the --lock file, or the one variant of the matrix."""
    if req.lock:
        from imagebuild.building.documents import VariantLock
        from imagebuild.jsonfile import read_json

        # bounded (a FIFO, a device: exit 2) and typed: `env` a list of {name, value}, the components mappings
        return read_json(Path(req.lock), "variant lock", model=VariantLock, flag="--lock")
    from imagebuild.matrix.load import load

    variants = load(req.matrix, list(req.variants))
    if len(variants) != 1:
        raise UserError(
            f"{len(variants)} variants in {req.matrix}: choose one with --variant",
            key="--variant",
            hint=", ".join(v.name for v in variants[:10]),
        )
    return variants[0].to_lock()
