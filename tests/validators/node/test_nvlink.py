"""NVLink on today's GPUs (issue 39 item 2): Blackwell's `nvidia-smi nvlink -e` counters, nvidia-smi's "all
links are inactive", remedies; the real `nvlink -s` captures read by path (../shared/gpu-captures). The
Blackwell output is written by us from the counter names in efa_validators/node/nvlink.py (tests/fixtures/
gpuhealth/nvlink-s-b300.txt and `_blackwell_errors` below)."""

import re

from conftest import gpu_capture
from paths import ROOT

from efa_validators.node import nvlink

FIX = ROOT / "tests" / "fixtures" / "gpuhealth"
# the error counters a Blackwell driver prints per link, then what is not judged: traffic, rates, FEC buckets
BLACKWELL_COUNTERS = (
    "Malformed packet Errors",
    "Buffer overrun Errors",
    "Rx Errors",
    "Rx remote Errors",
    "Rx General Errors",
    "Local link integrity Errors",
    "Tx discards",
    "Link recovery successful events",
    "Link recovery failed events",
    "Total link recovery events",
    "Effective Errors",
    "Symbol Errors",
)


def _blackwell_errors(status: str, **counts: int) -> str:
    """`nvidia-smi nvlink -e` of a healthy Blackwell node for the links `status` lists, with `counts`
    ({"g3l7": {...}} spelled g<gpu>l<link>__<counter with _ for spaces>=n) overriding a zero."""
    out, gpu = [], None
    for line in status.splitlines():
        head = re.match(r"GPU (\d+): ", line)
        if head:
            gpu = int(head.group(1))
            out.append(line)
            continue
        link = re.match(r"\s*Link (\d+): ", line)
        if not link:
            continue
        n = int(link.group(1))
        values = {name: 0 for name in BLACKWELL_COUNTERS}
        for key, value in counts.items():
            where, counter = key.split("__")
            if where == "g%dl%d" % (gpu, n):
                values[counter.replace("_", " ")] = value
        out += ["\t Link %d: Tx packets: 918273645" % n, "\t Link %d: Rx packets: 918273612" % n]
        out += ["\t Link %d: %s: %d" % (n, name, value) for name, value in values.items()]
        out += ["\t Link %d: Effective BER: 15e-255" % n, "\t Link %d: Symbol BER: 15e-255" % n]
        out += ["\t Link %d: FEC Errors - %d: %d" % (n, b, 36140749276 if b == 0 else 0) for b in range(16)]
    return "\n".join(out) + "\n"


def test_a_healthy_blackwell_listing_passes():
    """It passed nothing before: no `Recovery Errors` line, so 'no recovery counter' made it unknown."""
    status = (FIX / "nvlink-s-b300.txt").read_text()
    ok = nvlink.nvlink_check(
        0, status, 0, _blackwell_errors(status), expected=True, profile="p6-b300.48xlarge"
    )
    assert ok["status"] == "pass" and "144 links up" in ok["detail"], ok
    assert "Link recovery successful events=0" in ok["detail"], ok


def test_a_failed_blackwell_link_recovery_fails_and_a_successful_one_is_shown():
    status = (FIX / "nvlink-s-b300.txt").read_text()
    failed = nvlink.nvlink_check(0, status, 0, _blackwell_errors(status, g3l7__Link_recovery_failed_events=2))
    assert failed["status"] == "fail" and failed["remedy"] == "reset-gpu", failed
    assert "GPU 3 link 7: 2 failed link recoveries" in failed["detail"], failed
    recovered = nvlink.nvlink_check(
        0, status, 0, _blackwell_errors(status, g3l7__Link_recovery_successful_events=5)
    )
    assert recovered["status"] == "pass" and "Link recovery successful events=5" in recovered["detail"], (
        recovered
    )
    # FEC bucket 0 and the BER floor are no errors; a counter this does not name is not judged
    noisy = _blackwell_errors(status, g1l1__Symbol_Errors=0).replace("Rx packets: 918273612", "Rx packets: 1")
    assert nvlink.nvlink_check(0, status, 0, noisy)["status"] == "pass"


def test_links_without_either_recovery_counter_are_unknown():
    status = (FIX / "nvlink-s-b300.txt").read_text()
    errors = "\n".join(
        line for line in _blackwell_errors(status).splitlines() if "recovery" not in line or "GPU 2" in line
    )
    checked = nvlink.nvlink_check(0, status, 0, errors)
    assert checked["status"] == "unknown" and "no recovery counter for 144 link(s)" in checked["detail"], (
        checked
    )


def test_a_down_link_fails_with_a_gpu_reset():
    healthy, down = (FIX / "nvlink-s-healthy.txt").read_text(), (FIX / "nvlink-s-link-down.txt").read_text()
    bad = nvlink.nvlink_check(0, down, 0, (FIX / "nvlink-e-crc-only.txt").read_text())
    assert bad["status"] == "fail" and bad["remedy"] == "reset-gpu" and "GPU 3 link 7" in bad["detail"], bad
    retrained = nvlink.nvlink_check(0, healthy, 0, (FIX / "nvlink-e-recovery.txt").read_text())
    assert retrained["status"] == "fail" and retrained["remedy"] == "reset-gpu", retrained


def test_the_real_all_links_inactive_capture_fails():
    """Azure's A100 capture: `NVML: Unable to retrieve NVLink information as all links are inActive` under the
    GPU's header. It was 'no link lines': unknown."""
    status = gpu_capture("14-azhpc-a100-nvlink-s-all-inactive.txt").read_text()
    checked = nvlink.nvlink_check(0, status, 0, "")
    assert checked["status"] == "fail" and checked["remedy"] == "reset-gpu", checked
    assert checked["detail"].startswith("GPU 6: every link inactive"), checked
    assert "all links are inActive" in checked["evidence"][0]["text"], checked
    # a profile whose GPUs have no NVLink reads the same words as that fact
    assert nvlink.nvlink_check(0, status, 0, "", expected=False, profile="g5.48xlarge")["status"] == "pass"


def test_the_real_healthy_a100_status_capture_never_fails():
    """gpud's healthy A100 `nvlink -s` (8 GPUs x 12 links at 25 GB/s) has no `-e` beside it. Without counters
    it is unknown, not pass: every link is up, but a link that keeps retraining is only seen in `-e`, and an
    `-e` that printed no counter is no zero count (fail closed). With the counters an A100 prints (our own,
    all zero, in the pre-Blackwell format) for exactly its links, it passes."""
    status = gpu_capture("16-gpud-a100x8-nvlink-s.txt").read_text()
    for rc, errors in ((0, ""), (None, "nvidia-smi timed out after 30 s"), (3, "")):
        checked = nvlink.nvlink_check(0, status, rc, errors)
        assert checked["status"] == "unknown", (rc, checked)
    counters = re.sub(
        r"(?m)^(\s*)Link (\d+): .*$",
        lambda m: "\n".join(
            "%sLink %s: %s: 0" % (m.group(1), m.group(2), c)
            for c in ("Replay Errors", "Recovery Errors", "CRC Errors")
        ),
        status,
    )
    ok = nvlink.nvlink_check(0, status, 0, counters, expected=True, profile="p4d.24xlarge")
    assert ok["status"] == "pass" and "96 links up" in ok["detail"], ok
