"""BuildKit cache mounts for apt and pip: the classic builder's copy of the Dockerfile, and real builds.

The rendered Dockerfile (hashed, tagged) carries `RUN --mount=type=cache,...`; the classic builder gets it
without those flags (imagebuild.builder.classic_dockerfile). Real builds of a small variant with apt packages
and a hash-pinned requirement prove that a rebuild after a change to the apt step reuses apt's lists and pip's
downloads under BuildKit, and that BuildKit and classic images of the same Dockerfile hold the same files
(no apt lists, apt downloads or pip cache in any layer) and pass the static checks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_usersteps import SIX_HASHED, project

from imagebuild.builder import classic_dockerfile
from imagebuild.cli import main

ROOT = Path(__file__).resolve().parent.parent
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


# ---------------------------------------------------------------- real builds


@pytest.fixture
def cleanup(docker_client):
    from test_usersteps import REPO

    yield
    for image in docker_client.images.list():
        if any(t.startswith(REPO) for t in image.tags):
            docker_client.images.remove(image.id, force=True)


def _build(path: Path, out: Path, builder: str) -> str:
    argv = ["build", "--matrix", str(path), "--out", str(out), "--builder", builder, "--plain", "--force"]
    log = out / "usersteps" / "build.log"
    assert main(argv) == 0, log.read_text()[-3000:] if log.exists() else "no log"
    return log.read_text()


def _step_output(log: str, *words: str) -> str:
    """BuildKit plain progress -> the output lines of the (last) RUN step whose header has all `words`."""
    step = None
    for line in log.splitlines():
        m = re.match(r"#(\d+) \[.*\] RUN (.*)", line)
        if m and all(w in m.group(2).split() for w in words):
            step = m.group(1)
    assert step, f"no RUN step with {words} in the log"
    return "\n".join(line for line in log.splitlines() if line.startswith(f"#{step} "))


LEFTOVERS = "find /var/cache/apt /var/lib/apt/lists /root/.cache -mindepth 1 2>/dev/null | sort; true"
FILES = "find / -xdev -path /proc -prune -o -print | sort"


@pytest.mark.docker
@pytest.mark.slow
def test_a_rebuild_after_an_apt_change_reuses_the_caches_and_classic_gives_the_same_files(
    tmp_path, docker_client, local_base, cleanup
):
    path = project(tmp_path, SIX_HASHED, base=local_base)
    out = tmp_path / "build"
    _build(path, out, "buildkit")  # fills the caches (or finds them filled by an earlier run)
    # a change to the apt step of the system stage: every stage after it runs again
    path.write_text(path.read_text().replace("packages: [python3=3.11.2-1+b1]", "packages: [python3, less]"))
    log = _build(path, out, "buildkit")
    assert "less" in (out / "usersteps" / "Dockerfile").read_text()
    update = _step_output(log, "apt-get", "install", "less")
    # apt's lists came from the cache mount: the mirror answered "not changed" (Hit), nothing re-fetched
    assert re.search(r"Hit:\d+ \S+ bookworm InRelease", update), update[-2000:]
    assert not re.search(r"Get:\d+ \S+ bookworm/main amd64 Packages", update), update[-2000:]
    pip = _step_output(log, "pip", "install")
    assert "Using cached six-1.16.0" in pip, pip[-2000:]  # pip's download, from the cache mount
    kit = json.loads((out / "summary.json").read_text())["variants"][0]
    assert kit["builder"] == "buildkit"

    _build(path, out, "classic")  # the same Dockerfile, its mounts stripped
    classic = json.loads((out / "summary.json").read_text())["variants"][0]
    assert classic["builder"] == "classic" and classic["tags"] == kit["tags"]
    assert classic["image_id"] != kit["image_id"]
    images = {"buildkit": kit["image_id"], "classic": classic["image_id"]}
    for name, image in images.items():
        left = docker_client.containers.run(image, ["bash", "-c", LEFTOVERS], remove=True).decode()
        assert left == "", f"{name} image keeps apt/pip caches:\n{left[:2000]}"
    files = {
        n: docker_client.containers.run(i, ["bash", "-c", FILES], remove=True).decode()
        for n, i in images.items()
    }
    assert files["buildkit"] == files["classic"]
    assert (
        docker_client.images.get(kit["image_id"]).labels
        == docker_client.images.get(classic["image_id"]).labels
    )
    assert main(["test", "--out", str(out), "--variant", "usersteps"]) == 0
