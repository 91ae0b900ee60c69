"""Files of a local image, read from a container of it that is created and never started (no command runs,
no network): what the image holds on disk, as `docker cp` would copy it out."""

from __future__ import annotations

import io
import tarfile
from typing import Any, Dict, Optional, Sequence


def read_image_files(client: Any, image: str, paths: Sequence[str]) -> Dict[str, Optional[bytes]]:
    """path -> its bytes; None where the image has no such path, b"" where it is not a regular file (a
    symlink, a folder): it is there, but has no content of its own to read."""
    import docker.errors

    found: Dict[str, Optional[bytes]] = {}
    container = client.containers.create(image, ["true"], entrypoint="", network_disabled=True)
    try:
        for path in dict.fromkeys(paths):
            try:
                stream, _stat = container.get_archive(path)
            except docker.errors.NotFound:
                found[path] = None
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member is not None and member.isfile() else None
                found[path] = handle.read() if handle is not None else b""
    finally:
        container.remove(force=True)
    return found
