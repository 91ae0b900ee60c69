"""What a training `requirements.txt` asks of the build, read at load time as pip reads it (pure).

The image installs the file in a stage of its own before the training code is copied (so a code-only change
keeps the pip layer). That stage sees the requirements file alone, so lines that point at other files or at
the code (`-r`, `-c`, `-e`, local paths, a word pip reads as a local archive though it has no `./`
(`pkg-1.0-py3-none-any.whl`, `dist/pkg.whl`), a direct reference `pkg @ file:...` to one, a local
`--find-links` or index) cannot work there and are refused here, at their line. pip turns on hash-checking
mode as soon as one requirement carries `--hash` (or the file says `--require-hashes`), and then wants a hash
on every one (pip docs, "Secure installs / hash-checking mode"): a file that hashes some lines only is refused
here too, rather than at build time.

A refusal must hold for every spelling pip accepts, so lines are read the way pip's own reader reads them
(pip docs, "Requirements File Format", https://pip.pypa.io/en/latest/reference/requirements-file-format/;
pip's src/pip/_internal/req/req_file.py: `preprocess`, `break_args_options`, `build_parser`):
- a line ending in `\\` is joined to the next with the backslashes stripped and nothing put between
  (`--con\\` + `straint c.txt` is `--constraint c.txt`), unless the line is a comment line; the joined line
  keeps the first line's number; comments (`#` at the start or after whitespace) are removed after joining;
- `${NAME}` is replaced from the environment before the line is read: what it becomes is not known here, so
  it is refused;
- the requirement is the words (split on single spaces) before the first word starting with `-`; the rest is
  shell-split and read by optparse, which takes any unique prefix of a long option (`--constr` is
  `--constraint`), a short option's value joined or apart (`-cc.txt`, `-c c.txt`), a long option's after
  `=` or apart; an unknown or ambiguous option is an error in pip, so it is refused here.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from imagebuild.errors import UserError

KEY = "training.requirements"

# The options pip reads in a requirements file (req_file.py SUPPORTED_OPTIONS and SUPPORTED_OPTIONS_REQ, with
# their names in cli/cmdoptions.py), the union over the pip versions an image may carry: a prefix unique in
# the union names the same option in every pip that has it. `--install-option` left pip in 23.1 and
# `--global-option` in 25.3; `--no-require-hashes`, `--all-releases` and `--only-final` are newer.
# long name -> (short name, takes a value)
PIP_OPTIONS: Dict[str, Tuple[Optional[str], bool]] = {
    "--index-url": ("-i", True),
    "--pypi-url": (None, True),  # the same option as --index-url
    "--extra-index-url": (None, True),
    "--no-index": (None, False),
    "--constraint": ("-c", True),
    "--requirement": ("-r", True),
    "--editable": ("-e", True),
    "--find-links": ("-f", True),
    "--no-binary": (None, True),
    "--only-binary": (None, True),
    "--prefer-binary": (None, False),
    "--require-hashes": (None, False),
    "--no-require-hashes": (None, False),
    "--pre": (None, False),
    "--all-releases": (None, True),
    "--only-final": (None, True),
    "--trusted-host": (None, True),
    "--use-feature": (None, True),
    "--hash": (None, True),
    "--config-settings": ("-C", True),
    "--global-option": (None, True),
    "--install-option": (None, True),
}
_SHORT = {short: long for long, (short, _value) in PIP_OPTIONS.items() if short}
# Options that name another file, an editable install or a local folder: the requirements stage has none.
_REFUSED = ("--requirement", "--constraint", "--editable")
_LOCATIONS = ("--index-url", "--pypi-url", "--extra-index-url", "--find-links")  # must be http(s) URLs here
_LOCAL = re.compile(r"^(\.{1,2}/|/|file:)", re.I)  # a URL scheme is case-insensitive (`FILE:` is `file:`)
# PEP 508 `name [extras] @ url` (spaces around `@` optional): a direct reference. Its URL must reach a
# remote host: a scheme whose transport (after `+` for VCS: `git+https`) is one of these; anything else
# (`file:`, `git+file:`, a path with no scheme) would take files from the build machine.
_DIRECT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(?:\[[^\]]*\])?\s*@\s*(?P<url>\S*)")
_REMOTE_TRANSPORTS = ("http", "https", "ssh", "git", "svn")
# The endings pip takes for a distribution archive (pip src/pip/_internal/utils/filetypes.py,
# ARCHIVE_EXTENSIONS), compared after pip's own `splitext` (utils/misc.py): `.tar` kept with what follows.
_ARCHIVES = (".whl", ".zip", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma")
_ARCHIVES += (".tar.gz", ".tgz", ".tar")
# The tool's own distributions: either one installed by the training requirements lands an `efa_validators` in
# the image's site-packages, ahead of the tool's copy in /opt/efa-image-build (added by a .pth file, so last
# on sys.path), and `python -m efa_validators` would run that one. Compared as PEP 503 normalizes names.
TOOL_DISTRIBUTIONS = ("efa-image-build", "efa-validators")
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508 `identifier`
# A distribution file's name up to its version (wheel: `name-ver-...`, PEP 427 escapes `-` in the name as
# `_`; sdist: `name-ver.tar.gz`): the name is the part before the first `-` followed by a digit.
_FILE_NAME = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._]*(?:-(?!\d)[A-Za-z0-9._]+)*)-\d")
_COMMENT = re.compile(r"(^|\s+)#.*$")
_ENV_VAR = re.compile(r"\$\{[A-Z0-9_]+\}")  # pip's pattern (req_file.ENV_VAR_RE)


@dataclass(frozen=True)
class RequirementsFile:
    requirements: int  # requirement lines (0: nothing to install; comments and options only)
    hashed: bool  # every requirement carries --hash=: install with --require-hashes


@dataclass(frozen=True)
class Option:
    name: str  # pip's long name, however it was spelled
    spelled: str  # as written (`--constr`, `-c`)
    value: Optional[str]


def logical_lines(text: str) -> List[Tuple[int, str]]:
    """(first physical line number, text) as pip's `preprocess` gives them: continuations joined, then
    comments removed, then empty lines dropped."""
    joined: List[Tuple[int, str]] = []
    parts: List[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line
            if parts:
                joined.append((start, "".join(parts + [line])))
                parts = []
            else:
                joined.append((number, line))
        else:
            if not parts:
                start = number
            parts.append(line.strip("\\"))
    if parts:
        joined.append((start, "".join(parts)))
    out = []
    for number, line in joined:
        line = _COMMENT.sub("", line).strip()
        if line:
            out.append((number, line))
    return out


def split_line(line: str) -> Tuple[str, str]:
    """(requirement, options) as pip's `break_args_options`: words before the first that starts with `-`."""
    words = line.split(" ")
    for index, word in enumerate(words):
        if word.startswith("-"):
            return " ".join(words[:index]), " ".join(words[index:])
    return line, ""


