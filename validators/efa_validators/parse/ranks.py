"""What one process and its ranks showed: the records the fold (facts.Facts) fills.

Why apart from the fold: a process (host:pid) and its ranks (host:pid + the device in the NCCL head) are
the unit every question asks about (is it on EFA, is GDR in use, what did it print first); the fold only
fills them, and a scan worker sends them as plain data (`Proc.state`, `Rank.state`) for the parent to
merge. Also here: the evidence record every report quotes (`_ev`) and the NET channel run the fold takes
whole (`NetRun`).
"""

from operator import attrgetter
from typing import Dict, List, Optional, Sequence, Set

from efa_validators.scan.redact import redact_text


def is_efa_provider(name: Optional[str]) -> bool:
    """`efa`, `efa;ofi_rxr` (libfabric < 1.8 printed the utility provider too), `efa-direct`."""
    return bool(name) and name.split(";")[0].strip().lower() in ("efa", "efa-direct")


EVIDENCE_PER_KIND = 5
TEXT_MAX = 400
# a signature's line is kept longer: its end may hold what the finding names (a completion error's peer
# host id follows the provider's text and two addresses); at most EVIDENCE_PER_KIND of them per signature
SIGNATURE_TEXT_MAX = 1000
ENV_MAX = 64
# what a line without an NCCL head may still tell (provider, plugin, network: not channels or ranks)
HEADLESS_KINDS = frozenset(
    (
        "provider",
        "plugin_init",
        "plugin_loaded",
        "plugin_load_failed",
        "plugin_init_failed",
        "plugin_net_init_failed",
        "plugin_dep_missing",
        "libfabric_version",
        "platform",
        "network",
        "gdr_disabled",
        "gdr_enabled",
        "internal_net",
        "ib_error",
        "cuda_driver",
        "ofi",
        "socket_if",
    )
)
CRASHES_MAX = 32
INTRA_PATHS_MAX = 8  # intra-node transports kept per rank
WATCHDOG_MAX = 4096  # watchdog ranks kept
_SHARED = {}  # type: Dict[frozenset, frozenset]  # Proc.put: one copy of each distinct set
_SHARED_MAX = 4096
_GROWN = {}  # type: Dict[tuple, frozenset]  # Proc.put: (a shared set, a value) -> the shared set with it


def _ev(event, cut: bool = False, limit: int = TEXT_MAX) -> dict:
    """A line as evidence, its secrets masked (efa_validators.scan.redact, the table `validators run` masks
    by):
    every line a report quotes, in JSON, Markdown or JUnit, is made here. Masked before it is cut, so no cut
    leaves half a secret a rule would no longer see. An NCCL line holds none: it is passed unchanged."""
    text = redact_text(event.text)
    text = text if len(text) <= limit else text[:limit] + "..."
    out = {"file": event.file, "line": event.lineno, "text": text}
    if cut:
        out["cut"] = True
    return out


class Where:
    """A line as evidence: what `_ev` reads of an event."""

    __slots__ = ("file", "lineno", "text")

    def __init__(self, file: Optional[str], lineno: int, text: str) -> None:
        self.file, self.lineno, self.text = file, lineno, text


