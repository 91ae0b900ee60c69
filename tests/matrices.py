"""The smallest matrix variant that resolves, shared by the matrix tests: a local Debian base, CUDA 12.8 and
NCCL from its pinned wheel (nothing fetched, no docker), plus whatever keys a test adds."""

from __future__ import annotations


def nccl_variant(name: str, extra: str = "") -> str:
    """One `variants:` item named `name`; `extra` is more of its keys, indented four spaces, one a line."""
    return (
        f"  - name: {name}\n"
        "    base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}\n"
        '    cuda: "12.8"\n'
        "    components:\n"
        '      nccl: {version: "2.27.7", method: wheel}\n' + extra
    )
