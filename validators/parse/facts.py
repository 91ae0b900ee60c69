"""The fold over events: what each process, rank and host showed.

Why a fold: logs are streamed (the pre-flight runner feeds launcher output as it comes)
and can be gigabytes, so state is kept per process (host:pid), per rank (host:pid + the
device in the NCCL head) and per host, as sets and counters; evidence is the first few
lines of each kind. Memory grows with ranks and channels, never with lines, and the
result does not depend on the order ranks interleave their output.
"""

from contextlib import contextmanager
from operator import attrgetter
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

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
HOSTS_KEPT = 4096  # hosts whose first line is kept (Facts.host_first): past it a host is counted, not cited
INTRA_PATHS_MAX = 8  # intra-node transports kept per rank
WATCHDOG_MAX = 4096  # watchdog ranks kept
# Ranks and processes kept with their evidence. Past the cap they are counted, not stored (a finding says how
# many; efa and gdr are not shown for them, so the verdict cannot pass): memory and the report stay bounded at
# any rank count (issue 23, item 10: a 32 MB log naming 300,000 ranks took 1.5 GB and wrote 425 MB). 32768
# ranks, 4096 p5 nodes, is the largest job bench/ measures from real-log lines (134 MiB): every real size up
# to it keeps each rank's detail. A scan worker's fold of its range is not capped: the range bounds it.
RANKS_MAX = 32768
PROCS_MAX = RANKS_MAX
COUNTED_MAX = 1 << 19  # distinct ranks (processes) past the cap counted exactly up to here; past it, at least
WORLD_RANKS_MAX = 1 << 19  # rank numbers of the world kept for coverage; past it, `seen` is at least that
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


class Counted:
    """Distinct keys counted, not kept: their hashes (one process makes and reads them), at most `most`;
    past it the count is a floor (`full`)."""

    def __init__(self, most: Optional[int] = None) -> None:
        self.hashes = set()  # type: Set[int]
        self.most, self.full = COUNTED_MAX if most is None else most, False

    def add(self, key: tuple) -> None:
        self.add_hash(hash(key))

    def update(self, other: "Counted") -> None:
        """Add what a scan worker counted (forked from this process: the same string hashes)."""
        for h in other.hashes:
            self.add_hash(h)
        self.full = self.full or other.full

    def add_hash(self, h: int) -> None:
        if h not in self.hashes:
            if len(self.hashes) >= self.most:
                self.full = True
            else:
                self.hashes.add(h)

    def __len__(self) -> int:
        return len(self.hashes)


