"""The fact predicates of the failure-signature catalog (efa_validators/judge/signatures.py, `when`).

Why apart: the catalog is data, reviewed entry by entry; these read the folded facts
(efa_validators/parse/facts.py) and the lines the catalog's patterns kept, and say what fired in words. Each
takes the Facts and the nccl-tests report object and returns None when its signature does not fire, else
(message, evidence list[, severity]).
"""

import re
from typing import List, Optional

from efa_validators.judge import envcheck
from efa_validators.judge.shortlist import few, ranges
from efa_validators.parse.ranks import is_efa_provider


def crash_kind(facts, kind: str) -> List[dict]:
    """The processes that failed as `kind` (crash, network, relay)."""
    return [c for c in facts.crashes if c["kind"] == kind]


def _plugin_missing(facts, tests):
    procs = [p for p in _procs_and_headless(facts) if p.plugin_missing()]
    if not procs:
        return None
    return "%d process(es) on %s found no net plugin" % (len(procs), _hosts(procs)), facts.evidence_of(
        "plugin_load_failed"
    ) + facts.evidence_of("network")


def _plugin_dep_missing(facts, tests):
    procs = [p for p in _procs_and_headless(facts) if p.plugin_deps_missing]
    if not procs:
        return None
    libs = sorted({lib for p in procs for lib in p.plugin_deps_missing})
    where = _hosts([p for p in procs if p.host]) or "a line without NCCL head"
    return "the net plugin could not be loaded: %s not found (on %s)" % (", ".join(libs), where), (
        facts.evidence_of("plugin_dep_missing")
    )


def _procs_and_headless(facts) -> list:
    """The processes, or, when no line had an NCCL head, the lines without one (a pasted snippet)."""
    return list(facts.procs.values()) or [facts.headless]


def _plugin_init_failed(facts, tests):
    procs = [p for p in _procs_and_headless(facts) if p.plugin_init_failed or p.plugin_net_init_failed]
    if not procs:
        return None
    return "aws-ofi-nccl failed to initialise in %d process(es) on %s" % (
        len(procs),
        _hosts(procs),
    ), facts.evidence_of("plugin_init_failed") + facts.evidence_of("warn")


def _socket_fallback(facts, tests):
    procs = [p for p in _procs_and_headless(facts) if _on_sockets(p)]
    if not procs:
        return None
    return "NCCL uses TCP sockets in %d process(es) on %s" % (len(procs), _hosts(procs)), facts.evidence_of(
        "network_socket"
    ) + facts.evidence_of("internal_net")[:2]


def _on_sockets(p) -> bool:
    """Socket is its network: named so, or (NCCL < 2.7 prints no 'Using network') no plugin, and Socket the
    only transport NCCL set up for itself ('NET/Socket : Using' after 'NET/IB : No device found')."""
    if any(_is_socket(n) for n in p.networks()):
        return True
    return not p.networks() and p.plugin_missing() and set(p.internal_nets) == {"Socket"}


def _network_ib(facts, tests):
    procs = [p for p in facts.procs.values() if any(n.strip().upper() == "IB" for n in p.networks())]
    if not procs:
        return None
    said = "NCCL uses NET/IB in %d process(es) on %s" % (len(procs), _hosts(procs))
    return said, facts.evidence_of("network") + facts.evidence_of("channel_nogdr")[:2] + facts.evidence_of(
        "channel_gdr"
    )[:2]


def _provider_not_efa(facts, tests):
    procs = [p for p in facts.procs.values() if any(not is_efa_provider(v) for v in p.providers)]
    if not procs:
        return None
    names = sorted({v for p in procs for v in p.providers if not is_efa_provider(v)})
    return "provider {} on {}".format(", ".join(names), _hosts(procs)), facts.evidence_of("provider_other")


