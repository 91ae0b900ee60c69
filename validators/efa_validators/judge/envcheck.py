"""Misconfigurations the log itself shows: what NCCL and aws-ofi-nccl print about the environment they read.

Why here, as catalog entries: NCCL prints each variable it reads from the environment (`<NAME> set by
environment to <value>`), refuses a protocol or algorithm list it cannot parse, and aws-ofi-nccl refuses a
value of its own parameters. A run whose only visible fault is such a setting must not end "unknown, no
findings", and a failure that follows from one must name it (causes.LINKS). Each entry is a signature of
signatures.CATALOG (same fields); `gate: True` means its lines only collect evidence and the predicate decides
(the value, the versions and the other facts of the run). Where the text cannot tell (no version, no plugin
line), an entry stays silent rather than guess.

Read at NVIDIA/nccl 5067397c (and the tags named) and aws/aws-ofi-nccl 2daf7d30.
"""

import re
from typing import List, Optional, Tuple

_PARAM = (
    "NVIDIA/nccl src/misc/param.cc (ncclLoadParam: '%s set by environment to %lld.', "
    "'Invalid value %s for %s, using default')"
)
_LEVEL = "NVIDIA/nccl src/graph/paths.cc (ncclGetLevel: '%s set by environment to %s')"
_TUNING = "NVIDIA/nccl src/graph/tuning.cc ('NCCL_PROTO set by environment to %s', 'NCCL_ALGO set by ...')"
_EFA_ENV = "aws/aws-ofi-nccl doc/efa-env-var.md"
_FORCED = "env-protocol-forced/plugin"  # the evidence list of the plugin's 'Need to force simple protocol'

# the one value after "set by environment to" (NCCL prints integers with a final '.')
_VALUE = r"set by environment to\s+(\S+?)\.?\s*$"
# a shell's trace of an export (bash -x: `+ export NAME=value`, quoted or not): variables NCCL and the
# plugin never print (FI_*, NCCL_NET) are visible only so
_EXPORT = r"(?:^\+*\s*|[;&|]\s*)export\s+[\"']?%s=[\"']?([^\s\"';]*)"
_TRACE = "GNU bash manual, 'set -x' (xtrace: each command printed after expansion, prefixed by PS4 '+ ')"

