"""Ranks past the cap the fold keeps (facts.RANKS_MAX): the finding that counts them.

Why: a log can name more ranks than any job the validator is sized for (a flood of made-up ranks, or a
job beyond 32768 GPUs); those ranks are counted, not stored, so nothing of their evidence was read and
the verdict must not pass on them (issue 23, item 10; verdict.decide adds the `ranks-kept` check).
"""

from typing import Optional

from efa_validators.parse import facts as fold
from efa_validators.parse.facts import Facts


def not_kept_finding(facts: Facts) -> Optional[dict]:
    """The `ranks-not-kept` finding when ranks or processes were counted and not kept, else None."""
    why = facts.not_kept_reason()
    if why is None:
        return None
    ranks, procs, floor = facts.not_kept()
    kept, procs_kept = sum(len(p.ranks) for p in facts.procs.values()), len(facts.procs)
    return {
        "id": "ranks-not-kept",
        "severity": "warning",
        "title": "more ranks than the validator keeps",
        "message": "%d rank(s) on %d process(es) kept with their evidence; %s" % (kept, procs_kept, why),
        "kept": {"ranks": kept, "processes": procs_kept},
        "not_kept": {"ranks": ranks, "processes": procs, "at_least": floor},
        "cap": {"ranks": fold.RANKS_MAX, "processes": fold.PROCS_MAX},
        "evidence": [],
        "remedy": "Parse the logs of at most %d ranks at a time (a group of nodes each), each judged on "
        "its own; a log of a smaller job that names this many ranks is corrupt or forged." % fold.RANKS_MAX,
        "source": "efa_validators/judge/kept.py",
    }