def _long_name(spelled: str) -> str:
    """optparse's reading of a long option: the exact name, else the one option it is a prefix of."""
    if spelled in PIP_OPTIONS:
        return spelled
    matches = sorted(name for name in PIP_OPTIONS if name.startswith(spelled))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ValueError(f"pip has no option `{spelled}` in a requirements file")
    raise ValueError(f"`{spelled}` is ambiguous to pip ({', '.join(matches)})")


def read_options(text: str) -> List[Option]:
    """The options of a line's option part as pip's optparse reads them; ValueError where pip errors."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"pip cannot split the options ({err})") from None
    out: List[Option] = []
    while words:
        word = words.pop(0)
        if word == "--":
            break  # optparse: the rest are arguments, which pip ignores
        if word.startswith("--"):
            spelled, eq, value = word.partition("=")
            name = _long_name(spelled)
            takes = PIP_OPTIONS[name][1]
            if eq and not takes:
                raise ValueError(f"`{spelled}` ({name}) takes no value")
            if takes and not eq:
                if not words:
                    raise ValueError(f"`{spelled}` ({name}) needs a value")
                value = words.pop(0)
            out.append(Option(name, spelled, value if takes else None))
        elif word.startswith("-") and len(word) > 1:
            rest = word[1:]
            while rest:
                spelled, rest = "-" + rest[0], rest[1:]
                if spelled not in _SHORT:
                    raise ValueError(f"pip has no option `{spelled}` in a requirements file")
                name = _SHORT[spelled]
                if not PIP_OPTIONS[name][1]:
                    out.append(Option(name, spelled, None))
                    continue
                if not rest and not words:
                    raise ValueError(f"`{spelled}` ({name}) needs a value")
                out.append(Option(name, spelled, rest or words.pop(0)))
                rest = ""
    return out


def _refuse(message: str, file: str, line: int, hint: Optional[str] = None) -> UserError:
    return UserError(message, file=file, line=line, key=KEY, hint=hint)


def _check_option(opt: Option, file: str, number: int) -> None:
    read_as = f" (pip reads it as `{opt.name}`)" if opt.spelled != opt.name else ""
    if opt.name in _REFUSED:
        raise _refuse(
            f"`{opt.spelled}` is not supported{read_as}: the requirements are installed before the training "
            "code is copied, from this one file",
            file,
            number,
            hint="list the packages in this file (pinned, ideally with --hash=sha256:...)",
        )
    if opt.name in _LOCATIONS and not re.match(r"^https?://", opt.value or "", re.I):
        raise _refuse(
            f"`{opt.spelled}` {opt.value!r}{read_as} is not an http(s) URL: the requirements stage has no "
            "files but this one",
            file,
            number,
        )


def _remote_url(url: str) -> bool:
    """A URL whose scheme's transport (after `+` for VCS: `git+https`) reaches a remote host."""
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", url)
    return bool(scheme) and scheme.group(1).lower().rsplit("+", 1)[-1] in _REMOTE_TRANSPORTS


