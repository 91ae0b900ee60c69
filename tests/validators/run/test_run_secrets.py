"""No secret a launch command carries or a child prints reaches anything `validators run` writes: the
report's run.command, rank_output.last_lines and findings, the --log file, the rank logs, JUnit, Markdown,
stdout and stderr (issue 23, item 5)."""

from __future__ import annotations

import sys
import textwrap
import uuid

from preflight_util import finding, load, run_cli


def _secret(kind: str) -> str:
    return "%s%s" % (kind, uuid.uuid4().hex)


def test_every_kind_of_secret_printed_by_a_child_is_masked_everywhere(tmp_path):
    s = {k: _secret(k) for k in ("urltok", "awssecret", "session", "bearer", "query", "password", "key")}
    url = "https://builder:%s@git.invalid/repo?X-Amz-Security-Token=%s" % (s["urltok"], s["query"])
    child = textwrap.dedent(
        """
        import os, sys
        print(sys.argv[1])                                    # the URL from the command line
        print(os.environ["AWS_SECRET_ACCESS_KEY"])            # a secret printed bare
        print("AWS_SECRET_ACCESS_KEY=" + os.environ["AWS_SECRET_ACCESS_KEY"])
        print('{"Credentials": {"SessionToken": "%s"}}' % os.environ["AWS_SESSION_TOKEN"])
        print("curl -H 'Authorization: Bearer " + sys.argv[3] + "' https://h.invalid/")
        print("-----BEGIN RSA PRIVATE KEY-----")
        print(os.environ["KEY_BODY_FOR_TEST"])               # a name no rule knows: the block masks it
        print("-----END RSA PRIVATE KEY-----")
        sys.stdout.flush()
        sys.exit(3)                                           # a failed run: its tails become findings
        """
    )
    log, out, junit, md = (tmp_path / n for n in ("run.log", "r.json", "r.xml", "r.md"))
    ranks = tmp_path / "ranks"
    argv = [
        sys.executable,
        "-c",
        child,
        url,
        "--password",
        s["bearer"],
        "--password",
        s["password"],
    ]
    env = {
        "AWS_SECRET_ACCESS_KEY": s["awssecret"],
        "AWS_SESSION_TOKEN": s["session"],
        "KEY_BODY_FOR_TEST": s["key"],
    }
    proc, _ = run_cli(
        ["run", "--timeout", "60", "--log", str(log), "--json", str(out), "--junit", str(junit)]
        + ["--markdown", str(md), "--rank-logs", str(ranks), "--"]
        + argv,
        env=env,
        timeout=90,
    )
    assert proc.returncode == 1, proc.stderr
    report = load(out)
    written = {
        "stdout": proc.stdout,
        "stderr": proc.stderr,  # the echo of the output, and the summary
        "log": log.read_text(),
        "json": out.read_text(),
        "junit": junit.read_text(),
        "markdown": md.read_text(),
    }
    written.update({p.name: p.read_text() for p in ranks.iterdir()})
    for name, text in written.items():
        for kind, secret in s.items():
            assert secret not in text, "%s leaked into %s" % (kind, name)
    # what was there is still said: the line count, the URL's host, the names of the secrets
    assert "https://***@git.invalid/repo?X-Amz-Security-Token=***" in report["run"]["command"]
    assert report["run"]["command"][-1] == "***" and report["run"]["command"][-2] == "--password"
    tail = [line for r in report["run"]["rank_output"] for line in r.get("last_lines", [])]
    assert "AWS_SECRET_ACCESS_KEY=***" in tail and "***" in tail
    assert report["run"]["lines"] == 8
    assert "AWS_SECRET_ACCESS_KEY=***" in written["log"]
    exit_finding = finding(report, "launcher-exit")
    assert exit_finding and exit_finding["evidence"]
