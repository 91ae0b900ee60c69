"""The sweep's planning, pure (efa_validators/run/sweep.py): rounds are disjoint, every host is covered, a bad
host among 256 is named in at most 3 rounds wherever it is, and nothing is cleared without a pass."""

from __future__ import annotations

import random

import pytest

from efa_validators.run import pairwise, sweep

HOSTS = ["h%d" % i for i in range(256)]


def _fails_with(bad):
    """A round runner: a pair fails when it holds a bad host, else passes; records every round."""
    seen = []

    def run(pairs):
        seen.append(list(pairs))
        return ["fail" if set(p) & bad else "pass" for p in pairs]

    return run, seen


def _disjoint(tests) -> bool:
    hosts = [h for t in tests for h in t]
    return len(hosts) == len(set(hosts))


@pytest.mark.parametrize("n", range(2, 41))
def test_a_ring_is_two_rounds_for_even_counts_and_three_for_odd(n):
    hosts = HOSTS[:n]
    ring = pairwise.plan(hosts)
    rounds = sweep.fixed_rounds(ring)
    assert all(_disjoint(r) for r in rounds)
    assert sorted(p for r in rounds for p in r) == sorted(ring)  # every pair once
    assert len(rounds) == (1 if n == 2 else 2 if n % 2 == 0 else 3)


def test_the_known_good_node_is_in_one_pair_per_round_in_the_fixed_plan():
    rounds = sweep.fixed_rounds(pairwise.plan(HOSTS[:6], "h0"))
    assert len(rounds) == 5 and all(len(r) == 1 and "h0" in r[0] for r in rounds)


@pytest.mark.parametrize("n", [2, 3, 8, 255, 256])
def test_the_first_round_pairs_every_host_once(n):
    first = sweep.first_round(HOSTS[:n])
    assert _disjoint(first)
    covered = {h for p in first for h in p}
    assert covered == set(HOSTS[: n - n % 2])  # an odd count leaves the last host for round 2


@pytest.mark.parametrize("n", [256, 255])
def test_one_bad_host_is_implicated_in_two_rounds_wherever_it_is(n):
    hosts = HOSTS[:n]
    for bad in hosts:
        run, seen = _fails_with({bad})
        done = sweep.adaptive_rounds(hosts, run)
        outcome = done["outcome"]
        assert outcome["implicated"] == [bad], bad
        assert outcome["suspects"] == [] and outcome["undecided"] == []
        assert set(outcome["cleared"]) == set(hosts) - {bad}
        assert len(seen) == 2, (bad, seen[1:])
        assert all(_disjoint(r) for r in seen)


def test_two_bad_hosts_are_implicated_in_at_most_three_rounds():
    pairs = [(HOSTS[i], HOSTS[i + 1]) for i in range(0, 256, 2)]  # both in one first-round pair: all of them
    rng = random.Random(22)
    pairs += [tuple(rng.sample(HOSTS, 2)) for _ in range(300)]  # and anywhere
    for bad in pairs:
        run, seen = _fails_with(set(bad))
        outcome = sweep.adaptive_rounds(HOSTS, run)["outcome"]
        assert sorted(outcome["implicated"]) == sorted(bad), bad
        assert len(seen) <= 3 and all(_disjoint(r) for r in seen)


def test_a_few_bad_hosts_out_of_32():
    rng = random.Random(6)
    for _ in range(200):
        bad = set(rng.sample(HOSTS[:32], 4))
        run, seen = _fails_with(bad)
        outcome = sweep.adaptive_rounds(HOSTS[:32], run)["outcome"]
        assert set(outcome["implicated"]) == bad
        assert len(seen) <= 3


@pytest.mark.parametrize("in_list", [True, False])
def test_known_good_is_cleared_from_the_start_and_in_one_pair_per_round(in_list):
    hosts = HOSTS[:16] if in_list else HOSTS[1:16]
    for bad in HOSTS[1:16]:
        run, seen = _fails_with({bad})
        outcome = sweep.adaptive_rounds(hosts, run, known_good="h0")["outcome"]
        assert outcome["implicated"] == [bad]
        assert len(seen) == (1 if bad == "h1" else 2)  # h0-h1 fails with h0 cleared: named at once
        for r in seen:
            assert _disjoint(r) and sum("h0" in p for p in r) <= 1
        assert seen[0][0] == ("h0", "h1")  # the known-good node is tested like any other