class NetRun:
    """NET channel lines of one rank in a row, summed up for the fold (`Facts._fold_run`):
    counts, network names, each evidence kind's count and first lines, the rank's first line of each kind.

    Why: a rank prints its NET channels together (32 lines per communicator on p5); `analyze.prepare`
    sums them and the fold takes one NetRun instead of one event per line."""

    __slots__ = ("first", "counts", "names", "firsts", "keeps", "peer")

    def __init__(self, groups: dict, cut: bool = False, peer: Optional[tuple] = None) -> None:
        """`groups`: {(net, gdr, proxy, pci): [(lineno, text)] in line order}, in the order of their first
        lines (a rank's channels share one or two tails: each group counts as a whole); `cut`: lines
        truncated. Only a group's first EVIDENCE_PER_KIND entries are read as (lineno, text): past them an
        entry only counts (analyze.prepare puts the line number there, not cutting the line's text out).
        `peer`: (the highest rank the lines name, lineno, text of the first line naming it), or None."""
        self.first = next(iter(groups.values()))[0]
        self.peer = peer
        counts = dict.fromkeys(("net", "net_unnamed", "net_proxied", "net_gdr", "net_pci", "net_nogdr"), 0)
        counts["net_unclear"] = 0
        names = []  # type: List[str]
        firsts = {}  # type: Dict[str, Tuple[int, str]]
        keeps = {}  # type: Dict[str, list]  # kind -> [kind, count, first lines]; in the order first seen
        for (net, gdr, proxy, pci), group in groups.items():
            n = len(group)
            counts["net"] += n
            if net:
                if net not in names:
                    names.append(net)
            else:
                counts["net_unnamed"] += n
            if proxy is not None:
                counts["net_proxied"] += n
            if cut and gdr is False:
                gdr = None  # the '/GDRDMA' suffix may be what was cut off
            if gdr is True:
                counts["net_gdr"] += n
                if pci:
                    counts["net_pci"] += n
                kind, attr, marked = "channel_gdr", "ev_gdr", False
            elif gdr is False:
                counts["net_nogdr"] += n
                kind, attr, marked = "channel_nogdr", "ev_nogdr", False
            else:
                counts["net_unclear"] += n
                kind, attr, marked = "channel_unclear", "ev_unclear", True
            firsts.setdefault(attr, group[0])
            _count(keeps, kind, n, group, marked)
            if not is_libfabric_net(net):
                _count(keeps, "channel_other_net", n, group, False)
        self.counts, self.names, self.firsts = counts, names, firsts
        self.keeps = list(keeps.values())

    @classmethod
    def of(cls, lines: list, cut: bool = False) -> "NetRun":
        """The run of `lines`: [(lineno, text, (net, gdr, proxy, pci))] in line order."""
        groups = {}  # type: Dict[tuple, list]
        for lineno, text, tail in lines:
            groups.setdefault(tail, []).append((lineno, text))
        return cls(groups, cut)


def _count(keeps: dict, kind: str, n: int, group: list, cut: bool) -> None:
    """Add a group of `n` lines to `kind`'s count and first lines (kept in line order across groups)."""
    k = keeps.get(kind)
    first = [(lineno, text, cut) for lineno, text in group[:EVIDENCE_PER_KIND]]
    if k is None:
        keeps[kind] = [kind, n, first]
        return
    k[1] += n
    if first[0][0] < k[2][-1][0] or len(k[2]) < EVIDENCE_PER_KIND:
        k[2] = sorted(k[2] + first)[:EVIDENCE_PER_KIND]


def is_libfabric_net(name: Optional[str]) -> bool:
    """aws-ofi-nccl names its network 'AWS Libfabric' (< 1.13) or 'Libfabric' (1.13+)."""
    if not name:
        return False
    low = name.lower()
    return "libfabric" in low or low.startswith("aws ofi") or low == "ofi"


class Rank:
    """One GPU rank: (host, pid, device as printed in its NCCL head)."""

    # channel counts: start at 0, and add up when two records of one rank are merged
    COUNTERS = (
        "net",
        "net_gdr",
        "net_nogdr",
        "net_unclear",
        "net_proxied",
        "net_pci",
        "net_unnamed",
        "intra",
    )
    __slots__ = (
        "host",
        "pid",
        "dev",
        "rank",
        "nranks",
        "busid",
        "nnodes",
        "init_complete",
        "net_names",
        "intra_paths",
        "ev_gdr",
        "ev_nogdr",
        "ev_unclear",
        "first_line",
    ) + COUNTERS

    def __init__(self, host: str, pid: str, dev: str) -> None:
        self.host, self.pid, self.dev = host, pid, dev
        self.rank = None  # type: Optional[int]
        self.nranks = None  # type: Optional[int]
        self.busid = None  # type: Optional[str]
        self.nnodes = None  # type: Optional[int]
        self.init_complete = False
        for name in self.COUNTERS:  # net_unnamed: NET channels whose network name was cut off
            setattr(self, name, 0)
        self.net_names = set()  # type: Set[str]
        self.intra_paths = {}  # type: Dict[str, None]  # a set in the order first seen (capped: see _channel)
        self.ev_gdr = self.ev_nogdr = self.ev_unclear = None  # type: Optional[dict]
        self.first_line = None  # type: Optional[dict]

    # _merge: a rank new to its process takes COMM from the state it is built from (an existing rank never
    # does: a partial's comm lines are folded instead); FIRSTS, the first evidence, keep the earlier value
    COMM = ("rank", "nranks", "busid", "nnodes", "init_complete")
    FIRSTS = ("ev_gdr", "ev_nogdr", "ev_unclear", "first_line")

    def state(self, comms: Sequence[tuple] = ()) -> tuple:
        """This rank as plain data for `_merge` (a worker's partial pickles it several times faster than the
        object), None for each part still as a new Rank has it; `comms`: its comm lines not folded yet
        (Facts.comms)."""
        counts, firsts, comm = _COUNTS(self), _FIRSTS(self), _COMM(self)
        return (
            self.dev,
            counts if any(counts) else None,
            self.net_names or None,
            self.intra_paths or None,
            None if firsts == _NO_FIRSTS else firsts,
            None if comm == _NO_COMM else comm,
            comms,
        )

    def gdr(self, read0: bool = False) -> Optional[bool]:
        """GDR on this rank's NET channels. `read0`: its process printed NCCL's `GPU Direct RDMA Enabled ...,
        read 0` (GDR for receives, sends through host memory by design): with receives over /GDRDMA, its
        channels without /GDRDMA are those sends."""
        if self.net_nogdr and not (read0 and self.net_gdr):
            return False
        if self.net == 0 or self.net_unclear:
            return None
        return True

    def to_json(self, proc: "Proc") -> dict:
        return {
            "rank": self.rank,
            "nranks": self.nranks,
            "host": self.host,
            "pid": _int(self.pid),
            "device": self.dev,
            "bus_id": self.busid,
            "init_complete": self.init_complete,
            "net_channels": self.net,
            "gdr_channels": self.net_gdr,
            "non_gdr_channels": self.net_nogdr,
            "unclear_channels": self.net_unclear,
            "proxied_channels": self.net_proxied,
            "pci_gdr_channels": self.net_pci,
            "networks": sorted(self.net_names),
            "intra_node_channels": self.intra,
            "intra_node_transports": sorted(self.intra_paths),
            "provider": _one(proc.providers),
            "nics": _one(proc.nics),
            "efa": proc.efa_for(self),
            "gdr": False if proc.gdr_disabled else self.gdr(proc.gdr_read0),
            "evidence": [e for e in (self.ev_nogdr or self.ev_unclear, self.ev_gdr, self.first_line) if e][
                :2
            ],
        }


