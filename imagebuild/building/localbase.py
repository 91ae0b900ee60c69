"""The local base image: a debootstrap minbase of Debian bookworm, imported into docker.

No registry can be reached from the build hosts this tool must also serve, so the base every local
variant starts `FROM` is made from Debian's own packages: `debootstrap --variant=minbase bookworm DIR`
(its default mirror, no mirror argument) and `tar -C DIR -c . | docker import - NAME`.
Made once and reused by name: a second call finds the image and does nothing.

For another platform (`build.py base --platform linux/arm64`, the base of an arm64 twin) debootstrap runs with
`--arch` and configures the tree under user-mode emulation (Debian's qemu-user-static registered through
binfmt_misc with the F flag, so it works inside chroots and containers: scripts/setup-host.sh sets it up).
`docker import` of this engine keeps the host's architecture in the image config whatever `--platform` says,
so the tree is added `FROM scratch` by a build for that platform instead: the config then says arm64.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from imagebuild.adapters.docker_engine import find_image
from imagebuild.catalog import platforms
from imagebuild.errors import UserError, did_you_mean

DEFAULT_NAME = "localbase/debian:bookworm-minbase"
SUITE = "bookworm"
BINFMT = Path("/proc/sys/fs/binfmt_misc")

Say = Callable[[str], None]


def bootstrap_problem(debootstrap_path: Optional[str], euid: int) -> Optional[UserError]:
    """Why this host cannot run debootstrap, or None. Pure, so both refusals are testable as any user."""
    if debootstrap_path is None:
        return UserError(
            "debootstrap is not installed (needed to make the local base image)",
            key="debootstrap",
            hint="apt-get install debootstrap",
        )
    if euid != 0:
        return UserError(
            "debootstrap must run as root (it creates device nodes and chroots)",
            key="debootstrap",
            hint='run `sudo "$(command -v efa-image-build)" base` (sudo resets PATH)',
        )
    return None


def default_name(platform: str) -> str:
    """The base's name for a platform: the default for the host's, `-<arch>` after it for another."""
    if platform == platforms.DEFAULT:
        return DEFAULT_NAME
    return f"{DEFAULT_NAME}-{platforms.platform(platform).arch}"


def emulation_problem(
    target: platforms.Platform, host_machine: str, binfmt: Path = BINFMT
) -> Optional[UserError]:
    """Why this host cannot run `target`'s binaries (debootstrap's second stage needs to), or None."""
    if target.machine == host_machine:
        return None
    entry = binfmt / f"qemu-{target.machine}"
    try:
        state = entry.read_text().splitlines()
    except OSError:
        state = []
    if not state or state[0].strip() != "enabled":
        return UserError(
            f"this {host_machine} host cannot run {target.machine} binaries: no enabled {entry}",
            key="--platform",
            hint="install qemu-user-static and binfmt-support, mount binfmt_misc, `update-binfmts --enable` "
            "(scripts/setup-host.sh does it)",
        )
    return None


def split_name(name: str) -> tuple:
    """`repo:tag` -> (repo, tag); a missing tag is `latest`, as docker reads it."""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, "latest"


def image_exists(client, name: str) -> bool:
    return find_image(client, name) is not None


def _chunks(stream, size: int = 1 << 20) -> Iterator[bytes]:
    while True:
        block = stream.read(size)
        if not block:
            return
        yield block


def make_base(
    client,
    name: str = DEFAULT_NAME,
    say: Say = print,
    suite: str = SUITE,
    platform: str = platforms.DEFAULT,
) -> str:
    """Make `name` for `platform` unless it exists; return the image id. UserError when this host cannot."""
    target = platforms.platform(platform)
    if image_exists(client, name):
        say(f"base image {name} exists: nothing to do")
        return client.images.get(name).id
    problem = bootstrap_problem(shutil.which("debootstrap"), os.geteuid()) or emulation_problem(
        target, os.uname().machine
    )
    if problem:
        raise problem
    repo, tag = split_name(name)
    with tempfile.TemporaryDirectory(prefix="efa-image-build-rootfs-") as tmp:
        root = os.path.join(tmp, "rootfs")
        started = time.monotonic()
        arch = [f"--arch={target.arch}"] if target.machine != os.uname().machine else []
        say(f"debootstrap {' '.join(arch)} --variant=minbase {suite} {root} (a few minutes on a slow mirror)")
        proc = subprocess.Popen(
            ["debootstrap", *arch, "--variant=minbase", suite, root],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        tail = []
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-20:]
            if line.startswith(("I: Retrieving", "I: Extracting", "I: Installing", "I: Configuring")):
                continue  # one line per package: too chatty; the stage lines below say enough
            if line:
                say(f"  {line}")
        if proc.wait() != 0:
            raise UserError(
                f"debootstrap failed (exit {proc.returncode}); last lines:\n    " + "\n    ".join(tail),
                key="debootstrap",
                hint="check that Debian's package mirror is reachable from this host",
            )
        say(f"debootstrap done in {time.monotonic() - started:.0f} s; importing as {name}")
        if arch:
            _add_from_scratch(client, root, tmp, name, target.name)
        else:
            _import(client, root, repo, tag)
    image = client.images.get(name)
    say(f"base image {name} ready: {image.id} ({time.monotonic() - started:.0f} s)")
    return image.id


def _import(client, root: str, repo: str, tag: str) -> None:
    """`tar -C ROOT -c . | docker import - REPO:TAG`, streamed."""
    tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    try:
        client.api.import_image_from_stream(_chunks(tar.stdout), repository=repo, tag=tag)
    finally:
        tar.stdout.close()
        tar.wait()
    if tar.returncode != 0:
        raise UserError(f"tar of the debootstrap tree failed (exit {tar.returncode})", key="tar")


def _add_from_scratch(client, root: str, tmp: str, name: str, platform: str) -> None:
    """The tree as one layer `FROM scratch`, built for `platform` so the image config names its architecture
    (nothing runs: ADD only unpacks the tar)."""
    context = Path(tmp) / "context"
    context.mkdir()
    done = subprocess.run(["tar", "-C", root, "-cf", str(context / "rootfs.tar"), "."], check=False)
    if done.returncode != 0:
        raise UserError(f"tar of the debootstrap tree failed (exit {done.returncode})", key="tar")
    (context / "Dockerfile").write_text("FROM scratch\nADD rootfs.tar /\n")
    client.images.build(path=str(context), tag=name, platform=platform, rm=True, forcerm=True)


def matrix_bases(matrix: str, only: Sequence[str] = ()) -> List[Tuple[str, str, str]]:
    """(name, layout, platform) of each local base the matrix's variants (or those in `only`) build FROM,
    once each, in matrix order: a `kind: local` base is the Debian debootstrap base for the variant's
    platform; a `local: true` DLC is the DLC-layout base (the AL2023 stand-in for os amzn2023). What CI runs
    on a fresh runner, where no base exists yet (issue 42)."""
    from imagebuild.matrix.load import expand

    found: Dict[Tuple[str, str, str], None] = {}
    variants = expand(matrix)
    names = [r.name for r in variants]
    for want in only:
        if want not in names:
            raise UserError(
                f"no variant {want!r} in {matrix}", key="--variant", hint=did_you_mean(want, names)
            )
    for r in variants:
        base = r.spec.base
        if (only and r.name not in only) or base is None or base.image is None:
            continue
        platform = r.spec.platform or platforms.DEFAULT
        if base.kind == "local":
            found[(str(base.image), "debian", platform)] = None
        elif base.local:
            found[(str(base.image), "al2023-standin" if base.os == "amzn2023" else "dlc", platform)] = None
    return list(found)
