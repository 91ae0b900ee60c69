"""The env policy by version and the env linter (data: imagebuild/catalog/envpolicy.yaml)."""

from __future__ import annotations

import json
import re

import pytest
from cli import build_py
from matrices import nccl_variant
from paths import ROOT

from imagebuild.matrix.envpolicy import StackFacts, decide, forbidden, lint, policy_env
from imagebuild.matrix.load import load

SEED = {"FI_PROVIDER", "NCCL_PROTO", "FI_EFA_USE_DEVICE_RDMA", "NCCL_LAUNCH_MODE", "NCCL_NET_SHARED_COMMS"}


def facts(instances=("p4d.24xlarge",), **versions):
    return StackFacts(tuple(versions.items()), tuple(instances))


def names(env):
    return {e.name for e in env}


def test_old_plugin_gets_the_seed_vars_with_reasons():
    env = policy_env(facts(aws_ofi_nccl="1.5.0", libfabric="1.17.1", nccl="2.18.5", efa_installer="1.22.1"))
    assert names(env) - {"NCCL_SOCKET_IFNAME"} == SEED  # the interface rule holds wherever NCCL is
    assert all(e.reason and e.source for e in env)


def test_modern_stack_sets_none_of_them():
    env = policy_env(
        facts(
            ("p5.48xlarge",), aws_ofi_nccl="1.21.1", libfabric="2.1.0", nccl="2.27.7", efa_installer="1.41.0"
        )
    )
    assert not names(env) & SEED
    reasons = {d.name: d.reason for d in decide(facts(aws_ofi_nccl="1.21.1", libfabric="2.1.0"))}
    assert "selects the efa provider itself" in reasons["FI_PROVIDER"]


def test_version_boundaries_are_numeric_not_strings():
    # "1.10" < "1.5" as strings; as versions 1.10 is newer, so no seed vars
    assert not names(policy_env(facts(aws_ofi_nccl="1.10.0", libfabric="1.19"))) & SEED
    assert "FI_PROVIDER" in names(policy_env(facts(aws_ofi_nccl="1.5")))
    assert "FI_PROVIDER" not in names(policy_env(facts(aws_ofi_nccl="1.6.0")))


def test_device_rdma_never_on_a_device_without_rdma_read_or_unknown_instances():
    old = dict(aws_ofi_nccl="1.5.0", libfabric="1.17.1")
    assert "FI_EFA_USE_DEVICE_RDMA" in names(policy_env(facts(("p4d.24xlarge",), **old)))
    assert "FI_EFA_USE_DEVICE_RDMA" not in names(policy_env(facts(("p3dn.24xlarge",), **old)))
    assert "FI_EFA_USE_DEVICE_RDMA" not in names(policy_env(facts((), **old)))  # unknown: fail closed
    mixed = policy_env(facts(("p4d.24xlarge", "p3dn.24xlarge"), **old))
    assert "FI_EFA_USE_DEVICE_RDMA" not in names(mixed)


def test_cuda_sync_memops_for_nccl_219_on_efa_before_129():
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS" in names(policy_env(facts(nccl="2.19.3", efa_installer="1.28.0")))
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS" not in names(
        policy_env(facts(nccl="2.19.3", efa_installer="1.29.0"))
    )
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS" not in names(
        policy_env(facts(nccl="2.18.5", efa_installer="1.22.1"))
    )


def test_nccl_algo_forbidden_where_a_tuner_decides():
    """From NCCL 2.12 (the project's stated floor) NCCL's tuner, and aws-ofi-nccl's (on by default on AWS
    since 1.16.0), pick the algorithm; the plugin's release notes say why (1.17.0 fallback, 1.20.0 fix)."""
    assert "NCCL_ALGO" in names(forbidden(facts(nccl="2.12.0")))
    assert "NCCL_ALGO" in names(forbidden(facts(aws_ofi_nccl="1.16.0")))
    assert "NCCL_ALGO" not in names(forbidden(facts(nccl="2.11.4")))
    assert "NCCL_ALGO" not in names(forbidden(facts(nccl="2.11.4", aws_ofi_nccl="1.5.0")))
    (rule,) = [f for f in forbidden(facts(nccl="2.27.7", aws_ofi_nccl="1.21.1")) if f.name == "NCCL_ALGO"]
    assert "RELEASENOTES" in rule.source and "1.20.0" in rule.reason and "efa-env-var" not in rule.source


