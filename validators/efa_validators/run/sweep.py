"""The sweep in parallel rounds: which tests to run at once to find a bad node, as pure functions.

A node can run one test at a time, so a round is a set of disjoint groups that all run at once (concurrent
mpiruns with disjoint hostfiles, concurrent `srun` steps of one allocation); a round takes one test's time
however many groups it holds. Two searches:

* Elimination by pairs (`adaptive_rounds`). Round 1 pairs every node once: h0-h1, h2-h3, ... (the
  known-good node, if any, is h0: it can be in one pair per round like any node). A node of a passing pair
  is cleared. Each later round pairs every node not yet decided with a cleared node it has not been tested
  with (one pair per cleared node), so a failing pair splits at once: its bad node fails again and is
  implicated, its good one passes and is cleared. A single bad node among any number is named in 2 rounds
  (an odd count's left-over node is paired in round 2), a few bad nodes in 2 as long as there are as many
  cleared nodes as undecided ones. Nodes with no cleared node left to pair with are paired with each
  other, partners they have not had yet. It stops when every node is decided, nothing new can be paired,
  or at `max_rounds`.
* Bisection (`bisect_rounds`), for a slow node that passes in pairs: the whole set first; a set that is not
  good is split in halves, each half run at the scale the set was slow at (filled up with cleared nodes,
  as far as there are enough), all halves of a round at once. A half that is good beside a half that is
  not is cleared; the other is split again, down to one node beside cleared ones, which is then implicated.
  When both halves of a slow set are good, the slowness needs the whole set: its nodes stay suspects.

Elimination is fail closed (efa_validators.run.pairwise.eliminate): only 'pass' clears, only 'fail' with a
cleared partner implicates; an 'unknown' test proves nothing either way.
`fixed_rounds` schedules a fixed list of pairs (the ring, or each node against the known-good one) as
rounds of disjoint pairs: a ring of n nodes is 2 rounds for even n, 3 for odd.
"""

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from efa_validators.run.pairwise import Pair, eliminate

Group = Tuple[str, ...]
# a round's tests -> one verdict each ('pass' | 'fail' | 'unknown'), in the same order
RunPairs = Callable[[List[Pair]], List[str]]
RunGroups = Callable[[List[Group]], List[str]]

DEFAULT_MAX_ROUNDS = 4


def unique(hosts: Sequence[str]) -> List[str]:
    return list(dict.fromkeys(hosts))


def fixed_rounds(pairs: Sequence[Pair]) -> List[List[Pair]]:
    """The pairs in rounds of disjoint pairs, each pair in the first round where neither node is busy."""
    rounds = []  # type: List[List[Pair]]
    busy = []  # type: List[Set[str]]
    for pair in pairs:
        for i, taken in enumerate(busy):
            if pair[0] not in taken and pair[1] not in taken:
                rounds[i].append(pair)
                taken.update(pair)
                break
        else:
            rounds.append([pair])
            busy.append(set(pair))
    return rounds


def sweep_hosts(hosts: Sequence[str], known_good: Optional[str] = None) -> List[str]:
    """The nodes of an adaptive sweep in order: the known-good node first (it need not be in `hosts`)."""
    unique_hosts = unique(hosts)
    if known_good is None:
        return unique_hosts
    return [known_good] + [h for h in unique_hosts if h != known_good]


def first_round(hosts: Sequence[str], known_good: Optional[str] = None) -> List[Pair]:
    """h0-h1, h2-h3, ...: every node in one pair (an odd count leaves the last one for round 2)."""
    order = sweep_hosts(hosts, known_good)
    return [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]


def next_round(
    hosts: Sequence[str], results: Sequence[Tuple[Pair, str]], known_good: Optional[str] = None
) -> List[Pair]:
    """The next round from every result so far: each undecided node beside a cleared node it has not been
    tested with, one pair per cleared node; the rest with each other (new partners only). [] when every
    node is decided or nothing new can be learned."""
    order = sweep_hosts(hosts, known_good)
    if not results:
        return first_round(order)
    state = eliminate(results, known_good)
    cleared = set(state["cleared"])
    if known_good is not None:
        cleared.add(known_good)
    implicated = set(state["implicated"])
    undecided = [h for h in order if h not in cleared and h not in implicated]
    if not undecided:
        return []
    tested = {frozenset(p) for p, _v in results}
    busy = set()  # type: Set[str]
    pairs = []  # type: List[Pair]
    partners = [h for h in order if h in cleared]
    for node in undecided:
        for partner in partners:
            if partner not in busy and frozenset((node, partner)) not in tested:
                pairs.append((partner, node))
                busy.update((partner, node))
                break
    rest = [h for h in undecided if h not in busy]
    for i, node in enumerate(rest):
        if node in busy:
            continue
        for other in rest[i + 1 :]:
            if other not in busy and frozenset((node, other)) not in tested:
                pairs.append((node, other))
                busy.update((node, other))
                break
    return pairs


def adaptive_rounds(
    hosts: Sequence[str],
    run: RunPairs,
    known_good: Optional[str] = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> Dict[str, object]:
    """Elimination in rounds: `run` runs one round's pairs (all at once) and returns their verdicts.

    Returns {'rounds': [[(pair, verdict), ...], ...], 'outcome': eliminate() of every result, with
    'untested': nodes in no pair}."""
    order = sweep_hosts(hosts, known_good)
    results = []  # type: List[Tuple[Pair, str]]
    rounds = []  # type: List[List[Tuple[Pair, str]]]
    while len(rounds) < max_rounds:
        pairs = next_round(order, results, known_good)
        if not pairs:
            break
        verdicts = run(pairs)
        done = list(zip(pairs, verdicts))
        rounds.append(done)
        results.extend(done)
    return {"rounds": rounds, "outcome": conclude(order, results, known_good)}


def conclude(
    hosts: Sequence[str], results: Sequence[Tuple[Pair, str]], known_good: Optional[str] = None
) -> Dict[str, object]:
    """eliminate() of the results, plus 'untested' (in no pair) and 'undecided' (neither cleared nor
    implicated: suspects, nodes whose pairs were unknown, untested ones)."""
    outcome = eliminate(results, known_good)
    tested = {h for p, _v in results for h in p}
    outcome["untested"] = [h for h in hosts if h not in tested and h != known_good]
    decided = set(outcome["cleared"]) | set(outcome["implicated"])  # type: ignore[arg-type]
    if known_good is not None:
        decided.add(known_good)
    outcome["undecided"] = [h for h in hosts if h not in decided]
    return outcome


def halves(group: Sequence[str]) -> Tuple[Group, Group]:
    cut = (len(group) + 1) // 2
    return tuple(group[:cut]), tuple(group[cut:])


def bisect_max_rounds(n: int) -> int:
    """The whole set, then one split per halving down to one node: ceil(log2 n) + 1."""
    return 1 + max(1, math.ceil(math.log2(max(n, 2))))


def bisect_rounds(
    hosts: Sequence[str], run: RunGroups, max_rounds: Optional[int] = None
) -> Dict[str, object]:
    """Bisection in rounds: `run` runs one round's groups (all at once) and returns their verdicts.

    Returns {'rounds': [[{'group', 'under_test', 'filler', 'verdict'}, ...], ...], 'outcome': {'cleared',
    'implicated', 'suspects', 'suspect_groups', 'undecided'}}. A group's test is its `under_test` nodes
    plus `filler` (cleared nodes that keep the scale)."""
    order = unique(hosts)
    limit = bisect_max_rounds(len(order)) if max_rounds is None else max_rounds
    rounds = []  # type: List[List[Dict[str, object]]]
    cleared = []  # type: List[str]
    implicated = []  # type: List[str]
    stuck = []  # type: List[Group]  # slow sets whose halves were both good (or could not be run)
    if len(order) < 2 or limit < 1:
        return {"rounds": rounds, "outcome": _bisect_outcome(order, cleared, implicated, [tuple(order)])}
    verdict = run([tuple(order)])[0]
    rounds.append([{"group": tuple(order), "under_test": tuple(order), "filler": (), "verdict": verdict}])
    if verdict == "pass":
        return {"rounds": rounds, "outcome": _bisect_outcome(order, list(order), [], [])}
    open_sets = [(tuple(order), len(order))]  # (nodes not cleared, the scale their test was not good at)
    while open_sets and len(rounds) < limit:
        pool = list(cleared)
        tests = []  # type: List[Tuple[int, Group, Group]]  # (which open set, half, filler)
        skipped = {}  # type: Dict[int, List[str]]  # halves that cannot be run (one node, no filler)
        for i, (nodes, scale) in enumerate(open_sets):
            for half in halves(nodes):
                if not half:
                    continue
                need = max(0, scale - len(half))
                filler, pool = tuple(pool[:need]), pool[need:]
                if len(half) + len(filler) < 2:  # one node alone sends nothing over the network
                    skipped.setdefault(i, []).extend(half)
                    continue
                tests.append((i, half, filler))
        if not tests:
            break
        verdicts = run([half + filler for _i, half, filler in tests])
        rounds.append(
            [
                {"group": half + filler, "under_test": half, "filler": filler, "verdict": v}
                for (_i, half, filler), v in zip(tests, verdicts)
            ]
        )
        next_open = []  # type: List[Tuple[Group, int]]
        for i, (nodes, _scale) in enumerate(open_sets):
            mine = [(half, filler, v) for (j, half, filler), v in zip(tests, verdicts) if j == i]
            bad = [m for m in mine if m[2] != "pass"]
            if not bad:  # every half that ran was good: the slowness needs the whole set
                stuck.append(nodes)
                continue
            if i in skipped:  # a half that could not run is not cleared by its sibling's failure
                stuck.append(tuple(skipped[i]))
            else:
                for half, _filler, v in mine:
                    if v == "pass":  # good beside a half that is not, at the same scale
                        cleared.extend(half)
            for half, filler, v in bad:
                if len(half) == 1 and filler and v == "fail":
                    implicated.append(half[0])  # one node beside cleared ones, and the test failed
                elif len(half) == 1:
                    stuck.append(half)  # unknown proves nothing; the same test again would not either
                else:
                    next_open.append((half, len(half) + len(filler)))
        open_sets = next_open
    stuck.extend(nodes for nodes, _s in open_sets)
    return {"rounds": rounds, "outcome": _bisect_outcome(order, cleared, implicated, stuck)}


def _bisect_outcome(
    order: List[str], cleared: List[str], implicated: List[str], stuck: List[Group]
) -> Dict[str, object]:
    cleared_set = set(cleared)
    suspects = [h for h in order if any(h in g for g in stuck) and h not in cleared_set]
    return {
        "cleared": [h for h in order if h in cleared_set],
        "implicated": [h for h in order if h in implicated],
        "suspects": [h for h in suspects if h not in implicated],
        "suspect_groups": [list(g) for g in stuck],
        "undecided": [h for h in order if h not in cleared_set and h not in implicated],
    }
