"""The fold over events: what each process, rank and host showed.

Why a fold: logs are streamed (the pre-flight runner feeds launcher output as it comes)
and can be gigabytes, so state is kept per process (host:pid), per rank (host:pid + the
device in the NCCL head) and per host, as sets and counters; evidence is the first few
lines of each kind. Memory grows with ranks and channels, never with lines, and the
result does not depend on the order ranks interleave their output.

The records it fills (Proc, Rank, the evidence record) are in ranks.py; the questions a report asks of
the result (EFA, GDR, silent ranks) in reading.py, a base class of Facts.
"""

from typing import Callable, List, Optional, Tuple

from efa_validators.parse.ranks import (
    CRASHES_MAX,
    ENV_MAX,
    EVIDENCE_PER_KIND,
    HEADLESS_KINDS,
    INTRA_PATHS_MAX,
    SIGNATURE_TEXT_MAX,
    TEXT_MAX,
    WATCHDOG_MAX,
    NetRun,
    Proc,
    Rank,
    Where,
    _ev,
    _shared,
    is_efa_provider,
)
from efa_validators.parse.reading import Reading
from efa_validators.scan.redact import redact_text

# Ranks and processes kept with their evidence. Past the cap they are counted, not stored (a finding says how
# many; efa and gdr are not shown for them, so the verdict cannot pass): memory and the report stay bounded at
# any rank count (issue 23, item 10: a 32 MB log naming 300,000 ranks took 1.5 GB and wrote 425 MB). 32768
# ranks, 4096 p5 nodes, is the largest job bench/ measures from real-log lines (134 MiB): every real size up
# to it keeps each rank's detail. A scan worker's fold of its range is not capped: the range bounds it.
RANKS_MAX = 32768
PROCS_MAX = RANKS_MAX
COUNTED_MAX = 1 << 19  # distinct ranks (processes) past the cap counted exactly up to here; past it, at least
WORLD_RANKS_MAX = 1 << 19  # rank numbers of the world kept for coverage; past it, `seen` is at least that
HOSTS_KEPT = 4096  # hosts whose first line is kept (Facts.host_first): past it a host is counted, not cited


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


class Facts(Reading):
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