def test_an_unknown_pair_proves_nothing():
    """h2-h3's test says nothing (unknown) every time: they are never cleared, never implicated."""

    def run(pairs):
        return ["unknown" if {"h2", "h3"} & set(p) else "pass" for p in pairs]

    done = sweep.adaptive_rounds(HOSTS[:8], run)
    outcome = done["outcome"]
    assert "h2" not in outcome["cleared"] and "h3" not in outcome["cleared"]
    assert outcome["implicated"] == [] and set(outcome["undecided"]) == {"h2", "h3"}
    assert len(done["rounds"]) <= sweep.DEFAULT_MAX_ROUNDS


def test_every_pair_failing_names_no_one_and_stops():
    """A shared fault (image, network): every pair fails; nobody is cleared, so nobody is implicated."""
    run, seen = _fails_with(set(HOSTS[:8]))
    outcome = sweep.adaptive_rounds(HOSTS[:8], run)["outcome"]
    assert outcome["implicated"] == [] and outcome["cleared"] == []
    assert set(outcome["suspects"]) == set(HOSTS[:8])
    assert len(seen) <= sweep.DEFAULT_MAX_ROUNDS
    tested = [frozenset(p) for r in seen for p in r]
    assert len(tested) == len(set(tested))  # never the same pair twice


def test_no_pair_is_run_twice_and_max_rounds_holds():
    run, seen = _fails_with(set(HOSTS[:5]))
    sweep.adaptive_rounds(HOSTS[:6], run, max_rounds=2)
    assert len(seen) <= 2


def _slow_from(bad, at_least):
    """A group is slow when it holds all of `bad` and has at least `at_least` hosts (passes in pairs)."""
    seen = []

    def run(groups):
        seen.append(list(groups))
        return ["fail" if set(bad) <= set(g) and len(g) >= at_least else "pass" for g in groups]

    return run, seen


def test_bisection_finds_a_slow_host_that_passes_in_pairs_wherever_it_is():
    for bad in HOSTS:
        run, seen = _slow_from([bad], 3)
        done = sweep.bisect_rounds(HOSTS, run)
        outcome = done["outcome"]
        assert outcome["implicated"] == [bad], (bad, outcome["suspect_groups"])
        assert len(outcome["cleared"]) == 255
        assert len(seen) <= sweep.bisect_max_rounds(256) == 9
        assert seen[0] == [tuple(HOSTS)]
        assert all(_disjoint(r) for r in seen)


@pytest.mark.parametrize("n", [5, 8, 13, 32])
def test_bisection_on_other_counts(n):
    for bad in HOSTS[:n]:
        run, _seen = _slow_from([bad], 3)
        outcome = sweep.bisect_rounds(HOSTS[:n], run)["outcome"]
        assert outcome["implicated"] == [bad] or bad in outcome["suspects"], (n, bad, outcome)
        assert bad not in outcome["cleared"]


def test_bisection_when_the_slowness_needs_two_hosts_together():
    run, _seen = _slow_from(["h3", "h200"], 2)
    outcome = sweep.bisect_rounds(HOSTS, run)["outcome"]
    assert outcome["implicated"] == []
    assert {"h3", "h200"} <= set(outcome["suspects"])
    assert "h3" not in outcome["cleared"] and "h200" not in outcome["cleared"]


def test_bisection_of_a_good_job_is_one_round():
    run, seen = _slow_from(["nobody"], 2)
    outcome = sweep.bisect_rounds(HOSTS[:16], run)["outcome"]
    assert len(seen) == 1 and outcome["cleared"] == HOSTS[:16]


def test_bisection_never_clears_on_unknown():
    def run(groups):
        return ["unknown" for _g in groups]

    done = sweep.bisect_rounds(HOSTS[:16], run)
    assert done["outcome"]["cleared"] == [] and done["outcome"]["implicated"] == []
    assert len(done["rounds"]) <= sweep.bisect_max_rounds(16)
