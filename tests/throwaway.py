"""What docker tests make and throw away: a script run in a named container that is removed however the
run ends, and a test module's images removed by their repository prefix (unique to the module and run, so
nothing another test or the user made is touched)."""

from __future__ import annotations

import io
import subprocess
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator


def run_script(image: str, script: str, prefix: str) -> subprocess.CompletedProcess:
    """`bash -c script` in a container of `image` named `<prefix>-<random>`; the container is removed even
    when the run times out (`--rm` alone leaves it to a docker CLI that may have been killed)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        return subprocess.run(
            ["docker", "run", "--rm", "--name", name, image, "bash", "-c", script],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def remove_images_tagged(client, prefix: str) -> None:
    """Remove (forced, by id) every image of the engine that has a tag starting with `prefix`."""
    for image in client.images.list():
        if any(t.startswith(prefix) for t in image.tags):
            client.images.remove(image.id, force=True)


@contextmanager
def derived_images(client, default_base: str, repo: str, preamble: str = "") -> Iterator[Callable[..., str]]:
    """`build(name, lines, base="")`: an image `FROM default_base` (or `base`) + `preamble` + `lines`, tagged
    `repo:name`; every image made this way is removed when the block ends."""
    made = []

    def build(name: str, lines: str, base: str = "") -> str:
        dockerfile = f"FROM {base or default_base}\n{preamble}{lines}\n"
        tag = f"{repo}:{name}"
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
        made.append(tag)
        return tag

    try:
        yield build
    finally:
        for tag in made:
            client.images.remove(tag, force=True)
