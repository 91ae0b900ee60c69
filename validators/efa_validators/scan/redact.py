"""Secrets out of everything the tool writes: the one rule table of both sides.

A launch command can carry a token in a URL (`https://user:TOKEN@host/`, `?X-Amz-Signature=...`), and a
child can print its environment (`AWS_SECRET_ACCESS_KEY=...`), an STS answer (`"SessionToken": "..."`), a
curl header (`Authorization: Bearer ...`) or a key file. `validators run` writes what it runs and what the
child printed into its log, report and findings; `validators parse` quotes a saved log's lines as evidence
(parse/ranks.py `_ev` masks each as it is made); `build.py` writes URLs into messages. All redact by this
table (imagebuild.errors.redact is `redact_text`), so a rule added here holds everywhere. It sits in the first
stage (scan) so that the parser, the runner and the build side can all use it.

Every rule is linear in the line's length (bounded repeats only): the runner applies them to every line.
A value is replaced by `***`; the name, scheme or header stays, so the line still says what was there.
"""

import re
from typing import Dict, Iterable, List, Optional, Sequence

MASK = "***"

# Words that make a name a secret's name, matched against the name's parts (split at `_ . -` and
# camelCase): `AWS_SECRET_ACCESS_KEY`, `SessionToken`, `x-amz-security-token`, `HF_TOKEN`, `password`.
# `max_tokens` or `PWD` are not secrets. Pairs: both parts, one after the other (`api_key`, `PrivateKey`).
SECRET_WORDS = frozenset(
    "secret token password passwd passphrase credential credentials signature auth apikey".split()
)
SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("account", "key"), ("secret", "key")})

# The AWS access key id formats the build side's no-credentials check looks for (imagebuild/check).
AWS_KEY_ID = r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"
# The PEM armour's five dashes are spelled apart: this file ships in every image, and a team's secret scan
# greps images for the armour's header on one line (AWS's DLC sanity script check_credentials.sh): the
# redactor's own pattern must not read as a private key to it.
_DASHES = "-" * 5
PRIVATE_KEY_BEGIN = re.compile(_DASHES + r"BEGIN [A-Z ]{0,40}PRIVATE KEY" + _DASHES)
PRIVATE_KEY_END = re.compile(_DASHES + r"END [A-Z ]{0,40}PRIVATE KEY" + _DASHES)

_NAME_CHARS = "A-Za-z0-9_.-"
_ASSIGNMENT = re.compile(
    r"(?<![%s])([%s]{0,64}?(?i:secret|token|passw|passphrase|credential|signature|auth|api[_-]?key|"
    r"private[_-]?key|account[_-]?key)[%s]{0,64})"  # a name holding a secret word
    r"(\s*=\s*|\s*:\s+|[\"']\s*[:=]\s*(?=[\"']))"  # NAME=, NAME: x (not `host:pid`), "NAME": "x"
    r"(\"[^\"\n]*\"?|'[^'\n]*'?|[^\s\"',;&}]+)" % (_NAME_CHARS, _NAME_CHARS, _NAME_CHARS)
)
_PARTS = re.compile(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")

# (name, pattern, replacement): applied in this order to every line (a replacement may be a function)
RULES = (
    ("url-userinfo", re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^/\s@]*@"), r"\1" + MASK + "@"),
    (
        "authorization-header",
        re.compile(
            r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[a-z0-9-]{1,32}\s+)?)[^\"'\r\n]+"
        ),
        r"\1" + MASK,
    ),
    ("bearer", re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK),
    ("url-query-key", re.compile(r"(?i)([?&](?:sig|key)=)[^&#\s\"']+"), r"\1" + MASK),
    ("aws-key-id", re.compile(AWS_KEY_ID), MASK),
    (
        "private-key",
        re.compile(PRIVATE_KEY_BEGIN.pattern + r".*"),
        _DASHES + "BEGIN PRIVATE KEY" + _DASHES + " " + MASK,
    ),
    ("secret-assignment", _ASSIGNMENT, None),  # replaced by _assignment (the name's parts decide)
)


# Lowercase words of which a line must hold one (or an AWS key id prefix) for any rule to match: most lines
# are passed after a few substring searches (tests/validators/scan/test_redact.py keeps this in step).
TRIGGERS = ("://", "auth", "bearer", "sig=", "key", "pass", "credential", "secret", "token", "signature")
_AWS_PREFIX = re.compile(r"A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)")