CATALOG = [
    {
        "id": "env-value-refused",
        "when": "value_refused",
        "severity": "error",
        "title": "NCCL or aws-ofi-nccl refused a value in the environment",
        "lines": [
            # NCCL >= 2.24 parseList: an unknown protocol/algorithm token is ncclInvalidUsage (init fails)
            {
                "needle": "nrecognized",
                "regex": r"Unrecognized (?:element|prefix) token \"[^\"]*\" when parsing",
            },
            # aws-ofi-nccl's parameters: an invalid value fails the plugin's init (-EINVAL)
            {"needle": "nvalid value", "regex": r"NET/OFI WARNING: \S+ set to invalid value"},
        ],
        "remedy": "Correct or unset the variable the line names: NCCL_PROTO takes LL, LL128, Simple (a "
        "leading ^ excludes), NCCL_ALGO Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT; "
        "aws-ofi-nccl's OFI_NCCL_* take the values its documentation lists.",
        "source": "NVIDIA/nccl src/graph/tuning.cc parseList (v2.24.3-1 on: 'Unrecognized element "
        "token'; silently ignored before); aws/aws-ofi-nccl include/nccl_ofi_param_impl.h ('WARNING: %s "
        "set to invalid value %s', returns -EINVAL)",
    },
    {
        "id": "env-value-ignored",
        "when": "value_ignored",
        "severity": "warning",
        "title": "a variable in the environment has a value NCCL or the plugin ignored",
        "lines": [
            {
                "needle": "nvalid value",
                "regex": r"Invalid value \S* for NCCL_\w+, using default",
                "scan": True,
            },
            {"needle": "nvalid value", "regex": r"Invalid value \S* provided for \S+ environment variable"},
        ],
        "remedy": "The run used the default instead of the value set: correct the value (an integer for "
        "NCCL's numeric parameters) or unset the variable.",
        "source": _PARAM + "; aws/aws-ofi-nccl include/nccl_ofi_param.h at v1.13.2-aws ('Invalid value %s "
        "provided for %s environment variable, using default')",
    },
    {
        "id": "env-protocol-forced",
        "severity": "warning",
        "title": "NCCL_PROTO is set in the environment",
        "gate": True,
        "lines": [
            {"needle": "set by env", "words": ["NCCL_PROTO"], "regex": r"NCCL_PROTO " + _VALUE, "scan": True},
            # kept apart (its own evidence list): every rank prints it before NCCL reads NCCL_PROTO
            {"needle": "force simple protocol", "regex": r"Need to force simple protocol", "as": _FORCED},
        ],
        "when": "protocol_forced",
        "remedy": "Unset NCCL_PROTO: aws-ofi-nccl >= 1.6 forces the Simple protocol itself where the EFA "
        "device gives no delivery ordering, and only when NCCL_PROTO is not set; LL/LL128 without ordering "
        "corrupt data. Only aws-ofi-nccl <= 1.5.0 needs NCCL_PROTO=simple.",
        "source": _TUNING
        + "; aws/aws-ofi-nccl src/nccl_ofi_net.cpp nccl_net_ofi_configure_nccl_proto_simple "
        "('Need to force simple protocol: %s not supported', set without overwrite), "
        "include/nccl_ofi_environ.h ('Skipping adding %s to environment, already set'); " + _EFA_ENV,
    },
    {
        "id": "env-algorithm-forced",
        "severity": "warning",
        "title": "NCCL_ALGO is set in the environment",
        "gate": True,
        "lines": [{"needle": "set by env", "words": ["NCCL_ALGO"], "regex": r"NCCL_ALGO " + _VALUE}],
        "when": "algorithm_forced",
        "remedy": "Unset NCCL_ALGO: from NCCL 2.12 NCCL's tuner (and on AWS aws-ofi-nccl's tuner) picks the "
        "algorithm per message size and node count; a forced one was tuned for another job or stack.",
        "source": _TUNING + "; aws/aws-ofi-nccl src/tuner/nccl_ofi_model.cpp (the plugin's own algorithm "
        "choice); docs/env-policy.md (NCCL_ALGO, nccl >= 2.12)",
    },
    {
        "id": "env-gdr-forbidden",
        "when": "gdr_forbidden",
        "severity": "warning",
        "title": "the environment forbids GPUDirect RDMA on the network path",
        "lines": [
            {
                "needle": "set by env",
                "words": ["NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ"],
                "regex": r"NCCL_NET_GDR_LEVEL set by environment to (?:LOC|0)\b"
                r"|NCCL_NET_GDR_READ set by environment to 0\b",
            }
        ],
        "remedy": "Unset NCCL_NET_GDR_LEVEL and NCCL_NET_GDR_READ: NCCL and aws-ofi-nccl decide GPUDirect "
        "RDMA from the topology; LOC (0) keeps every network transfer in host memory.",
        "source": _LEVEL
        + " for NCCL_NET_GDR_LEVEL (src/transport/net.cc at v2.4.8-1: an integer, 0 is LOC); "
        "NVIDIA/nccl src/graph/paths.cc NCCL_PARAM(NetGdrRead, 'NET_GDR_READ')",
    },
    {
        "id": "env-p2p-disabled",
        "when": "p2p_disabled",
        "severity": "warning",
        "title": "the environment disables NCCL's intra-node GPU paths",
        "lines": [
            {
                "needle": "set by env",
                "words": ["NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE"],
                "regex": r"NCCL_P2P_DISABLE set by environment to 1\b"
                r"|NCCL_P2P_LEVEL set by environment to LOC\b|NCCL_SHM_DISABLE set by environment to 1\b",
            }
        ],
        "remedy": "Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL / NCCL_SHM_DISABLE: traffic between GPUs of one "
        "node then goes over NVLink/PCIe (P2P) instead of through host memory or the network; if P2P fails "
        "in a container, give it the host's IPC namespace (docker --ipc=host) instead.",
        "source": _LEVEL + " (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL); NVIDIA/nccl src/transport/shm.cc "
        "NCCL_PARAM(ShmDisable, 'SHM_DISABLE') with " + _PARAM,
    },
    {
        "id": "env-tuning-override",
        "when": "tuning_override",
        "severity": "warning",
        "title": "a buffer or channel size is overridden in the environment",
        "lines": [
            {
                "needle": "set by env",
                "words": ["NCCL_BUFFSIZE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"],
                # 8388608 is what aws-ofi-nccl itself sets on p4/p5 (its platform table): not the user's
                "regex": r"NCCL_BUFFSIZE set by environment to (?!8388608\b)\d+"
                r"|NCCL_(?:MIN|MAX)_NCHANNELS set by environment to",
            }
        ],
        "remedy": "Leave NCCL_BUFFSIZE and NCCL_MIN_NCHANNELS/NCCL_MAX_NCHANNELS at their defaults on EFA: a "
        "changed value was tuned for another stack (more channels than needed starve EFA with small "
        "messages).",
        "source": _EFA_ENV + " (NCCL_BUFFSIZE, NCCL_MIN_CHANNELS: leave out); NVIDIA/nccl src/init.cc "
        "NCCL_PARAM(BuffSize, 'BUFFSIZE'), src/graph/connect.cc NCCL_PARAM(MinNchannels, 'MIN_NCHANNELS'); "
        "aws/aws-ofi-nccl src/platform-aws.cpp platform_data_map (NCCL_BUFFSIZE 8388608 on p4/p5)",
    },
    {
        "id": "env-socket-ifname-unmatched",
        "severity": "error",
        "title": "NCCL_SOCKET_IFNAME matches no usable interface",
        "gate": True,
        "lines": [
            {
                "needle": "set by env",
                "words": ["NCCL_SOCKET_IFNAME"],
                "regex": r"NCCL_SOCKET_IFNAME " + _VALUE,
            }
        ],
        "when": "socket_ifname_unmatched",
        "remedy": "Set NCCL_SOCKET_IFNAME to a prefix of an interface every node has (`ip -br addr`), e.g. "
        "'^docker,lo,veth' to exclude, or 'ens'/'eth0' to select; '=' before a name matches it exactly.",
        "source": "NVIDIA/nccl src/misc/socket.cc ('NCCL_SOCKET_IFNAME set by environment to %s', "
        "ncclFindInterfaces), src/bootstrap.cc ('Bootstrap : no socket interface found')",
    },
    {
        "id": "env-net-plugin-unloadable",
        "severity": "error",
        "title": "NCCL_NET_PLUGIN names a plugin NCCL could not load",
        "gate": True,
        "lines": [
            {"needle": "set by env", "words": ["NCCL_NET_PLUGIN"], "regex": r"NCCL_NET_PLUGIN " + _VALUE},
            # NCCL 2.12-2.26 'Plugin name set by env to', 2.27 'NET/Plugin: ...' (not TUNER/ or PROFILER/)
            {
                "needle": "set by env",
                "words": ["name"],
                "regex": r"(?:NCCL INFO |NET/Plugin ?: ?)Plugin name set by env to \S+",
            },
        ],
        "when": "net_plugin_unloadable",
        "remedy": "NCCL loads libnccl-net-<NCCL_NET_PLUGIN>.so (or the path given): name the installed "
        "plugin (aws-ofi-nccl: 'ofi' for libnccl-net-ofi.so, or unset it to load libnccl-net.so) and put its "
        "directory on LD_LIBRARY_PATH.",
        "source": "NVIDIA/nccl src/net.cc at v2.12.12-1 ('Plugin name set by env to %s', libnccl-net-%s.so), "
        "src/plugin/plugin_open.cc at v2.27.7-1, src/plugin/net.cc ('NCCL_NET_PLUGIN set by environment to "
        "%s'); aws/aws-ofi-nccl INSTALL.md (libnccl-net-ofi.so)",
    },
]


