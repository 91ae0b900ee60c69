"""Instance profiles: the data is complete and sourced, and the bandwidth arithmetic is right."""

from __future__ import annotations

import pytest

from efa_validators.judge import profile_data
from efa_validators.judge.profiles import (
    busbw_factor,
    expected_busbw,
    get_profile,
    internode_rate_per_rank,
    known_instance_types,
    wire_busbw,
)

REQUIRED = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_every_required_profile_is_complete_and_sourced(name):
    p = get_profile(name)
    assert p is not None and p.name == name
    assert p.gpus == 8 and p.efa_devices > 0 and p.efa_gbps in (400, 3200)
    assert p.gdr_required is True and p.gdr_source
    assert p.source
    assert p.references, "every profile needs a published bandwidth reference"
    for ref in p.references:
        assert ref.source and ref.nodes >= 2 and ref.size >= 1 << 30 and ref.busbw > 0
        # a figure measured on another type names it, and that type has the same network
        if ref.measured_on:
            other = get_profile(ref.measured_on)
            assert other is not None
            assert (other.efa_devices, other.efa_gbps) == (p.efa_devices, p.efa_gbps)
    assert p.to_dict()["references"][0]["source"] == p.references[0].source


def test_profile_table_matches_field_notes_hardware():
    table = {n: (get_profile(n).efa_devices, get_profile(n).efa_gbps) for n in REQUIRED}
    assert table == {
        "p4d.24xlarge": (4, 400),
        "p4de.24xlarge": (4, 400),
        "p5.48xlarge": (32, 3200),
        "p5e.48xlarge": (32, 3200),
        "p5en.48xlarge": (16, 3200),
        "p6-b200.48xlarge": (8, 3200),
    }


def test_lookup_normalises_and_unknown_is_none():
    assert get_profile(" P5.48xlarge ").name == "p5.48xlarge"
    assert get_profile("ml.p4d.24xlarge").name == "p4d.24xlarge"
    assert get_profile("g4dn.12xlarge") is None and get_profile(None) is None and get_profile("") is None
    assert set(REQUIRED) <= set(known_instance_types())


@pytest.mark.parametrize(
    "collective, n, factor",
    [
        ("all_reduce", 16, 2 * 15 / 16),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 1, 0.0),
        ("all_gather", 8, 7 / 8),
        ("reduce_scatter", 16, 15 / 16),
        ("alltoall", 4, 3 / 4),
        ("broadcast", 16, 1.0),
        ("reduce", 16, 1.0),
        ("sendrecv", 16, 1.0),
        ("hypercube", 16, None),
        (None, 16, None),
    ],
)
def test_busbw_factor(collective, n, factor):
    assert busbw_factor(collective, n) == (None if factor is None else pytest.approx(factor))


def test_busbw_factor_rejects_zero_ranks():
    with pytest.raises(ValueError):
        busbw_factor("all_reduce", 0)


def test_internode_rate_and_wire_speed():
    # 2 nodes x 8 ranks: each rank must move busbw/15 across nodes
    assert internode_rate_per_rank(450.0, 2, 16) == pytest.approx(30.0)
    assert internode_rate_per_rank(450.0, 1, 8) is None
    p5 = get_profile("p5.48xlarge")
    # 3200 Gbps = 400 GB/s per node, 50 GB/s per rank, x 15 / 1
    assert wire_busbw(p5, "all_reduce", 2, 16) == pytest.approx(750.0)
    # the inverse relation holds: at wire speed each rank moves exactly its EFA share
    assert internode_rate_per_rank(wire_busbw(p5, "all_reduce", 4, 32), 4, 32) == pytest.approx(50.0)
    assert wire_busbw(p5, "all_reduce", 1, 8) is None
    assert wire_busbw(p5, "broadcast", 2, 16) is None
    p4d = get_profile("p4d.24xlarge")
    assert wire_busbw(p4d, "all_gather", 2, 16) == pytest.approx(93.75)


def test_expected_busbw_published_at_the_run_node_count():
    p5 = get_profile("p5.48xlarge")
    exp = expected_busbw(p5, "all_reduce", 2, 16, 16 << 30)
    assert exp.busbw == 487.0 and not exp.derived
    assert exp.floor == pytest.approx(487.0 * profile_data.FLOOR_FRACTION)
    assert "published" in exp.how and "awsome-distributed-training" in exp.how
    # the reference at the largest size not above the plateau's
    assert expected_busbw(p5, "all_reduce", 2, 16, 4 << 30).busbw == 444.0
    assert expected_busbw(p5, "all_reduce", 2, 16, 1 << 30).busbw == 437.0
    assert expected_busbw(p5, "all_reduce", 2, 16, 1 << 20).busbw == 437.0  # smallest published


def test_expected_busbw_other_node_counts_are_derived_and_never_above_the_reference():
    p5 = get_profile("p5.48xlarge")
    exp = expected_busbw(p5, "all_reduce", 16, 128, 16 << 30)
    assert exp.derived and "derived" in exp.how
    ratio = wire_busbw(p5, "all_reduce", 16, 128) / wire_busbw(p5, "all_reduce", 2, 16)
    assert exp.busbw == pytest.approx(487.0 * ratio)
    p5en = get_profile("p5en.48xlarge")
    fewer = expected_busbw(p5en, "all_reduce", 2, 16, 16 << 30)
    assert fewer.derived and fewer.busbw == pytest.approx(370.0)  # capped: never more than measured


