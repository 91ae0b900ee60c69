"""The one quoting layer for every printed recipe: each value is checked for the place it lands in.

Why places, not one quote function: `shlex.quote` makes any text one safe shell word, but a recipe also puts
values into comments (`# node 0 is HOST`), `#SBATCH` directives (read by sbatch before bash, up to the end of
the line), pyxis' `--container-mounts=SRC:DST,...` list, mpirun's `-H a:8,b:8` list and Kubernetes names. In
those places quoting cannot help: a newline ends the comment and bash runs the next line, a comma adds a
host or a mount. So a value that cannot be expressed where it lands is refused when the cluster file is
read (exit 2 with file, line and key), and the renderers only ever call `word()` / `words()` / `comment()`.
Every pattern is applied with `fullmatch`: `$` also matches before a final newline, so `match` let
"efa-preflight\n" pass as a Kubernetes name.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable, Dict, Iterable, Optional

from imagebuild.errors import UserError

# A control byte (newline, CR, ESC, NUL ...) ends or corrupts a line in every place a recipe has.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# RFC 1123 host name (labels of letters, digits and inner hyphens, dot-separated), or an IPv4 address.
# [RFC 1123 section 2.1; RFC 952]. IPv6 is left out: mpirun's `-H host:slots` reads a colon as the slot count.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(r"^%s(?:\.%s)*$" % (_LABEL, _LABEL))
# A Kubernetes object name or namespace: a DNS-1123 label (MPIJob pods take their host name from it)
# [kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go IsDNS1123Label,
# commit 008b3652]
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")
# A label key (optional DNS prefix + '/' + name) and value, for nodeSelector and tolerations
# [same file: IsQualifiedName and IsValidLabelValue, now content.IsLabelKey / content.IsLabelValue]
_QUALIFIED = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# A Slurm partition, account or job name in an `#SBATCH --opt=VALUE` line: no blanks (sbatch splits the
# directive at them), no quotes, no `#`; partitions may be a comma list (sbatch --partition).
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,+@%=-]{1,128}$")
# An environment variable name in `export NAME=...` and mpirun's `-x NAME=...` (POSIX portable names).
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Kubernetes quantity (hugepages-2Mi: 5120Mi), unsigned: a subset of the resource quantity pattern in
# mpi-operator's CRD [kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml, commit caa3c47f]
_QUANTITY = re.compile(r"^[0-9]+(?:\.[0-9]+)?(?:[KMGTPE]i|[mkMGTPE]|[eE][0-9]+)?$")


def _no_control(text: str) -> Optional[str]:
    m = _CONTROL.search(text)
    return (
        "holds control byte %r (a newline or escape ends the line it is printed on)" % m.group()
        if m
        else None
    )


def _host(text: str) -> Optional[str]:
    if len(text) > 253 or not _HOST.fullmatch(text):
        return "is not a host name (letters, digits, '-' and '.'; no ',', ':', blanks or quotes)"
    return None


def _mount_path(text: str) -> Optional[str]:
    """A path in pyxis' `--container-mounts=SRC:DST[:FLAGS][,...]`: ',' and ':' are its separators
    [NVIDIA/pyxis README.md `--container-mounts`, commit 10751994]."""
    bad = _no_control(text)
    if bad:
        return bad
    if not text.startswith("/"):
        return "must be an absolute path (every node resolves it alike)"
    if "," in text or ":" in text:
        return "holds ',' or ':', which separate pyxis' --container-mounts entries"
    return None


def _path(text: str) -> Optional[str]:
    return _no_control(text)


def _pattern(regex: re.Pattern, what: str) -> Callable[[str], Optional[str]]:
    def check(text: str) -> Optional[str]:
        return None if regex.fullmatch(text) else "is not %s" % what

    return check


def _shell_words(text: str) -> Optional[str]:
    bad = _no_control(text)
    if bad:
        return bad
    try:
        shlex.split(text)
    except ValueError as err:
        return "cannot be split into words: %s" % err
    return None


def _instance_type(text: str) -> Optional[str]:
    """A word in every recipe and the value of the EKS node label node.kubernetes.io/instance-type."""
    if _LABEL_VALUE.fullmatch(text):
        return _host(text)
    return _host(text) or "is not an instance type (a label value)"


# Each place a value lands, and the check that says why a value cannot land there (None: it can).
PLACES: Dict[str, Callable[[str], Optional[str]]] = {
    "word": _no_control,  # a shell command word: shlex.quote; printed on one line
    "words": _shell_words,  # a flag string split with shlex, each word then quoted
    "comment": _no_control,  # text after `#` on one line
    "host": _host,  # a host in mpirun -H, a comment, MASTER_ADDR
    "instance_type": _instance_type,
    "k8s_name": _pattern(_DNS_LABEL, "a DNS-1123 label (lower-case letters, digits, '-'; at most 63)"),
    "k8s_label_key": _pattern(_QUALIFIED, "a Kubernetes label key ([prefix/]name)"),
    "k8s_label_value": _pattern(_LABEL_VALUE, "a Kubernetes label value (at most 63 of [-A-Za-z0-9_.])"),
    "slurm_name": _pattern(_SLURM_NAME, "a Slurm name (letters, digits and _ . , + @ % = -; no blanks)"),
    "mount_path": _mount_path,  # a path in pyxis --container-mounts and in the script
    "path": _path,
    "env_name": _pattern(_ENV_NAME, "an environment variable name"),
    "quantity": _pattern(_QUANTITY, "a Kubernetes quantity such as 5120Mi"),
}


def why_not(value: str, place: str) -> Optional[str]:
    """Why `value` cannot be printed where `place` is, or None when it can."""
    return PLACES[place](value)


def word(value: object) -> str:
    """A shell word: the text, quoted. Refuses a control byte (a printed script is read line by line);
    cluster-file values were checked at load, so what is refused here came from the lock."""
    text = str(value)
    bad = _no_control(text)
    if bad:
        raise UserError("cannot print %r in a script: it %s" % (text, bad), key="--lock")
    return shlex.quote(text)


def words(values: Iterable[object]) -> str:
    return " ".join(word(v) for v in values)


def comment(text: str) -> str:
    """`# text`, refusing what would end the comment's line."""
    bad = _no_control(text)
    if bad:
        raise UserError("cannot print %r in a comment: it %s" % (text, bad), key="--lock")
    return "# " + text
