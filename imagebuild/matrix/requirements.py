"""What a training `requirements.txt` asks of the build, read at load time (pure).

The image installs the file in a stage of its own before the training code is copied (so a code-only change
keeps the pip layer). That stage sees the requirements file alone, so lines that point at other files or at
the code (`-r`, `-c`, `-e`, local paths) cannot work there and are refused here, at their line. pip turns on
hash-checking mode as soon as one requirement carries `--hash=`, and then wants a hash on every one
(pip docs, "Secure installs / hash-checking mode"): a file that hashes some lines only is refused here too,
rather than at build time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Tuple

from imagebuild.errors import UserError

# Options that name another file, an editable install or a local folder: the requirements stage has none.
_REFUSED = ("-r", "--requirement", "-c", "--constraint", "-e", "--editable")
_LOCAL = re.compile(r"^(\.{1,2}/|/|file:)")


@dataclass(frozen=True)
class RequirementsFile:
    requirements: int  # requirement lines (0: nothing to install; comments and options only)
    hashed: bool  # every requirement carries --hash=: install with --require-hashes


def _logical_lines(text: str) -> List[Tuple[int, str]]:
    """(first physical line number, text) with `\\` continuations joined and comments removed."""
    out: List[Tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip()))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip()))
    return out


def scan(text: str, file: str) -> RequirementsFile:
    """Count the requirements and decide hash mode; a line the requirements stage cannot honour is a
    UserError at its line (key `training.requirements`)."""
    count, hashed = 0, []
    for number, line in _logical_lines(text):
        first = line.split()[0]
        flag = first.split("=", 1)[0]
        if flag in _REFUSED or any(first.startswith(o) and len(o) == 2 for o in ("-r", "-c", "-e")):
            raise UserError(
                f"`{flag}` is not supported: the requirements are installed before the training code is "
                "copied, from this one file",
                file=file,
                line=number,
                key="training.requirements",
                hint="list the packages in this file (pinned, ideally with --hash=sha256:...)",
            )
        if first.startswith("-"):
            continue  # a global option (--index-url, --extra-index-url, --only-binary, ...)
        if _LOCAL.match(first):
            raise UserError(
                f"local path {first!r}: the requirements stage has no files but this one",
                file=file,
                line=number,
                key="training.requirements",
            )
        count += 1
        hashed.append((number, "--hash=" in line))
    if any(h for _, h in hashed) and not all(h for _, h in hashed):
        number = next(n for n, h in hashed if not h)
        raise UserError(
            "this requirement has no --hash= but others do: pip's hash-checking mode needs a hash on every "
            "requirement",
            file=file,
            line=number,
            key="training.requirements",
            hint="pip hash / pip-compile --generate-hashes give them",
        )
    return RequirementsFile(count, bool(hashed) and all(h for _, h in hashed))
