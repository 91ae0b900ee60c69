"""BuildKit cache mounts for apt and pip: the classic builder's copy of the Dockerfile, and real builds.

The rendered Dockerfile (hashed, tagged) carries `RUN --mount=type=cache,...`; the classic builder gets it
without those flags (imagebuild.building.context.classic_dockerfile);
tests/imagebuild/building/test_buildkit.py builds a Dockerfile with a
cache mount with both builders (same tags and labels).
"""

from __future__ import annotations

import re

import pytest
from paths import ROOT

from imagebuild.building.context import classic_dockerfile

GOLDEN = sorted((ROOT / "tests" / "golden").rglob("*.Dockerfile"))


# ---------------------------------------------------------------- the classic builder's Dockerfile (pure)


def test_classic_copy_drops_mount_flags_over_continuation_lines_and_nothing_else():
    text = (
        "FROM base AS system\n"
        "RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \\\n"
        "    --mount=type=cache,target=/var/lib/apt/lists \\\n"
        "    apt-get update \\\n"
        " && echo --mount=type=cache,target=/not-a-flag\n"
        "run --mount=type=cache,target=/root/.cache/pip pip install x\n"
        "COPY a b\n"
        "RUN echo \\\n"
        "    --mount=type=cache,target=/an-argument\n"
        "# RUN --mount=type=cache,target=/in-a-comment\n"
    )
    assert classic_dockerfile(text) == (
        "FROM base AS system\n"
        "RUN \\\n"
        "    apt-get update \\\n"
        " && echo --mount=type=cache,target=/not-a-flag\n"
        "run pip install x\n"
        "COPY a b\n"
        "RUN echo \\\n"
        "    --mount=type=cache,target=/an-argument\n"
        "# RUN --mount=type=cache,target=/in-a-comment\n"
    )


def test_classic_copy_of_a_file_without_mounts_is_the_same_bytes():
    text = "FROM x\nRUN a \\\n && b\n\nRUN c\n"
    assert classic_dockerfile(text) == text


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.relative_to(ROOT / "tests" / "golden").as_posix())
def test_every_golden_has_cache_mounts_and_its_classic_copy_has_none(golden):
    text = golden.read_text()
    classic = classic_dockerfile(text)
    assert "--mount=" not in classic
    # only flag lines went: every other line is kept, in order
    kept = [line for line in text.splitlines() if not line.lstrip().startswith("--mount=")]
    assert [re.sub(r"^RUN --mount=\S+ ", "RUN ", line) for line in kept] == classic.splitlines()
    if "apt-get update" in text:
        assert "target=/var/lib/apt/lists,sharing=locked" in text
        assert text.count("apt-get update") == text.count("target=/var/lib/apt/lists")
