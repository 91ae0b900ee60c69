"""PNG of nccl-tests busbw against message size, from a validator report (host side: needs matplotlib).

Why a picture: a busbw curve shows at a glance what the table hides -- where the plateau starts, how far
it sits below the wire, whether in-place and out-of-place agree, and a dip at one size. The expected
floor and the wire speed come from the same efa_validators.judge.profiles arithmetic the verdict used, so the
picture and the verdict cannot disagree.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

from efa_validators.judge import profiles
from efa_validators.parse.nccltests_result import PLATEAU_MIN_BYTES
from imagebuild.errors import UserError


def human_size(size: float) -> str:
    """8 -> "8 B", 1048576 -> "1 MiB", 17179869184 -> "16 GiB" (binary units, as nccl-tests sizes are)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            value = size / float(1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size:.0f} B"


def _series(rows: List[Dict[str, Any]], placement: str) -> Tuple[List[int], List[float]]:
    xs, ys = [], []
    for row in rows:
        cell = row.get(placement)
        if not isinstance(cell, dict):
            continue
        bw, size = cell.get("busbw"), row.get("size")
        if _is_num(bw) and _is_int(size) and size > 0 and math.isfinite(bw):
            xs.append(size)
            ys.append(float(bw))
    return xs, ys


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _shape(report: Dict[str, Any], nt: Dict[str, Any], profile) -> Tuple[Optional[int], Optional[int]]:
    """Nodes and ranks as the verdict read them: the report's, else the `# Rank` lines', else nodes x GPUs."""
    nodes = report.get("nodes") if _is_int(report.get("nodes")) and report["nodes"] > 0 else None
    hosts, rank_list = nt.get("hosts"), nt.get("ranks")
    if nodes is None and isinstance(hosts, list) and hosts:
        nodes = len(hosts)
    ranks = len(rank_list) if isinstance(rank_list, list) and rank_list else None
    if ranks is None and nodes and profile is not None:
        ranks = nodes * profile.gpus
    return nodes, ranks


def plot_busbw(report: Dict[str, Any], out_path: str, source: str = "<report>") -> str:
    """Write the PNG to `out_path` (atomically) and return it; UserError when there is nothing to plot."""
    nt = report.get("nccl_tests") if "nccl_tests" in report else None
    if not isinstance(nt, dict):
        raise UserError("the report has no nccl-tests table to plot", file=source, key="nccl_tests")
    rows = nt.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError("expected a list of row objects", file=source, key="nccl_tests.rows")
    oop = _series(rows, "out_of_place")
    inp = _series(rows, "in_place")
    if not oop[0] and not inp[0]:
        raise UserError("no row with a busbw value to plot", file=source, key="nccl_tests.rows")

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    instance = report.get("instance_type")
    profile = profiles.get_profile(instance) if isinstance(instance, str) else None
    nodes, ranks = _shape(report, nt, profile)
    collective = nt.get("collective") if isinstance(nt.get("collective"), str) else None

    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=110)
    if oop[0]:
        ax.plot(oop[0], oop[1], marker="o", ms=4, lw=1.8, color="#1f77b4", label="out-of-place busbw")
    if inp[0]:
        ax.plot(inp[0], inp[1], marker="s", ms=3.5, lw=1.2, ls="--", color="#ff7f0e", label="in-place busbw")
    ax.set_xscale("log", base=2)

    all_x = sorted(set(oop[0] + inp[0]))
    lo, hi = all_x[0], all_x[-1]
    if hi >= PLATEAU_MIN_BYTES:
        ax.axvspan(
            max(PLATEAU_MIN_BYTES, lo),
            hi * 1.3,
            color="#2ca02c",
            alpha=0.07,
            lw=0,
            label="plateau judged (>= 1 GiB)",
        )

    top = max(oop[1] + inp[1])
    if profile is not None and nodes and ranks:
        wire = profiles.wire_busbw(profile, collective, nodes, ranks)
        if wire:
            ax.axhline(wire, color="#d62728", lw=1.2, ls="-.")
            ax.annotate(
                f"wire speed {wire:.0f} GB/s busbw ({profile.efa_gbps} Gbps EFA per node, {nodes} nodes)",
                (hi * 1.25, wire),
                xytext=(0, 4),
                textcoords="offset points",
                ha="right",
                color="#d62728",
                fontsize=8.5,
            )
            top = max(top, wire)
        size = nt.get("plateau_size") if _is_int(nt.get("plateau_size")) else None
        exp = profiles.expected_busbw(profile, collective, nodes, ranks, size)
        if exp is not None:
            ax.axhline(exp.floor, color="#2ca02c", lw=1.4, ls="--")
            kind = "derived" if exp.derived else "published"
            ax.annotate(
                f"expected plateau >= {exp.floor:.0f} GB/s (0.9 x {exp.busbw:.0f}, {kind} for "
                f"{exp.reference.nodes} nodes at {human_size(exp.reference.size)})",
                (lo, exp.floor),
                xytext=(4, -12),
                textcoords="offset points",
                color="#2ca02c",
                fontsize=8.5,
            )

    plateau, psize = nt.get("plateau_busbw"), nt.get("plateau_size")
    if _is_num(plateau) and math.isfinite(plateau) and _is_int(psize) and psize > 0:
        ax.plot([psize], [plateau], marker="*", ms=14, color="#9467bd", zorder=5, ls="none")
        ax.annotate(
            f"plateau {plateau:g} GB/s @ {human_size(psize)}",
            (psize, plateau),
            xytext=(-10, 10),
            textcoords="offset points",
            ha="right",
            fontsize=9,
            color="#9467bd",
            fontweight="bold",
        )
    avg = nt.get("avg_busbw")
    if _is_num(avg) and math.isfinite(avg):
        ax.axhline(avg, color="#7f7f7f", lw=0.8, ls=":")
        ax.annotate(
            f"'Avg bus bandwidth' {avg:g} GB/s (mean over all sizes, not judged)",
            (lo, avg),
            xytext=(4, 4),
            textcoords="offset points",
            ha="left",
            color="#7f7f7f",
            fontsize=8,
        )

    ticks = [2**e for e in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]
    every = 1 if len(ticks) <= 16 else 2 if len(ticks) <= 34 else 4  # at most ~17 labels
    major = [t for t in ticks if int(math.log2(t)) % every == 0] or ticks
    ax.xaxis.set_major_locator(FixedLocator(major))
    ax.xaxis.set_minor_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([human_size(t) for t in major], rotation=0)
    ax.set_xlim(lo / 1.3, hi * 1.3)
    ax.set_ylim(0, top * 1.12)
    ax.set_xlabel("message size (log2)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", axis="x", alpha=0.08)

    where = []
    if nodes:
        where.append(f"{nodes} x {instance}" if instance else f"{nodes} nodes")
    elif instance:
        where.append(str(instance))
    if ranks:
        where.append(f"{ranks} ranks")
    title = f"nccl-tests {collective or 'collective unknown'} busbw"
    from imagebuild.reports.markdown import replayed

    if replayed(report):
        title = "REPLAY (recorded log, no GPU ran): " + title
    if where:
        title += " - " + ", ".join(where)
    verdict = report.get("verdict")
    if isinstance(verdict, str):
        title += f"  [verdict: {verdict}]"
    ax.set_title(title, fontsize=11)
    # upper left, under the wire-speed line (always the top of the axes when drawn): small sizes sit at 0
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.86), fontsize=9, framealpha=0.9)
    fig.tight_layout()

    tmp = temp_beside(out_path, ".png")
    try:
        fig.savefig(tmp, format="png", metadata={"Title": title})  # the title, readable by tools and tests
        os.replace(tmp, out_path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out_path


def temp_beside(path: str, suffix: str) -> str:
    """A new empty file next to `path` (same filesystem, so os.replace is atomic), with the mode a plain
    open() would give (mkstemp's 0600 would make the published file private)."""
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=suffix, dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    return tmp
