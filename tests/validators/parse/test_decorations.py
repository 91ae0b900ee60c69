"""Logs as they reach us from other fabrics and collectors (issue 33, item 3), on fixtures of our own
(tests/fixtures/decorations/): host names cut before sharing (`:pid:tid [dev] NCCL INFO`), IB transport
lines, Ray's de-duplication count after a line. Each is read as the fact it is; what the text cannot tell
stays unknown."""

import json

import cli
from paths import ROOT

FIX = ROOT / "tests" / "fixtures" / "decorations"


def _parse(name, *extra):
    res = cli.validators("parse", str(FIX / name), "--json", "-", *extra)
    return res.rc, json.loads(res.out)


def test_channels_with_an_empty_host_are_read_ib_is_not_efa():
    rc, r = _parse("empty-host-ib-channels.log")
    assert r["efa"] is False and r["network"] == "IB" and r["gdr"] is True, r["counts"]
    assert r["counts"]["channel_gdr"] == 2 and rc == 1
    assert [h["host"] for h in r["hosts"]] == [""]  # the host is unknown, not invented
    # a visible misconfiguration is never a report without findings: the network is named as the cause
    assert [f["id"] for f in r["findings"]] == ["network-ib"] and r["findings"][0]["evidence"]


def test_an_empty_host_does_not_invent_a_world_the_log_cannot_show():
    """Two nodes' ranks under one empty host: the host count cannot be checked, never passes as one host."""
    _rc, r = _parse("empty-host-ib-channels.log", "--nodes", "2")
    world = next(c for c in r["checks"] if c["name"] == "world-consistent")
    assert world["status"] != "pass", world


def test_an_ib_completion_error_behind_an_empty_host_shows_ib():
    rc, r = _parse("empty-host-ib-completion-error.log")
    assert r["efa"] is False and rc == 1
    assert [f["id"] for f in r["findings"]][:1] == ["completion-error"]


def test_rays_dedup_count_stays_out_of_the_network_name_and_the_channel():
    _rc, r = _parse("ray-dedup-ib.log")
    assert r["network"] == "IB" and r["efa"] is False
    assert r["counts"]["channel_unclear"] == 0 and r["counts"]["channel_nogdr"] == 1
    assert [f["id"] for f in r["findings"]][:1] == ["network-ib"]


def test_efa_with_gdr_read_through_an_empty_host_a_ray_prefix_and_dedup_counts():
    _rc, r = _parse("empty-host-efa-ray.log")
    assert r["efa"] is True and r["gdr"] is True and r["network"] == "Libfabric", r["checks"]
    assert r["counts"]["channel_gdr"] == 2 and r["counts"]["channel_unclear"] == 0


def test_roce_devices_behind_an_empty_host_are_the_ib_transport_not_efa():
    """NET/IB over RoCE ports is NCCL's verbs transport: efa false, the network named. The fixture's device
    line has the form of NVIDIA/nccl src/transport/net_ib.cc's `"NET/IB : Using%s %s; OOB %s:%s"`, each
    device `" [%d]%s:%d/%s"` with the link layer `IB` or `RoCE`."""
    rc, r = _parse("empty-host-roce.log")
    assert r["efa"] is False and r["network"] == "IB" and rc == 1, r["counts"]
    assert r["counts"]["channel_nogdr"] == 2 and r["counts"]["channel_unclear"] == 0
    assert [f["id"] for f in r["findings"]][:1] == ["network-ib"]
