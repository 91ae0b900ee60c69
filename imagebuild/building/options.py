"""What one build run is given (`BuildOptions`, the variant's lock) and what it gives back per variant
(`VariantResult`, the build summary's entries); the bad input it refuses before anything builds.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from imagebuild.building import buildkit
from imagebuild.building.artifacts import ArtifactCache
from imagebuild.building.baseid import BaseIdentity, base_ref, base_without_ref, resolve_base
from imagebuild.building.registryhit import RemoteHit
from imagebuild.errors import UserError


@dataclass
class BuildOptions:
    cache: ArtifactCache
    build_ca: Optional[Path] = None
    build_args: Dict[str, str] = field(default_factory=dict)
    out: Path = Path("build")
    cancel: threading.Event = field(default_factory=threading.Event)
    force: bool = False  # build even when the content tag exists
    nocache: bool = False  # and without docker's layer cache (a cold build, for benchmarks)
    builder: buildkit.BuilderChoice = buildkit.CLASSIC
    cache_from: List[str] = field(default_factory=list)
    cache_to: List[str] = field(default_factory=list)
    # content tag -> where a registry already holds it (None: not there); asked only when not in the engine
    remote_lookup: Optional[Callable[[str, str], Optional[RemoteHit]]] = None
    # docker CLI builds in flight: ended on Ctrl-C, so no BuildKit build runs on after the tool exits
    children: set = field(default_factory=set)
    # --trust-local-base: when the base's registry cannot be asked, hash the local copy's digest instead
    trust_local_base: bool = False
    # base ref -> what it resolved to, once per run: variants on one base share one look-up and one answer
    bases: Dict[str, BaseIdentity] = field(default_factory=dict)
    bases_lock: threading.Lock = field(default_factory=threading.Lock)

    def base_of(self, client, lock: dict) -> BaseIdentity:
        """The lock's base resolved (`resolve_base`), asked once per run and ref."""
        ref = base_ref(lock, self.build_args)
        if ref is None:
            return base_without_ref(lock)
        with self.bases_lock:
            if ref not in self.bases:
                found = resolve_base(client, ref, self.trust_local_base)
                base = lock.get("base") or {}
                local = base.get("kind") == "local" or bool(base.get("local"))
                self.bases[ref] = dataclasses.replace(found, local=local) if local else found
            return self.bases[ref]


@dataclass
class VariantResult:
    variant: str
    status: str  # built | skipped | failed
    image_id: Optional[str]
    tags: List[str]
    context_hash: Optional[str]
    duration_s: float
    log: str
    lock: str
    error: Optional[str] = None
    digest: Optional[str] = None
    pushed: List[str] = field(default_factory=list)
    builder: Optional[str] = None  # buildx | buildkit | classic (built only)
    found_in: Optional[str] = None  # engine | registry (skipped only)
    base_digest: Optional[str] = None  # the base's manifest digest (pinned, the registry's); in the labels
    base_image_id: Optional[str] = None  # and its image id in the engine (a local base has no digest)
    base_ref: Optional[str] = None  # the FROM the lock names (build args filled in)
    base_hashed: Optional[str] = None  # the identity that went into the content hash
    base_source: Optional[str] = None  # how it was learned: BASE_SOURCES
    channels: List[str] = field(
        default_factory=list
    )  # the lock's moving tags: release moves them, push never


class BuildFailed(Exception):
    """docker said the build failed; the message is its error, the log has the rest."""


def read_lock(variant_dir: Path) -> dict:
    path = variant_dir / "variant.lock.json"
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise UserError(
            f"no rendered lock: {err.strerror}", file=str(path), hint="run `efa-image-build render`"
        ) from None
    except ValueError as err:
        raise UserError(f"not JSON: {err}", file=str(path)) from None


def parse_build_args(values: Sequence[str]) -> Dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v or not v.split("=", 1)[0]:
            raise UserError(f"--build-arg wants KEY=VALUE, got {v!r}", key="--build-arg")
        k, val = v.split("=", 1)
        out[k] = val
    return out


def summary_counts(results: Sequence[VariantResult]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts
