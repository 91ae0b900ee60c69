"""One image build of a staged variant: the labels the builder adds, then the classic builder (the SDK's
build API) or BuildKit (the docker CLI), the same context tar to both; the image id, or BuildFailed naming
the failed step. imagebuild.building.buildkit picks the builder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Optional

from imagebuild.building import buildkit, lifeline, steplog
from imagebuild.building.context import DOCKERFILE_IN_TAR, ca_used, write_context_tar
from imagebuild.building.options import BuildFailed, BuildOptions
from imagebuild.variant import HASH_LABEL, LOCK_LABEL, VARIANT_LABEL

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")


def build_labels(
    variant_dir: Path, lock: dict, chash: str, base: Optional[Dict[str, str]] = None
) -> Dict[str, str]:
    """The labels the builder adds (the same for every builder); `base`: what the base resolved to."""
    # Each label given through the API is one more LABEL step in the classic builder, re-run on every code
    # change: add the lock and its labels only when the Dockerfile does not already write them.
    labels = {**(base or {}), HASH_LABEL: chash}
    if LOCK_LABEL not in (variant_dir / "Dockerfile").read_text():
        labels = {VARIANT_LABEL: variant_dir.name}
        labels |= {str(k): str(v) for k, v in (lock.get("labels") or {}).items()}  # the lock's word wins
        labels |= {LOCK_LABEL: json.dumps(lock, sort_keys=True, separators=(",", ":")), HASH_LABEL: chash}
        labels |= base or {}
    return labels


def docker_build(
    client,
    variant_dir: Path,
    lock: dict,
    chash: str,
    opts: BuildOptions,
    log,
    report,
    base: Optional[Dict[str, str]] = None,
) -> str:
    labels = build_labels(variant_dir, lock, chash, base)
    platform = lock.get("platform") or None
    if opts.builder.is_buildkit:
        return _buildkit_build(variant_dir, labels, opts, log, report, platform)
    name = variant_dir.name
    with tempfile.TemporaryFile(prefix="efa-context-", dir=variant_dir) as tar:
        write_context_tar(variant_dir, tar, classic=True)
        tar.seek(0)
        stream = client.api.build(
            fileobj=tar,
            custom_context=True,
            dockerfile=DOCKERFILE_IN_TAR,
            rm=True,
            forcerm=True,
            nocache=opts.nocache,
            decode=True,
            buildargs=dict(opts.build_args),
            labels=labels,
            cache_from=list(opts.cache_from) or None,
            platform=platform,
        )
        image_id = None
        step = (0, 0)
        steps = steplog.ClassicSteps()
        for chunk in stream:
            if opts.cancel.is_set():
                raise BuildFailed("interrupted")
            if "stream" in chunk:
                text = chunk["stream"]
                logf_text = text.rstrip("\n")
                if logf_text:
                    log(logf_text)
                m = _STEP.match(text)
                if m:
                    step = (int(m.group(1)), int(m.group(2)))
                    steps.start(text)
                    report.event(name, "building", m.group(3).strip(), step)
                else:
                    steps.feed(text)
                    last = text.strip()
                    if last:
                        report.event(name, "building", last, step)
            elif "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
            elif "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                log(f"ERROR: {detail}")
                ca = ca_used(variant_dir, opts)
                raise BuildFailed(steplog.describe(steps.failure(detail), str(variant_dir / "build.log"), ca))
            elif "status" in chunk:
                log(str(chunk.get("status")))
        if not image_id:
            raise BuildFailed(f"docker reported no image id (log {variant_dir / 'build.log'})")
    return image_id


def _buildkit_build(
    variant_dir: Path, labels: Dict[str, str], opts: BuildOptions, log, report, platform: Optional[str] = None
) -> str:
    """One BuildKit build through the docker CLI, the same context tar on stdin; returns the image id."""
    name = variant_dir.name
    log_path = variant_dir / "build.log"
    with tempfile.TemporaryDirectory(prefix=".tmp-iid-", dir=variant_dir) as tmp:
        iidfile = str(Path(tmp) / "iid")
        argv, env = buildkit.build_argv(
            opts.builder,
            DOCKERFILE_IN_TAR,
            iidfile,
            labels,
            opts.build_args,
            nocache=opts.nocache,
            cache_from=opts.cache_from,
            cache_to=opts.cache_to,
            platform=platform,
        )
        log(f"builder: {opts.builder.reason}")
        with tempfile.TemporaryFile(prefix="efa-context-", dir=variant_dir) as tar:
            write_context_tar(variant_dir, tar)
            tar.seek(0)
            proc = subprocess.Popen(
                argv,
                stdin=tar,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                text=True,
                errors="replace",
                preexec_fn=lifeline.die_with_parent,  # this process killed: the CLI cancels its build
            )
            opts.children.add(proc)
            steps = steplog.BuildkitSteps()
            try:
                for line in proc.stdout:  # type: ignore[union-attr]
                    if opts.cancel.is_set():
                        raise BuildFailed("interrupted")
                    text = line.rstrip("\n")
                    log(text)
                    steps.feed(text)
                    m = buildkit.STEP_RE.match(text)
                    if m:
                        step = (int(m.group(1)), int(m.group(2)))
                        report.event(name, "building", m.group(3).strip(), step)
                rc = proc.wait()
            finally:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=30)
                opts.children.discard(proc)
        if rc != 0:
            failure = steps.failure() or steplog.Failure(None, f"docker build exited {rc}")
            raise BuildFailed(steplog.describe(failure, str(log_path), ca_used(variant_dir, opts)))
        image_id = Path(iidfile).read_text().strip() if Path(iidfile).is_file() else ""
    if not image_id:
        raise BuildFailed(f"BuildKit reported no image id (log {log_path})")
    return image_id