def _gdr_off(facts, tests):
    if facts.gdr_verdict() is not False:
        return None
    disabled = any(p.gdr_disabled for p in facts.procs.values())
    on_rdma_net = any(
        r.gdr(p.gdr_read0) is False and any(not _is_socket(n) for n in r.net_names)
        for p in facts.procs.values()
        for r in p.ranks.values()
    )
    if not disabled and not on_rdma_net:
        return None  # only socket channels lack GDR: socket-fallback says what is wrong
    return facts.gdr_reason(), facts.evidence_of("gdr_disabled") + facts.evidence_of("channel_nogdr")


def _row_evidence(rows, bad) -> List[dict]:
    out = []
    for row in rows:
        if bad(row):
            out.append({"file": row.get("file"), "line": row.get("line"), "text": row.get("text")})
            if len(out) >= 5:
                break
    return out


def _cells(row):
    return [c for c in (row.get("out_of_place"), row.get("in_place")) if c]


def _tests_wrong(facts, tests):
    if not tests:
        return None
    wrong = tests.get("wrong") or 0
    nonfinite = tests.get("nonfinite") or 0
    if wrong <= 0 and nonfinite <= 0:
        return None
    ev = _row_evidence(
        tests.get("rows") or [],
        lambda r: r.get("nonfinite") or any((c.get("wrong") or 0) > 0 for c in _cells(r)),
    )
    return "nccl-tests reports %d wrong value(s) and %d Inf/NaN cell(s)" % (wrong, nonfinite), ev


def _tests_no_results(facts, tests):
    if not tests or tests.get("rows") or crash_kind(facts, "crash"):
        return None  # a crash explains a missing table: it is not a hang
    if not tests.get("ranks") and not tests.get("nthread"):
        return None
    if tests.get("out_of_bounds") is not None or tests.get("avg_busbw") is not None:
        return None  # its footer was printed: the run ended (the table was lost or pasted apart)
    ev = [e for e in (tests.get("evidence") or {}).values() if isinstance(e, dict)]
    return "nccl-tests printed its header but no result row (stalled or killed)", [
        {"file": e.get("file"), "line": e.get("line"), "text": e.get("text")} for e in ev[:3]
    ]


def _describe(crashes) -> str:
    parts = []
    for c in crashes:
        who = "rank %s" % c["rank"] if c.get("rank") is not None else "a process"
        text = "{}{}: {}".format(who, f" on {c['host']}" if c.get("host") else "", c["what"])
        if text not in parts:
            parts.append(text)
    more = f" (and {len(parts) - 4} more)" if len(parts) > 4 else ""
    return "; ".join(parts[:4]) + more


_SRUN_EXIT = re.compile(r"srun: error: (\S+): (tasks? [\d,-]+): Exited with exit code (\d+)")


def _crashed(facts, tests):
    crashes = crash_kind(facts, "crash")
    if not crashes:
        said = []  # type: List[str]  # srun's own line for a task that exited non-zero
        for e in facts.signature_evidence.get("crash") or ():
            m = _SRUN_EXIT.search(e.get("text") or "")
            if m and "%s on %s: exited with code %s" % (m.group(2), m.group(1), m.group(3)) not in said:
                said.append("%s on %s: exited with code %s" % (m.group(2), m.group(1), m.group(3)))
        return ("; ".join(said[:4]), []) if said else None
    relayed = crash_kind(facts, "relay")
    text, ev = _describe(crashes), [c["evidence"] for c in crashes + relayed]
    origin = _chain_origin(facts, crashes)
    before = _warn_before(facts, crashes, origin)
    if (
        before is not None
    ):  # the failure line says what kind; the WARN printed where it began says what failed
        text += "; the WARN before it: %s" % _message_of(before["text"])
        ev.insert(0, before)
    elif origin is not None:  # no WARN: the first return of NCCL's chain is where the failure began
        text += "; it began at %s" % _message_of(origin["text"])
        ev.insert(0, origin)
    return text, ev


