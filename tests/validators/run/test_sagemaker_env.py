"""{sm_...} placeholders: each SageMaker instance's place in the job, from its resourceconfig.json."""

import json

import pytest

from efa_validators.run import sagemaker_env as sme

CONFIG = {
    "current_host": "algo-2",
    "hosts": ["algo-10", "algo-1", "algo-2"],
    "network_interface_name": "eth0",
}


def test_hosts_in_number_order_and_this_hosts_rank():
    v = sme.values(CONFIG)
    assert v["sm_hosts"] == "algo-1,algo-2,algo-10"  # not text order (algo-10 before algo-2)
    assert (v["sm_node_rank"], v["sm_nodes"], v["sm_master"], v["sm_ifname"]) == ("1", "3", "algo-1", "eth0")
    argv = ["torchrun", "--node_rank", "{sm_node_rank}", "--master_addr={sm_master}", "x{sm_nodes}y"]
    assert sme.expand(argv, v) == ["torchrun", "--node_rank", "1", "--master_addr=algo-1", "x3y"]
    assert sme.uses_placeholders(argv) and not sme.uses_placeholders(["echo", "{gpus}", "{}"])


@pytest.mark.parametrize(
    "config, key",
    [
        ({"current_host": "algo-1"}, "hosts"),
        ({"current_host": "algo-1", "hosts": []}, "hosts"),
        ({"current_host": "algo-1", "hosts": ["algo-1", 3]}, "hosts"),
        ({"current_host": "algo-9", "hosts": ["algo-1"]}, "current_host"),
        ({"hosts": ["algo-1"]}, "current_host"),
    ],
)
def test_a_bad_config_names_its_key(config, key):
    with pytest.raises(sme.ConfigError) as err:
        sme.values(config, "rc.json")
    assert "rc.json" in str(err.value) and "'%s'" % key in str(err.value)


def test_unknown_or_missing_values_are_errors(tmp_path):
    v = sme.values({"current_host": "a", "hosts": ["a"]})
    with pytest.raises(sme.ConfigError, match="unknown placeholder"):
        sme.expand(["{sm_rank}"], v)
    with pytest.raises(sme.ConfigError, match="does not give it"):
        sme.expand(["{sm_ifname}"], v)  # no network_interface_name in the config
    with pytest.raises(sme.ConfigError, match="only inside a SageMaker training job"):
        sme.load(str(tmp_path / "absent.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(sme.ConfigError, match="not JSON"):
        sme.load(str(bad))
    good = tmp_path / "rc.json"
    good.write_text(json.dumps(CONFIG))
    assert sme.load(str(good)) == CONFIG


def test_sagemaker_interface_replaces_only_the_image_default(tmp_path, monkeypatch):
    """The image's NCCL_SOCKET_IFNAME is a site default (`overridable` in the lock): on SageMaker the
    interface the resource config names replaces it; a value the job set itself stays."""
    from efa_validators import cmd_preflight

    lock = tmp_path / "lock.json"
    lock.write_text(
        json.dumps(
            {"env": [{"name": "NCCL_SOCKET_IFNAME", "value": "^docker,lo,veth,virbr", "overridable": True}]}
        )
    )
    monkeypatch.setenv("EFA_IMAGE_LOCK", str(lock))
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    assert cmd_preflight._image_default("NCCL_SOCKET_IFNAME")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "^docker,lo,veth,virbr")
    assert cmd_preflight._image_default("NCCL_SOCKET_IFNAME")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ens5")
    assert not cmd_preflight._image_default("NCCL_SOCKET_IFNAME")