def _trace(name: str, sid: str, title: str, when: str, remedy: str, source: str) -> dict:
    """An entry read from a shell's trace of `export NAME=...` (one scan needle, 'export ', for all)."""
    return {
        "id": sid,
        "severity": "warning",
        "title": title,
        "gate": True,
        "lines": [{"needle": "export ", "regex": _EXPORT % name, "scan": True}],
        "when": when,
        "remedy": remedy,
        "source": source + "; " + _TRACE,
    }


CATALOG += [
    _trace(
        "NCCL_NET",
        "env-net-forced",
        "the job's script forces NCCL's network to one that is not EFA",
        "net_forced",
        "Unset NCCL_NET, or set it to the plugin's name ('Libfabric' for aws-ofi-nccl >= 1.13, 'AWS "
        "Libfabric' before): NCCL_NET=Socket or IB never uses EFA.",
        "NVIDIA/nccl src/init.cc (NCCL_NET read, not printed), src/plugin/net.cc (the network whose name "
        "matches NCCL_NET, case-insensitive)",
    ),
    _trace(
        "FI_PROVIDER",
        "env-provider-forced",
        "the job's script sets FI_PROVIDER to a provider other than efa",
        "provider_forced",
        "Unset FI_PROVIDER (aws-ofi-nccl >= 1.6 selects efa itself on AWS) or set it to efa.",
        "aws/aws-ofi-nccl src/platform-aws.cpp (FI_PROVIDER read: set and not efa, the efa provider is not "
        "forced), " + _EFA_ENV + " (FI_PROVIDER=efa only for aws-ofi-nccl <= 1.5.0)",
    ),
    _trace(
        "FI_EFA_USE_DEVICE_RDMA",
        "env-device-rdma-off",
        "the job's script turns the EFA device's RDMA off",
        "device_rdma_off",
        "Unset FI_EFA_USE_DEVICE_RDMA: with it off libfabric emulates RDMA and GPUDirect RDMA over EFA is "
        "not used; libfabric >= 1.18 with aws-ofi-nccl >= 1.7 decide themselves.",
        "ofiwg/libfabric man/fi_efa.7.md (FI_EFA_USE_DEVICE_RDMA: 0/false/no/off emulates fi_rma operations "
        "instead of using device RDMA); " + _EFA_ENV,
    ),
]


