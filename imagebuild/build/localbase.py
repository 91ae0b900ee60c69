"""The local base image: a debootstrap minbase of Debian bookworm, imported into docker.

No registry can be reached from the build hosts this tool must also serve, so the base every local
variant starts `FROM` is made from Debian's own packages: `debootstrap --variant=minbase bookworm DIR`
(its default mirror, no mirror argument) and `tar -C DIR -c . | docker import - NAME`.
Made once and reused by name: a second call finds the image and does nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from typing import Callable, Iterator, Optional

from imagebuild.adapters.docker_engine import find_image
from imagebuild.errors import UserError

DEFAULT_NAME = "localbase/debian:bookworm-minbase"
SUITE = "bookworm"

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
            hint="run `sudo python build.py base`",
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


def make_base(client, name: str = DEFAULT_NAME, say: Say = print, suite: str = SUITE) -> str:
    """Make `name` unless it exists; return the image id. Raises UserError when this host cannot."""
    if image_exists(client, name):
        say(f"base image {name} exists: nothing to do")
        return client.images.get(name).id
    problem = bootstrap_problem(shutil.which("debootstrap"), os.geteuid())
    if problem:
        raise problem
    repo, tag = split_name(name)
    with tempfile.TemporaryDirectory(prefix="efa-image-build-rootfs-") as tmp:
        root = os.path.join(tmp, "rootfs")
        started = time.monotonic()
        say(f"debootstrap --variant=minbase {suite} {root} (a few minutes on a slow mirror)")
        proc = subprocess.Popen(
            ["debootstrap", "--variant=minbase", suite, root],
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
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        try:
            client.api.import_image_from_stream(_chunks(tar.stdout), repository=repo, tag=tag)
        finally:
            tar.stdout.close()
            tar.wait()
        if tar.returncode != 0:
            raise UserError(f"tar of the debootstrap tree failed (exit {tar.returncode})", key="tar")
    image = client.images.get(name)
    say(f"base image {name} ready: {image.id} ({time.monotonic() - started:.0f} s)")
    return image.id
