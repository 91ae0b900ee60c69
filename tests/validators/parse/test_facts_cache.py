"""Answers Facts keeps per value of what they read (issue 15) equal the answers computed afresh."""

import inspect
import random
import re

from efa_validators.parse.ranks import COUNTER_READS, PROC_FLAGS, Proc

_VALUES = {
    "using_network": ["Libfabric", "AWS Libfabric", "Socket", "IB"],
    "channel_nets": ["Libfabric", "Socket"],
    "providers": ["efa", "efa-direct", "tcp;ofi_rxm", "efa;ofi_rxr"],
    "plugin_versions": ["1.13.2"],
    "plugin_deps_missing": ["libfabric.so.1"],
    "internal_nets": ["Socket", "IB"],
}


def test_counter_efa_kept_per_value_equals_it_computed_afresh():
    """Processes that share sets and flags share the answer; one that differs in any of them gets its own,
    also after `put` or a flag changed it."""
    rng = random.Random(15)
    procs = []
    for i in range(400):
        p = Proc("h%d" % i, str(i))
        for name, values in _VALUES.items():
            for v in values:
                if rng.random() < 0.25:
                    p.put(name, v)
        for flag in PROC_FLAGS:
            if rng.random() < 0.2:
                setattr(p, flag, True)
        procs.append(p)
    answers = set()
    for p in procs + procs[::-1]:
        assert p.counter_efa() == p._counter_efa()
        answers.add(p.counter_efa())
    assert len(answers) >= 4 and None in answers  # the answers differ: the key tells processes apart
    for p in procs[:100]:
        p.put("providers", "tcp")
        why = p.counter_efa()
        assert why == p._counter_efa()
        assert why == "provider tcp" or why.startswith("network ")
        p.plugin_init_failed = not p.plugin_init_failed
        assert p.counter_efa() == p._counter_efa()


def test_the_key_holds_every_attribute_counter_efa_reads():
    """The kept answer is keyed by COUNTER_READS: an attribute _counter_efa reads (itself or through the
    Proc methods it calls) that the key lacks would hand one process another's answer."""
    read, methods, todo = set(), set(), ["_counter_efa"]
    while todo:
        name = todo.pop()
        methods.add(name)
        for attr, call in re.findall(r"self\.(\w+)(\()?", inspect.getsource(getattr(Proc, name))):
            if call:
                if attr not in methods:
                    todo.append(attr)
            else:
                read.add(attr)
    assert methods >= {"_counter_efa", "networks", "plugin_missing", "plugin_ok"}
    assert read <= set(COUNTER_READS), sorted(read - set(COUNTER_READS))