def exported(facts, sid: str, name: str) -> List[str]:
    """The values a shell trace kept for signature `sid` shows `name` exported with."""
    rx = re.compile(_EXPORT % re.escape(name))
    out = []  # type: List[str]
    for e in facts.signature_evidence.get(sid) or ():
        m = rx.search(e.get("text") or "")
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def _exported_if(sid: str, name: str, bad, what: str):
    """A trace entry's predicate: the values `bad` holds for, said with `what` they do."""

    def judge(facts, tests):
        vals = [v for v in exported(facts, sid, name) if bad(v)]
        if not vals:
            return None
        return "export {}={} in the job's trace: {}".format(name, "/".join(vals), what), list(
            facts.signature_evidence.get(sid) or ()
        )

    return judge


def values(facts, sid: str, name: str) -> List[str]:
    """The values `name` was set to, as the kept lines of signature `sid` and the folded processes say."""
    rx = re.compile(re.escape(name) + " " + _VALUE)
    out = []  # type: List[str]
    for e in facts.signature_evidence.get(sid) or ():
        m = rx.search(e.get("text") or "")
        if m and m.group(1) not in out:
            out.append(m.group(1))
    for p in facts.procs.values():
        v = p.env.get(name)
        if v and v.rstrip(".") not in out:
            out.append(v.rstrip("."))
    return out


def _lines(facts, sid: str, needle: str) -> List[dict]:
    return [e for e in facts.signature_evidence.get(sid) or () if needle in (e.get("text") or "")]


def allows_ll(value: str) -> bool:
    """Whether an NCCL_PROTO value leaves LL or LL128 enabled for some collective (tuning.cc parseList:
    `[func:][^]p1,p2;...`, names case-insensitive; a leading ^ disables the names listed)."""
    for part in value.split(";"):
        elems = part.split(":", 1)[-1].strip()
        if not elems:
            continue
        names = {n.strip().lower() for n in elems.lstrip("^").split(",")}
        if elems.startswith("^"):
            if not {"ll", "ll128"} <= names:
                return True
        elif names & {"ll", "ll128"}:
            return True
    return False