def _local_direct_reference(requirement: str) -> Optional[str]:
    """The URL of a PEP 508 direct reference (`pkg @ url`) that is not remote, or None (no direct
    reference, or a remote one)."""
    found = _DIRECT.match(requirement)
    if not found:
        return None
    url = found.group("url")
    return None if _remote_url(url) else url


def _looks_like_path(word: str) -> bool:
    """pip's test on Linux (src/pip/_internal/req/constructors.py, `_looks_like_path`): a `/` anywhere, or a
    leading `.`."""
    return "/" in word or word.startswith(".")


def _is_archive(word: str) -> bool:
    """pip's `is_archive_file` (utils/filetypes.py): the extension, `.tar.*` kept whole, is an archive's."""
    base, ext = posixpath.splitext(word)
    if base.lower().endswith(".tar"):
        ext = base[-4:] + ext
    return ext.lower() in _ARCHIVES


def _local_file(requirement: str) -> Optional[str]:
    """The requirement, where pip reads it as a local file or folder rather than a project name, else None.

    pip (src/pip/_internal/req/constructors.py, `parse_req_from_line` and `_get_url_from_path`) cuts the
    markers at `;`, drops trailing `[extras]`, and takes as a path a name that ends in an archive's extension
    (`pkg-1.0-py3-none-any.whl`, `pkg.zip`: a bare file name, no `./` needed) unless it is `name @ url`, or
    one that looks like a path and is a folder. A word with a `/` that is neither is no requirement pip can
    read either; here it is refused with the paths, since the requirements stage has no files but this one.
    """
    name = requirement.split(";", 1)[0].strip()
    if _remote_url(name):
        return None  # a URL pip fetches (`https://.../pkg.whl`, `git+https://...`)
    before_at, at, _url = name.partition("@")
    if at and not _looks_like_path(before_at):
        return None  # a direct reference: `_local_direct_reference` judges its URL
    bare = re.sub(r"\[[^\]]+\]$", "", name)
    if _looks_like_path(name) or _is_archive(bare):
        return name
    return None


