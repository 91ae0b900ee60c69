"""The team's own checks (matrix `checks:`, recorded in the lock): expectations and their three evaluators.

Why beside the derived checks and not a second tool: they run in the same container, through the same
testinfra module, into the same JSON/JUnit report as `custom:<name>`, so release gates on them like on any
other check. The kinds and field names follow container-structure-test (command, file existence and
content, metadata tests; GoogleContainerTools/container-structure-test README.md). Regexes are searched
line-aware (`^` and `$` match at each line), as a reader of `--version` output expects.
"""

from __future__ import annotations

import re
import shlex
import time
from typing import Any, Callable, Dict, List, Tuple

from imagebuild.check.probes import FAIL, PASS, UNKNOWN, Outcome, Target
from imagebuild.components.expectation import Expectation
from imagebuild.matrix.schema import CHECK_TIMEOUT_DEFAULT

PREFIX = "custom:"
WHY = "the team's own check (matrix `checks:`)"


def expectations(lock: dict) -> List[Expectation]:
    """One expectation per check the lock records, in name order; a record this tool did not write (a label
    made by hand) is one that stays unknown, never skipped. Pure."""
    checks = lock.get("checks") or {}
    if not isinstance(checks, dict):
        return [Expectation(PREFIX + "checks", "custom_unknown", "the lock's checks are not a mapping")]
    out = []
    for name, spec in sorted(checks.items(), key=lambda item: str(item[0])):
        spec = spec if isinstance(spec, dict) else {}
        kind = next((k for k in ("command", "path", "metadata") if k in spec), "unknown")
        out.append(
            Expectation(f"{PREFIX}{name}", f"custom_{kind}", str(spec.get("description") or WHY), spec)
        )
    return out


def _regexes(p: dict, text: str, what: str, expected: str, excluded: str) -> List[str]:
    """What is wrong with `text` against the check's expected/excluded regexes (empty: nothing)."""
    bad = [f"{what} lacks /{r}/" for r in p.get(expected) or () if not re.search(r, text, re.MULTILINE)]
    bad += [
        f"{what} matches excluded /{r}/" for r in p.get(excluded) or () if re.search(r, text, re.MULTILINE)
    ]
    return bad


def _tail(text: str) -> str:
    return text.strip()[-300:]


# Runs the argv under `timeout -s KILL` inside the container (coreutils, or busybox's): KILL cannot be caught,
# and coreutils sends it to the command's whole process group, so a hung command and its children end and the
# check run goes on. Its stdout and stderr each pass through `head -c`: past MAX_OUTPUT bytes the reader is
# gone, the command ends on SIGPIPE, and this process never holds more than MAX_OUTPUT + 1 bytes of either
# (a check printing 600 MB made it 1.26 GB). The command's status comes back through fd 5, the rest of the
# pipeline's shell plumbing never reaches it. An image without `timeout` or `head` says so on stderr with
# exit 125: the check stays unknown.
NO_TIMEOUT = "efa-image-build: no timeout command in the image"
MAX_OUTPUT = 1024 * 1024  # bytes kept of a check's stdout, and of its stderr
_BOUNDED = (
    f'command -v timeout >/dev/null 2>&1 || {{ echo "{NO_TIMEOUT}" >&2; exit 125; }}; '
    'command -v head >/dev/null 2>&1 || { echo "efa-image-build: no head command in the image" >&2; '
    "exit 125; }; "
    "limit=$1; max=$2; shift 2; exec 4>&1; "
    'rc=$({ { { timeout -s KILL "$limit" "$@" 4>&- 5>&-; echo $? >&5; } 2>&1 1>&3 3>&- '
    '| head -c "$max" >&2; } 3>&1 | head -c "$max" >&4; } 5>&1); exit "${rc:-137}"'
)
KILLED = 128 + 9  # the status of a command (and of `timeout` itself) ended by SIGKILL


def bounded(argv: List[str], limit: int, max_output: int = MAX_OUTPUT) -> str:
    """The shell command that runs `argv` killed after `limit` seconds, each stream cut one byte past
    `max_output` (so a cut is seen); every word quoted, so the container's shell interprets nothing of the
    check's."""
    return shlex.join(["sh", "-c", _BOUNDED, "sh", str(limit), str(max_output + 1), *argv])


def _cut(out: str, err: str, max_output: int) -> Tuple[str, str, List[str]]:
    """(stdout, stderr, what was cut): a stream past `max_output` characters keeps its head."""
    streams = (("stdout", out), ("stderr", err))
    cut = [f"{name} cut at {max_output} bytes (a check's output is bounded)"
           for name, text in streams if len(text.encode()) > max_output]  # fmt: skip
    return out[:max_output], err[:max_output], cut