class Facts:
    """Accumulates events from one or more logs; see `add`.

    `partial`: the fold of one range of a log, which `merge` adds to the fold of the lines before it
    (a scan worker folds its range; issue 15). Its evidence records count lines from the range's start
    (`made` lists them all, so `merge` shifts them in one loop) and its comm lines are kept, not folded
    (`comms`): what they leave depends on the rank's comm lines before them (see `_comm_fold`).
    """

    def __init__(self, partial: bool = False) -> None:
        self.procs = {}  # type: Dict[Tuple[str, str], Proc]
        self.headless_versions = set()  # type: Set[Tuple[str, Optional[str]]]
        self.counts = {}  # type: Dict[str, int]
        self.evidence = {}  # type: Dict[str, List[dict]]
        self.signature_counts = {}  # type: Dict[str, int]
        self.signature_evidence = {}  # type: Dict[str, List[dict]]
        self.world_nranks = None  # type: Optional[int]
        self.world_ranks = set()  # type: Set[int]
        self.nnodes = set()  # type: Set[int]
        self.watchdog_ranks = set()  # type: Set[int]
        self.crashes = []  # type: List[dict]  # processes that failed or died: rank, host, what
        # NCCL lines pasted without their `host:pid:tid [dev]` head: a process of their own, never a rank,
        # read for the summary values and as counter-evidence, never as evidence for a rank
        self.headless = Proc("", "")
        # the highest rank number a channel line names, and that line (file, lineno, text): past the world's
        # size it is a line of another job (judge/world.py); line numbers shifted by `merge` itself
        self.peer_top = None  # type: Optional[Tuple[int, Optional[str], int, str]]
        self.host_first = {}  # type: Dict[str, Tuple[Optional[str], int, str]]  # host -> its first line
        self.made = [] if partial else None  # type: Optional[List[dict]]  # every evidence record made
        self.comms = {} if partial else None  # type: Optional[Dict[Rank, List[tuple]]]  # see _comm_fold
        # past RANKS_MAX / PROCS_MAX (not in a partial): what is not kept is folded into these two, never
        # reported, so the counts and first lines per kind are those of a fold that kept everything
        self.capped = not partial
        self.kept_ranks = 0
        self.spill, self.spill_rank = Proc("", ""), Rank("", "", "")
        self.ranks_not_kept, self.procs_not_kept = Counted(), Counted()
        self.kept = None  # type: Optional[frozenset]  # keep_only

    def keep_only(self, procs: frozenset) -> None:
        """A partial: every process but these is spilled and counted (the parent is full and keeps these)."""
        self.kept = procs

    def full(self) -> bool:
        """No process will be kept any more (only those kept already)."""
        return self.capped and len(self.procs) >= PROCS_MAX

    # ------------------------------------------------------------------ folding
    def _ev(self, event, cut: bool = False, limit: int = TEXT_MAX) -> dict:
        """Every evidence record is made here: a partial lists them (`made`) for `merge` to shift."""
        out = _ev(event, cut, limit)
        if self.made is not None:
            self.made.append(out)
        return out

    def _keep(self, kind: str, event, cut: bool = False) -> None:
        counts = self.counts
        counts[kind] = counts.get(kind, 0) + 1
        lst = self.evidence.get(kind)  # not setdefault: no list built per call (hot on dense logs)
        if lst is None:
            lst = self.evidence[kind] = []
        if len(lst) < EVIDENCE_PER_KIND:
            lst.append(self._ev(event, cut))

    def add_signature_hits(self, ids: List[str], event_like) -> None:
        for sid in ids:
            self.signature_counts[sid] = self.signature_counts.get(sid, 0) + 1
            lst = self.signature_evidence.setdefault(sid, [])
            if len(lst) < EVIDENCE_PER_KIND:
                lst.append(self._ev(event_like, limit=SIGNATURE_TEXT_MAX))

    def _rank(self, proc: Proc, event) -> Rank:
        r = proc.ranks.get(event.dev)
        if r is None:
            r = self._new_rank(proc, event.host, event.pid, event.dev)
            if r is not self.spill_rank:
                r.first_line = self._ev(event)
        return r

    def _new_proc(self, host: str, pid: str) -> Proc:
        """A process first seen: kept, or past PROCS_MAX counted and folded into `spill`."""
        if (self.kept is not None and (host, pid) not in self.kept) or self.full():
            self.procs_not_kept.add((host, pid))
            return self.spill
        p = self.procs[(host, pid)] = Proc(host, pid)
        return p

    def _new_rank(self, proc: Proc, host: str, pid: str, dev: str) -> Rank:
        """A rank new to `proc`: kept, or past RANKS_MAX (or in a process not kept) counted and folded into
        `spill_rank`."""
        if proc is self.spill or (self.capped and self.kept_ranks >= RANKS_MAX):
            self.ranks_not_kept.add((host, pid, dev))
            return self.spill_rank
        self.kept_ranks += 1
        r = proc.ranks[dev] = Rank(host, pid, dev)
        return r

    def add(self, event, cut: bool = False) -> None:
        """Fold one event. `cut` marks a line that was truncated (its tail may be missing)."""
        kind = event.kind
        d = event.data
        cut = cut or event.cut
        if kind == "crash":
            if len(self.crashes) < CRASHES_MAX:
                # its `what` quotes the failure's text (`Test NCCL failure ... '<error>'`): masked too
                said = {k: redact_text(v) if isinstance(v, str) else v for k, v in d.items()}
                self.crashes.append(dict(said, evidence=self._ev(event)))
            self._keep(kind, event)
            return
        if event.host is None:
            if kind == "nccl_version":
                self.headless_versions.add((d["version"], d.get("cuda")))
                self._keep(kind, event)
            elif kind == "watchdog":
                if d.get("rank") is not None and len(self.watchdog_ranks) < WATCHDOG_MAX:
                    self.watchdog_ranks.add(d["rank"])
                self._keep(kind, event)
            elif kind == "error":
                self._keep(kind, event)
            elif kind in HEADLESS_KINDS:
                self._fold(self.headless, kind, d, event, cut)
            return
        key = (event.host, event.pid)  # its process (every headed event: inline)
        p = self.procs.get(key)
        if p is None:
            p = self._new_proc(event.host, event.pid)
            self._host_seen(event.host, event.file, event.lineno, event.text)
        if p.only_spliced and not event.spliced:
            p.only_spliced = False
        if kind == "channel":
            self._channel(p, event, d, cut)
        elif kind == "comm":
            self._comm(p, event, d)
        else:
            self._fold(p, kind, d, event, cut)

    def _fold(self, p: Proc, kind: str, d: dict, event, cut: bool) -> None:
        """Fold a process-level event (everything but channel and comm lines) into `p`."""
        if kind == "nccl_version":
            p.put("nccl_versions", d["version"])
            if d.get("cuda"):
                p.put("cuda_versions", d["cuda"])
            self._keep(kind, event)
        elif kind == "cuda_driver":
            p.put("drivers", d["version"])
            p.put("driver_runtime", (d["version"], d.get("runtime")))
            self._keep(kind, event)
        elif kind == "cuda_runtime":
            p.put("driver_runtime", (None, d["version"]))
        elif kind == "plugin_init":
            p.ofi = True
            p.put("plugin_names", d["name"])
            p.put("plugin_versions", d["version"])
            self._keep(kind, event)
        elif kind == "plugin_loaded":
            p.plugin_loaded = True
            self._keep(kind, event)
        elif kind == "plugin_load_failed":
            p.plugin_load_failed = True
            self._keep(kind, event)
        elif kind == "plugin_init_failed":
            p.ofi = True
            p.plugin_init_failed = True
            self._keep(kind, event)
        elif kind == "libfabric_version":
            p.ofi = True
            p.put("libfabric", d["version"])
            self._keep(kind, event)
        elif kind == "platform":
            p.ofi = True
            p.platforms.setdefault(d["via"], d["name"])
            self._keep(kind, event)
        elif kind == "provider":
            if cut and d.get("nics") is None:
                return
            p.ofi = True
            p.put("providers", d["provider"])
            if d.get("fabric"):
                p.put("fabrics", d["fabric"])
            if d.get("nics") is not None:
                p.put("nics", d["nics"])
            self._keep(kind, event)
            if not is_efa_provider(d["provider"]):
                self._keep("provider_other", event)
        elif kind == "network":
            if cut:
                return
            p.put("using_network", d["name"])
            self._keep(kind, event)
            if d["name"].strip().lower() == "socket":
                self._keep("network_socket", event)
        elif kind == "net_initialized":
            p.put("net_initialized", d["name"])
        elif kind == "gdr_disabled":
            p.gdr_disabled = True
            self._keep(kind, event)
        elif kind == "gdr_enabled":
            if d.get("read") == 0:
                p.gdr_read0 = True
                self._keep("gdr_read0", event)
        elif kind == "ofi_ndev":
            p.ofi = True
            p.put("ndev", d["ndev"])
        elif kind == "ofi":
            p.ofi = True
        elif kind == "env":
            if len(p.env) < ENV_MAX:
                p.env.setdefault(d["name"], d["value"])
        elif kind in ("warn", "error", "return_chain"):
            self._keep(kind, event)
        elif kind == "socket_if":
            self.counts["socket_if"] = self.counts.get("socket_if", 0) + 1
            p.put("internal_nets", "Socket")
            # every such line is kept, not each process's first: a piece folded alone (Facts.merge) cannot
            # know what the process printed before it
            self._keep("internal_net", event)
        elif kind == "internal_net":
            p.put("internal_nets", d["name"])
            self._keep("internal_net", event)
        elif kind == "ib_error":
            p.ib_error = True
            self._keep("ib_error", event)
        elif kind == "plugin_net_init_failed":
            p.plugin_net_init_failed = True
            self._keep("plugin_init_failed", event)
        elif kind == "plugin_dep_missing":
            p.put("plugin_deps_missing", d["lib"])
            self._keep("plugin_dep_missing", event)

    def _host_seen(self, host: str, file: Optional[str], lineno: int, text: str) -> None:
        """Keep a host's first line (the first HOSTS_KEPT hosts): what a host without evidence did print."""
        if host not in self.host_first and len(self.host_first) < HOSTS_KEPT:
            self.host_first[host] = (file, lineno, text[:TEXT_MAX])

    def _peer(self, rank: int, file: Optional[str], lineno: int, text: str) -> None:
        """A channel line names `rank`: keep the highest rank named and its first line."""
        top = self.peer_top
        if top is None or rank > top[0]:
            self.peer_top = (rank, file, lineno, text[:TEXT_MAX])

    def _channel(self, p: Proc, event, d: dict, cut: bool) -> None:
        r = self._rank(p, event)
        if d.get("src") is not None and d.get("dst") is not None:
            self._peer(max(d["src"], d["dst"]), event.file, event.lineno, event.text)
        transport = d.get("transport")
        if transport == "NET":
            self._net(p, r, event, d, cut)
        elif transport == "COLLNET":
            self.counts["collnet_channels"] = self.counts.get("collnet_channels", 0) + 1
        else:
            r.intra += 1
            path = d.get("path")
            if path and len(r.intra_paths) < INTRA_PATHS_MAX:
                r.intra_paths[path] = None

    def _net(self, p: Proc, r: Rank, event, d: dict, cut: bool) -> None:
        """Fold one NET channel line: a run of one (a cut line's missing '/GDRDMA' leaves GDR unclear)."""
        tail = (d.get("net"), d.get("gdr"), d.get("proxy"), d.get("pci"))
        self._fold_run(p, r, event.file, 0, NetRun({tail: [(event.lineno, event.text)]}, cut))

    def add_net_run(
        self, host: str, pid: str, dev: str, file: Optional[str], base: int, run: "NetRun"
    ) -> None:
        """Fold a run of whole NET channel lines of one rank (`net_run` summed them up), as `add` would fold
        their channel events one by one; its line numbers count from `base`."""
        key = (host, pid)
        p = self.procs.get(key)
        if p is None:
            p = self._new_proc(host, pid)
            self._host_seen(host, file, base + run.first[0], run.first[1])
        p.only_spliced = False
        r = p.ranks.get(dev)
        if r is None:
            r = self._new_rank(p, host, pid, dev)
            if r is not self.spill_rank:
                r.first_line = self._ev(Where(file, base + run.first[0], run.first[1]))
        self._fold_run(p, r, file, base, run)

    def _fold_run(self, p: Proc, r: Rank, file: Optional[str], base: int, run: "NetRun") -> None:
        if run.peer is not None:
            self._peer(run.peer[0], file, base + run.peer[1], run.peer[2])
        for name in ("net", "net_unnamed", "net_proxied", "net_gdr", "net_pci", "net_nogdr", "net_unclear"):
            setattr(r, name, getattr(r, name) + run.counts[name])
        for name in run.names:
            r.net_names.add(name)
            p.put("channel_nets", name)
        for attr, cut in (("ev_gdr", False), ("ev_nogdr", False), ("ev_unclear", True)):
            line = run.firsts.get(attr)
            if line is not None and getattr(r, attr) is None:
                setattr(r, attr, self._ev(Where(file, base + line[0], line[1]), cut))
        counts, evidence = self.counts, self.evidence
        for kind, n, lines in run.keeps:
            counts[kind] = counts.get(kind, 0) + n
            lst = evidence.get(kind)
            if lst is None:
                lst = evidence[kind] = []
            for lineno, text, cut in lines[: EVIDENCE_PER_KIND - len(lst)]:
                lst.append(self._ev(Where(file, base + lineno, text), cut))

    def _comm(self, p: Proc, event, d: dict) -> None:
        r = self._rank(p, event)
        comm = (d["nranks"], d["rank"], d.get("busid"), d.get("phase") == "COMPLETE", d.get("nnodes"))
        self._comm_fold(r, comm)

    def _comm_fold(self, r: Rank, comm: tuple) -> None:
        """Fold a comm line of rank `r`: (nranks, rank, bus id, init complete, nnodes).

        What it leaves depends on the rank's comm lines before it (the largest communicator wins, its first
        rank number, the last bus id given with it), so a partial keeps them and `merge` folds them in order,
        after the lines before them (the world's size and ranks seen do not depend on the order)."""
        if self.comms is not None:
            self.comms.setdefault(r, []).append(comm)
            return
        n, rank, busid, complete, nnodes = comm
        if r.nranks is None or n > r.nranks or (n == r.nranks and r.rank is None):
            r.nranks, r.rank = n, rank
            if busid:
                r.busid = busid
        if complete and n == r.nranks:
            r.init_complete = True
        if nnodes:
            self.nnodes.add(nnodes)
        if self.world_nranks is None or n > self.world_nranks:
            self.world_nranks = n
            self.world_ranks = set()
        if n == self.world_nranks and len(self.world_ranks) < WORLD_RANKS_MAX:
            self.world_ranks.add(rank)

    def export(self) -> tuple:
        """A partial's facts as plain data for `merge` (a scan worker sends it: tuples, dicts and sets
        pickle several times faster than the objects)."""
        comms = self.comms or {}
        return (
            tuple([p.state(comms) for p in self.procs.values()]),
            self.headless.state(comms),
            self.headless_versions,
            self.counts,
            self.evidence,
            self.signature_counts,
            self.signature_evidence,
            self.watchdog_ranks,
            self.crashes,
            self.made or [],
            (self.peer_top, self.host_first),
            (tuple(comms.get(self.spill_rank, ())), self.ranks_not_kept, self.procs_not_kept),
        )

    def merge(self, part: tuple, base: int) -> None:
        """Add `part` (`export` of a partial: the fold of the lines that follow those folded here, its line
        numbers counted from `base`): the result is the fold of all these lines in one pass. `part` is used
        up (its evidence records are shifted and taken)."""
        states, headless, versions, counts, evidence, sig_counts, sig_evidence, watchdog, crashes, made = (
            part[:10]
        )
        self._merge_world(part[10], base)
        spilled = part[11]  # what the range spilled (keep_only)
        for ev in made:  # the one place a partial's line numbers are shifted
            ev["line"] += base
        if self.made is not None:
            self.made.extend(made)
        procs, fold = self.procs, self._comm_fold
        for state in states:  # a process first seen there comes after those seen here
            key = (state[0], state[1])
            p = procs.get(key)
            if p is None:
                p = self._new_proc(*key)
                if p is self.spill:
                    self._spill_state(key, state[7])
                    continue
            _merge(p, state, fold, self._new_rank)
        _merge(self.headless, headless, fold)
        spilled_comms, ranks_not_kept, procs_not_kept = spilled
        for comm in spilled_comms:
            fold(self.spill_rank, comm)
        self.ranks_not_kept.update(ranks_not_kept)
        self.procs_not_kept.update(procs_not_kept)
        self.headless_versions |= versions
        _add_kept(self.counts, self.evidence, counts, evidence)
        _add_kept(self.signature_counts, self.signature_evidence, sig_counts, sig_evidence)
        for rank in watchdog:  # capped as `add` caps it (past the cap nothing reads which ranks)
            if len(self.watchdog_ranks) >= WATCHDOG_MAX:
                break
            self.watchdog_ranks.add(rank)
        self.crashes.extend(crashes[: CRASHES_MAX - len(self.crashes)])

    def _spill_state(self, key: Tuple[str, str], ranks: tuple) -> None:
        """A process not kept (Proc.state's ranks): what a fold that kept it leaves outside it, nothing more
        (the spill is never read): its ranks counted, its comm lines folded (the world's size and ranks)."""
        host, pid = key
        for rank in ranks:
            self.ranks_not_kept.add((host, pid, rank[0]))
            for comm in rank[6]:
                self._comm_fold(self.spill_rank, comm)

    def _merge_world(self, world: tuple, base: int) -> None:
        """Add a later range's highest rank named and hosts' first lines (Facts.export's last part)."""
        peer_top, host_first = world
        if peer_top is not None:
            rank, file, lineno, text = peer_top
            self._peer(rank, file, base + lineno, text)
        for host, (file, lineno, text) in host_first.items():
            self._host_seen(host, file, base + lineno, text)

    def finalize(self) -> None:
        """Give spliced lines back to their process.

        A line that began inside another rank's output may have that output's tail glued to
        its hostname (`...Libfabz-2:2:6 [0] NCCL INFO`); when a real process with the same pid
        has a hostname that ends the glued one, the lines are that process's.
        """
        for key, s in list(self.procs.items()):
            if not s.only_spliced:
                continue
            for other in self.procs.values():
                if (
                    other is not s
                    and not other.only_spliced
                    and other.pid == s.pid
                    and s.host.endswith(other.host)
                ):
                    _merge(other, s.state({}))
                    del self.procs[key]
                    break

    # ------------------------------------------------------------------ reading
    _memo = None  # type: Optional[Dict[str, Any]]

    @contextmanager
    def reading(self) -> Iterator["Facts"]:
        """While a report is built nothing is folded: the sorted views and the verdicts the checks ask
        for again and again are computed once (at 8192 ranks they were sorted ten times; issue 15)."""
        self._memo = {}
        try:
            yield self
        finally:
            self._memo = None

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()`, once per `reading()`; outside one, every time."""
        memo = self._memo
        if memo is None:
            return compute()
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def evidence_of(self, kind: str) -> List[dict]:
        return list(self.evidence.get(kind, ()))

    def all_ranks(self) -> List[Tuple[Proc, Rank]]:
        return list(self.memo("all_ranks", self._all_ranks))

    def _all_ranks(self) -> List[Tuple[Proc, Rank]]:
        out = [(p, r) for p in self.procs.values() for r in p.ranks.values()]
        out.sort(
            key=lambda pr: (pr[1].rank is None, pr[1].rank or 0, pr[0].host, _int(pr[0].pid) or 0, pr[1].dev)
        )
        return out

    def net_channels(self) -> int:
        return sum(r.net for p in self.procs.values() for r in p.ranks.values())

    def efa_verdict(self) -> Tuple[Optional[bool], str]:
        """True only with positive evidence everywhere, False on counter-evidence, else None."""
        return self.memo("efa", self._efa_of_all)

    def _efa_of_all(self) -> Tuple[Optional[bool], str]:
        for p in self._sorted_procs():
            why = p.counter_efa()
            if why is not None:
                return False, f"{p.host}:{p.pid}: {why}"
        why = self.headless.counter_efa() if not self.procs else None
        if why is not None:
            return False, f"a line without NCCL head: {why}"
        for p, r in self.all_ranks():
            bad = sorted(n for n in r.net_names if not is_libfabric_net(n))
            if bad:
                return False, f"{p.host}:{p.pid} NET channel via {bad[0]}"
        net_ranks = [(p, r) for p, r in self.all_ranks() if r.net]
        if not net_ranks:
            return None, "no NET (inter-node) channel in the log: EFA was not exercised or not logged"
        for p, r in net_ranks:
            if not p.providers:
                return None, f"{p.host}:{p.pid} has NET channels but printed no provider line"
            if r.net_unnamed:
                return None, f"{p.host}:{p.pid} [{r.dev}] has a NET channel line cut before its network name"
        silent = self.silent_rank() or self.not_kept_reason() or self.silent_host()
        if silent is not None:
            return None, silent
        return True, "%d rank(s) with %d NET channel(s), all via %s, provider efa" % (
            len(net_ranks),
            sum(r.net for _, r in net_ranks),
            "/".join(sorted({n for _, r in net_ranks for n in r.net_names})),
        )

    def _silent(self) -> Optional[Tuple[Proc, Rank]]:
        return self.memo("silent", self._first_silent)

    def _first_silent(self) -> Optional[Tuple[Proc, Rank]]:
        for p, r in self.all_ranks():
            if not r.net and not p.on_efa_evidence():
                return p, r
        return None

    def silent_rank(self) -> Optional[str]:
        """The first rank that shows neither an efa provider nor a NET channel, described; None if none.

        Every rank must prove it: a rank whose process printed only its init (its other lines lost,
        another log not given) could be on any transport.
        """
        found = self._silent()
        if found is None:
            return None
        p, r = found
        who = f"rank {r.rank}" if r.rank is not None else "a rank"
        return (
            f"{who} ({p.host}:{p.pid} [{r.dev}]) printed no provider line and no NET channel: "
            "its transport is not shown"
        )

    def silent_rank_evidence(self) -> List[dict]:
        """The first line of the first silent rank, else of the first silent host (what it did print), for
        the check's evidence."""
        found = self._silent()
        if found is not None:
            return [found[1].first_line] if found[1].first_line else []
        host = self.memo("silent_host", self._first_silent_host)
        line = self.host_first.get(host) if host is not None else None
        return [_ev(Where(*line))] if line is not None else []

    def silent_host(self) -> Optional[str]:
        """The first host (by name) none of whose processes shows an efa provider or a NET channel,
        described with its first line; None if none.

        Every host the log names must prove it: a host that printed one line (a process with no rank, no
        provider) would otherwise ride on the other hosts' evidence (issue 23, item 1)."""
        host = self.memo("silent_host", self._first_silent_host)
        if host is None:
            return None
        line = self.host_first.get(host)
        where = " (its first line: %s:%s)" % (line[0] or "<stdin>", line[1]) if line is not None else ""
        return "host %s printed no provider line and no NET channel%s: its transport is not shown" % (
            host,
            where,
        )

    def _first_silent_host(self) -> Optional[str]:
        shown, named = set(), set()
        for p in self.procs.values():
            named.add(p.host)
            if p.host not in shown and (p.on_efa_evidence() or any(r.net for r in p.ranks.values())):
                shown.add(p.host)
        silent = sorted(named - shown)
        return silent[0] if silent else None

    def gdr_verdict(self) -> Optional[bool]:
        return self._gdr()[0]

    def gdr_reason(self) -> str:
        return self._gdr()[1]

    def _gdr(self) -> Tuple[Optional[bool], str]:
        return self.memo("gdr", self._gdr_of_all)

    def _gdr_of_all(self) -> Tuple[Optional[bool], str]:
        for p in self._sorted_procs():
            if p.gdr_disabled:
                return False, f"GDR disabled in {p.host}:{p.pid}"
        if self.headless.gdr_disabled and not self.procs:
            return False, "GDR disabled (a line without NCCL head)"
        total = gdr = nogdr = unclear = 0
        first_bad = None
        sends = 0  # channels without /GDRDMA of ranks whose NCCL reads without GDR by design ('read 0')
        for p, r in self.all_ranks():
            total += r.net
            gdr += r.net_gdr
            unclear += r.net_unclear
            if r.gdr(p.gdr_read0) is not False:
                sends += r.net_nogdr
                continue
            nogdr += r.net_nogdr
            if r.net_nogdr and first_bad is None:
                first_bad = f"{p.host}:{p.pid} [{r.dev}]"
        if nogdr:
            return False, "%d of %d NET channel(s) without /GDRDMA (first on %s)" % (nogdr, total, first_bad)
        if total == 0:
            return None, "no NET channel in the log"
        if unclear:
            return None, "%d NET channel line(s) cut or garbled before their GDR flag" % unclear
        for p in self._sorted_procs() or [self.headless]:
            why = p.no_gdr_path()
            if why is not None:
                who = f"{p.host}:{p.pid}" if p.host else "a line without NCCL head:"
                return None, f"{who} {why}: GPUDirect RDMA is not in use there"
        hosts = self._host_gdr_channels()
        for host in sorted(hosts):
            if not hosts[host]:
                return None, f"host {host} printed no NET channel with /GDRDMA: GDR not shown there"
        silent = self.silent_rank() or self.not_kept_reason() or self.silent_host()
        if silent is not None:
            return None, silent
        if sends:
            return True, (
                "%d NET channel(s) use /GDRDMA; %d without it are sends of ranks whose NCCL printed 'GPU "
                "Direct "
                "RDMA Enabled ..., read 0' (receives over GDR, sends through host memory by design)"
                % (gdr, sends)
            )
        return True, "all %d NET channel(s) use /GDRDMA" % gdr

    def gdr_read0_sends(self) -> int:
        """NET channels without /GDRDMA that `gdr` counts as sends of ranks whose NCCL printed 'read 0'."""
        return sum(
            r.net_nogdr
            for p, r in self.all_ranks()
            if p.gdr_read0 and r.gdr(True) is not False and r.net_nogdr
        )

    def _host_gdr_channels(self) -> Dict[str, int]:
        """{host: NET channels with /GDRDMA} for every host the log names (one with no rank has none)."""
        out = {}  # type: Dict[str, int]
        for p in self.procs.values():
            out[p.host] = out.get(p.host, 0) + sum(r.net_gdr for r in p.ranks.values())
        return out

    def timed_out_ranks(self) -> Tuple[Optional[Set[int]], int]:
        """(ranks that printed a torch watchdog timeout, the cap): None past the cap, where which ranks
        were kept depends on how the log was split, not on its order."""
        ranks = self.watchdog_ranks
        return (None if len(ranks) >= WATCHDOG_MAX else ranks), WATCHDOG_MAX

    def not_kept(self) -> Tuple[int, int, bool]:
        """(ranks, processes) counted past RANKS_MAX / PROCS_MAX and not kept, and whether those counts are
        floors (more than COUNTED_MAX distinct ones)."""
        ranks, procs = self.ranks_not_kept, self.procs_not_kept
        return len(ranks), len(procs), ranks.full or procs.full

    def not_kept_reason(self) -> Optional[str]:
        """Why efa and gdr cannot be shown for every rank: ranks or processes past the cap, or None."""
        ranks, procs, floor = self.not_kept()
        if not ranks and not procs:
            return None
        return (
            "%s%d rank(s) and %d process(es) past the first %d ranks (%d processes) were counted, not "
            "kept: their evidence was not read"
            % ("more than " if floor else "", ranks, procs, RANKS_MAX, PROCS_MAX)
        )

    def coverage(self) -> Tuple[Optional[int], int]:
        """(world size as printed, how many of its ranks printed their init line)."""
        return self.world_nranks, len(self.world_ranks)

    def _sorted_procs(self) -> List[Proc]:
        return list(
            self.memo("procs", lambda: sorted(self.procs.values(), key=lambda p: (p.host, _int(p.pid) or 0)))
        )


def _add_kept(counts: dict, evidence: dict, src_counts: dict, src_evidence: dict) -> None:
    """Add counts and first lines kept per kind (`Facts._keep`) of later lines: new kinds come after."""
    for kind, n in src_counts.items():
        counts[kind] = counts.get(kind, 0) + n
    for kind, lines in src_evidence.items():
        lst = evidence.get(kind)
        if lst is None:
            lst = evidence[kind] = []
        lst.extend(lines[: EVIDENCE_PER_KIND - len(lst)])


def _merge(
    into: Proc,
    state: tuple,
    comm_fold: Optional[Callable[[Rank, tuple], None]] = None,
    new_rank: Optional[Callable[[Proc, str, str, str], Rank]] = None,
) -> None:
    """Add a process's facts (Proc.state) to `into`; a rank new to `into` takes the state's whole
    (`new_rank`, Facts.merge: the rank kept, or the spill where it is not).

    `comm_fold` (Facts.merge): the state is the fold of the lines after those `into` folded, of the same
    process; the result is one fold of both: what `add` caps (env, intra-node paths) capped in line order,
    the state's comm lines folded. Without it (Facts.finalize) the state is a spliced copy of `into`'s
    process: a rank `into` has keeps its comm state, env and only_spliced stay."""
    _, _, sets, platforms, env, flags, only_spliced, ranks = state
    attrs = into.__dict__
    for name, values in sets:
        cur = getattr(into, name)
        if not cur:
            attrs[name] = _shared(values)
        elif not values <= cur:
            attrs[name] = _shared(cur | values)
    if platforms:
        for via, name in platforms.items():
            into.platforms.setdefault(via, name)
    for flag in flags:
        attrs[flag] = True
    sequential = comm_fold is not None
    if sequential and not only_spliced:
        into.only_spliced = False
    if sequential and env:
        mine_env = into.env
        for name, value in env.items():
            if len(mine_env) >= ENV_MAX:
                break
            mine_env.setdefault(name, value)
    host, pid, has = into.host, into.pid, into.ranks
    for dev, counters, net_names, paths, firsts, comm, comms in ranks:
        mine = has.get(dev)
        if mine is None:
            if new_rank is None:
                mine = has[dev] = Rank(host, pid, dev)
            else:
                mine = new_rank(into, state[0], state[1], dev)
            if comm is not None:
                for name, value in zip(Rank.COMM, comm):
                    setattr(mine, name, value)
        if counters is not None:
            for name, n in zip(Rank.COUNTERS, counters):
                if n:
                    setattr(mine, name, getattr(mine, name) + n)
        if net_names:
            mine.net_names.update(net_names)
        if paths:
            mine_paths = mine.intra_paths
            if sequential:
                for path in paths:
                    if len(mine_paths) >= INTRA_PATHS_MAX:
                        break
                    mine_paths[path] = None
            else:
                mine_paths.update(paths)
        if firsts is not None:
            for name, ev in zip(Rank.FIRSTS, firsts):
                if ev is not None and getattr(mine, name) is None:
                    setattr(mine, name, ev)
        if sequential:
            for comm_line in comms:
                comm_fold(mine, comm_line)


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