def _chain_origin(facts, crashes) -> Optional[dict]:
    """The first line of NCCL's return chain (`file.cc:N -> RC`) before the first crash, on its host: where
    the error began. Why the first: each caller prints its own line as the error passes up, so the first
    printed is the deepest, and the test's failure line is only where the chain surfaced."""
    for c in crashes:
        at = c["evidence"]
        for r in facts.evidence_of("return_chain"):
            if (
                r.get("file") == at.get("file")
                and (r.get("line") or 0) < (at.get("line") or 0)
                and (not c.get("host") or c["host"] in (r.get("text") or ""))
            ):
                return r
    return None


def _warn_before(facts, crashes, origin: Optional[dict] = None) -> Optional[dict]:
    """The last WARN kept before the first crash whose only text is NCCL's 'internal error', on its host;
    with a return chain (`origin`, its first line), the last WARN before the chain began, whatever the
    error: the WARN NCCL printed where the failure began names its cause."""
    for c in crashes:
        if origin is None and "internal error" not in (c.get("error") or c["what"]):
            continue
        at = (
            origin
            if origin is not None and origin.get("file") == c["evidence"].get("file")
            else c["evidence"]
        )
        warns = [
            w
            for w in facts.evidence_of("warn")
            if w.get("file") == at.get("file")
            and (w.get("line") or 0) < (at.get("line") or 0)
            and (not c.get("host") or c["host"] in (w.get("text") or ""))
            and "internal error" not in (w.get("text") or "")
        ]
        if warns:
            return warns[-1]
    return None


def _message_of(text: str) -> str:
    """A line's message: what follows its NCCL level, else the line."""
    for level in (" NCCL WARN ", " NCCL INFO "):
        i = text.find(level)
        if i >= 0:
            return text[i + len(level) :].strip()
    return text.strip()


_HEAD_HOST = re.compile(r"([^\s:\[\]|]+):\d+:\d+ \[[^\]\s]*\]")
_OFI_ERROR = re.compile(
    r"strerror: (.*?)(?:, len: -?\d+|$)|Error: -?\d+ \((.*?)\)?(?:\. Completed length|$)"
    r"|Error: ([A-Za-z][^.]*)|\berr: -?\d+, message: (.*?)(?: My EFA addr|$)"
)
_PEER = re.compile(r"Peer host id: ([^\s,]+)|Peer EFA addr: ([^\s,]+)|from peer ([^\s,]+)")
_STATUS = re.compile(
    r"Unresponsive (?:receiver|remote) \([^)]*\)|Unreachable remote \([^)]*\)|Unexpected status[^.,;]*"
    r"|Got completion[^,;]*"
)


def completion_detail(text: str) -> str:
    """`on HOST: <the provider's error text> (peer <host id or address>)` of a completion error line."""
    head = _HEAD_HOST.search(text)
    m = _OFI_ERROR.search(text)
    what = next((g for g in m.groups() if g), None) if m else None
    if what:
        what = what.split(" My EFA addr", 1)[0].strip()
    else:
        st = _STATUS.search(text)
        what = st.group(0).strip() if st else _message_of(text)[:160]
    found = [None, None, None]  # type: List[Optional[str]]  # host id, EFA address, IB peer: the first given
    for p in _PEER.finditer(text):
        for i, value in enumerate(p.groups()):
            if value and value not in ("N/A", "(null)") and found[i] is None:
                found[i] = value
    peer = next((v for v in found if v), None)
    where = " on %s" % head.group(1) if head else ""
    return "completion error%s: %s%s" % (where, what, " (peer %s)" % peer if peer else "")


def _completion_errors(facts, tests):
    ev = facts.signature_evidence.get("completion-error") or []
    if not ev:
        return None
    said = []
    own = [e for e in ev if " Test NCCL failure " not in (e.get("text") or "")]  # not nccl-tests' relay of it
    for e in own or ev:
        d = completion_detail(e.get("text") or "")
        if d not in said:
            said.append(d)
    return "; ".join(said[:3]) + (" (and more)" if len(said) > 3 else ""), []