def _vkey(v: str) -> Tuple[int, ...]:
    """A version's leading numbers; ASCII digits only (str.isdigit holds for '²', which int() refuses)."""
    out = []
    for part in re.split(r"[.+-]", v):
        if not (part.isascii() and part.isdigit()):
            break
        out.append(int(part))
    return tuple(out)


def _on_plugin(facts) -> bool:
    """aws-ofi-nccl is seen: its lines, its version, or its network name."""
    from efa_validators.parse.ranks import is_libfabric_net

    return any(
        p.ofi or p.plugin_versions or any(is_libfabric_net(n) for n in p.networks())
        for p in facts.procs.values()
    )


def _protocol_forced(facts, tests):
    sid = "env-protocol-forced"
    vals = values(facts, sid, "NCCL_PROTO")
    if not vals:
        return None
    ev = _lines(facts, sid, "NCCL_PROTO")
    forced = list(facts.signature_evidence.get(_FORCED) or ())
    plugins = sorted({v for p in facts.procs.values() for v in p.plugin_versions}, key=_vkey)
    old = [v for v in plugins if _vkey(v) and _vkey(v) < (1, 6)]
    risky = [v for v in vals if allows_ll(v)]
    if not risky:
        return None  # Simple only: safe, and aws-ofi-nccl sets it itself, so the text cannot tell who did
    said = "NCCL_PROTO={}".format("/".join(risky))
    if risky and forced:
        return (
            said
            + (
                ": it enables LL/LL128 where aws-ofi-nccl needs the Simple protocol (no delivery ordering) "
                "and does not overwrite a value set: results can be corrupted"
            ),
            ev + forced[:1],
            "error",
        )
    if risky and old:
        return (
            said
            + (
                ": it enables LL/LL128 with aws-ofi-nccl %s, which does not force Simple (<= 1.5.0): results "
                "can be corrupted" % old[0]
            ),
            ev,
            "error",
        )
    if not _on_plugin(facts):
        return None  # not on aws-ofi-nccl (or it did not say): the setting is that fabric's own business
    return said + (
        ": it overrides NCCL's protocol choice, and aws-ofi-nccl (>= 1.6) forces Simple only while "
        "NCCL_PROTO is unset"
    ), ev


def _algorithm_forced(facts, tests):
    sid = "env-algorithm-forced"
    vals = values(facts, sid, "NCCL_ALGO")
    if not vals:
        return None
    versions = sorted({v for p in facts.procs.values() for v in p.nccl_versions}, key=_vkey)
    versions += [v for v, _ in facts.headless_versions if v not in versions]
    known = [v for v in versions if _vkey(v)]
    if known and all(_vkey(v) < (2, 12) for v in known):
        return None  # before 2.12 no guidance against it
    said = "NCCL_ALGO={} with NCCL {}".format(
        "/".join(vals), "/".join(known) if known else "(version not printed)"
    )
    return said + ": it overrides the tuner's per-size choice", _lines(facts, sid, "NCCL_ALGO")


_NO_INTERFACE = ("no socket interface found", "No usable listening interface found", "no interface found")


def _socket_ifname_unmatched(facts, tests):
    sid = "env-socket-ifname-unmatched"
    vals = values(facts, sid, "NCCL_SOCKET_IFNAME")
    if not vals:
        return None
    boot = [
        e
        for e in facts.signature_evidence.get("bootstrap-interface") or ()
        if any(s in (e.get("text") or "") for s in _NO_INTERFACE)
    ]
    if not boot:
        return None  # the setting found an interface, or the text does not say
    return "NCCL_SOCKET_IFNAME={}: NCCL found no interface it selects".format("/".join(vals)), _lines(
        facts, sid, "NCCL_SOCKET_IFNAME"
    ) + boot[:1]