def test_device_rdma_is_an_error_only_where_the_device_lacks_rdma_read():
    """aws-ofi-nccl doc/efa-env-var.md: harmless on p4/p5 with new software; libfabric aborts without
    RDMA read (p3dn)."""
    new = dict(nccl="2.27.7", aws_ofi_nccl="1.21.1", libfabric="2.1.0")
    on_p5 = lint({"FI_EFA_USE_DEVICE_RDMA": "1"}, facts(("p5.48xlarge", "p4d.24xlarge"), **new))
    assert [(f.severity, "harmless" in f.message) for f in on_p5] == [("info", True)]
    assert "FI_EFA_USE_DEVICE_RDMA" not in names(forbidden(facts(("p5.48xlarge",), **new)))
    on_p3dn = lint({"FI_EFA_USE_DEVICE_RDMA": "1"}, facts(("p3dn.24xlarge",), **new))
    assert [f.severity for f in on_p3dn] == ["error"] and "abort" in on_p3dn[0].message
    assert "FI_EFA_USE_DEVICE_RDMA" in names(forbidden(facts(("p3dn.24xlarge",), **new)))


def test_linter_flags_advice_against_with_why():
    f = facts(("p5.48xlarge",), nccl="2.27.7", aws_ofi_nccl="1.21.1", libfabric="2.1.0")
    found = {
        x.name: x
        for x in lint(
            {
                "NCCL_ALGO": "Ring",
                "RDMAV_FORK_SAFE": "1",
                "FI_EFA_USE_DEVICE_RDMA": "1",
                "NCCL_PROTO": "LL",
                "FI_PROVIDER": "efa",
                "NCCL_DEBUG": "INFO",
            },
            f,
        )
    }
    assert found["NCCL_ALGO"].severity == "error" and "tuner" in found["NCCL_ALGO"].message
    assert found["RDMAV_FORK_SAFE"].severity == "warning" and "do not use" in found["RDMAV_FORK_SAFE"].message
    assert found["FI_EFA_USE_DEVICE_RDMA"].severity == "info"  # harmless on p5 with this software
    assert found["NCCL_PROTO"].severity == "warning"
    assert found["FI_PROVIDER"].severity == "info" and "not needed" in found["FI_PROVIDER"].message
    assert "NCCL_DEBUG" not in found
    assert not lint({"FI_EFA_USE_HUGE_PAGE": "0"}, f)
    assert lint({"FI_EFA_USE_HUGE_PAGE": "1"}, f)[0].severity == "info"


MATRIX = "variants:\n" + nccl_variant("v", "    env: {NCCL_ALGO: Ring, NCCL_DEBUG: INFO}\n")


def test_render_refuses_an_error_finding_and_accepts_it_when_ignored(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX)
    res = build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out"))
    assert res.rc == 1
    assert "NCCL_ALGO=Ring" in res.err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    path.write_text(MATRIX + "    lint_ignore: [NCCL_ALGO]\n")
    assert build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out")).rc == 0
    (v,) = load(str(path))
    assert {"NCCL_ALGO", "NCCL_DEBUG"} <= names(v.env) and "NCCL_ALGO" not in names(v.env_forbidden)
    assert 'ENV NCCL_ALGO="Ring"' in (tmp_path / "out" / "v" / "Dockerfile").read_text()


@pytest.mark.parametrize(
    "variant,present,absent",
    [
        ("cuda12.1-efa1.22-ofi1.5-legacy", SEED, {"NCCL_ALGO"}),
        ("cuda12.8-efa1.51-nccl2.27.7-ofi1.22", set(), SEED),
        ("dlc-pt2.7-efa1.41.0", set(), SEED),
    ],
)
def test_explain_env_says_why_for_old_and_new(variant, present, absent):
    res = build_py("explain-env", "--matrix", str(ROOT / "matrix.yaml"), variant, "--json")
    assert res.rc == 0
    info = json.loads(res.out)
    set_names = {e["name"] for e in info["set"]}
    assert present <= set_names and not (absent & set_names)
    for e in info["set"]:
        assert e["reason"] and e["source"]
    unset = {d["name"]: d["reason"] for d in info["unset"]}
    for name in absent & SEED:
        assert name in unset and unset[name], name
    res = build_py("explain-env", "--matrix", str(ROOT / "matrix.yaml"), variant)
    assert res.rc == 0
    text = res.out
    assert "why" in text and ("why not" in text or present)


def test_explain_env_needs_one_variant(capsys):
    res = build_py("explain-env", "--matrix", str(ROOT / "matrix.yaml"))
    assert res.rc == 2
    assert "exactly one variant" in res.err


def test_policy_sources_are_recorded_in_the_lock():
    (v,) = [x for x in load(str(ROOT / "matrix.yaml")) if x.name == "cuda12.1-efa1.22-ofi1.5-legacy"]
    lock = v.to_lock()
    seeds = [e for e in lock["env"] if e["name"] in SEED]
    assert len(seeds) == 5 and all(e["origin"] == "policy" and e["source"] for e in seeds)
    assert {f["name"] for f in lock["env_forbidden"]} >= {"NCCL_ALGO", "RDMAV_FORK_SAFE"}


# ---------------------------------------------------------------- NCCL_SOCKET_IFNAME (issue 21, item 6)

