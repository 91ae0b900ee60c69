"""Build rendered variants into images (BuildKit or the classic builder): cached by content, parallel, logged.

Each variant directory (`build/<variant>/`: Dockerfile, variant.lock.json, context/) is staged and hashed
(`context`, `contenthash`: the image is tagged `<repo>:<versions>-<hash12>`), so a hash that already has an
image is skipped with no work. An image is built untagged and tagged only after the build succeeded
(`dockerbuild`): an interrupted or failed build leaves no tag pointing at a half-built image. Before building,
the content tag is looked up in the local engine, then (given a lookup, `registryhit`) in the target
registry: a fresh CI runner skips what another runner already built and pushed. The base is named by its
identity (`baseid`); `options` holds what a run is given and gives back, `reporters` what it shows.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

from imagebuild.adapters.docker_engine import find_image
from imagebuild.building.artifacts import ArtifactCache, ArtifactError, artifacts_from_lock
from imagebuild.building.baseid import (
    base_labels,
    base_line,
    engine_image_id,
    ensure_base,
    known_image_id,
    unconfirmed_message,
)
from imagebuild.building.contenthash import image_tags, split_repo_tag
from imagebuild.building.context import stage_variant
from imagebuild.building.dockerbuild import docker_build
from imagebuild.building.options import BuildFailed, BuildOptions, VariantResult, read_lock
from imagebuild.building.reporters import Reporter
from imagebuild.errors import UserError
from imagebuild.variant import BASE_DIGEST_LABEL, BASE_ID_LABEL, HASH_LABEL


def build_variant(client, variant_dir: Path, opts: BuildOptions, report: Reporter) -> VariantResult:
    """Stage artifacts, hash, skip or build, tag. Never raises for a build failure: it is in the result."""
    started = time.monotonic()
    name = variant_dir.name
    log_path = variant_dir / "build.log"
    lock_path = variant_dir / "variant.lock.json"
    result = VariantResult(name, "failed", None, [], None, 0.0, str(log_path), str(lock_path))
    with open(log_path, "w", buffering=1) as logf:

        def log(line: str) -> None:
            logf.write(line.rstrip("\n") + "\n")

        try:
            lock = read_lock(variant_dir)
            result.channels = [str(c) for c in lock.get("channels") or []]
            base = opts.base_of(client, lock)
            result.base_ref, result.base_hashed, result.base_source = base.ref, base.identity, base.source
            if base.problem:
                raise BuildFailed(unconfirmed_message(base))
            log(base_line(base))
            report.event(name, "staging", "artifacts")
            chash, tags = stage_variant(variant_dir, lock, opts, log, base.identity)
            result.context_hash, result.tags = chash, tags
            log(f"context hash {chash}; tags {' '.join(tags)}")
            existing = find_image(client, tags[0])
            remote = None
            if existing is None and opts.remote_lookup is not None:
                remote = opts.remote_lookup(tags[0], chash)
            if existing is not None and existing.labels.get(HASH_LABEL) == chash and not opts.force:
                for ref in tags[1:]:
                    existing.tag(*split_repo_tag(ref))
                result.status, result.image_id, result.found_in = "skipped", existing.id, "engine"
                result.base_digest = existing.labels.get(BASE_DIGEST_LABEL) or base.digest
                result.base_image_id = existing.labels.get(BASE_ID_LABEL) or None
                log(f"skipped: {tags[0]} already built from this content ({existing.id})")
                report.event(name, "skipped", tags[0])
            elif remote is not None and not opts.force:
                result.status, result.image_id, result.found_in = "skipped", remote.image_id, "registry"
                result.digest, result.pushed = remote.digest, [f"{remote.ref}@{remote.digest}"]
                result.base_digest = base.digest
                result.base_image_id = known_image_id(base)
                log(f"skipped: the registry holds {remote.ref}@{remote.digest} built from this content")
                report.event(name, "skipped", f"{remote.ref} (in the registry)")
            else:
                report.event(name, "building", f"sending context ({opts.builder.kind})")
                result.builder = opts.builder.kind
                ref = base.ref
                ensure_base(client, base, log)
                result.base_digest, result.base_image_id = base.digest, engine_image_id(client, ref)
                labels = base_labels(result.base_digest, result.base_image_id)
                image_id = docker_build(client, variant_dir, lock, chash, opts, log, report, labels)
                if result.base_image_id is None:  # pulled by the build: the engine has it now
                    result.base_image_id = engine_image_id(client, ref)
                log(f"base {ref}: digest {result.base_digest}, image id {result.base_image_id}")
                if opts.cancel.is_set():
                    raise BuildFailed("interrupted: built but not tagged")
                image = client.images.get(image_id)
                held = existing.id if existing is not None else (remote.image_id if remote else None)
                if held is not None and held != image_id:  # --force: the content tags stay where they are
                    tags = image_tags(lock, chash, rebuild=image_id)
                    result.tags = tags
                    log(f"--force: {held} keeps this content's write-once tags; the rebuild gets its own")
                for ref in tags:  # only now: a failed or interrupted build tags nothing
                    image.tag(*split_repo_tag(ref))
                result.status, result.image_id = "built", image_id
                log(f"built {image_id}; tagged {' '.join(tags)}")
                report.event(name, "built", tags[0])
        except (ArtifactError, UserError, BuildFailed) as err:
            result.error = str(err)
            log(f"FAILED: {err}")
            report.event(name, "failed", str(err).splitlines()[0])
        except Exception as err:  # noqa: BLE001 - a docker API error in one variant must not stop the others
            result.error = f"{type(err).__name__}: {err}"
            log(f"FAILED: {result.error}")
            report.event(name, "failed", result.error.splitlines()[0])
        result.duration_s = round(time.monotonic() - started, 2)
        log(f"status {result.status} in {result.duration_s} s")
    return result


# ---------------------------------------------------------------- the matrix


def check_offline(cache: ArtifactCache, variant_dirs: Sequence[Path]) -> None:
    """With --offline, name every missing artifact of every variant at once, before anything builds."""
    if not cache.offline:
        return
    missing = []
    for vdir in variant_dirs:
        for art in cache.missing(artifacts_from_lock(read_lock(vdir), str(vdir / "variant.lock.json"))):
            missing.append(f"{vdir.name}: {art.describe()}")
    if missing:
        raise UserError(
            f"--offline: {len(missing)} artifact(s) not in the cache {cache.root}:\n    "
            + "\n    ".join(missing),
            key="--offline",
            hint="fill the cache once online (or with --mirror), or copy a filled .cache/artifacts here",
        )


def build_all(
    client, variant_dirs: Sequence[Path], opts: BuildOptions, report: Reporter, jobs: int = 1
) -> List[VariantResult]:
    """Build `jobs` variants at a time. Ctrl-C: workers stop before tagging and the process may exit at once.

    Workers are daemon threads (not a ThreadPoolExecutor, whose exit joins them): a build blocked in a long
    RUN step must not keep an interrupted process alive until it finishes -- and then tag its image.
    """
    check_offline(opts.cache, variant_dirs)
    for vdir in variant_dirs:
        read_lock(vdir)  # a broken lock is bad input: say so before any build starts
    todo: queue.Queue = queue.Queue()
    for i in range(len(variant_dirs)):
        todo.put(i)
    results: List[Optional[VariantResult]] = [None] * len(variant_dirs)
    cancel = opts.cancel

    def worker() -> None:
        while not cancel.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            results[i] = build_variant(client, variant_dirs[i], opts, report)

    threads = [
        threading.Thread(target=worker, name=f"build-{n}", daemon=True)
        for n in range(max(1, min(jobs, len(variant_dirs))))
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        cancel.set()
        for proc in list(opts.children):
            if proc.poll() is None:
                proc.terminate()
        raise
    return [r for r in results if r is not None]
