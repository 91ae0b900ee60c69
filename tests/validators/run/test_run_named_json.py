"""`efa_validators run` reads the -J JSON the nccl-tests table names, as `parse` does (issue 40 item 2): the
recipes write it at an absolute path in their shared folder, and the run's report checks the table against
it. Before, only `parse` read it, so the printed recipes' reports never saw the JSON."""

from __future__ import annotations

import json

from paths import TESTS
from preflight_util import load, run_cli

NT = TESTS / "fixtures" / "nccltests"
PAIR_LOG, PAIR_JSON = NT / "pair-allreduce-2node.log", NT / "pair-allreduce-2node.json"


def _check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def test_the_run_reads_the_json_its_table_names_and_checks_it(tmp_path):
    doc = json.loads(PAIR_JSON.read_text())
    target = tmp_path / "shared" / "nccl-tests.json"  # absolute, as the recipes print it
    target.parent.mkdir()
    target.write_text(json.dumps(doc))
    lines = PAIR_LOG.read_text().splitlines()
    assert lines[0].startswith("# Writing JSON output to ")
    log = tmp_path / "table.log"
    log.write_text("\n".join(["# Writing JSON output to %s" % target] + lines[1:]) + "\n")
    out = tmp_path / "r.json"
    run_cli(["run", "--quiet", "--instance-type", "p5.48xlarge", "--json", str(out), "--", "cat", str(log)])
    report = load(out)
    named = [i for i in report["inputs"] if i.get("named_by")]
    assert named and named[0]["file"] == str(target), report["inputs"]
    assert _check(report, "json-agrees")["status"] == "pass"
    doc["results"][4]["in_place"]["nwrong"] = 3  # the JSON saw corruption the table does not show
    target.write_text(json.dumps(doc))
    run_cli(["run", "--quiet", "--instance-type", "p5.48xlarge", "--json", str(out), "--", "cat", str(log)])
    report = load(out)
    assert _check(report, "json-agrees")["status"] == "fail" and report["verdict"] == "fail"