def normalize(name: str) -> str:
    """PEP 503's normalized form of a distribution name: `EFA_Validators` and `efa.validators` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _url_names(url: str) -> List[str]:
    """The distribution names a URL shows: `#egg=NAME`, its file's name (`.../efa_validators-1.0-py3-none-
    any.whl`, `.../pkg-1.0.tar.gz`) and, for a VCS URL, the repository's name (`.../efa-image-build.git@v1`).
    What a URL installs is only known once it is fetched; these are what it says it is."""
    path, _hash, fragment = url.partition("#")
    names = re.findall(r"(?:^|&)egg=([A-Za-z0-9._-]+)", fragment)
    last = path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    if "+" in url.split(":", 1)[0]:  # git+https://host/org/repo.git@ref
        names.append(re.sub(r"(\.git)?(@.*)?$", "", last))
    found = _FILE_NAME.match(last)
    if found:
        names.append(found.group("name"))
    return names


def shadowing(requirement: str) -> Optional[str]:
    """The tool's own distribution (normalized) that a requirement installs, or None: by its name
    (`efa_image_build[attest]==0.1`, `EFA.Validators`), a direct reference's name or URL, or a bare URL's."""
    spec = requirement.split(";", 1)[0].strip()
    names = _url_names(spec) if _remote_url(spec) else []
    if not names:
        found = _NAME.match(spec)
        names = [found.group(0)] if found else []
        _before, at, url = spec.partition("@")
        if at:
            names += _url_names(url.strip())
    return next((normalize(n) for n in names if normalize(n) in TOOL_DISTRIBUTIONS), None)


def scan(text: str, file: str) -> RequirementsFile:
    """Count the requirements and decide hash mode; a line the requirements stage cannot honour is a
    UserError at its line (key `training.requirements`)."""
    hashed: List[Tuple[int, bool]] = []
    require_hashes = False
    for number, line in logical_lines(text):
        variable = _ENV_VAR.search(line)
        if variable:
            raise _refuse(
                f"{variable.group(0)}: pip replaces it from the build's environment before it reads the "
                "line, so what the line says is not known here",
                file,
                number,
                hint="write the value itself",
            )
        requirement, option_text = split_line(line)
        try:
            options = read_options(option_text)
        except ValueError as err:
            raise _refuse(str(err), file, number) from None
        for opt in options:
            _check_option(opt, file, number)
        require_hashes |= any(o.name == "--require-hashes" for o in options)
        if not requirement:
            continue  # an options line (--index-url, --only-binary, ...)
        first = requirement.split()[0]
        path = first if _LOCAL.match(first) else _local_file(requirement)
        if path is not None:
            message = (
                f"local path {path!r}: pip reads it as a file or folder, but the requirements stage has no "
                "files but this one, and nothing from outside the training folder enters the image"
            )
            raise _refuse(message, file, number, hint="name a released version, or an https:// URL")
        local = _local_direct_reference(requirement)
        if local is not None:
            message = (
                f"direct reference to a local path {local!r}: the requirements stage has no files but this "
                "one, and nothing from outside the training folder enters the image"
            )
            raise _refuse(message, file, number, hint="name a released version, or an https:// URL")
        tool = shadowing(requirement)
        if tool is not None:
            message = (
                f"{requirement.split()[0]!r} installs {tool}, the tool's own package: its efa_validators "
                "would come first on the image's sys.path and shadow the copy every image carries "
                "(/opt/efa-image-build/efa_validators), which `python -m efa_validators node-check` and the "
                "image checks run"
            )
            raise _refuse(message, file, number, hint="remove the line: every image has the validators")
        hashed.append((number, any(o.name == "--hash" for o in options)))
    if (require_hashes or any(h for _, h in hashed)) and not all(h for _, h in hashed):
        number = next(n for n, h in hashed if not h)
        why = "the file says --require-hashes" if require_hashes else "others do"
        raise _refuse(
            f"this requirement has no --hash= but {why}: pip's hash-checking mode needs a hash on every "
            "requirement",
            file,
            number,
            hint="pip hash / pip-compile --generate-hashes give them",
        )
    return RequirementsFile(len(hashed), bool(hashed) and all(h for _, h in hashed))
