"""Find the bad node by elimination: run the same two-node test over pairs and reason from which pairs
failed. A node in any passing pair is cleared; a failing pair with one cleared node implicates the
other; a node all of whose pairs failed, with no cleared partner, stays a suspect (not proven).

The fixed plans: each node against a known-good one (one run per node, the answer is direct), or a ring
of pairs (h0-h1, h1-h2, ..., hn-h0: every node tested twice, no known-good node needed). The sweep in
rounds of disjoint pairs, which finds a bad node in 2 rounds, is efa_validators/run/sweep.py.
"""

from typing import Dict, List, Optional, Sequence, Tuple

Pair = Tuple[str, str]


def plan(hosts: Sequence[str], known_good: Optional[str] = None) -> List[Pair]:
    """The pairs to run, in order; duplicates in `hosts` are dropped."""
    unique = list(dict.fromkeys(hosts))
    if known_good is not None:
        return [(known_good, h) for h in unique if h != known_good]
    if len(unique) < 2:
        return []
    if len(unique) == 2:
        return [(unique[0], unique[1])]
    return [(unique[i], unique[(i + 1) % len(unique)]) for i in range(len(unique))]


def eliminate(results: Sequence[Tuple[Pair, str]], known_good: Optional[str] = None) -> Dict[str, object]:
    """From (pair, verdict) results: which nodes are cleared, implicated, or merely suspect.

    Only 'pass' clears and only 'fail' implicates; an 'unknown' pair proves nothing either way."""
    nodes = []  # type: List[str]
    for (a, b), _v in results:
        for h in (a, b):
            if h not in nodes:
                nodes.append(h)
    cleared = set()
    for (a, b), verdict in results:
        if verdict == "pass":
            cleared.update((a, b))
    if known_good is not None:
        cleared.add(known_good)
    implicated = set()
    for (a, b), verdict in results:
        if verdict != "fail":
            continue
        if a in cleared and b not in cleared:
            implicated.add(b)
        elif b in cleared and a not in cleared:
            implicated.add(a)
    suspects = set()
    for h in nodes:
        if h in cleared or h in implicated:
            continue
        mine = [v for (a, b), v in results if h in (a, b)]
        if mine and all(v == "fail" for v in mine):
            suspects.add(h)
    if known_good is not None and results and all(v == "fail" for _p, v in results) and len(results) > 1:
        # every pair with the "known-good" node failed: the reference itself, or something shared, is bad
        implicated.clear()
        suspects = set(nodes)
    order = {h: i for i, h in enumerate(nodes)}
    return {
        "cleared": sorted(cleared & set(nodes), key=order.get),
        "implicated": sorted(implicated, key=order.get),
        "suspects": sorted(suspects, key=order.get),
        "untested": [],
    }


def substitute(
    argv: Sequence[str], group: Sequence[str], hostfile: Optional[str], slots: Optional[int] = None
) -> List[str]:
    """The command for one pair or group: `{hosts}` -> `a,b`, `{host1}`/`{host2}`, `{hostfile}` -> a file
    of them, `{nhosts}` -> their count, `{np}` -> count x slots (the count without --slots)."""
    values = {
        "hosts": ",".join(group),
        "host1": group[0] if group else "",
        "host2": group[1] if len(group) > 1 else "",
        "hostfile": hostfile or "",
        "nhosts": str(len(group)),
        "np": str(len(group) * (slots or 1)),
    }
    out = []
    for word in argv:
        for key, value in values.items():
            word = word.replace("{%s}" % key, value)
        out.append(word)
    return out


def uses_placeholders(argv: Sequence[str], groups: bool = False) -> bool:
    """Whether the command places its hosts: `{hosts}` or `{hostfile}`, or for pairs `{host1}` too."""
    keys = ("{hosts}", "{hostfile}") if groups else ("{hosts}", "{host1}", "{hostfile}")
    return any(k in w for w in argv for k in keys)
