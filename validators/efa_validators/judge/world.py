"""Does the log agree with itself and with the run about its world (ranks, hosts)?

Why: every other check reads the lines as they come; a log that lies about its world (one host's lines with
`nRanks`/`nNodes` rewritten to match, a host that printed one line, channels of a bigger job) would pass on
the evidence of the hosts it does show (issue 23, item 1). The counts the log states (NCCL's `nRanks` and
`nNodes`, nccl-tests' `# Rank` lines) and the count the run states (`--nodes`) must agree with the ranks
and hosts the lines come from. A count above another is a contradiction (fail); a count below one means
output is missing (unknown: give every host's log). Nothing to compare gives no check at all.
Pure: facts and the nccl-tests object in, one check and its findings out.
"""

from typing import Dict, List, Optional, Tuple

from efa_validators.judge.bandwidth import _rank_ev
from efa_validators.judge.shortlist import few
from efa_validators.parse.facts import Facts
from efa_validators.parse.ranks import Where, _ev

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
NAME = "world-consistent"


def outside_world(facts: Facts) -> Optional[Tuple[str, List[dict]]]:
    """(why, evidence) when a line names a rank at or past the world's size (`nRanks`), else None.

    A channel names two ranks of its communicator, a comm line its own rank: none can be >= the size of the
    largest communicator. Such a line belongs to another (bigger) job: counter-evidence against the log."""
    world = facts.world_nranks
    if world is None:
        return None
    top = facts.peer_top
    if top is not None and top[0] >= world:
        rank, file, lineno, text = top
        why = "a channel line names rank %d, outside the world of %d ranks (nRanks %d): %s:%d" % (
            rank,
            world,
            world,
            file or "<stdin>",
            lineno,
        )
        return why, [_ev(Where(file, lineno, text))]
    for p, r in facts.all_ranks():
        if r.rank is not None and r.nranks is not None and r.rank >= r.nranks:
            line = r.first_line or {}
            why = "%s:%s [%s] says it is rank %d of nRanks %d (its first line: %s:%s)" % (
                p.host,
                p.pid,
                r.dev,
                r.rank,
                r.nranks,
                line.get("file") or "<stdin>",
                line.get("line"),
            )
            return why, [r.first_line] if r.first_line else []
    return None


def _duplicates(facts: Facts) -> Optional[Tuple[str, List[dict]]]:
    """Two processes that claim one rank of the world: a log of two runs, or one host's lines copied."""
    world = facts.world_nranks
    owner: Dict[int, tuple] = {}
    for p, r in facts.all_ranks():
        if r.rank is None or r.nranks != world:
            continue
        first = owner.setdefault(r.rank, (p, r))
        if first[1] is not r:
            a, b = first, (p, r)
            why = "rank %d of the world is claimed by %s:%s [%s] and by %s:%s [%s]" % (
                r.rank,
                a[0].host,
                a[0].pid,
                a[1].dev,
                b[0].host,
                b[0].pid,
                b[1].dev,
            )
            return why, [x[1].first_line for x in (a, b) if x[1].first_line]
    return None


def _misplaced(facts: Facts, nt_ranks: List[dict]) -> Optional[Tuple[str, List[dict]]]:
    """The first nccl-tests `# Rank` line whose host or pid is not where that rank's NCCL lines come from.

    nccl-tests and NCCL print the same process's gethostname() (cut at the first '.') and getpid(): a rank
    listed on one host and heard from another is a table or lines of another run. A head printed right after
    another line's tail (`...0node-a:100:200 [0] NCCL INFO`) carries that tail before its host: the host
    need only end with the listed one; the pid must be the same."""
    world = facts.world_nranks
    where = {}  # type: Dict[int, tuple]
    for p, r in facts.all_ranks():
        if r.rank is not None and r.nranks == world:
            where.setdefault(r.rank, (p, r))
    for listed in nt_ranks:
        found = where.get(listed.get("rank"))  # type: ignore[arg-type]
        if found is None:
            continue
        p, r = found
        host, pid = str(listed.get("host") or ""), listed.get("pid")
        same_pid = pid is None or not p.pid.isdigit() or int(p.pid) == pid
        if host and (not p.host.lower().endswith(host.lower()) or not same_pid):
            why = "nccl-tests puts rank %s on %s pid %s; its NCCL lines come from %s:%s [%s]" % (
                listed.get("rank"),
                host,
                pid,
                p.host,
                p.pid,
                r.dev,
            )
            return why, [_rank_ev(listed)] + ([r.first_line] if r.first_line else [])
    return None


def _host_lines(facts: Facts, hosts: List[str]) -> List[dict]:
    return [_ev(Where(*facts.host_first[h])) for h in hosts[:3] if h in facts.host_first]