def _net_plugin_unloadable(facts, tests):
    sid = "env-net-plugin-unloadable"
    ev = facts.signature_evidence.get(sid) or []
    if not ev or not any(p.plugin_missing() for p in facts.procs.values()):
        return None
    names = values(facts, sid, "NCCL_NET_PLUGIN")
    for e in ev:
        m = re.search(r"(?:NCCL INFO |NET/Plugin ?: ?)Plugin name set by env to (\S+)", e.get("text") or "")
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return "NCCL_NET_PLUGIN names {}, which NCCL could not load".format("/".join(names)), ev + (
        facts.evidence_of("plugin_load_failed")[:1]
    )


def _named(sid: str, what: str, warns: Optional[str] = None):
    """A line-driven entry's message: the settings its kept lines name (NAME=value), and `what` they do;
    `warns`: a pattern for kept WARN lines that count too (a rare form that earns no needle of its own)."""
    rx = re.compile(warns) if warns else None

    def said(facts, tests):
        ev = list(facts.signature_evidence.get(sid) or ())
        if rx is not None:
            ev += [w for w in facts.evidence_of("warn") if rx.search(w.get("text") or "") and w not in ev]
        names = []  # type: List[str]
        for e in ev:
            s = said_of(e.get("text") or "")
            if s and s not in names:
                names.append(s)
        if not names:
            return None
        return "{}: {}".format(", ".join(names), what), ev

    return said


PREDICATES = {
    "net_forced": _exported_if(
        "env-net-forced",
        "NCCL_NET",
        lambda v: v.lower() in ("socket", "ib"),
        "NCCL uses that network, never EFA",
    ),
    "provider_forced": _exported_if(
        "env-provider-forced",
        "FI_PROVIDER",
        lambda v: v.split(";")[0].lower() not in ("efa", "efa-direct", ""),
        "libfabric is kept from the efa provider",
    ),
    "device_rdma_off": _exported_if(
        "env-device-rdma-off",
        "FI_EFA_USE_DEVICE_RDMA",
        lambda v: v.lower() in ("0", "false", "no", "off"),
        "libfabric emulates RDMA, GPUDirect RDMA over EFA is off",
    ),
    "value_refused": _named(
        "env-value-refused",
        "refused, so NCCL or the plugin stops at init",
        # NCCL >= 2.24 parseList, read from the WARN lines kept (src/graph/tuning.cc)
        r"All entries except the first must have a prefix",
    ),
    "value_ignored": _named("env-value-ignored", "not a valid value, the default was used instead"),
    "gdr_forbidden": _named("env-gdr-forbidden", "network transfers go through host memory"),
    "p2p_disabled": _named("env-p2p-disabled", "GPUs of one node talk through host memory"),
    "tuning_override": _named("env-tuning-override", "not the default EFA was measured with"),
    "protocol_forced": _protocol_forced,
    "algorithm_forced": _algorithm_forced,
    "socket_ifname_unmatched": _socket_ifname_unmatched,
    "net_plugin_unloadable": _net_plugin_unloadable,
}


# How a refused or ignored value's line names it: (the line's pattern, the words made of its groups). Each
# line's source is cited where its finding is made above (NCCL's param and parseList lines, aws-ofi-nccl's).
_SAID = (
    (re.compile(r"(\w+) " + _VALUE), "{0}={1}"),
    (re.compile(r"Invalid value (\S*) (?:for|provided for) (\w+)"), "{1}={0}"),
    (re.compile(r"WARNING: (\S+) set to invalid value (\S*)"), "{0}={1}"),
    (
        re.compile(r"All entries except the first must have a prefix: \"([^\"]*)\""),
        "the value '{0}' (an entry after the first without a prefix)",
    ),
    (
        re.compile(r"Unrecognized (?:element|prefix) token \"([^\"]*)\" when parsing \"([^\"]*)\""),
        "the token '{0}' of the value '{1}'",
    ),
)


def said_of(text: str) -> Optional[str]:
    """`NAME=value` of an env line (for a refused or ignored value's message), or None: the first pattern of
    `_SAID` that the line holds."""
    for pattern, words in _SAID:
        m = pattern.search(text)
        if m:
            return words.format(*m.groups())
    return None