_COUNTS, _FIRSTS, _COMM = attrgetter(*Rank.COUNTERS), attrgetter(*Rank.FIRSTS), attrgetter(*Rank.COMM)
_NO_FIRSTS, _NO_COMM = _FIRSTS(Rank("", "", "")), _COMM(Rank("", "", ""))


class Proc:
    """One process (host:pid): what the NCCL library and its net plugin printed there.

    Its sets (PROC_SETS: versions, providers, networks, ...) are frozensets, written only by `put`.
    """

    def __init__(self, host: str, pid: str) -> None:
        self.host, self.pid = host, pid
        self.platforms = {}  # type: Dict[str, str]
        self.env = {}  # type: Dict[str, str]
        self.ofi = False
        self.only_spliced = True  # every line of this process began inside another line
        self.plugin_loaded = False
        self.plugin_load_failed = False
        self.plugin_init_failed = False
        self.gdr_disabled = False
        self.ib_error = False  # a completion error from NCCL's IB transport (net_ib.cc)
        self.plugin_net_init_failed = False  # NCCL >= 2.28 "Failed to initialize NET plugin"
        self.gdr_read0 = False  # NCCL < 2.13 "GPU Direct RDMA Enabled for GPU ... read 0": sends without GDR
        self.ranks = {}  # type: Dict[str, Rank]

    def put(self, name: str, value) -> None:
        """Add `value` to the set `name` (one of PROC_SETS). The sets are frozensets shared between
        processes that hold the same values (a log of 16k ranks has 16k processes, each with ~12 sets
        that almost always hold the same one value): memory grows with distinct values, not processes."""
        cur = getattr(self, name)
        if value not in cur:
            key = (cur, value)
            grown = _GROWN.get(key)  # each new process adds the same values to the same sets: made once
            if grown is None:
                grown = _shared(cur | {value})
                if len(_GROWN) >= _SHARED_MAX:
                    _GROWN.clear()
                _GROWN[key] = grown
            self.__dict__[name] = grown

    def state(self, comms: Dict[Rank, List[tuple]]) -> tuple:
        """This process as plain data for `_merge` (see Rank.state); `comms`: Facts.comms."""
        d = self.__dict__
        return (
            self.host,
            self.pid,
            tuple([(n, d[n]) for n in PROC_SETS if n in d]),
            self.platforms or None,
            self.env or None,
            tuple([f for f in PROC_FLAGS if d[f]]),
            self.only_spliced,
            tuple([r.state(comms.get(r, ())) for r in self.ranks.values()]),
        )

    def plugin_ok(self) -> bool:
        return self.plugin_loaded or bool(self.plugin_versions) or self.ofi

    def plugin_missing(self) -> bool:
        """NCCL said it found no net plugin (or could not load it) and no plugin line followed."""
        return self.plugin_load_failed and not self.plugin_ok()

    def on_efa_evidence(self) -> bool:
        """This process printed a provider line and every provider it printed is efa."""
        return bool(self.providers) and all(is_efa_provider(p) for p in self.providers)

    def networks(self) -> Set[str]:
        """The network NCCL chose: its 'Using network' line, else the NET channel names (NCCL < 2.7)."""
        return self.using_network or self.channel_nets

    def counter_efa(self) -> Optional[str]:
        """Why this process is positively not on EFA, or None.

        A report asks it several times of every process (8192 of them at 8192 ranks) and processes share
        their sets (`put`): the answer is kept per value of what it reads (_COUNTER_READS, bounded)."""
        key = _COUNTER_READS(self)
        why = _COUNTERS.get(key, _UNKNOWN)
        if why is _UNKNOWN:
            why = self._counter_efa()
            if len(_COUNTERS) >= _SHARED_MAX:
                _COUNTERS.clear()
            _COUNTERS[key] = why
        return why

    def _counter_efa(self) -> Optional[str]:
        for n in sorted(self.networks()):
            if not is_libfabric_net(n):
                return f"network {n}"
        for p in sorted(self.providers):
            if not is_efa_provider(p):
                return f"provider {p}"
        if self.plugin_init_failed:
            return "aws-ofi-nccl initialization failed"
        if self.plugin_net_init_failed and not self.providers:
            return "NCCL failed to initialize the NET plugin"
        if self.ib_error:
            return "NCCL's own IB transport (net_ib) reported a completion error"
        if self.plugin_missing():
            if self.plugin_deps_missing:
                return "net plugin not loaded: %s missing" % ", ".join(sorted(self.plugin_deps_missing))
            if self.internal_nets:
                nets = "/".join(sorted(self.internal_nets))
                return f"no net plugin; NCCL's internal {nets} transport in use"
        return None

    def no_gdr_path(self) -> Optional[str]:
        """Why GPUDirect RDMA over EFA cannot be in use in this process (Socket, no plugin), or None."""
        for n in sorted(self.networks() | self.internal_nets):
            if n.strip().lower() == "socket" and (n in self.networks() or self.plugin_missing()):
                return "uses TCP sockets (network Socket)"
        if self.plugin_missing():
            return "no net plugin loaded"
        if self.plugin_init_failed or self.plugin_net_init_failed:
            return "the net plugin failed to initialize"
        return None

    def efa_for(self, rank: Rank) -> Optional[bool]:
        if self.counter_efa() is not None:
            return False
        if rank.net == 0:
            return None
        if any(not is_libfabric_net(n) for n in rank.net_names):
            return False
        if rank.net_unnamed:
            return None
        if self.providers and all(is_efa_provider(p) for p in self.providers):
            return True
        return None

    def platform(self) -> Optional[str]:
        for via in ("running_on", "tuner", "selected"):
            if via in self.platforms:
                return self.platforms[via]
        return None


