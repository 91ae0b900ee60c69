"""Every file a verb reads, given something that is not the file it wants: a FIFO, a device, a folder, a
wrong-typed JSON, a huge file. Each is exit 2 naming the path, never a traceback, never a hang (issue 32,
item 3).

The flags are found by walking the argparse parsers of both command lines (imagebuild/cli.py,
efa_validators/cli.py), so a new flag that takes a path is walked too: a flag whose metavar, name or help
says it takes a file or folder is an input unless OUTPUTS names it as written. Each case runs in a forked
child (the modules are imported once), bounded by a deadline, with the docker engine pointed at nothing and
no registry reachable: nothing a verb does past reading its inputs can touch the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from cli import build_py, validators
from paths import ROOT

DEADLINE_S = 30
HUGE = 200 * 1024 * 1024  # a sparse file: past every cap, costs no disk
# path-taking flags that name what the verb writes (never read as input)
OUTPUTS = {
    ("render", "--out"), ("build", "--out"), ("bake", "--out"), ("bake", "--file"), ("demo", "--out"),
    ("test", "--json"), ("test", "--junit"), ("preflight", "--out"), ("report", "--plot"),
    ("report", "--markdown"), ("build", "--cache"), ("bake", "--cache"), ("demo", "--cache"),
    ("parse", "--json"), ("parse", "--junit"), ("parse", "--markdown"), ("node-check", "--json"),
    ("run", "--json"), ("run", "--junit"), ("run", "--markdown"), ("run", "--log"), ("run", "--rank-logs"),
    ("release", "--s3"), ("release", "--notes"), ("base", "--name"), ("init", "dir"), ("fan-in", "--out"),
    ("drain", "--json"),
    ("demo", "--mirror"),  # a URL base (file:// or http://) the fetcher asks, not a file a verb parses
}  # fmt: skip
# logs are streamed at any size and any text is a log: only what is not a readable file is bad input there
LOGS = {("parse", "logs"), ("explain", "logs")}
_PATHY = re.compile(r"FILE|PATH|\.pem|\.json|DIR|LOG\b|REPORT|RECORD")  # a metavar
_PATHY_NAME = re.compile(
    r"(^|_)(matrix|summary|records?|checks|previous|cluster|lock|key|ca|config|logs?|report|file|hostfile|out)$"
)
_PATHY_HELP = re.compile(r"\b(file|folder|directory)\b", re.I)


def _subparsers(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def path_flags() -> Iterator[Tuple[str, str, str]]:
    """(cli, verb, flag or positional dest) of every input that takes a path."""
    from efa_validators.cli import make_parser as validators_parser
    from imagebuild.cli import make_parser as build_parser

    for cli, parser in (("imagebuild", build_parser()), ("validators", validators_parser())):
        for verb, sub in sorted(_subparsers(parser).items()):
            for a in sub._actions:
                if isinstance(a, argparse._HelpAction) or a.nargs == 0 or a.type not in (None, str):
                    continue
                flag = a.option_strings[-1] if a.option_strings else a.dest
                pathy = (_PATHY.search(str(a.metavar or "")) or _PATHY_NAME.search(a.dest)
                         or _PATHY_HELP.search(a.help or ""))  # fmt: skip
                if (verb, flag) in OUTPUTS or not pathy:
                    continue
                yield cli, verb, flag


# the readers this issue names: each must be reached (the path named in the error), not passed over because
# something before it failed; other flags must be exit 2 without a traceback or a hang, whatever stops them
KNOWN_READERS = {
    ("verify", "--key"), ("attest", "--sign-key"), ("release", "--require-signed"),
    ("preflight", "--lock"), ("test", "--out"), ("prune", "--records"), ("prune", "--summary"),
    ("release", "--summary"), ("report", "report"),
    ("parse", "logs"), ("explain", "logs"), ("run", "--resource-config"), ("verify", "--docker-config"),
    ("list", "--matrix"), ("render", "--matrix"), ("bake", "--matrix"), ("attest", "--summary"),
    ("push", "--summary"), ("bake", "--build-ca"),
}  # fmt: skip
# push --sign-key and release --checks/--previous are read only once a summary names a pushed variant; their
# readers are the ones attest --sign-key and release --summary/--require-preflight are proven through here
# flags that take a folder: an (empty) folder is good input there
FOLDERS = {("prune", "--records"), ("release", "--records"), ("test", "--out")}


def test_the_walk_finds_the_known_readers():
    """The walk sees the readers this issue names: a parser change that hid one would pass vacuously."""
    found = {(verb, flag) for _cli, verb, flag in path_flags()}
    assert KNOWN_READERS <= found, KNOWN_READERS - found


# ---------------------------------------------------------------- a workspace where every other input is good
MATRIX = """\
    defaults:
      base: {image: "localbase/debian:bookworm-minbase"}
    variants:
      - name: v1
