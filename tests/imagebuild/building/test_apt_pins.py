"""An apt pin by upstream version, for real (issue 21, item 6): `openssh-server=1:9.2p1-*` on the local Debian
base builds with the newest 1:9.2p1 build bookworm's archive has, records it in the image, and passes the
static checks; a pin no build in the archive matches fails the build with a message naming the package and
the pin (both builders)."""

from __future__ import annotations

import json
import subprocess

import pytest
from cli import build_py
from services import RUN
from throwaway import remove_images_tagged

REPO = f"efa-image-build-test-{RUN}/aptpin"

MATRIX = """\
variants:
  - name: {name}
    base: {{image: {base}, kind: local, os: debian12}}
    packages: [python3=3.11.2-1+b1]
    components:
      openssh:
        version: "{version}"
        source: {{apt: ["openssh-server=1:{version}-*", "openssh-client=1:{version}-*"]}}
    tags: ["{repo}:{{name}}-{{content_hash}}"]
"""


@pytest.fixture
def cleanup(docker_client):
    yield
    remove_images_tagged(docker_client, REPO)


def _matrix(tmp_path, local_base, name, version):
    path = tmp_path / f"{name}.yaml"
    path.write_text(MATRIX.format(name=name, base=local_base, version=version, repo=REPO))
    return path


def _build(path, out, *extra):
    rc = build_py("build", "--matrix", str(path), "--out", str(out), "--plain", *extra).rc
    (entry,) = json.loads((out / "summary.json").read_text())["variants"]
    return rc, entry


@pytest.mark.docker
def test_a_pin_by_upstream_version_builds_records_and_passes_the_checks(
    docker_client, local_base, tmp_path, cleanup
):
    rc, entry = _build(_matrix(tmp_path, local_base, "ssh-by-upstream", "9.2p1"), tmp_path / "out")
    assert rc == 0, f"{entry.get('error')} (log {entry['log']})"
    ref = entry["tags"][0]
    record = json.loads(
        subprocess.run(
            ["docker", "run", "--rm", ref, "cat", "/opt/efa-image-build/resolved-packages.json"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    )  # fmt: skip
    by = {r["package"]: r for r in record["packages"]}
    assert set(by) == {"openssh-server", "openssh-client"}
    server = by["openssh-server"]
    assert server["pin"] == "openssh-server=1:9.2p1-*" and server["component"] == "openssh"
    assert server["version"].startswith("1:9.2p1-") and by["openssh-client"]["version"] == server["version"]
    # through the CLI: the SDK's run(remove=True) can lose a fast container's output
    installed = subprocess.run(
        ["docker", "run", "--rm", ref, "dpkg-query", "-W", "--showformat=${Version}", "openssh-server"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert installed == server["version"]

    report = tmp_path / "report.json"
    rc = build_py("test", "--image", ref, "--trust-image-checks", "--json", report).rc
    (image,) = json.loads(report.read_text())["images"]
    st = {c["name"]: (c["status"], c["detail"]) for c in image["checks"]}
    assert rc == 0 and image["passed"], {k: v for k, v in st.items() if v[0] not in ("pass", "skip")}
    for name in ("openssh-packages", "ssh-version", "sshd-ready"):
        assert st[name][0] == "pass", (name, st[name])
    assert f"openssh-server {installed} (pin openssh-server=1:9.2p1-*, recorded)" in st["openssh-packages"][1]


@pytest.mark.docker
@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_a_pin_no_build_matches_fails_the_build_naming_package_and_pin(
    docker_client, local_base, tmp_path, cleanup, builder
):
    path = _matrix(tmp_path, local_base, f"ssh-no-such-{builder}", "9.9p9")
    rc, entry = _build(path, tmp_path / "out", "--builder", builder)
    assert rc == 1 and entry["status"] == "failed"
    error = entry["error"]
    # the failing step first, then its command's own last error lines (imagebuild.building.steplog)
    lines = error.splitlines()
    assert "system" in lines[0] or "Step" in lines[0], error
    said = [ln.strip() for ln in lines[1:]]
    assert any(
        ln.startswith("error: no build of openssh-server matches the pin openssh-server=1:9.9p9-*")
        for ln in said
    ), error
    assert "the archive has: 1:9.2p1-" in error  # what there is instead
