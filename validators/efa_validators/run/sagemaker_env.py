"""Place a launch command on a SageMaker training cluster: `{sm_...}` placeholders, read at run time.

Why: SageMaker starts the same container, with the same arguments, on every instance of a job, and
tells each one who it is only in /opt/ml/input/config/resourceconfig.json (`current_host`, `hosts`,
`network_interface_name`). A probe that spans the instances (torchrun over all of them, so NCCL
really goes over EFA) needs each one's node rank and the first host's name, which the request
cannot carry. `validators run` expands these in the command before it starts it:

  {sm_nodes}        number of hosts            {sm_node_rank}  this host's place among them (0 first)
  {sm_master}       the first host             {sm_hosts}      all hosts, comma-separated
  {sm_current_host} this host                  {sm_ifname}     the network interface SageMaker names

Hosts are ordered by their number (algo-2 before algo-10), the same on every instance.
"""

import json
import re
from typing import Any, Dict, List, Tuple

RESOURCE_CONFIG = "/opt/ml/input/config/resourceconfig.json"
_PLACEHOLDER = re.compile(r"\{(sm_[a-z_]+)\}")


class ConfigError(ValueError):
    """The resource config is missing or malformed, or the command names an unknown placeholder."""


def uses_placeholders(argv: List[str]) -> bool:
    return any(_PLACEHOLDER.search(a) for a in argv)


def load(path: str = RESOURCE_CONFIG) -> Dict[str, Any]:
    from efa_validators.run.smallfile import NotAFile, read_small

    try:
        doc = json.loads(read_small(path).decode("utf-8"))  # a FIFO or a device is refused, not read
    except NotAFile as err:
        raise ConfigError("%s (--resource-config)" % err) from None
    except OSError as err:
        raise ConfigError(
            "%s: %s (the {sm_...} placeholders resolve only inside a SageMaker training job, or with "
            "--resource-config FILE)" % (path, err.strerror or err)
        ) from None
    except ValueError as err:  # UnicodeDecodeError too
        raise ConfigError("%s: not JSON: %s" % (path, err)) from None
    if not isinstance(doc, dict):
        raise ConfigError("%s: a resource config is a JSON object" % path)
    return doc


def _host_key(host: str) -> Tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", host))


def values(config: Dict[str, Any], where: str = RESOURCE_CONFIG) -> Dict[str, str]:
    """The placeholder values for this host (pure)."""
    hosts = config.get("hosts")
    current = config.get("current_host")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise ConfigError("%s: key 'hosts': expected a non-empty list of host names" % where)
    if not isinstance(current, str) or current not in hosts:
        raise ConfigError("%s: key 'current_host': %r is not one of 'hosts' %s" % (where, current, hosts))
    ordered = sorted(set(hosts), key=_host_key)
    ifname = config.get("network_interface_name")
    return {
        "sm_nodes": str(len(ordered)),
        "sm_node_rank": str(ordered.index(current)),
        "sm_master": ordered[0],
        "sm_hosts": ",".join(ordered),
        "sm_current_host": current,
        "sm_ifname": ifname if isinstance(ifname, str) and ifname else "",
    }


def expand(argv: List[str], vals: Dict[str, str]) -> List[str]:
    """argv with every {sm_...} replaced (pure); an unknown or empty one is a ConfigError."""

    def one(m: "re.Match") -> str:
        name = m.group(1)
        if name not in vals:
            raise ConfigError("unknown placeholder {%s} (known: %s)" % (name, ", ".join(vals)))
        if not vals[name]:
            raise ConfigError("{%s}: the resource config does not give it" % name)
        return vals[name]

    return [_PLACEHOLDER.sub(one, a) for a in argv]
