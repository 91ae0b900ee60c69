"""Run the static checks on images: a container per image, the testinfra module, JSON and JUnit reports.

The lock comes from the image's label (so any image this tool built can be checked by reference), or from a
rendered `variant.lock.json`, in which case the label must equal it (check `lock-label`).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import efa_validators
from imagebuild.adapters.docker_engine import find_image
from imagebuild.check import custom
from imagebuild.check.expectations import Expectation, derive
from imagebuild.check.probes import INVENTORY_PATH
from imagebuild.check.report import write_report as write_report
from imagebuild.errors import UserError
from imagebuild.variant import CHECK_CONTAINER_LABEL, LOCK_LABELS, lock_from_labels

CHECK_MODULE = Path(__file__).with_name("test_image.py")
INVENTORY = Path(__file__).with_name("inventory.py")
VALIDATORS = Path(efa_validators.__file__).resolve().parent  # its nodecheck goes beside inventory.py
CONTAINER_LABEL = CHECK_CONTAINER_LABEL
STATUSES = ("pass", "fail", "unknown", "skip")
IMAGE_CONFIG = ("User", "WorkingDir", "Entrypoint", "Cmd")  # what a metadata check may compare
DOCKER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def import_roots() -> List[str]:
    """The folders the check run's child imports imagebuild and efa_validators from: this copy's, wherever it
    is (a wheel's site-packages holds both; a checkout keeps efa_validators in validators/, its src
    folder)."""
    return list(dict.fromkeys([str(Path(__file__).resolve().parents[2]), str(VALIDATORS.parent)]))


@dataclass
class ImageReport:
    variant: Optional[str]
    image: str
    image_id: str
    checks: List[dict] = field(default_factory=list)
    duration_s: float = 0.0
    software: Optional[dict] = None  # training code hash and Python packages (imagebuild/check/software.py)

    @property
    def passed(self) -> bool:
        """True only when something passed and nothing failed or stayed unknown."""
        statuses = {c["status"] for c in self.checks}
        return "pass" in statuses and not statuses & {"fail", "unknown"}

    def to_json(self) -> dict:
        doc = {
            "variant": self.variant,
            "image": self.image,
            "image_id": self.image_id,
            "passed": self.passed,
            "duration_s": self.duration_s,
            "checks": self.checks,
        }
        if self.software is not None:
            doc["software"] = self.software
        return doc


def _env_of(image) -> dict:
    config = image.attrs.get("Config") or {}
    return dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)


def _base_env(client, lock: dict) -> dict:
    """The env the Dockerfile's ENV lines were expanded over: the base image's, when it is here."""
    base = (lock.get("base") or {}).get("image")
    # a registry base not pulled here: ENV lines that reference base vars may then differ
    image = find_image(client, base, api_error_is_absent=True) if base else None
    env: dict = _env_of(image) if image is not None else {}
    # docker expands ENV over its default PATH when the base sets none (a `docker import`ed base, say)
    env.setdefault("PATH", DOCKER_DEFAULT_PATH)
    return env


def _inventory_tar() -> bytes:
    """inventory.py and the validators lookup it imports (efa_validators/node/nodecheck.py), side by side."""
    buf = io.BytesIO()
    here = INVENTORY_PATH.lstrip("/").rsplit("/", 1)[0]
    files = {
        INVENTORY_PATH.lstrip("/"): INVENTORY,
        f"{here}/efa_validators/__init__.py": VALIDATORS / "__init__.py",
        f"{here}/efa_validators/node/__init__.py": VALIDATORS / "node" / "__init__.py",
        f"{here}/efa_validators/node/nodecheck.py": VALIDATORS / "node" / "nodecheck.py",
    }
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, src in files.items():
            data = src.read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def check_image(
    client,
    ref: str,
    lock: Optional[dict] = None,
    lock_file: Optional[str] = None,
    variant: Optional[str] = None,
    junit: Optional[Path] = None,
    timeout: int = 600,
    trust_image_checks: bool = False,
) -> ImageReport:
    """Check one image; never raises for a failing check (that is in the report), only for bad input.

    Without a lock of our own the image's label gives it: its team checks (`custom:`) are commands the
    image chose, so they run only with `trust_image_checks` and are unknown (never pass) otherwise."""
    started = time.monotonic()
    image = find_image(client, ref)
    if image is None:
        raise UserError(f"no such image: {ref}", key="--image", hint="build it with `efa-image-build build`")
    labels = image.labels or {}
    label_lock = lock_from_labels(labels)
    if lock is None and label_lock is None:
        raise UserError(
            f"image {ref} carries no lock label ({LOCK_LABELS[0]}): it was not built by this tool",
            key="--image",
            hint="check it with --variant NAME so the rendered variant.lock.json is used",
        )
    use_lock = lock if lock is not None else label_lock
    exps = [
        Expectation(
            "lock-label",
            "lock_label",
            "the image carries the lock it was built from, so any check can be re-run from the image alone",
            {"labels": list(LOCK_LABELS), "lock": lock, "lock_file": lock_file},
        )
    ] + derive(use_lock)
    if lock is None and not trust_image_checks:
        exps = custom.untrusted(exps)
    env = _env_of(image)
    base_env = _base_env(client, use_lock)
    for e in exps:
        if e.probe == "env_policy":
            e.params["base_env"] = base_env
    history = [h.get("CreatedBy") or "" for h in image.history()]
    python = use_lock.get("python") or "python3"
    report = ImageReport(variant or use_lock.get("name"), ref, image.id)
    container = client.containers.run(
        image.id,
        entrypoint=["sleep", "infinity"],
        command=[],
        detach=True,
        user="root",
        network_disabled=True,
        name=f"efa-check-{uuid.uuid4().hex[:10]}",
        labels={CONTAINER_LABEL: "1"},
    )
    try:
        container.put_archive("/", _inventory_tar())
        with tempfile.TemporaryDirectory(prefix="efa-check-") as tmp:
            tmpd = Path(tmp)
            plan = {
                "container": container.id,
                "image": ref,
                "lock": use_lock,
                "env": env,
                "labels": labels,
                "history": history,
                "python": python,
                "entrypoint": (image.attrs.get("Config") or {}).get("Entrypoint"),
                "config": {k: (image.attrs.get("Config") or {}).get(k) for k in IMAGE_CONFIG},
                "expectations": [e.to_json() for e in exps],
                "results": str(tmpd / "results.jsonl"),
            }
            (tmpd / "plan.json").write_text(json.dumps(plan))
            (tmpd / "pytest.ini").write_text("[pytest]\n")
            xml = tmpd / "junit.xml"
            cmd = [sys.executable, "-m", "pytest", str(CHECK_MODULE), "-q", "-rN", "-p", "no:cacheprovider"]
            cmd += ["-c", str(tmpd / "pytest.ini"), "--rootdir", tmp, f"--junitxml={xml}"]
            cmd += ["-o", f"junit_suite_name={report.variant or ref}"]
            env_run = dict(os.environ, EFA_IMAGE_CHECK_PLAN=str(tmpd / "plan.json"))
            env_run["PYTHONPATH"] = os.pathsep.join([*import_roots(), env_run.get("PYTHONPATH", "")])
            try:
                subprocess.run(cmd, env=env_run, capture_output=True, text=True, timeout=timeout, cwd=tmp)
            except subprocess.TimeoutExpired:
                pass  # checks that did not record are reported unknown below
            results = {}
            rpath = tmpd / "results.jsonl"
            if rpath.exists():
                for line in rpath.read_text().splitlines():
                    rec = json.loads(line)
                    results[rec["name"]] = rec
            for e in exps:
                rec = results.get(e.name) or {
                    "name": e.name,
                    "status": "unknown",
                    "detail": "the check did not run (pytest crashed or timed out)",
                }
                rec["component"] = e.component
                report.checks.append(rec)
            if junit is not None and xml.exists():
                junit.parent.mkdir(parents=True, exist_ok=True)
                junit.write_bytes(xml.read_bytes())
    finally:
        container.remove(force=True)
    report.duration_s = round(time.monotonic() - started, 2)
    return report


def merge_junit(parts: List[Path], dest: Path) -> None:
    """One JUnit file for CI: every image's testsuite under one <testsuites>."""
    root = ET.Element("testsuites")
    for part in parts:
        try:
            tree = ET.parse(part)
        except (OSError, ET.ParseError):
            continue
        node = tree.getroot()
        suites = [node] if node.tag == "testsuite" else list(node)
        for suite in suites:
            for case in suite.iter("testcase"):
                case.set("classname", suite.get("name", "image"))
            root.append(suite)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".tmp-{dest.name}")
    ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, dest)
