"""The dnf stage's rpm half, run for real: the rendered rpm_verify / rpm_record lines on a real rpm database.

No Amazon Linux image (and no dnf) can be had here, so `dnf install` itself is pinned by golden
(test_al2023.py). What checks and records the installed builds is rpm's query, and Debian packages rpm: this
test builds two small packages with rpmbuild (one with an epoch), installs them into rpm's database in a
Debian container, and runs the system stage's lines that follow `dnf install`, as rendered for pins of them.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from services import RUN

from imagebuild.matrix.load import load
from imagebuild.render.dockerfile import dockerfile

SPEC = """\
Name: {name}
{epoch}Version: {version}
Release: {release}
Summary: efa-image-build test package
License: MIT
BuildArch: noarch
%description
An empty package for the rpm_verify test.
%files
"""
PACKAGES = (("efa-test-epoch", "Epoch: 4\n", "1.2", "3.test"), ("efa-test-plain", "", "0.9", "1.test"))


@pytest.fixture(scope="module")
def rpm_image(docker_client, local_base, tmp_path_factory):
    ctx = tmp_path_factory.mktemp("rpm-image")
    for name, epoch, version, release in PACKAGES:
        (ctx / f"{name}.spec").write_text(
            SPEC.format(name=name, epoch=epoch, version=version, release=release)
        )
    (ctx / "Dockerfile").write_text(
        f"FROM {local_base}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends rpm \\\n"
        " && rm -rf /var/lib/apt/lists/*\n"
        "COPY *.spec /tmp/specs/\n"
        'RUN for s in /tmp/specs/*.spec; do rpmbuild -bb --quiet "$s"; done \\\n'
        " && rpm --initdb && rpm -i --nodeps /root/rpmbuild/RPMS/noarch/*.rpm\n"
    )
    tag = f"efa-image-build-test-{RUN}/rpm-verify:1"
    docker_client.images.build(path=str(ctx), tag=tag, rm=True, forcerm=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def _after_install(tmp_path: Path, pins) -> str:
    """The system stage's lines after `dnf install`, rendered for `pins` on an amzn2023 base, as a script."""
    path = tmp_path / "matrix.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            variants:
              - name: rpm
                base: {{image: "nvidia/cuda:13.0.2-runtime-amzn2023", kind: cuda, os: amzn2023}}
                cuda: "13.0"
                packages: {json.dumps(list(pins))}
            """
        )
    )
    (v,) = load(str(path))
    text = dockerfile(v)
    start = text.index(" && rpm_evr()")
    end = text.index(" && { grep -qs ' /var/cache/dnf '")
    return "true \\\n" + text[start:end].rstrip().rstrip("\\").rstrip() + "\n"


def _run(docker_client, image: str, script: str):
    container = docker_client.containers.run(
        image, ["bash", "-o", "pipefail", "-c", script], detach=True, network_disabled=True
    )
    try:
        rc = container.wait(timeout=120)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    return rc, out, err


@pytest.mark.docker
def test_the_installed_builds_are_verified_and_recorded_with_their_epoch(docker_client, rpm_image, tmp_path):
    script = _after_install(tmp_path, ["efa-test-epoch=4:1.2-3.test", "efa-test-plain=0.9-1.test"])
    rc, out, err = _run(
        docker_client, rpm_image, script + "cat /opt/efa-image-build/resolved-packages.json\n"
    )
    assert rc == 0, err
    record = json.loads(out)
    assert record == {
        "packages": [
            {
                "component": "packages",
                "package": "efa-test-epoch",
                "pin": "efa-test-epoch=4:1.2-3.test",
                "version": "4:1.2-3.test",
            },
            {
                "component": "packages",
                "package": "efa-test-plain",
                "pin": "efa-test-plain=0.9-1.test",
                "version": "0.9-1.test",
            },
        ]
    }


@pytest.mark.docker
@pytest.mark.parametrize(
    "pin, says",
    [
        (
            "efa-test-plain=0.9-2.test",
            "efa-test-plain 0.9-1.test is installed, the pin efa-test-plain=0.9-2.test",
        ),
        ("efa-test-epoch=1.2-3.test", "efa-test-epoch 4:1.2-3.test is installed"),  # the epoch counts
        ("efa-test-absent=1.0-1", "the pin efa-test-absent=1.0-1 wants 1.0-1"),
    ],
)
def test_another_build_than_the_pin_fails_the_step_naming_both(docker_client, rpm_image, tmp_path, pin, says):
    rc, out, err = _run(docker_client, rpm_image, _after_install(tmp_path, [pin]))
    assert rc != 0 and says in err, (rc, out, err)
    assert not re.search(r"resolved-packages", out)
