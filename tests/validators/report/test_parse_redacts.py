"""`validators parse` masks secrets in every line it quotes (findings' and checks' evidence, rank facts, a
crash's text) by the table `validators run` uses (efa_validators/scan/redact.py); NCCL lines are
quoted unchanged."""

from __future__ import annotations

import json

import cli
from paths import ROOT

LOG = ROOT / "tests" / "fixtures" / "logs" / "completion-error-unreachable.log"
HEAD = "[1,0]<stdout>:gpu-st-p5-1:21870:21901 [0] NCCL WARN "
# each kind of secret a child may print, each value unique so a leak anywhere is found by a substring search
SECRETS = {
    "aws-secret-key": "wJalrXUtnFEMIK7MDENGbPxRfiCYzq01AWSSECRET",
    "session-token": "IQoJb3JpZ2luX2VjEJr0SESSIONTOKEN",
    "url-credentials": "Passw0rdInTheUrl42",
    "bearer": "eyJhbGciOiJIUzI1NiJ9BEARERTOKEN",
    "crash-url": "Passw0rdOfTheFailure7",
}
LINES = [
    HEAD + "NET/OFI environment AWS_SECRET_ACCESS_KEY=" + SECRETS["aws-secret-key"],
    HEAD + 'sts answer {"SessionToken": "%s", "Expiration": "2026-12-04"}' % SECRETS["session-token"],
    HEAD + "fetch failed: https://builder:%s@mirror.example.internal/x.tar" % SECRETS["url-credentials"],
    HEAD + "curl -H 'Authorization: Bearer %s'" % SECRETS["bearer"],
    "[1,0]<stdout>:gpu-st-p5-1: Test NCCL failure common.cu:1160 'unhandled system error "
    "https://u:%s@host.internal/'" % SECRETS["crash-url"],
]


def _log(tmp_path):
    nccl = LOG.read_text().splitlines()[:18]  # the run up to its completion error, with it
    path = tmp_path / "secrets.log"
    path.write_text("\n".join(nccl + LINES) + "\n")
    return path


def _evidence(report: dict) -> list:
    return [e for part in ("findings", "checks") for item in report[part] for e in item.get("evidence") or []]


def test_no_secret_of_a_log_reaches_the_parse_reports(tmp_path):
    log = _log(tmp_path)
    out, md, junit = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.xml"
    res = cli.validators("parse", log, "--json", out, "--markdown", md, "--junit", junit)
    assert res.rc == 1, res.err
    explained = cli.validators("explain", log)
    texts = {
        "json": out.read_text(),
        "markdown": md.read_text(),
        "junit": junit.read_text(),
        "stdout": res.out,
        "explain": explained.out,
    }
    for kind, value in SECRETS.items():
        for where, text in texts.items():
            assert value not in text, (kind, where)
    report = json.loads(texts["json"])
    quoted = [e["text"] for e in _evidence(report)]
    # the secrets' lines are still evidence, masked: the name, scheme or header says what was there
    for said in ("AWS_SECRET_ACCESS_KEY=***", '"SessionToken": "***"', "https://***@mirror", "Bearer ***"):
        assert any(said in text for text in quoted), said
    assert "https://***@host.internal" in texts["json"]  # the crash's own text, in its finding's message


def test_nccl_lines_are_quoted_as_they_are(tmp_path):
    log = _log(tmp_path)
    out = tmp_path / "r.json"
    cli.validators("parse", log, "--json", out)
    report = json.loads(out.read_text())
    nccl = LOG.read_text()
    kept = [e["text"] for e in _evidence(report) if "***" not in e["text"]]
    assert any("Peer host id: i-07d2e6c1b0f9a3e44" in text for text in kept)  # the completion error, whole
    for text in kept:
        assert text.rstrip(".") in nccl or text in log.read_text(), text
