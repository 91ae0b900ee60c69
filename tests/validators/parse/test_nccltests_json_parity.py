"""One nccl-tests run read twice, from its table and from its `-J` JSON: the same facts (issue 34, item 3).

The fixtures are our own, one run written both ways from the formats NVIDIA/nccl-tests v2.19.6 writes
(src/util.cu: writeDeviceReport, writeResultHeader, writeBenchmarkLine*, writeResultFooter; JSON version 3):
pair-allreduce-2node.log is what rank 0 prints with `-J` (the table; its first line says where the JSON went),
pair-allreduce-2node.json the file. The table prints values rounded (%.2f, the average with %g) where the JSON
has six decimals (%lf): numbers are equal to the table's precision. What only one of them says is named."""

from __future__ import annotations

import json
import math

from paths import TESTS

from efa_validators.parse.nccltests import NcclTestsParser
from efa_validators.parse.nccltests_json import load_json_output

FIXTURES = TESTS / "fixtures" / "nccltests"
LOG, DOC = FIXTURES / "pair-allreduce-2node.log", FIXTURES / "pair-allreduce-2node.json"
# provenance, not facts: where each came from and how it was read
PROVENANCE = {"source", "json_version", "evidence", "file", "line", "text"}
ONLY_TABLE = {"nccl_tests_version"}  # the table's first line; the JSON does not carry it


def _table() -> dict:
    p = NcclTestsParser()
    for i, line in enumerate(LOG.read_text().splitlines(), 1):
        p.feed(line, i, str(LOG))
    return p.result()


def _facts(value, where=""):
    """Flatten to {path: value}, provenance left out."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k not in PROVENANCE:
                out.update(_facts(v, f"{where}.{k}" if where else k))
        return out
    if isinstance(value, list):
        out = {f"{where}#len": len(value)}
        for i, v in enumerate(value):
            out.update(_facts(v, f"{where}[{i}]"))
        return out
    return {where: value}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=0.005)  # %g / %.2f in the table, %lf in the JSON
    return a == b


def test_the_fixtures_are_one_run():
    doc = json.loads(DOC.read_text())
    assert doc["version"] == 3 and "-J" in doc["args"]
    assert LOG.read_text().splitlines()[0] == "# Writing JSON output to " + doc["args"][-1]


def test_table_and_json_give_the_same_facts():
    table, js = _table(), load_json_output(str(DOC))
    assert (table["source"], js["source"]) == ("text", "json")
    t, j = _facts(table), _facts(js)
    assert set(t) == set(j)
    differ = {k: (t[k], j[k]) for k in t if not _same(t[k], j[k])}
    assert differ == {k: (t[k], None) for k in ONLY_TABLE}
    # and the facts are the run's, not two equal empties
    assert table["nccl_tests_version"] == "2.19.6" and js["nccl_version"] == table["nccl_version"] == "2.27.7"
    assert (js["iters"], js["warmup_iters"], js["step"], js["step_kind"]) == (100, 5, 4, "factor")
    assert len(js["rows"]) == 6 and len(js["ranks"]) == 16 and js["hosts"] == ["p5-a", "p5-b"]
    assert js["rows"][-1]["in_place"]["busbw"] == 438.65 and js["plateau_size"] == 1 << 30
    assert js["out_of_bounds"] == 0 and js["out_of_bounds_ok"] is True and js["truncated"] is False
    assert js["avg_busbw"] > 0 and js["units"] == table["units"]


def test_a_changed_json_value_shows_as_a_difference(tmp_path):
    """The comparison can fail: one busbw changed in the JSON is the one difference."""
    doc = json.loads(DOC.read_text())
    doc["results"][2]["out_of_place"]["bus_bw"] += 1.0
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    t, j = _facts(_table()), _facts(load_json_output(str(changed)))
    differ = {k for k in set(t) & set(j) if not _same(t[k], j[k])}
    assert "rows[2].out_of_place.busbw" in differ
