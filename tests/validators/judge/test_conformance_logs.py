"""Conformance: the real public logs in ../shared/nccl-logs, read by path, against their .meta.yaml.

Each meta's `expected` is a human reading of the log. Where it says a fact is unknown or not
printed, the parser must say null; where it gives a value, the report must carry that value.
The logs are never copied into the project.
"""

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from cli import validators_process
from conftest import corpus_missing
from paths import ROOT

from efa_validators.analyze import analyze_paths

_DIR = Path(os.environ.get("NCCL_LOGS_DIR", ROOT.parent / "shared" / "nccl-logs"))
NAMES = (
    sorted(p.name[: -len(".meta.yaml")] for p in _DIR.glob("*.meta.yaml")) if _DIR.is_dir() else ["absent"]
)

_CACHE = {}


def _load(nccl_logs_dir, name):
    meta_path = nccl_logs_dir / (name + ".meta.yaml")
    log_path = nccl_logs_dir / (name + ".log")
    if not meta_path.exists() or not log_path.exists():
        corpus_missing(f"{name} not in the corpus")
    if name not in _CACHE:
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        _CACHE[name] = (meta, analyze_paths([str(log_path)]))
    return _CACHE[name]


def _unknown(value) -> bool:
    return isinstance(value, str) and ("unknown" in value.lower() or value.lower().startswith("not "))


def _first(value):
    """The value before any comment: 'g6e.48xlarge (tuner line)' -> 'g6e.48xlarge'."""
    return str(value).split()[0]


@pytest.mark.parametrize("name", NAMES)
def test_efa_and_gdr_match_meta(nccl_logs_dir, name):
    meta, report = _load(nccl_logs_dir, name)
    exp = meta["expected"]
    for key, field in (("uses_efa", "efa"), ("gdr", "gdr")):
        want = exp.get(key)
        if isinstance(want, bool):
            assert report[field] is want, f"{name}: {field} should be {want}"
        elif _unknown(want):
            assert report[field] is None, (
                f"{name}: {field} is unknown in the meta, parser said {report[field]}"
            )
        # other strings describe a nuance; the property tests guard against unsupported `true`


@pytest.mark.parametrize("name", NAMES)
def test_versions_match_meta(nccl_logs_dir, name):
    meta, report = _load(nccl_logs_dir, name)
    nccl = meta.get("nccl_version")
    if _unknown(nccl):
        assert report["nccl_version"] is None
    elif nccl:
        version, _, cuda = _first(nccl).partition("+cuda")
        assert report["nccl_version"] == version
        assert report["cuda_version"] == (cuda or None)
    plugin = meta.get("plugin_version")
    if _unknown(plugin):
        assert report["plugin"]["version"] is None
    elif plugin:
        assert report["plugin"]["version"] == _first(plugin)
    libfabric = meta.get("libfabric_version")
    if libfabric:
        assert report["libfabric_version"] == _first(libfabric)


@pytest.mark.parametrize("name", NAMES)
def test_network_provider_platform_nics(nccl_logs_dir, name):
    meta, report = _load(nccl_logs_dir, name)
    exp = meta["expected"]
    net = exp.get("network_name")
    if _unknown(net):
        assert report["network"] is None
    elif net:
        assert report["network"] == net
    provider = exp.get("provider")
    if _unknown(provider):
        assert report["provider"] is None
    elif provider and " " not in provider:
        assert report["provider"] == provider
    elif provider:  # a description, e.g. 'efa filter set, init failed': no provider was selected
        assert report["provider"] is None
    platform = exp.get("platform")
    if platform:
        assert report["platform"] == _first(platform)
    if isinstance(exp.get("nics"), int):
        assert report["nics"] == exp["nics"]


@pytest.mark.parametrize("name", NAMES)
def test_ranks_and_nodes(nccl_logs_dir, name):
    meta, report = _load(nccl_logs_dir, name)
    exp = meta["expected"]
    ranks = exp.get("ranks")
    if isinstance(ranks, int):
        assert report["nranks"] == ranks
    if isinstance(exp.get("nodes"), int) and report["nranks"] and report["ranks_seen"] == report["nranks"]:
        assert report["nodes_seen"] == exp["nodes"]


@pytest.mark.parametrize("name", NAMES)
def test_nccl_tests_numbers(nccl_logs_dir, name):
    meta, report = _load(nccl_logs_dir, name)
    exp = meta["expected"]
    nt = report["nccl_tests"]
    if "avg_bus_bandwidth_GBps" in exp:
        want = exp["avg_bus_bandwidth_GBps"]
        if want is None:
            assert nt is None or nt["avg_busbw"] is None
        else:
            assert nt is not None and nt["avg_busbw"] == pytest.approx(float(want))
    if isinstance(exp.get("max_busbw_GBps"), (int, float)):
        best = max(
            c["busbw"]
            for r in nt["rows"]
            for c in (r.get("out_of_place"), r.get("in_place"))
            if c and c.get("busbw") is not None
        )
        assert best == pytest.approx(float(exp["max_busbw_GBps"]))
    oob = exp.get("out_of_bounds")
    if isinstance(oob, str) and re.match(r"^\d+ (OK|FAILED)$", oob):
        count, word = oob.split()
        assert nt["out_of_bounds"] == int(count)
        assert nt["out_of_bounds_ok"] is (word == "OK")


@pytest.mark.parametrize("name", NAMES)
def test_warnings_and_failures(nccl_logs_dir, name):
    meta, report = _load(nccl_logs_dir, name)
    notes = " ".join(str(x) for x in meta["expected"].get("errors_warnings") or [])
    ids = {f["id"] for f in report["findings"]}
    if "no WARN lines" in notes or "no NCCL WARN lines" in notes:
        assert report["counts"]["warn"] == 0
    elif "NCCL WARN" in notes:
        assert report["counts"]["warn"] > 0 and "nccl-warn" in ids
    if "fallback to socket" in notes:
        assert {"socket-fallback", "ofi-init-failed"} <= ids
        assert report["verdict"] == "fail"
    if report["efa"] is not True or report["gdr"] is not True:
        assert report["verdict"] != "pass"


@pytest.mark.parametrize("name", NAMES)
def test_cli_agrees_with_library(nccl_logs_dir, name, tmp_path):
    """The CLI's exit code is the verdict's, and its JSON is the library's report."""
    meta, report = _load(nccl_logs_dir, name)
    out = tmp_path / "r.json"
    proc = validators_process("parse", nccl_logs_dir / (name + ".log"), "--json", out, timeout=120)
    assert proc.returncode == {"pass": 0, "fail": 1, "unknown": 3}[report["verdict"]], proc.stderr
    cli = json.loads(out.read_text())
    assert (cli["efa"], cli["gdr"], cli["verdict"]) == (report["efa"], report["gdr"], report["verdict"])
    assert "efa={}".format(json.dumps(report["efa"])) in proc.stdout
