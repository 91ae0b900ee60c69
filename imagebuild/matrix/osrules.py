"""What a base's OS family allows: the refusals that keep a dnf/rpm base from getting apt/dpkg steps.

The apt/dpkg family (Debian, Ubuntu) has every partial. On the dnf/rpm family (Amazon Linux 2023) the system
stage installs `packages:` with dnf, and a variant extends the base's own stack: components the base holds
(`source: {base: true}`), the validators, the training code, env, labels and build steps. The EFA installer
stage, source and wheel builds (their builder installs Debian tool packages) and apt-pinned components are
apt/dpkg steps: rendering them for dnf would give a Dockerfile that fails in its first RUN, so the matrix is
refused at load time with the reason instead (exit 2, file and line).
"""

from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

from imagebuild.catalog import osfamily

# name=[epoch:]version-release: dnf's `name-[epoch:]version-release`, split at `=` (names hold dashes)
RPM_PIN = re.compile(r"[a-z0-9][a-z0-9+._-]*=(?:[0-9]+:)?[0-9A-Za-z.+~_^]+-[0-9A-Za-z.+~_^]+")

Refusal = Tuple[str, str, str]  # message, key, hint


def component_refusal(os_name: str, name: str, method: str) -> Optional[Refusal]:
    """Why component `name` installed by `method` cannot go on a base of `os_name`, or None."""
    fam = osfamily.family(os_name)
    if fam is osfamily.DEB or method == "base":
        return None
    return (
        f"{name} by method {method} on an {os_name} base: that step is rendered for apt/dpkg only, and "
        f"{os_name} is of the {fam.label} family",
        f"components.{name}",
        "extend the base's own stack (`source: {base: true}`) and add OS packages as dnf pins in `packages:` "
        "(docs/matrix.md, OS families)",
    )


def package_refusal(os_name: str, packages: Sequence[str]) -> Optional[Refusal]:
    """Why one of the runtime `packages` is no pin of the base's family, or None. apt's own rules stay in
    the schema (`name[=version]`); an rpm pin must be `name=[epoch:]version-release`."""
    if osfamily.family(os_name) is not osfamily.RPM:
        return None
    for i, pkg in enumerate(packages):
        if "=" in pkg and not RPM_PIN.fullmatch(pkg):
            return (
                f"package {pkg!r} is no rpm pin: on {os_name} a pin is name=[epoch:]version-release",
                f"packages[{i}]",
                "in the base, `rpm -q --qf '%{NAME}=%{VERSION}-%{RELEASE}\\n' NAME` prints one so",
            )
        if ":" in pkg.partition("=")[0]:
            return (
                f"package {pkg!r}: a `:arch` suffix is Debian's multiarch, which dnf does not read",
                f"packages[{i}]",
                "write the package name alone",
            )
    return None