"""


def _workspace(root: Path) -> Dict[str, str]:
    """Good inputs for every flag but the one under test: a matrix, an empty build summary, a lock, a
    cluster file, a report, a log."""
    shutil.copy(ROOT / "matrix.local.yaml", root / "matrix.yaml")
    shutil.copy(ROOT / "checks.local.yaml", root / "checks.local.yaml")
    shutil.copytree(ROOT / "examples", root / "examples")
    (root / "build").mkdir()
    summary = {"schema": "efa-image-build/build-summary/v1", "variants": []}
    (root / "build" / "summary.json").write_text(json.dumps(summary))
    lock = {"name": "v1", "env": [], "components": {}}
    (root / "lock.json").write_text(json.dumps(lock))
    (root / "cluster.yaml").write_text("nodes: 2\ninstance_type: p5.48xlarge\nhosts: [a, b]\n")
    (root / "report.json").write_text(json.dumps({"schema": "efa-image-build/report/v1", "verdict": "pass"}))
    (root / "run.log").write_text("nothing\n")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (root / "pub.pem").write_bytes(pem)
    (root / "key.pem").write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))  # fmt: skip
    return {"pub": str(root / "pub.pem"), "key": str(root / "key.pem"),
            "summary": str(root / "build" / "summary.json"),
            "lock": str(root / "lock.json"), "cluster": str(root / "cluster.yaml"),
            "report": str(root / "report.json"), "log": str(root / "run.log")}  # fmt: skip


# argv of each verb with good values; BAD is put where the flag under test goes
BASE = {
    "verify": ["localhost:1/x@sha256:" + "a" * 64, "--key", "{pub}", "--attempts", "1"],
    "preflight": ["--print", "mpirun", "--cluster", "{cluster}", "--lock", "{lock}"],
    "report": ["{report}"],
    "parse": ["{log}"],
    "explain": ["{log}"],
    "run": ["--", "echo", "{{sm_current_host}}"],  # a placeholder: the resource config is read
    "prune": ["--dry-run", "--engine-only"],
    "release": ["--attempts", "1"],
    "push": ["--attempts", "1"],
    "attest": ["--sign-key", "{key}", "--attempts", "1"],
    "explain-env": ["local-debian-nccl2.27"],
    "build": ["--attempts", "1"],
}


def _argv(verb: str, flag: str, bad: str, good: Dict[str, str]) -> List[str]:
    argv = [w.format(**good) for w in BASE.get(verb, [])]
    if flag.startswith("-"):
        if flag in argv:
            argv[argv.index(flag) + 1] = bad
        else:
            argv[:0] = [flag, bad]  # before a `--` the command follows
    else:  # a positional: the first good one of its kind is replaced
        first = next((i for i, w in enumerate(argv) if not w.startswith("-")), None)
        argv[first if first is not None else 0 : (first + 1) if first is not None else 0] = [bad]
    return [verb] + argv


def _bad_inputs(root: Path) -> Dict[str, str]:
    fifo = root / "a-fifo"
    os.mkfifo(fifo)
    folder = root / "a-folder"
    folder.mkdir()
    wrong = root / "wrong.json"  # every reader's key with the wrong type
    wrong.write_text(json.dumps({
        "schema": "efa-image-build/build-summary/v1", "variants": [{"variant": 3, "digest": ["x"]}],
        "env": "x", "components": 5, "checks": [1], "digest": {"a": 1}, "channels": 7, "index": [],
        "images": 4, "verdict": ["pass"], "nodes": "two", "instance_type": 5, "hosts": 9,
    }))  # fmt: skip
    huge = root / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(HUGE)
    return {"fifo": str(fifo), "device": "/dev/zero", "folder": str(folder), "wrong-typed": str(wrong),
            "huge": str(huge)}  # fmt: skip


def _run_forked(cli: str, argv: List[str], cwd: Path) -> Tuple[str, int, str]:
    """('done', rc, stderr) or ('hang', -1, '') when the verb did not end by the deadline (killed)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the verb in this process image, its answer on the pipe
        try:
            os.close(read)
            os.chdir(cwd)
            os.environ.update(DOCKER_HOST="unix:///nonexistent/docker.sock", AWS_EC2_METADATA_DISABLED="true",
                              TMPDIR=str(cwd))  # fmt: skip
            for var in ("IMAGE_REGISTRY", "REGISTRY_USERNAME", "REGISTRY_PASSWORD"):
                os.environ.pop(var, None)
            res = (build_py if cli == "imagebuild" else validators)(*argv)
            with os.fdopen(write, "w") as fh:
                json.dump([res.rc, res.err[-4000:]], fh)
        finally:
            os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(read, 65536)
        if not chunk:  # the child answered and ended
            break
        chunks.append(chunk)
    os.close(read)
    text = b"".join(chunks).decode()
    if not text:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "hang", -1, ""
    os.waitpid(pid, 0)
    rc, err = json.loads(text)
    return "done", rc, err


CASES = sorted(path_flags())


@pytest.mark.parametrize("cli,verb,flag", CASES, ids=["%s-%s" % (v, f.lstrip("-")) for _c, v, f in CASES])
def test_every_file_argument_refuses_what_is_not_its_file(tmp_path, cli, verb, flag):
    good = _workspace(tmp_path)
    bad = _bad_inputs(tmp_path)
    kinds = ["fifo", "device", "folder"] if (verb, flag) in LOGS else list(bad)
    if (verb, flag) in FOLDERS:
        kinds.remove("folder")
    wrong = []
    for kind in kinds:
        argv = _argv(verb, flag, bad[kind], good)
        state, rc, err = _run_forked(cli, argv, tmp_path)
        # a generic wrong-typed JSON may be good input to some readers (a docker config): not required named
        unread = (verb, flag) in KNOWN_READERS and kind != "wrong-typed" and bad[kind] not in err
        if state == "hang" or rc != 2 or "Traceback" in err or unread:
            wrong.append("%s: %s rc=%s %s" % (kind, " ".join(argv), rc, textwrap.shorten(err, 300)))
    assert not wrong, "\n".join(wrong)
