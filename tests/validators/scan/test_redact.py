"""efa_validators/scan/redact.py: the one table of secrets both sides mask (issue 23, item 5)."""

from __future__ import annotations

import re

import pytest

from efa_validators.scan.redact import (
    MASK,
    RULES,
    TRIGGERS,
    Redactor,
    may_hold_secret,
    redact_argv,
    redact_text,
    secret_values,
)
from imagebuild.check.expectations import CREDENTIAL_PATTERNS
from imagebuild.errors import UserError, redact

SECRET = "s3cr3tVALUE+with=chars"  # as a URL holds it (a `/` would be percent-encoded)
AWS_STYLE = "s3cr3tXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
# (line holding SECRET, what stays of it): one per kind of secret a child or a command line shows
KINDS = {
    "url userinfo": (f"git clone https://user:{SECRET}@git.invalid/r", "https://***@git.invalid/r"),
    "url query token": (f"GET https://b.invalid/k?X-Amz-Security-Token={SECRET}&x=1", "Token=***&x=1"),
    "url signature": (f"https://b.invalid/k?X-Amz-Signature={SECRET}", "X-Amz-Signature=***"),
    "url sig": (f"https://acct.invalid/c?sv=2020&sig={SECRET}", "&sig=***"),
    "env assignment": (f"AWS_SECRET_ACCESS_KEY={SECRET}", "AWS_SECRET_ACCESS_KEY=***"),
    "export quoted": (f"export AWS_SESSION_TOKEN='{SECRET}'", "AWS_SESSION_TOKEN='***'"),
    "aws secret with slashes": (f"AWS_SECRET_ACCESS_KEY={AWS_STYLE} next", "AWS_SECRET_ACCESS_KEY=*** next"),
    "ini": (f"aws_secret_access_key = {SECRET}", "aws_secret_access_key = ***"),
    "sts json": (f'{{"SessionToken": "{SECRET}", "Expiration": "x"}}', '"SessionToken": "***"'),
    "yaml": (f"password: {SECRET}", "password: ***"),
    "flag=value": (f"--hf-token={SECRET}", "--hf-token=***"),
    "bearer header": (f"curl -H 'Authorization: Bearer {SECRET}' https://h.invalid/", "Bearer ***'"),
    "aws4 header": (f"Authorization: AWS4-HMAC-SHA256 Credential=x, Signature={SECRET}", "SHA256 ***"),
    "bare bearer": (f"using bearer {SECRET}", "bearer ***"),
    "private key": (f"-----BEGIN RSA PRIVATE KEY-----{SECRET}", "PRIVATE KEY----- ***"),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_secret_is_masked_and_what_it_was_stays(kind):
    line, kept = KINDS[kind]
    out = redact_text(line)
    assert SECRET not in out and "s3cr3t" not in out, out
    assert kept in out, out
    assert redact(line) == out  # the build side masks by the same table


def test_aws_key_ids_are_masked_so_the_no_credentials_check_finds_none():
    line = "AccessKeyId: ASIAIOSFODNN7EXAMPLE and AKIAIOSFODNN7EXAMPLE"
    out = redact_text(line)
    assert re.search(CREDENTIAL_PATTERNS[0], line) and not re.search(CREDENTIAL_PATTERNS[0], out)


@pytest.mark.parametrize(
    "line",
    [
        "ip-10-0-0-1:4242:4250 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 32 nics)",
        "auth-node-1:4242:4250 [0] NCCL INFO Channel 00 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
        "step 10 max_tokens=4096 loss=1.25 PWD=/home/u",
        "m.yaml: key 'training.auth': not a string",
        "Bearer tokens are rotated",
        '"expires_in": 3600',
    ],
)
def test_lines_without_a_secret_are_unchanged(line):
    assert redact_text(line) == line


def test_every_rules_example_passes_the_trigger_test():
    """A line no trigger word is in is passed unread: each rule's example must hold one."""
    for line, _kept in KINDS.values():
        assert may_hold_secret(line), line
    assert may_hold_secret("AKIAIOSFODNN7EXAMPLE")
    assert {name for name, _p, _r in RULES} >= {"url-userinfo", "secret-assignment", "aws-key-id"}
    assert all(word == word.lower() for word in TRIGGERS)


def test_known_values_are_masked_even_bare():
    env = {"AWS_SECRET_ACCESS_KEY": SECRET, "HOME": "/root/homedir", "GITHUB_TOKEN": "short"}
    known = secret_values(env)
    assert known == [SECRET]  # the home folder is no secret; a value under 8 characters is kept
    assert redact_text("the key is %s." % SECRET, known) == "the key is ***."


def test_a_command_line_loses_its_secrets_and_keeps_its_shape():
    argv = [
        "mpirun",
        "--password",
        SECRET,
        "-x",
        "AWS_SESSION_TOKEN",
        "git",
        f"https://u:{SECRET}@h.invalid/",
    ]
    assert redact_argv(argv) == [
        "mpirun",
        "--password",
        MASK,
        "-x",
        "AWS_SESSION_TOKEN",
        "git",
        "https://***@h.invalid/",
    ]


def test_a_private_key_is_masked_line_by_line_per_stream():
    red = Redactor()
    lines = ["-----BEGIN OPENSSH PRIVATE KEY-----", SECRET, SECRET, "-----END OPENSSH PRIVATE KEY-----"]
    out = [red.line(text, 3) for text in lines[:2]] + [red.line("rank 5 says hi", 5)]
    out += [red.line(text, 3) for text in lines[2:]] + [red.line("after", 3)]
    assert SECRET not in "".join(out)
    assert out[2] == "rank 5 says hi" and out[-1] == "after"


def test_user_errors_mask_every_kind():
    err = UserError("cannot fetch", file="m.yaml", hint=KINDS["env assignment"][0])
    assert SECRET not in str(err)


def test_option_names_are_named_never_masked():
    """issue 32 item 6: `key '--key'` of a message about a file named private_key became `*** '--key'`:
    the redactor masked the label after the path. Values are masked; option names stay."""
    assert str(UserError("not a regular file", file="/tmp/private_key", key="--key")) == (
        "/tmp/private_key: key '--key': not a regular file"
    )
    assert redact_text("api_key: --key") == "api_key: --key"
    assert redact_text("api_key: s3cr3t-value") == "api_key: ***"
    assert redact_argv(["--password", "--key", "k.pem"]) == ["--password", "--key", "k.pem"]
    assert redact_argv(["--password", "hunter2"]) == ["--password", "***"]
    got = str(UserError("x", file="https://u:pw@host/f", key="--key"))
    assert got == "https://***@host/f: key '--key': x"
