"""The knowledge base as data: components, EFA installer contents, env policy; instance profiles come from
efa_validators/judge/profile_data.py (shared with the validator).

The YAML files next to this module are the source of truth; this loader only reads and checks their shape
once (cached), so a broken catalog fails loudly on first use, not half way through a render.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional

import yaml

from imagebuild.versions import Version, check_spec

HERE = Path(__file__).resolve().parent
# An env policy constraint that holds for any version of a component that is present.
ANY_VERSION = "*"


def _read(name: str) -> Any:
    """The project's own files: libyaml's parser where PyYAML has it (the same safe constructor; the pure
    Python parser took 29 ms of every command's start, libyaml 3 ms)."""
    with open(HERE / name, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader


@lru_cache(maxsize=None)
def components() -> Dict[str, Dict[str, Any]]:
    data = _read("components.yaml")
    for name, entry in data.items():
        assert "prefix" in entry and "description" in entry, f"catalog component {name} incomplete"
        for ver, commit in (entry.get("commits") or {}).items():
            Version(ver)
            assert len(commit) == 40, f"catalog {name} {ver}: commit must be 40 hex"
    return data


@lru_cache(maxsize=None)
def efa_installers() -> Dict[str, Any]:
    data = _read("efa_installers.yaml")
    for ver in data["versions"]:
        Version(ver)
    ngc = data["ngc"]
    Version(ngc["flags_from"])  # a version gate, compared as a version
    assert ngc["flags"] and all(f.startswith("--") for f in ngc["flags"]), "efa_installers ngc.flags"
    assert ngc["plugin_packages"] and ngc["plugin_prefix"].startswith("/"), "efa_installers ngc plugin"
    return data


@lru_cache(maxsize=None)
def instances() -> Dict[str, Dict[str, Any]]:
    """Instance profiles, read from efa_validators/judge/profile_data.py: the one table the validator
    judges with
    (stdlib only, it ships in every image), so the matrix and the verdict never disagree."""
    from efa_validators.judge import profile_data

    out = {}
    for name, raw in profile_data.PROFILES.items():
        entry = {k: raw[k] for k in ("gpus", "gpu", "efa_devices", "efa_gbps", "gdr_required", "arch")}
        for key in ("rdma_read", "cuda_arch"):
            if raw.get(key) is not None:  # absent = unknown to the env policy and cuda_arch defaults
                entry[key] = raw[key]
        out[name] = entry
    return out


@lru_cache(maxsize=None)
def env_policy() -> Dict[str, Any]:
    data = _read("envpolicy.yaml")
    for rule in data["set"] + data["forbid"]:
        for when in [rule.get("when") or {}] + list(rule.get("any_of") or []):
            for key, spec in when.items():
                if not key.startswith("instances.") and spec != ANY_VERSION:
                    check_spec(spec)
        assert rule.get("reason") and rule.get("source"), f"env rule {rule['name']} needs reason and source"
    return data


def component(name: str) -> Dict[str, Any]:
    return components()[name]


def efa_installer(version: str) -> Optional[Dict[str, Any]]:
    """Contents of one EFA installer version, or None when the catalog does not know it."""
    return efa_installers()["versions"].get(version)