def custom_command(t: Target, p: dict) -> Outcome:
    argv = [p["command"], *(p.get("args") or [])]
    shown = shlex.join(argv)
    limit = int(p.get("timeout") or CHECK_TIMEOUT_DEFAULT)
    started = time.monotonic()
    rc, out, err = t.run(bounded(argv, limit))
    out, err, cut = _cut(out, err, MAX_OUTPUT)
    if rc == KILLED and time.monotonic() - started >= limit:  # killed by the limit, not before it
        return FAIL, f"`{shown}`: timed out after {limit} s (stdout {_tail(out)!r}, stderr {_tail(err)!r})"
    if rc == 125 and "efa-image-build: no " in err:
        return UNKNOWN, f"`{shown}` was not run: the image has no `timeout`/`head` command to bound it with"
    if cut:  # the command was ended by its cut output: what it said is not all it would have said
        return FAIL, f"`{shown}`: " + "; ".join(cut) + f" (exit {rc}, stdout ...{_tail(out)!r})"
    want = int(p.get("exit_code", 0))
    bad = [f"exited {rc} (want {want})"] if rc != want else []
    bad += _regexes(p, out, "stdout", "expected_output", "excluded_output")
    bad += _regexes(p, err, "stderr", "expected_error", "excluded_error")
    if bad:
        return FAIL, f"`{shown}`: " + "; ".join(bad) + f" (stdout {_tail(out)!r}, stderr {_tail(err)!r})"
    return PASS, f"`{shown}` exited {rc} as expected"


def custom_path(t: Target, p: dict) -> Outcome:
    path = p["path"]
    quoted = shlex.quote(path)
    rc, _, err = t.run(f"test -e {quoted} || test -L {quoted}")
    if rc not in (0, 1):
        return UNKNOWN, f"could not tell whether {path} exists (rc {rc}): {_tail(err)}"
    if p.get("should_exist", True) is False:
        return (FAIL, f"{path} exists; it should not") if rc == 0 else (PASS, f"{path} is absent")
    if rc == 1:
        return FAIL, f"{path} does not exist"
    bad: List[str] = []
    wants = {k: p.get(k) for k in ("permissions", "uid", "gid") if p.get(k) is not None}
    if wants:
        rc, out, err = t.run(f"stat -c '%A %u %g' -- {quoted}")
        fields = out.split()
        if rc != 0 or len(fields) != 3:
            return UNKNOWN, f"stat {path} failed (rc {rc}): {_tail(err or out)}"
        seen = {"permissions": fields[0], "uid": int(fields[1]), "gid": int(fields[2])}
        bad += [f"{k} {seen[k]} (want {v})" for k, v in wants.items() if seen[k] != v]
    if p.get("expected_contents") or p.get("excluded_contents"):
        if t.run(f"test -f {quoted}")[0] != 0:  # a device (/dev/zero), a FIFO or a folder is never read
            return FAIL, f"{path} is not a regular file: its contents are not read"
        limit = int(p.get("timeout") or CHECK_TIMEOUT_DEFAULT)
        rc, text, err = t.run(bounded(["cat", "--", path], limit))
        text, err, cut = _cut(text, err, MAX_OUTPUT)
        if cut:
            return FAIL, f"{path} is larger than {MAX_OUTPUT} bytes: its contents are not matched (cut there)"
        if rc != 0:
            return FAIL, f"{path} cannot be read as a file (rc {rc}): {_tail(err)}"
        bad += _regexes(p, text, "its contents", "expected_contents", "excluded_contents")
    if bad:
        return FAIL, f"{path}: " + "; ".join(bad)
    return PASS, f"{path} exists as the check says"


def custom_metadata(t: Target, p: dict) -> Outcome:
    want: Dict[str, Any] = p["metadata"]
    config = t.config
    seen = {
        "entrypoint": config.get("Entrypoint") or [],
        "cmd": config.get("Cmd") or [],
        "workdir": config.get("WorkingDir") or "",
        "user": config.get("User") or "",
    }
    bad = [f"{k} is {seen[k]!r} (want {v!r})" for k, v in sorted(want.items()) if k in seen and seen[k] != v]
    for what, have in (("env", t.env), ("labels", t.labels)):
        for k, v in sorted((want.get(what) or {}).items()):
            if have.get(k) != v:
                now = "unset" if k not in have else repr(have[k])
                bad.append(f"{what} {k} is {now} (want {v!r})")
    if bad:
        return FAIL, "; ".join(bad)
    return PASS, "the image's config says " + ", ".join(sorted(want))


def custom_unknown(t: Target, p: dict) -> Outcome:
    return UNKNOWN, "the lock records a check of no known kind (command, path or metadata)"


UNTRUSTED = "custom_untrusted"


def custom_untrusted(t: Target, p: dict) -> Outcome:
    return UNKNOWN, (
        "not run: this check comes from the image's own lock label, and an image handed to "
        "`efa-image-build test "
        "--image` may carry any command; run it with --trust-image-checks if you trust the image's builder"
    )


def untrusted(exps: List[Expectation]) -> List[Expectation]:
    """The team's checks read from an image's label, made ones that say they were not run (unknown)."""
    return [Expectation(e.name, UNTRUSTED, e.why, {}) if e.name.startswith(PREFIX) else e for e in exps]


PROBES: Dict[str, Callable[[Target, dict], Outcome]] = {
    "custom_command": custom_command,
    "custom_path": custom_path,
    "custom_metadata": custom_metadata,
    "custom_unknown": custom_unknown,
    UNTRUSTED: custom_untrusted,
}
