"""The questions a report asks of the fold (facts.Facts): EFA and GDR verdicts, silent ranks and hosts.

Why apart from the fold: the fold runs per line and must stay lean; these run once per report, over every
process and rank, and are memoized while a report is built (`reading`). Each verdict is fail closed: True
only with positive evidence on every rank and host, None where evidence is missing.
"""

from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from efa_validators.parse.ranks import WATCHDOG_MAX, Proc, Rank, Where, _ev, _int, is_libfabric_net


class Reading:
    """The reading half of facts.Facts (a base class of it): it reads the fold's records (`procs`,
    `headless`, `host_first`, ...) and asks the fold's `not_kept_reason`."""

    _memo = None  # type: Optional[Dict[str, Any]]

    @contextmanager
    def reading(self) -> Iterator["Reading"]:
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

    def coverage(self) -> Tuple[Optional[int], int]:
        """(world size as printed, how many of its ranks printed their init line)."""
        return self.world_nranks, len(self.world_ranks)

    def _sorted_procs(self) -> List[Proc]:
        return list(
            self.memo("procs", lambda: sorted(self.procs.values(), key=lambda p: (p.host, _int(p.pid) or 0)))
        )
