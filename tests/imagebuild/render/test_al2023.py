"""Amazon Linux 2023 bases: the dnf/rpm family's rendered steps and the AL2023 PyTorch DLC variant.

No AL2023 image can be pulled where these tests run, so the dnf path is pinned by golden
(tests/golden/al2023-dnf-pins.Dockerfile, from tests/fixtures/matrices/al2023-dnf.yaml) and the DLC variant's
golden (tests/golden/dlc-pt2.13-al2023.Dockerfile) is compared here with the facts of AWS's own Dockerfile:
aws/deep-learning-containers, read at commit e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0:
- docker/pytorch/Dockerfile.cuda (last changed in f1e622e430623f0afc8b51958c0483f78cbc31b2): `python3.12 -m
  venv /opt/venv`; the runtime's PATH starts /opt/venv/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin and its
  LD_LIBRARY_PATH names /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib, /opt/amazon/ofi-nccl/lib64,
  /opt/amazon/openmpi/lib, /opt/amazon/openmpi/lib64, /opt/amazon/efa/lib, /opt/amazon/efa/lib64; every OS
  package comes from dnf (`dnf install`, `dnf clean all`), none from apt.
- .github/config/image/pytorch/2.13-sagemaker-cuda.yml (6559da7bee4d4cf902184ba8687b734e869367dc):
  prod_image pytorch:2.13-cu133-amzn2023-sagemaker, torch_version 2.13.0, cuda_version 13.3.0,
  efa_version 1.49.0, python_version 3.12.
- docker/pytorch/2.13/cuda/uv.lock: nvidia-nccl-cu13 2.29.7 (torch's NCCL wheel in the venv).
- scripts/docker/common/install_efa_amzn2023.sh (a0f1504b37bd0293bb2c195ba0ba8b8906ed1a85): the plugin at
  /opt/amazon/ofi-nccl/lib64/libnccl-net-ofi.so from installer 1.44.0; dnf with install_weak_deps=False.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from cli import build_py
from paths import GOLDEN, ROOT, TESTS, assert_golden

from imagebuild import catalog
from imagebuild.building.context import classic_dockerfile
from imagebuild.catalog import osfamily
from imagebuild.matrix.load import load
from imagebuild.render.dockerfile import dockerfile

DLC = {
    "image": "pytorch:2.13-cu133-amzn2023-sagemaker",
    "python": "/opt/venv/bin/python",
    "nccl_lib": "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib",
    "plugin_dir": "/opt/amazon/ofi-nccl/lib64",
    "lib_dirs": (
        "/opt/amazon/openmpi/lib",
        "/opt/amazon/openmpi/lib64",
        "/opt/amazon/efa/lib",
        "/opt/amazon/efa/lib64",
    ),
    "bin_dirs": ("/opt/amazon/openmpi/bin", "/opt/amazon/efa/bin"),
    "torch": "2.13.0",
    "nccl": "2.29.7",
    "efa_installer": "1.49.0",
    "cuda": "13.3",
}
FIXTURE = TESTS / "fixtures" / "matrices" / "al2023-dnf.yaml"


def _variant(matrix: Path, name: str):
    (v,) = load(str(matrix), only=[name])
    return v


def _run_blocks(text: str):
    """Each RUN instruction with its continuation lines, as one string."""
    out, cur = [], None
    for line in text.splitlines():
        if line.startswith("RUN "):
            cur = [line]
            out.append(cur)
        elif cur is not None and cur[-1].endswith("\\"):
            cur.append(line)
        else:
            cur = None
    return ["\n".join(block) for block in out]


def test_the_al2023_dlc_golden_makes_the_dlcs_own_choices():
    v = _variant(ROOT / "matrix.yaml", "dlc-pt2.13-al2023")
    text = (GOLDEN / "dlc-pt2.13-al2023.Dockerfile").read_text()
    assert text == dockerfile(v)  # the golden is this variant's rendering (test_render pins it too)
    assert f"FROM ${{BASE_REGISTRY}}/{DLC['image']} AS system" in text
    # the DLC's venv Python runs the validators; torch's NCCL is the venv's wheel (the lock's prefix)
    assert v.python == DLC["python"] and f"{DLC['python']} -c 'import efa_validators'" in text
    comps = {c.name: c for c in v.components}
    assert f"{comps['nccl'].prefix}/lib" == DLC["nccl_lib"]
    # the loader's paths: the DLC's plugin (lib64) and its Open MPI and EFA lib and lib64 directories
    ld = re.search(r'^ENV LD_LIBRARY_PATH="([^"$]*)', text, re.M).group(1).split(":")
    assert DLC["plugin_dir"] in ld and set(DLC["lib_dirs"]) <= set(ld)
    assert not [d for d in ld if "-linux-gnu" in d]  # Debian's multiarch tuple has no place on AL2023
    path = re.search(r'^ENV PATH="([^"$]*)', text, re.M).group(1).split(":")
    assert set(DLC["bin_dirs"]) <= set(path)
    # the versions the DLC's config and lock give, and the installer's bundle as the catalog knows it
    versions = {name: c.version for name, c in comps.items()}
    bundle = catalog.efa_installers()["versions"][DLC["efa_installer"]]
    assert (versions["torch"], versions["nccl"], v.cuda) == (DLC["torch"], DLC["nccl"], DLC["cuda"])
    assert (versions["libfabric"], versions["openmpi"], versions["aws_ofi_nccl"]) == (
        bundle["libfabric"],
        bundle["openmpi"],
        bundle["aws_ofi_nccl"],
    )
    assert all(c.source == "base" for c in comps.values())  # extended, nothing of the stack replaced
    # an rpm system: no apt or dpkg step, the dnf caches the base left are removed
    assert not re.search(r"\b(apt-get|apt|dpkg|dpkg-query)\b|DEBIAN_FRONTEND", text)
    assert "RUN rm -rf /var/cache/dnf/* /var/cache/yum/*" in text


def test_the_dnf_path_is_pinned_by_golden_with_apts_discipline():
    """Exact pins as dnf spells them, each checked with rpm -q and recorded, no weak dependencies, the cache
    emptied in the same RUN (where no BuildKit mount holds it)."""
    v = _variant(FIXTURE, "al2023-dnf-pins")
    text = dockerfile(v)
    assert_golden(text, GOLDEN / "al2023-dnf-pins.Dockerfile")
    (install,) = [b for b in _run_blocks(text) if "python3.12-3.12.12" in b]
    assert "dnf install -y --setopt=install_weak_deps=False \\" in install
    for spec, name, evr in (
        ("python3.12-3.12.12-1.amzn2023.0.1", "python3.12", "3.12.12-1.amzn2023.0.1"),
        ("perl-interpreter-4:5.32.1-477.amzn2023.0.7", "perl-interpreter", "4:5.32.1-477.amzn2023.0.7"),
    ):
        assert f"      {spec} \\" in install
        assert f" && rpm_verify {name} {evr} {name}={evr} \\" in install
        assert f"rpm_record packages {name} {name}={evr};" in install
    assert "      which \\" in install and "rpm_verify which" not in install  # unpinned: said so above it
    assert "# Unpinned in the matrix (pin them for reproducible images): which" in text
    assert "> /opt/efa-image-build/resolved-packages.json" in install
    assert "%|EPOCH?{%{EPOCH}:}|%{VERSION}-%{RELEASE}" in install  # the epoch only where the package has one
    assert install.rstrip().endswith(
        "{ grep -qs ' /var/cache/dnf ' /proc/mounts || { dnf clean all && rm -rf /var/cache/dnf/*; }; }"
    )
    # pip for the requirements stage from dnf too, its cache emptied the same way
    (pip,) = [b for b in _run_blocks(text) if "python3-pip" in b]
    assert "dnf install -y --setopt=install_weak_deps=False python3-pip" in pip and "dnf clean all" in pip
    assert not re.search(r"\b(apt-get|dpkg|dpkg-query)\b|DEBIAN_FRONTEND", text)


def test_the_dnf_steps_are_hadolint_clean(tmp_path):
    """hadolint's dnf rules (DL3040 clean, DL3041 versions, DL3038 -y) hold; the unpinned lines say so."""
    from test_render import hadolint

    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile(_variant(FIXTURE, "al2023-dnf-pins")))
    proc = subprocess.run([hadolint(), str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path.write_text(path.read_text().replace("# hadolint ignore=DL3041\n", ""))  # without them: DL3041
    proc = subprocess.run([hadolint(), str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "DL3041" in proc.stdout


def test_the_classic_builder_gets_the_dnf_steps_without_mounts_and_with_the_cleanup():
    text = classic_dockerfile(dockerfile(_variant(FIXTURE, "al2023-dnf-pins")))
    assert "--mount=" not in text
    installs = [b for b in _run_blocks(text) if "dnf install -y --setopt=install_weak_deps=False" in b]
    assert len(installs) == 2  # the system stage's pins and the requirements stage's pip
    for block in installs:
        assert block.rstrip().endswith("{ dnf clean all && rm -rf /var/cache/dnf/*; }; }"), block


def test_the_family_decides_the_package_manager_and_library_dirs():
    assert osfamily.family("amzn2023") is osfamily.RPM and osfamily.family("ubuntu22.04") is osfamily.DEB
    assert osfamily.from_os_release("amzn", "2023") == "amzn2023"
    assert osfamily.from_os_release("amzn", "2") is None  # Amazon Linux 2 is not a family the matrix has
    dirs = ["/opt/amazon/efa/lib", "/opt/x/lib64", "/opt/x/lib/{multiarch}"]
    assert osfamily.DEB.libdirs(dirs) == dirs
    assert osfamily.RPM.libdirs(dirs) == ["/opt/amazon/efa/lib", "/opt/amazon/efa/lib64", "/opt/x/lib64"]
    # a DLC on amzn2023 gets the venv's Python and NCCL by default; on Ubuntu the /usr/local ones stay
    ubuntu = _variant(ROOT / "matrix.yaml", "dlc-pt2.7-efa1.41.0")
    assert ubuntu.python == "/usr/local/bin/python3" and ubuntu.base.family is osfamily.DEB


def _matrix(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(
        "format: efa-image-build/matrix/v1\nvariants:\n  - name: al\n    description: an AL2023 base\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return path


_BASE = """\
base: {image: "pytorch:2.13-cu133-amzn2023-sagemaker", registry_arg: BASE_REGISTRY, kind: dlc, os: %s}
"""


@pytest.mark.parametrize(
    "extra, key, says",
    [
        (
            'components:\n  openssh: {version: "8.7p1", source: {apt: ["openssh-server=8.7p1-1"]}}\n',
            "components.openssh",
            "rendered for apt/dpkg only",
        ),
        (
            'components:\n  efa_installer: {version: "1.49.0"}\n',
            "components.efa_installer",
            "of the dnf/rpm family",
        ),
        ("packages: [hwloc-libs=2.2.0]\n", "packages[0]", "no rpm pin"),
        ("packages: [which, hwloc-libs:amd64]\n", "packages[1]", "multiarch"),
    ],
)
def test_apt_steps_and_bad_rpm_pins_on_an_rpm_base_exit_2_naming_file_line_and_key(
    tmp_path, extra, key, says
):
    path = _matrix(tmp_path, _BASE % "amzn2023" + extra)
    res = build_py("render", "--matrix", path, "--out", tmp_path / "out")
    assert res.rc == 2, res
    assert f"{path}:" in res.err and f"key '{key}'" in res.err and says in res.err
    assert "Traceback" not in res.err and not (tmp_path / "out").exists()  # nothing half-done


def test_the_same_apt_component_on_an_ubuntu_base_renders(tmp_path):
    """The refusal is the family's: the same line on an apt/dpkg base is fine."""
    extra = (
        'components:\n  openssh: {version: "8.9p1", source: {apt: ["openssh-server=1:8.9p1-3ubuntu0.16"]}}\n'
    )
    path = _matrix(tmp_path, _BASE % "ubuntu22.04" + extra)
    res = build_py("render", "--matrix", path, "--out", tmp_path / "out")
    assert res.rc == 0, res
    assert "apt-get install" in (tmp_path / "out" / "al" / "Dockerfile").read_text()


def test_an_os_the_matrix_does_not_know_exits_2(tmp_path):
    path = _matrix(tmp_path, _BASE % "amzn2")
    res = build_py("render", "--matrix", path, "--out", tmp_path / "out")
    assert res.rc == 2 and "base.os" in res.err and "amzn2023" in res.err, res


def test_the_lock_records_the_os_and_the_schema_offers_it():
    v = _variant(ROOT / "matrix.yaml", "dlc-pt2.13-al2023")
    assert json.loads(v.lock_json())["base"]["os"] == "amzn2023"
    res = build_py("schema")
    assert res.rc == 0 and "amzn2023" in json.dumps(json.loads(res.out))