def world_check(
    facts: Facts, nccl_tests: Optional[dict], nodes: Optional[int], replay: bool = False
) -> Tuple[Optional[dict], List[dict]]:
    """(the `world-consistent` check or None when nothing can be compared, findings).

    `replay`: the replay stand-in printed the log (a recording of another run, by design): its world is
    held to itself, not to the run's `--nodes` (as `launch-matches-log` does not compare a replay)."""
    bad, short, agree = [], [], []  # type: List[str], List[str], List[str]
    if replay:
        nodes = None
    evidence = []  # type: List[dict]
    world = facts.world_nranks
    named = sorted({p.host for p in facts.procs.values()})
    with_ranks = sorted({p.host for p in facts.procs.values() if p.ranks})
    nnodes = max(facts.nnodes) if facts.nnodes else None

    outside = outside_world(facts)
    if outside is not None:
        bad.append(outside[0])
        evidence += outside[1]
    elif world is not None and facts.peer_top is not None:
        agree.append("channels name ranks 0-%d of %d" % (max(facts.peer_top[0], 0), world))
    dup = _duplicates(facts) if world is not None else None
    if dup is not None:
        short.append(dup[0] + " (a log of several runs, or lines copied: give one run's log)")
        evidence += dup[1]

    def hosts_against(count: int, said: str) -> None:
        if len(named) > count:
            bad.append("the log names %d hosts (%s); %s" % (len(named), few(named, 8), said))
            rankless = [h for h in named if h not in with_ranks]  # the likelier extras: cite them first
            evidence.extend(_host_lines(facts, rankless or named[count:]))
        elif len(with_ranks) < count:
            short.append(
                "only %d host(s) printed ranks (%s); %s: give every host's log"
                % (len(with_ranks), few(with_ranks, 8) or "none", said)
            )
        else:
            agree.append("%d host(s), as %s" % (count, said))

    for count, said in ((nnodes, "NCCL printed nNodes %s" % nnodes), (nodes, "--nodes says %s" % nodes)):
        if world is not None and count is not None and world < count:  # every node holds a rank
            bad.append("NCCL printed nRanks %d, fewer ranks than nodes (%s)" % (world, said))
    if nnodes is not None and nodes is not None and nnodes != nodes:
        bad.append("NCCL printed nNodes %d; --nodes says %d" % (nnodes, nodes))
    if named and nnodes is not None:
        hosts_against(nnodes, "NCCL printed nNodes %d" % nnodes)
    if named and nodes is not None:
        hosts_against(nodes, "--nodes says %d" % nodes)

    nt = nccl_tests or {}
    nt_hosts, nt_ranks = list(nt.get("hosts") or []), list(nt.get("ranks") or [])
    if nt_hosts and nodes is not None:
        if len(nt_hosts) != nodes:
            bad.append("nccl-tests lists ranks on %d host(s) (%s); --nodes says %d"
                       % (len(nt_hosts), few(nt_hosts, 8), nodes))  # fmt: skip
        else:
            agree.append("nccl-tests on %d host(s)" % nodes)
    if nt_ranks and world is not None:
        if len(nt_ranks) != world:
            bad.append("nccl-tests lists %d rank(s); NCCL printed nRanks %d" % (len(nt_ranks), world))
            evidence.append(_rank_ev(nt_ranks[-1]))
        else:
            agree.append("nccl-tests lists %d ranks" % world)
        misplaced = _misplaced(facts, nt_ranks)
        if misplaced is not None:
            bad.append(misplaced[0])
            evidence += misplaced[1]
        over = [r for r in nt_ranks if isinstance(r.get("rank"), int) and r["rank"] >= world]
        if over:
            bad.append("nccl-tests lists rank %d, outside the world of %d ranks" % (over[0]["rank"], world))
            evidence.append(_rank_ev(over[0]))
    if named and nt_hosts:
        printed = {n.lower() for n in named}
        quiet = sorted({h for h in nt_hosts if h.lower() not in printed})
        if quiet:
            short.append("nccl-tests lists ranks on %s, which printed no NCCL line" % few(quiet, 8))

    if not (bad or short or agree):
        return None, []
    if bad:
        status, detail = FAIL, "; ".join(bad + short)
    elif short:
        status, detail = UNKNOWN, "; ".join(short)
    else:
        status, detail = PASS, "the log agrees with itself: " + ", ".join(agree)
    if replay:
        detail = "REPLAY, --nodes not compared: " + detail
    check = {"name": NAME, "status": status, "detail": detail, "evidence": evidence[:5]}
    findings = []
    if bad:
        findings.append(
            {
                "id": "world-mismatch",
                "severity": "error",
                "title": "the log contradicts its own world",
                "message": "the log's ranks and hosts contradict the counts it states or the run's: "
                + "; ".join(bad),
                "evidence": evidence[:5],
                "remedy": "give the whole log of one run (every host's output), and --nodes as the run's "
                "node count (hosts as NCCL sees them: pods count); lines of another job or a rewritten log "
                "are no evidence about this one",
                "source": "efa_validators/judge/world.py",
            }
        )
    return check, findings


def demote(value: Optional[bool], why: str, facts: Facts) -> Tuple[Optional[bool], str]:
    """efa/gdr True stands only for the log's own world: a line naming a rank outside it leaves it unshown."""
    if value is not True:
        return value, why
    outside = outside_world(facts)
    if outside is None:
        return value, why
    return None, outside[0] + ": the lines are not all of this job's world"