def _ranks_disagree(facts, tests):
    """Processes of one host that found different NIC counts (between hosts: hosts-differ says it)."""
    by_host = {}  # type: Dict[str, Dict[int, list]]
    for p in facts.procs.values():
        if len(p.nics) == 1:
            by_host.setdefault(p.host, {}).setdefault(next(iter(p.nics)), []).append(p)
    parts, ev = [], []
    for host in sorted(by_host):
        sides = by_host[host]
        if len(sides) < 2:
            continue
        said = ["%d nics in %d process(es)" % (n, len(sides[n])) for n in sorted(sides, reverse=True)]
        parts.append("on %s the plugin found %s" % (host, " and ".join(said)))
        for n in sorted(sides):
            line = next(
                (
                    e
                    for e in facts.evidence_of("provider")
                    if host in e["text"] and "found %d nic" % n in e["text"]
                ),
                None,
            )
            if line is not None:
                ev.append(line)
    if not parts:
        return None
    return "; ".join(parts[:3]), ev


def _stalled(facts, tests):
    """A connection that broke or timed out (named by rank and host), or a header with no result row."""
    broken = crash_kind(facts, "network")
    parts, ev = [], []
    if broken:
        parts.append(_describe(broken))
        ev = [c["evidence"] for c in broken]
        origin = _chain_origin(facts, broken)  # where the failure began, as for a crash (`_crashed`)
        before = _warn_before(facts, broken, origin) if origin is not None else None
        if before is not None:
            parts[-1] += "; the WARN before it: %s" % _message_of(before["text"])
            ev.insert(0, before)
        elif origin is not None:
            parts[-1] += "; it began at %s" % _message_of(origin["text"])
            ev.insert(0, origin)
    no_rows = _tests_no_results(facts, tests)
    if no_rows is not None:
        parts.append(no_rows[0])
        ev += no_rows[1]
    if not parts:
        return None
    return "; ".join(parts), ev


def _watchdog(facts, tests):
    """Which ranks timed out, and (the world size known) which no timeout line names: where to look."""
    ev = facts.evidence_of("watchdog")
    if not facts.counts.get("watchdog"):
        return None
    text = "%d watchdog timeout line(s)" % facts.counts["watchdog"]
    timed_out, cap = facts.timed_out_ranks()
    if timed_out is None:
        return text + " from %d or more ranks" % cap, ev
    if timed_out:
        text += " from rank(s) %s" % ranges(timed_out)
        world = facts.world_nranks
        if world is not None and world <= cap and max(timed_out) < world:
            quiet = [r for r in range(world) if r not in timed_out]
            # said as the log says it: a rank number in a timeout line may be a subgroup's rank
            if quiet:
                text += "; no timeout line names rank(s) %s" % ranges(quiet)
            else:
                text += "; every rank of %d is named" % world
    return text, ev


def _python_exception(facts, tests):
    """The exception line that ends the first traceback (the first kept after it in its file), else the
    traceback alone."""
    tracebacks = facts.signature_evidence.get("python-exception") or []
    if not tracebacks:
        return None
    first = tracebacks[0]
    raised = next(
        (
            e
            for e in facts.signature_evidence.get("exception-line") or ()
            if e.get("file") == first.get("file") and (e.get("line") or 0) > (first.get("line") or 0)
        ),
        None,
    )
    if raised is None:
        return "a traceback (its exception line not kept)", []
    return _message_of(raised.get("text") or "")[:200], [raised]


_GDRCOPY = re.compile(r"Failed to initialize GDRCopy: (.*)|GIN (requires GDRCopy [\d.]+\+?)")


def _gdrcopy_failed(facts, tests):
    """Why aws-ofi-nccl's GIN could not use GDRCopy, as its line says (`Could not load libgdrapi.so`)."""
    said = []  # type: List[str]
    for e in facts.signature_evidence.get("gdrcopy-unavailable") or ():
        m = _GDRCOPY.search(e.get("text") or "")
        why = (m.group(1) or m.group(2) or "").strip()[:160] if m else ""
        if why and why not in said:
            said.append(why)
    return ("GDRCopy: %s" % "; ".join(said[:2]), []) if said else None


