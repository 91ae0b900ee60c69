"""Instance profiles and the arithmetic that turns them into expected nccl-tests bandwidth.

The data lives in efa_validators/judge/profile_data.py (every figure with its source); this module reads it
and holds the two relations the judgement needs:

* busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n; all_gather,
  reduce_scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1 -- for n ranks.
* For k nodes and n ranks, the least inter-node traffic an all_reduce / all_gather / reduce_scatter needs is
  busbw x (k-1)/(n-1) per rank (each node must ship (k-1)/k of its data). So the busbw that would fill
  every EFA device of every node (the "wire speed", in busbw units) is
  per-rank EFA share x (n-1)/(k-1), with per-rank share = node EFA GB/s / (n/k).
  A single node (k = 1) sends nothing over EFA, so it has no wire speed at all.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

from efa_validators.judge import profile_data

# Collectives whose busbw relates to the wire by (k-1)/(n-1): see the module docstring.
WIRE_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


# NamedTuples, not dataclasses: immutable all the same, and `dataclasses` (with `inspect`) costs ~10 ms to
# import in every `validators parse`
class Reference(NamedTuple):
    """One published bandwidth figure: all_reduce busbw at `size` bytes on `nodes` nodes."""

    nodes: int
    size: int
    busbw: float
    source: str
    measured_on: Optional[str] = None


class Profile(NamedTuple):
    """What one instance type has; see profile_data for the sources."""

    name: str
    gpus: int
    gpu: str
    efa_devices: Optional[int]  # None: no source we hold gives it (the nics check is then unknown)
    efa_gbps: int
    gdr_required: bool
    references: Tuple[Reference, ...] = ()
    notes: str = ""
    source: str = profile_data.HARDWARE_SOURCE
    gdr_source: str = profile_data.GDR_SOURCE
    arch: str = "x86_64"
    rdma_read: Optional[bool] = None
    cuda_arch: Optional[str] = None
    sources: Tuple[Tuple[str, Optional[str]], ...] = ()
    nvlink: Optional[bool] = None  # GPUs joined by NVLink; None: no source we hold says (gpu-nvlink unknown)

    @property
    def efa_gbytes(self) -> float:
        """Aggregate EFA rate of one node in GB/s (Gbps / 8), the unit nccl-tests prints."""
        return self.efa_gbps / 8.0

    def to_dict(self) -> Dict[str, object]:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "gpu": self.gpu,
            "efa_devices": self.efa_devices,
            "efa_gbps": self.efa_gbps,
            "gdr_required": self.gdr_required,
            "references": [r._asdict() for r in self.references],
            "notes": self.notes,
            "source": self.source,
            "arch": self.arch,
            "rdma_read": self.rdma_read,
            "cuda_arch": self.cuda_arch,
            "sources": dict(self.sources),
            "nvlink": self.nvlink,
        }


def _build(name: str, raw: Dict[str, object]) -> Profile:
    refs = tuple(Reference(**r) for r in raw["references"])  # type: ignore[arg-type]
    return Profile(
        name=name,
        gpus=int(raw["gpus"]),  # type: ignore[arg-type]
        gpu=str(raw["gpu"]),
        efa_devices=None if raw["efa_devices"] is None else int(raw["efa_devices"]),  # type: ignore[arg-type]
        efa_gbps=int(raw["efa_gbps"]),  # type: ignore[arg-type]
        gdr_required=bool(raw["gdr_required"]),
        references=refs,
        notes=str(raw.get("notes") or ""),
        arch=str(raw.get("arch") or "x86_64"),
        rdma_read=raw.get("rdma_read"),  # type: ignore[arg-type]
        cuda_arch=raw.get("cuda_arch"),  # type: ignore[arg-type]
        sources=tuple(sorted((raw.get("sources") or {}).items())),  # type: ignore[union-attr]
        nvlink=raw.get("nvlink"),  # type: ignore[arg-type]
    )


_PROFILES = {name: _build(name, raw) for name, raw in profile_data.PROFILES.items()}


def known_instance_types() -> List[str]:
    return sorted(_PROFILES)


def get_profile(instance_type: Optional[str]) -> Optional[Profile]:
    """The profile for `p5.48xlarge` (case and surrounding space ignored; `ml.` SageMaker prefix too)."""
    if not instance_type:
        return None
    name = instance_type.strip().lower()
    if name.startswith("ml."):
        name = name[3:]
    return _PROFILES.get(name)


def unknown_instance_type(instance_type: str) -> Optional[str]:
    """Why `instance_type` cannot be judged, with the close matches; None for a known one.

    Why bad input and not a verdict: a typo (`p5.48xl`) would otherwise judge nothing about NICs and
    bandwidth and come out as exit 3, a statement about the cluster."""
    if get_profile(instance_type) is not None:
        return None
    import difflib

    name = instance_type.strip().lower()
    close = difflib.get_close_matches(
        name[3:] if name.startswith("ml.") else name, known_instance_types(), 3, 0.5
    )
    hint = (
        "did you mean %s?" % " or ".join(close) if close else "known: %s" % ", ".join(known_instance_types())
    )
    return "--instance-type %r: no such instance profile; %s" % (instance_type, hint)


def busbw_factor(collective: Optional[str], n: int) -> Optional[float]:
    """algbw -> busbw factor for `n` ranks (nccl-tests doc/PERFORMANCE.md); None for an unknown collective."""
    if n < 1:
        raise ValueError("rank count must be >= 1")
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / float(n)
    if collective in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return None


def internode_rate_per_rank(busbw: float, nodes: int, ranks: int) -> Optional[float]:
    """GB/s each rank must move between nodes at this busbw: busbw x (k-1)/(n-1); None for one node."""
    if nodes < 2 or ranks < 2 or ranks < nodes:
        return None
    return busbw * (nodes - 1) / float(ranks - 1)


def wire_busbw(profile: Profile, collective: Optional[str], nodes: int, ranks: int) -> Optional[float]:
    """The busbw at which every EFA device of every node would be full; None where it does not apply."""
    if collective not in WIRE_COLLECTIVES or nodes < 2 or ranks < nodes:
        return None
    per_rank = profile.efa_gbytes * nodes / float(ranks)
    return per_rank * (ranks - 1) / float(nodes - 1)


class Expected(NamedTuple):
    """The expected plateau for one run, and how it was obtained (a sentence people can check)."""

    busbw: float
    floor: float
    reference: Reference
    derived: bool
    how: str


def expected_busbw(
    profile: Profile, collective: Optional[str], nodes: int, ranks: int, size: Optional[int]
) -> Optional[Expected]:
    """Expected all_reduce plateau busbw at `size` bytes on `nodes` x `ranks`, with its floor.

    A reference at the same node count is used as published (the one at the largest size not above
    `size`, else the smallest); another node count is scaled by the ratio of the wire speeds
    (`wire_busbw`), which holds the per-node EFA utilisation the reference reached. None when the
    collective is not all_reduce, the run is on one node, or the profile publishes nothing.
    """
    if collective != "all_reduce" or nodes < 2 or ranks < nodes or not profile.references:
        return None
    same = [r for r in profile.references if r.nodes == nodes]
    pool = same or _nearest_nodes(profile.references, nodes)
    fitting = [r for r in pool if size is not None and r.size <= size]
    ref = max(fitting, key=lambda r: r.size) if fitting else min(pool, key=lambda r: r.size)
    on = f" (measured on {ref.measured_on})" if ref.measured_on else ""
    where = f"{ref.busbw:g} GB/s at {_human(ref.size)} on {ref.nodes} nodes{on}, {ref.source}"
    if same:
        value, derived = ref.busbw, False
        how = f"published: {where}"
    else:
        ref_ranks = ref.nodes * ranks // nodes
        here = wire_busbw(profile, collective, nodes, ranks)
        there = wire_busbw(profile, collective, ref.nodes, ref_ranks)
        if here is None or not there:
            return None
        # Never expect more than was measured: with fewer nodes than the reference the ratio exceeds 1,
        # but real runs sit further below the wire on fewer nodes (2 x p5: 65% of it), so scaling up would
        # fail healthy clusters. Scaling down (more nodes) keeps the reference's share of the wire.
        value, derived = min(ref.busbw, ref.busbw * here / there), True
        how = (
            f"derived: {where}, scaled to {nodes} nodes by the wire speed ratio "
            f"({here:.0f}/{there:.0f} GB/s busbw, capped at 1)"
        )
    floor = value * profile_data.FLOOR_FRACTION
    how += f"; floor {profile_data.FLOOR_FRACTION:g} x ({profile_data.FLOOR_SOURCE})"
    return Expected(busbw=value, floor=floor, reference=ref, derived=derived, how=how)


def _nearest_nodes(refs: Tuple[Reference, ...], nodes: int) -> List[Reference]:
    best = min(abs(r.nodes - nodes) for r in refs)
    near = [r for r in refs if abs(r.nodes - nodes) == best]
    pick = min(r.nodes for r in near)  # two at the same distance: the smaller, so the choice is deterministic
    return [r for r in near if r.nodes == pick]


def _human(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"