def test_expected_busbw_none_where_nothing_applies():
    p5 = get_profile("p5.48xlarge")
    assert expected_busbw(p5, "all_gather", 2, 16, 1 << 30) is None
    assert expected_busbw(p5, "all_reduce", 1, 8, 1 << 30) is None
    assert expected_busbw(p5, None, 2, 16, 1 << 30) is None


# ----------------------------------------------------------------- one source, the types users run (#10)
NEW = {
    # name: (gpus, arch, gdr_required)
    "g5.48xlarge": (8, "x86_64", False),
    "g6e.48xlarge": (8, "x86_64", False),
    "p5.4xlarge": (1, "x86_64", False),
    "p6-b300.48xlarge": (8, "x86_64", True),
    "p6e-gb200.36xlarge": (4, "arm64", True),
}


@pytest.mark.parametrize("name", sorted(NEW))
def test_the_types_users_run_have_profiles(name):
    p = get_profile(name)
    assert p is not None and (p.gpus, p.arch, p.gdr_required) == NEW[name]


@pytest.mark.parametrize("name", sorted(profile_data.PROFILES))
def test_every_figure_has_a_public_source(name):
    """A figure is sourced, or None (unknown); no source points at a file a public clone lacks."""
    raw = profile_data.PROFILES[name]
    for figure, source in raw["sources"].items():
        if raw[figure] is None:
            continue
        assert source, (name, figure)
    texts = [s for s in raw["sources"].values() if s] + [r["source"] for r in raw["references"]]
    for text in texts + [profile_data.GDR_SOURCE, profile_data.FLOOR_SOURCE]:
        assert "FIELD-NOTES" not in text and "shared/" not in text, text
        assert "/" in text  # a repository path (owner/name path) or a page


def test_host_side_reads_the_same_profiles():
    """imagebuild's instance table is efa_validators/judge/profile_data.py's: one source, no YAML copy."""
    from imagebuild import catalog

    host = catalog.instances()
    assert set(host) == set(profile_data.PROFILES)
    for name, entry in host.items():
        p = get_profile(name)
        assert (entry["gpus"], entry["efa_devices"], entry["efa_gbps"], entry["gdr_required"]) == (
            p.gpus,
            p.efa_devices,
            p.efa_gbps,
            p.gdr_required,
        )
        assert entry.get("rdma_read") == p.rdma_read and entry.get("cuda_arch") == p.cuda_arch
    assert not (catalog.HERE / "instances.yaml").exists()


def test_gdr_off_on_p5_4xlarge_is_no_failure_but_on_p5_48xlarge_is():
    """aws-ofi-nccl disables GDR on p5.4xlarge by design (src/platform-aws.cpp gdr_required false)."""
    from efa_validators.analyze import analyze

    lines = []
    for i, host in enumerate(("a", "b")):
        h = f"{host}:1:1 [0] NCCL INFO "
        lines += [
            h + "NET/OFI Selected provider is efa, fabric is efa (found 1 nics)",
            h + "NET/OFI Could not disable CUDA API usage for HMEM, disabling GDR",
            h + "Using network Libfabric",
            h + f"comm 0x1 rank {i} nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
            h + f"Channel 00/0 : {1 - i}[0] -> {i}[0] [receive] via NET/Libfabric/0",
        ]
    small = analyze(lines, instance_type="p5.4xlarge", nodes=2)
    gdr = next(c for c in small["checks"] if c["name"] == "gdr")
    assert small["gdr"] is False and gdr["status"] == "pass"
    assert all(f["severity"] != "error" for f in small["findings"] if f["id"] == "gdr-disabled")
    assert not any(c["name"] == "failure-signatures" for c in small["checks"])
    big = analyze(lines, instance_type="p5.48xlarge", nodes=2)
    assert big["verdict"] == "fail"
    assert any(f["id"] == "gdr-disabled" and f["severity"] == "error" for f in big["findings"])


# ----------------------------------------------------------------- NVLink, for node-check's gpu-nvlink (#33)
@pytest.mark.parametrize(
    "name, nvlink",
    [
        ("g5.48xlarge", False),  # A10G: PCIe cards
        ("g6e.48xlarge", False),  # L40S: PCIe cards
        ("p4d.24xlarge", True),  # A100 SXM on NVSwitch
        ("p5.48xlarge", True),
        ("p5en.48xlarge", True),
        ("p6-b200.48xlarge", True),
        ("p3dn.24xlarge", None),  # no source read says
        ("p5.4xlarge", None),  # one GPU: nothing says what nvidia-smi lists without a peer
    ],
)
def test_a_profile_says_whether_its_gpus_have_nvlink_with_a_source(name, nvlink):
    p = get_profile(name)
    assert p.nvlink is nvlink and p.to_dict()["nvlink"] is nvlink
    source = dict(p.sources)["nvlink"]
    assert (source is None) == (nvlink is None), source
    if nvlink is not None:
        assert ("NVLink" in source or "NVSwitch" in source) and "/" in source, source