def may_hold_secret(text: str) -> bool:
    """False when no rule can match `text` (the runner's common case: an NCCL line)."""
    low = text.lower()
    for word in TRIGGERS:
        if word in low:
            return True
    return _AWS_PREFIX.search(text) is not None


def is_secret_name(name: str) -> bool:
    """Whether `name` (an env var, a flag, a JSON key) names a secret, by its parts (SECRET_WORDS)."""
    parts = [p.lower() for p in _PARTS.split(name) if p]
    if any(p in SECRET_WORDS for p in parts):
        return True
    return any(pair in SECRET_PAIRS for pair in zip(parts, parts[1:]))


# a command-line option's name (`--key`, `--api-token`): what a message names, never a secret's value
_OPTION_NAME = re.compile(r"--[a-z][a-z0-9]{0,30}(?:-[a-z0-9]{1,30}){0,6}")


def is_option_name(word: str) -> bool:
    return _OPTION_NAME.fullmatch(word.strip("\"'")) is not None


def _assignment(m: "re.Match") -> str:
    if not is_secret_name(m.group(1)) or is_option_name(m.group(3)):
        return m.group(0)
    value = m.group(3)
    quote = value[0] if value[:1] in "\"'" else ""
    return m.group(1) + m.group(2) + quote + MASK + (quote if quote and value.endswith(quote) else "")


def redact_text(text: str, known: Sequence[str] = ()) -> str:
    """`text` with every secret the rules find, and every `known` value, replaced by `***`."""
    for value in known:
        if value in text:
            text = text.replace(value, MASK)
    if not may_hold_secret(text):
        return text
    for _name, pattern, replacement in RULES:
        text = pattern.sub(replacement if replacement is not None else _assignment, text)
    return text


def secret_values(env: Dict[str, str], shortest: int = 8) -> List[str]:
    """The values of the secret-named variables in `env` (longest first), to be found wherever a child
    prints them bare (`echo $AWS_SECRET_ACCESS_KEY`). Short values are left: they would mask common words."""
    found = {v for k, v in env.items() if len(v) >= shortest and is_secret_name(k)}
    return sorted(found, key=len, reverse=True)


def redact_argv(argv: Iterable[str], known: Sequence[str] = ()) -> List[str]:
    """A command line with its secrets masked: each word by the rules, and the word after a secret-named
    flag given alone (`--password VALUE`, `--token VALUE`)."""
    out = []  # type: List[str]
    hide_next = False
    for word in argv:
        if hide_next and not is_option_name(word):  # `--token --other`: the token's value is missing
            out.append(MASK)
            hide_next = False
            continue
        out.append(redact_text(word, known))
        hide_next = word.startswith("-") and "=" not in word and is_secret_name(word.lstrip("-"))
    return out


def redact_tree(value: object, known: Sequence[str] = ()) -> object:
    """Every string in a JSON-like value (dicts, lists) redacted; keys are kept."""
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, dict):
        return {k: redact_tree(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_tree(v, known) for v in value]
    return value


class Redactor:
    """Redacts a stream of lines: the rules on each line, and a private key's lines between its BEGIN and
    END lines (or at most MAX_KEY_LINES of them). Streams are kept apart by a key (a rank's lines)."""

    MAX_KEY_LINES = 200
    MAX_STREAMS = 4096

    def __init__(self, known: Sequence[str] = ()) -> None:
        self.known = list(known)
        self.in_key = {}  # type: Dict[Optional[int], int]  # stream -> lines of a private key seen

    def line(self, text: str, stream: Optional[int] = None) -> str:
        inside = self.in_key.get(stream)
        if inside is not None:
            if PRIVATE_KEY_END.search(text) or inside >= self.MAX_KEY_LINES:
                del self.in_key[stream]
                return redact_text(text, self.known) if inside >= self.MAX_KEY_LINES else MASK
            self.in_key[stream] = inside + 1
            return MASK
        if "PRIVATE KEY-----" in text:
            begin = PRIVATE_KEY_BEGIN.search(text)
            if begin is not None and not PRIVATE_KEY_END.search(text, begin.end()):
                if len(self.in_key) < self.MAX_STREAMS:
                    self.in_key[stream] = 0
        return redact_text(text, self.known)

    def argv(self, argv: Iterable[str]) -> List[str]:
        return redact_argv(argv, self.known)

    def tree(self, value: object) -> object:
        return redact_tree(value, self.known)
