"""Which step of a build failed and what its command said last, read from that build's own output.

docker's own error names the command (`executor failed running [...]: exit code: 1`), not why it failed:
that is in the command's output (pip's `ERROR: No matching distribution found for ...`). BuildKit's plain
progress interleaves the stages it runs in parallel, and each line carries its vertex (`#7 ...`), so the lines
are kept per vertex and the vertex that failed names itself (`#7 ERROR: ...`): neither the step printed last
nor the lines of a step beside it. The classic builder runs one step at a time: its lines since `Step N/M`.
Pure: lines in, a Failure out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

TAIL_SCAN = 40  # output lines at the end of the step read for error lines
TAIL_KEEP = 3  # error lines carried into the summary
LINE_MAX = 300
STEP_MAX = 160

# A line that says what went wrong (pip's ERROR:, apt's E:, gcc's error:, make's ***, a shell's No such file).
_ERRORISH = re.compile(
    r"(^|\s)(E:|ERROR|error|Error|fatal|FATAL|\*\*\*)|failed|Failed|FAILED|[Uu]nable to|[Cc]annot |"
    r"[Cc]ould not|[Nn]o such|[Nn]ot found|[Pp]ermission denied|[Rr]efused"
)
# Certificate verification failed: a TLS-intercepting proxy whose CA the builder stages do not trust
# (pip/Python, OpenSSL, GnuTLS/apt, curl and git, Go).
TLS_FAILED = re.compile(
    r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLCertVerificationError|problem confirming the ssl"
    r"|SSL certificate problem|[Cc]ertificate verification failed|server certificate verification failed"
    r"|certificate signed by unknown authority|unable to get local issuer certificate",
)
# docker's words for "the command exited non-zero", the command itself left out (the step names it)
_EXIT = (
    re.compile(r"^executor failed running \[.*\]: (.*)$", re.DOTALL),  # the engine's BuildKit
    re.compile(r'^process ".*" did not complete successfully: (.*)$', re.DOTALL),  # buildx
    re.compile(r"^The command .* (returned a non-zero code: .*)$", re.DOTALL),  # classic
)

_VERTEX = re.compile(r"^#(\d+) (.*)$")
_OUTPUT = re.compile(r"^\d+\.\d+ ?(.*)$")  # `#7 0.488 Reading package lists...`
_STATUS = re.compile(r"^(DONE \S+|CACHED|CANCELED|sha256:[0-9a-f]+)$")


@dataclass
class Failure:
    """The failing step (`[builder 4/5] RUN ...`), docker's reason, the command's last error lines, and
    whether its output says certificate verification failed."""

    step: Optional[str]
    reason: str
    lines: List[str] = field(default_factory=list)
    tls: bool = False


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the classic builder colours a step's stderr


def error_lines(output: Sequence[str]) -> List[str]:
    """The last lines of a command's output that say what went wrong (else its last lines)."""
    tail = [_ANSI.sub("", line).strip()[:LINE_MAX] for line in output[-TAIL_SCAN:]]
    tail = [line for line in tail if line]
    errs = [line for line in tail if _ERRORISH.search(line)]
    return (errs or tail)[-TAIL_KEEP:]


def short_reason(message: str) -> str:
    """docker's error without the command it repeats (`exit code: 100`); other errors as they are."""
    text = message.strip()
    for pattern in _EXIT:
        m = pattern.match(text)
        if m:
            return m.group(1).strip()
    return text


def _failure(step: Optional[str], reason: str, output: Sequence[str]) -> Failure:
    return Failure(
        step=step if step is None or len(step) <= STEP_MAX else step[: STEP_MAX - 3] + "...",
        reason=short_reason(reason),
        lines=error_lines(output),
        tls=any(TLS_FAILED.search(line) for line in output),
    )


@dataclass
class _Vertex:
    name: Optional[str] = None
    output: List[str] = field(default_factory=list)
    error: Optional[str] = None


class BuildkitSteps:
    """BuildKit plain progress (`--progress=plain`), line by line, kept per vertex."""

    def __init__(self) -> None:
        self.vertices: Dict[str, _Vertex] = {}
        self.failed: List[str] = []  # vertex ids in the order they reported ERROR
        self.loose: List[str] = []  # lines of no vertex (the CLI's own `error: ...`)

    def feed(self, line: str) -> None:
        text = line.rstrip("\n")
        m = _VERTEX.match(text)
        if not m:
            if text.strip() and not text.startswith(("------", " > ")):
                self.loose.append(text)
            return
        vid, rest = m.group(1), m.group(2)
        vertex = self.vertices.setdefault(vid, _Vertex())
        out = _OUTPUT.match(rest)
        if rest.startswith("ERROR: ") or rest == "ERROR":
            vertex.error = rest[len("ERROR: ") :] or "failed"
            if vid not in self.failed:
                self.failed.append(vid)
        elif out:
            vertex.output.append(out.group(1))
        elif vertex.name is None and not _STATUS.match(rest):
            vertex.name = rest  # its first line; BuildKit repeats it when the vertex prints again
        # else: a repeated name, a status line (DONE, CACHED, sha256), a progress line (extracting ...)

    def failure(self) -> Optional[Failure]:
        """The vertex that failed first, not one cancelled because of it; None if none reported ERROR."""
        ids = [v for v in self.failed if "canceled" not in (self.vertices[v].error or "")] or self.failed
        if ids:
            vertex = self.vertices[ids[0]]
            return _failure(vertex.name, vertex.error or "failed", vertex.output)
        errs = [line for line in self.loose if line.startswith(("ERROR", "error:", "failed to"))]
        return _failure(None, errs[-1], []) if errs else None


class ClassicSteps:
    """The classic builder's stream: `Step N/M : INSTR`, then that step's output, one step at a time. Its
    chunks are not lines (`E` and `: Unable to locate package` may come apart): joined before they split."""

    def __init__(self) -> None:
        self.step: Optional[str] = None
        self.output: List[str] = []
        self.partial = ""

    def start(self, header: str) -> None:
        self.step, self.output, self.partial = header.strip(), [], ""

    def feed(self, text: str) -> None:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        self.output += [line for line in lines if line.strip()]

    def failure(self, message: str) -> Failure:
        return _failure(self.step, message, self.output + ([self.partial] if self.partial.strip() else []))


def describe(failure: Failure, log: str, build_ca: Optional[str] = None) -> str:
    """The summary's error: the step and docker's reason on the first line, then the command's last error
    lines, then a hint where the output says certificate verification failed."""
    head = f"{failure.step}: {failure.reason}" if failure.step else failure.reason
    lines = [f"{head} (log {log})"] + [f"    {line}" for line in failure.lines]
    if failure.tls and build_ca:
        lines.append(
            f"  hint: certificate verification failed although builder stages trusted {build_ca} "
            "(--build-ca): is it the CA of the proxy in the way?"
        )
    elif failure.tls:
        lines.append(
            "  hint: certificate verification failed in a builder stage (a TLS-intercepting proxy?): pass "
            "--build-ca PATH with the proxy's CA bundle (--build-ca alone: the host's, "
            "/etc/ssl/certs/ca-certificates.crt); builder stages trust it, the final image never has it"
        )
    return "\n".join(lines)
