"""AWS's own image secret scan (check_credentials.sh of the DLC sanity scripts, run by path) against what
this project puts in every image: the validator's sources. The scan greps /opt for a PEM private-key header on
one line; the redactor's own pattern was such a line, so every image this tool built failed a team's scan.
The images themselves are scanned in test_demo.py (every local variant the demo builds)."""

from __future__ import annotations

import subprocess

import peerchecks
import pytest
from paths import ROOT

pytestmark = pytest.mark.docker

IN_IMAGE = "/opt/efa-image-build/efa_validators/scan/redact.py"


def _scan(base: str, mounts: dict) -> subprocess.CompletedProcess:
    argv = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "bash"]
    argv += ["-v", f"{peerchecks.peer_checks_dir()}:/peer-checks:ro"]
    for host, there in mounts.items():
        argv += ["-v", f"{host}:{there}:ro"]
    argv += [base, "/peer-checks/check_credentials.sh"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_the_validator_sources_pass_awss_secret_scan_and_the_scan_can_fail(local_base, tmp_path):
    ok, why = peerchecks.available()
    if not ok:
        pytest.skip(why)
    clean = _scan(local_base, {ROOT / "validators" / "efa_validators" / "scan" / "redact.py": IN_IMAGE})
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # the scan does fail on the line it looks for: the redactor as it was (its pattern on one line)
    old = tmp_path / "redact.py"
    old.write_text('PRIVATE_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")\n')
    flagged = _scan(local_base, {old: IN_IMAGE})
    assert flagged.returncode == 1 and f"Private key header found in {IN_IMAGE}" in flagged.stdout, flagged


def test_no_file_of_the_validator_holds_a_line_the_scans_read_as_a_secret():
    """Every file copied into images (validators/), read with the scans' own patterns (grep -E)."""
    patterns = [
        r"-----BEGIN.*PRIVATE KEY-----",
        r"AKIA[0-9A-Z]{16}",
        r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_",
        r"hf_[A-Za-z]{34}",
    ]
    for pattern in patterns:
        proc = subprocess.run(
            ["grep", "-rlIE", "--", pattern, str(ROOT / "validators" / "efa_validators")],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 1 and not proc.stdout, (pattern, proc.stdout)
