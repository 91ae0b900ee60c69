"""Release notes say what changed in the training code and the Python packages (issue 25, item 2), as read in
the image by `build.py test` (its check report's `software`), against the previous release, through the real
registry the tests start.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import uuid

import pytest
from cli import build_py
from services import LOCK_LABEL, RUN, small_lock, summary_entry, write_check_report, write_summary

from imagebuild.building.dlcbase import DEFAULT_NAME as DLC_LAYOUT
from imagebuild.check import software
from imagebuild.release import record as rel

pytest_plugins = ["services_fixtures"]  # fixtures: registry

PYTHON = "/usr/local/bin/python3"  # the DLC layout's interpreter


def _expected_code_hash(files: dict) -> str:
    """The documented code hash: sha256 over the sorted `<path>\\0<sha256>\\n` lines."""
    lines = sorted(f"{p}\0{hashlib.sha256(data).hexdigest()}\n" for p, data in files.items())
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def test_the_probe_hashes_the_code_folder_and_lists_the_interpreters_packages(tmp_path):
    code = tmp_path / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    files = {"train.py": b"print('v1')\n", "pkg/model.py": b"x = 1\n"}
    for rel_path, data in files.items():
        (code / rel_path).write_bytes(data)
    (code / "pkg" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    run = [sys.executable, str(software.PROBE), str(code)]
    doc = json.loads(subprocess.run(run, capture_output=True, text=True, check=True, timeout=60).stdout)
    assert doc["code"] == {"path": str(code), "sha256": _expected_code_hash(files), "files": 2}
    from importlib.metadata import version

    assert doc["python_packages"]["pytest"] == version("pytest")
    (code / "train.py").write_bytes(b"print('v2')\n")
    again = json.loads(subprocess.run(run, capture_output=True, text=True, check=True, timeout=60).stdout)
    assert again["code"]["sha256"] != doc["code"]["sha256"]


@pytest.fixture(scope="module")
def dlc_layout(docker_client, local_base):
    """The DLC-layout base (a python with site-packages), made by `build.py base --layout dlc`."""
    assert build_py("base", "--layout", "dlc").rc == 0
    return DLC_LAYOUT


def _training_image(client, base, n, code: str, packages: dict):
    """A real image: training code in /opt/ml/code and Python distributions installed (their dist-info, as
    pip leaves it) in the interpreter's site-packages; the lock label says where both are."""
    lock = small_lock(f"soft-{n}")
    lock["python"] = PYTHON
    lock["training"] = {"source_dir": "training", "entry_point": "train.py", "code_dir": "/opt/ml/code"}
    text = json.dumps(lock, sort_keys=True)
    site = "/usr/local/lib/python3.11/site-packages"
    installs = " && ".join(
        f"mkdir -p {site}/{name}-{ver}.dist-info && printf 'Metadata-Version: 2.1\\nName: {name}\\n"
        f"Version: {ver}\\n' > {site}/{name}-{ver}.dist-info/METADATA"
        for name, ver in packages.items()
    )
    dockerfile = (
        f"FROM {base}\nRUN test -d {site} && {installs}\n"
        f"RUN mkdir -p /opt/ml/code && printf '{code}' > /opt/ml/code/train.py\n"
        f"LABEL {LOCK_LABEL}={json.dumps(text)} org.efa-image-build.test-run={RUN}\n"
    )
    image, _ = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=f"soft-test-{RUN}:{n}", rm=True
    )
    return image


@pytest.mark.docker
def test_release_notes_diff_the_training_code_and_the_python_packages(
    registry, docker_client, dlc_layout, tmp_path
):
    repo = f"soft-{uuid.uuid4().hex[:10]}/app"
    image_a = _training_image(
        docker_client, dlc_layout, "a", "print(1)\\n", {"teamlib": "1.0", "oldlib": "2.0"}
    )
    image_b = _training_image(
        docker_client, dlc_layout, "b", "print(2)\\n", {"teamlib": "1.1", "newlib": "0.2"}
    )
    try:
        # build.py test reads it in the image, into the check report, whatever the checks say
        report = tmp_path / "report.json"
        res = build_py(
            "test", "--image", image_a.id, "--json", str(report), "--junit", str(tmp_path / "r.xml")
        )
        assert res.rc in (0, 1), res.err
        soft_a = json.loads(report.read_text())["images"][0]["software"]
        assert soft_a["python_packages"]["teamlib"] == "1.0" and soft_a["python_packages"]["oldlib"] == "2.0"
        assert soft_a["code"] == {
            "path": "/opt/ml/code",
            "sha256": _expected_code_hash({"train.py": b"print(1)\n"}),
            "files": 1,
        }
        soft_b = software.describe(docker_client, image_b.id, json.loads(image_b.labels[LOCK_LABEL]))
        assert soft_b["python_packages"]["newlib"] == "0.2" and "oldlib" not in soft_b["python_packages"]

        records = tmp_path / "rec"
        for n, (image, soft) in enumerate(((image_a, soft_a), (image_b, soft_b))):
            summary = write_summary(
                tmp_path / f"summary-{n}.json", [summary_entry("soft", image, tags=[f"{repo}:c{n}"])]
            )
            assert build_py("push", "--summary", str(summary), "--registry", registry.host).rc == 0
            checks = write_check_report(tmp_path / f"checks-{n}.json", [("soft", image.id, True)])
            doc = json.loads(checks.read_text())
            doc["images"][0]["software"] = soft
            checks.write_text(json.dumps(doc))
            res = build_py(
                "release", "--summary", str(summary), "--checks", str(checks), "--records", str(records),
                "--registry", registry.host, "--tag", f"r{n}",
            )  # fmt: skip
            assert res.rc == 0, res.err
        record = json.loads((records / "soft" / "latest.json").read_text())
        assert record["software"] == soft_b
        notes = (records / "soft" / (rel.record_name(record) + ".md")).read_text()
        assert (
            f"- training code `/opt/ml/code` (1 files): `{soft_b['code']['sha256']}` "
            f"(changed, was `{soft_a['code']['sha256']}`)" in notes
        ), notes
        assert "| teamlib | 1.0 | 1.1 | upgraded |" in notes
        assert "| newlib | - | 0.2 | added |" in notes and "| oldlib | 2.0 | - | removed |" in notes
        same = len(soft_b["python_packages"]) - 2
        assert f"- Python packages: 3 changed, {same} unchanged" in notes
    finally:
        for image in (image_a, image_b):
            docker_client.images.remove(image.id, force=True)