_START_FAILED = re.compile(r"\bstart failed on ([^\s:]+):? ?(.*)")
_CXI_FAILED = re.compile(r"CXI alloc failed on (cxi\d+):? ?(.*)")


def _launch_failed(facts, tests):
    """Where the launch failed and why, as the lines say it (the first three different ones)."""
    said = []  # type: List[str]
    for e in facts.signature_evidence.get("launcher-start-failed") or ():
        text = e.get("text") or ""
        m = _START_FAILED.search(text)
        cxi = _CXI_FAILED.search(text)
        if m:
            part = "start failed on %s" % m.group(1) + (
                ": %s" % m.group(2).strip()[:160] if m.group(2) else ""
            )
        elif cxi:
            part = "CXI alloc failed on %s" % cxi.group(1) + (
                ": %s" % cxi.group(2)[:160] if cxi.group(2) else ""
            )
        else:
            continue
        if part not in said:
            said.append(part)
    return ("; ".join(said[:3]), []) if said else None


_STUCK = re.compile(r"got stuck for (\d+) seconds")
_C10D_RANK = re.compile(r"[\[ ][Rr]ank ?(\d+)\]")


def _watchdog_stuck(facts, tests):
    """How long the watchdog was stuck, and on which rank(s) (c10d's log prefix `[... Rank N]`)."""
    ev = facts.signature_evidence.get("watchdog-hang") or []
    if not ev:
        return None
    secs = sorted({m.group(1) for e in ev for m in [_STUCK.search(e.get("text") or "")] if m})
    ranks = sorted({int(r.group(1)) for e in ev for r in _C10D_RANK.finditer(e.get("text") or "")})
    said = "the watchdog got stuck" + (" for %s seconds" % "/".join(secs) if secs else "")
    if ranks:
        said += " on rank(s) %s" % ranges(ranks)
    return said, []


def _driver_older_than_runtime(facts, tests):
    bad = []
    for p in facts.procs.values():
        for drv, rt in p.driver_runtime:
            if rt and drv and _vkey(drv) < _vkey(rt):
                bad.append((p, drv, rt))
    if not bad:
        return None
    p, drv, rt = bad[0]
    return f"CUDA driver {drv} is older than runtime {rt} on {_hosts([b[0] for b in bad])}", (
        facts.evidence_of("cuda_driver")
    )


def _warn_lines(facts, tests):
    n = facts.counts.get("warn", 0)
    if not n:
        return None
    return "%d NCCL WARN line(s)" % n, facts.evidence_of("warn")


PREDICATES = {
    "plugin_missing": _plugin_missing,
    "plugin_dep_missing": _plugin_dep_missing,
    "plugin_init_failed": _plugin_init_failed,
    "socket_fallback": _socket_fallback,
    "network_ib": _network_ib,
    "provider_not_efa": _provider_not_efa,
    "gdr_off": _gdr_off,
    "tests_wrong": _tests_wrong,
    "tests_no_results": _tests_no_results,
    "watchdog": _watchdog,
    "watchdog_stuck": _watchdog_stuck,
    "launch_failed": _launch_failed,
    "gdrcopy_failed": _gdrcopy_failed,
    "python_exception": _python_exception,
    "crashed": _crashed,
    "completion_errors": _completion_errors,
    "ranks_disagree": _ranks_disagree,
    "stalled": _stalled,
    "driver_older_than_runtime": _driver_older_than_runtime,
    "warn_lines": _warn_lines,
}  # type: Dict[str, Callable]
PREDICATES.update(envcheck.PREDICATES)


def _is_socket(name: str) -> bool:
    return name.strip().lower() == "socket"


def _hosts(procs) -> str:
    return few(sorted({p.host or "(no NCCL head)" for p in procs}))


def _vkey(v: str):
    out = []
    for part in v.split("."):
        try:
            out.append(int(part))
        except ValueError:
            out.append(0)
    return tuple(out)
