"""`fan-in` prints each line of what it wrote with every value escaped (issue 41, hostile input round five,
item 6): a variant name from a job's summary.json reached stdout with its control bytes raw (an ESC sequence
clears a CI log's screen or retitles the terminal; a newline forges a line a script reads as a tag).

Against the real registry: one job's image is pushed, then its summary and check report name the variant
with control bytes, as an attacker who can write a job's output folder would."""

from __future__ import annotations

import json
import uuid

import pytest
from cli import build_py
from services import summary_entry, write_check_report, write_summary

from efa_validators.report.printable import printable

pytest_plugins = ["services_fixtures"]  # fixtures: registry, small_images

EVIL = "fan\x1b]0;pwned\x07\x1b[2J\ntag\tforged"


@pytest.mark.docker
def test_a_variant_name_with_control_bytes_is_printed_escaped(registry, small_images, tmp_path):
    repo = f"fanin-{uuid.uuid4().hex[:10]}/app"
    job = tmp_path / "job"
    job.mkdir()
    summary = write_summary(
        job / "summary.json", [summary_entry("fan", small_images["a"], tags=[f"{repo}:v1"])]
    )
    assert build_py("push", "--summary", summary, "--registry", registry.host).rc == 0
    doc = json.loads(summary.read_text())
    doc["variants"][0]["variant"] = EVIL
    summary.write_text(json.dumps(doc))
    write_check_report(job / "test-report.json", [(EVIL, small_images["a"].id, True)])
    res = build_py("fan-in", "--from", job, "--out", tmp_path / "out", "--registry", registry.host)
    assert res.rc == 0, res.err
    assert "\x1b" not in res.out and "\x07" not in res.out, repr(res.out)
    (line,) = res.out.splitlines()  # one line: the newline in the name is not a second one
    kind, ref, digest, name = line.split("\t")
    assert (kind, ref, name) == ("tag", f"{registry.host}/{repo}:v1", printable(EVIL).replace("\t", "\\t"))
    assert digest == doc["variants"][0]["digest"]