PROC_SETS = (
    "nccl_versions",
    "cuda_versions",
    "drivers",
    "driver_runtime",
    "plugin_names",
    "plugin_versions",
    "libfabric",
    "providers",
    "fabrics",
    "nics",
    "ndev",
    "using_network",
    "net_initialized",
    "channel_nets",
    "internal_nets",
    "plugin_deps_missing",
)
for _name in PROC_SETS:  # the empty default; Proc.put replaces it
    setattr(Proc, _name, frozenset())
# all that Proc._counter_efa reads (networks(), plugin_missing() and plugin_ok() included): its answer's key
# (tests/validators/parse/test_facts_cache.py reads those methods' source and holds this list to it)
COUNTER_READS = (
    "using_network",
    "channel_nets",
    "providers",
    "plugin_init_failed",
    "plugin_net_init_failed",
    "ib_error",
    "plugin_load_failed",
    "plugin_loaded",
    "plugin_versions",
    "ofi",
    "plugin_deps_missing",
    "internal_nets",
)
_COUNTER_READS = attrgetter(*COUNTER_READS)
_COUNTERS = {}  # type: Dict[tuple, Optional[str]]
_UNKNOWN = object()
PROC_FLAGS = (
    "ofi",
    "plugin_loaded",
    "plugin_load_failed",
    "plugin_init_failed",
    "gdr_disabled",
    "ib_error",
    "plugin_net_init_failed",
    "gdr_read0",
)


def _shared(values: frozenset) -> frozenset:
    """The one copy of `values` (Proc.put)."""
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    return _SHARED.setdefault(values, values)


def _one(values):
    if not values:
        return None
    if len(values) == 1:
        return next(iter(values))
    return sorted(values)


def _int(v) -> Optional[int]:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