IFNAME = "NCCL_SOCKET_IFNAME"
IFNAME_VALUE = "^docker,lo,veth,virbr"


@pytest.mark.parametrize(
    "versions",
    [
        {"nccl": "2.27.7"},  # wheel or source: any NCCL that crosses nodes
        {"nccl": "2.18.5", "aws_ofi_nccl": "1.5.0"},
        {"nccl": "2.26.2", "aws_ofi_nccl": "1.14.2", "efa_installer": "1.41.0"},  # the DLC's
    ],
)
def test_socket_ifname_is_set_wherever_nccl_is(versions):
    (env,) = [e for e in policy_env(facts(**versions)) if e.name == IFNAME]
    assert env.value == IFNAME_VALUE and env.overridable and env.origin == "policy"
    assert "awsome-distributed-training" in env.source and "9636cb16" in env.source
    assert "NVIDIA/nccl src/misc/socket.cc" in env.source and "veth" in env.reason


def test_socket_ifname_is_not_set_without_nccl():
    assert IFNAME not in names(policy_env(facts(libfabric="1.17.0", openmpi="4.1.4")))
    (dec,) = [d for d in decide(facts(libfabric="1.17.0")) if d.name == IFNAME]
    assert not dec.applies and "no nccl in this variant" in dec.reason
    assert IFNAME not in names(forbidden(facts(nccl="2.27.7")))  # never advised against


def test_the_linter_agrees_with_the_socket_ifname_rule():
    """The policy's own value is no finding; a site's interface (eth0, en) is info, not a warning."""
    stack = facts(nccl="2.27.7", aws_ofi_nccl="1.21.1")
    assert lint({IFNAME: IFNAME_VALUE}, stack) == []
    (finding,) = lint({IFNAME: "=eth0"}, stack)
    assert finding.severity == "info" and "site setting" in finding.message
    (finding,) = lint({IFNAME: "eth0"}, facts(libfabric="1.17.0"))  # no NCCL: not needed
    assert finding.severity == "info"


SOCKET_MATRIX = (
    "variants:\n"
    + nccl_variant("with-nccl")
    + nccl_variant("user-ifname", '    env: {NCCL_SOCKET_IFNAME: "^docker0,lo"}\n')
    + """\
  - name: no-nccl
    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
    components:
      openssh: {version: "9.2p1", source: {apt: ["openssh-server=1:9.2p1-*"]}}
"""
)


def test_socket_ifname_in_lock_dockerfile_and_explain_env(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SOCKET_MATRIX)
    by = {v.name: v for v in load(str(path))}
    (item,) = [e for e in by["with-nccl"].to_lock()["env"] if e["name"] == IFNAME]
    assert item["value"] == IFNAME_VALUE and item["overridable"] is True and item["origin"] == "policy"
    assert all("overridable" not in e for e in by["with-nccl"].to_lock()["env"] if e["name"] != IFNAME)
    # the user's env wins: one entry, theirs, and an info finding (not a warning)
    mine = [e for e in by["user-ifname"].env if e.name == IFNAME]
    assert [(e.value, e.origin) for e in mine] == [("^docker0,lo", "user")]
    assert [s for s, n, _ in by["user-ifname"].lint if n == IFNAME] == ["info"]
    assert IFNAME not in names(by["no-nccl"].env)
    assert build_py("render", "--matrix", str(path), "--out", str(tmp_path / "out")).rc == 0
    assert f'ENV {IFNAME}="{IFNAME_VALUE}"' in (tmp_path / "out" / "with-nccl" / "Dockerfile").read_text()
    assert IFNAME not in (tmp_path / "out" / "no-nccl" / "Dockerfile").read_text()
    res = build_py("explain-env", "--matrix", str(path), "with-nccl")
    assert res.rc == 0
    block = re.split(r"\n  (?=\S)", res.out.split(f"  {IFNAME}={IFNAME_VALUE}", 1)[1])[0]
    assert "source: aws-samples/awsome-distributed-training" in block and "NVIDIA/nccl" in block
    res = build_py("explain-env", "--matrix", str(path), "no-nccl", "--json")
    (unset,) = [d for d in json.loads(res.out)["unset"] if d["name"] == IFNAME]
    assert "no nccl" in unset["reason"] and "awsome-distributed-training" in unset["source"]


@pytest.mark.parametrize(
    "variant",
    ["cuda12.8-efa1.51-nccl2.27.7-ofi1.22", "dlc-pt2.7-efa1.41.0", "cuda12.1-efa1.22-ofi1.5-legacy"],
)
def test_every_nccl_variant_of_the_matrix_sets_socket_ifname(variant):
    info = json.loads(build_py("explain-env", "--matrix", str(ROOT / "matrix.yaml"), variant, "--json").out)
    (item,) = [e for e in info["set"] if e["name"] == IFNAME]
    assert item["value"] == IFNAME_VALUE and "install_efa.sh" in item["source"]
