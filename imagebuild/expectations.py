"""What an image must show, derived from its variant lock alone: checks as data.

In the spirit of container-structure-test, every check is a plain record (name, probe, parameters) that the
testinfra module in `imagebuild.checks` evaluates inside a container of the image. The list is the same for
every lock: a check whose component is not in the variant is kept with a `skip` reason, so a report always
says what was *not* checked, and a skipped check is never counted as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from imagebuild.variant import LOCK_LABEL

LOCK_LABELS = (LOCK_LABEL, "io.github.efa-image-build.lock")  # the second: docs/architecture.md wording

# Env vars whose whole namespace the policy owns: one set in the image but absent from the lock is a finding.
POLICY_PREFIXES = ("NCCL_", "FI_", "RDMAV_")

# Credentials must never be in env, labels or layer history. [AWS access key id formats; AWS CLI config keys]
CREDENTIAL_PATTERNS = (
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
    r"(?i)aws_secret_access_key",
    r"(?i)aws_session_token",
    r"(?i)-----BEGIN [A-Z ]*PRIVATE KEY-----",
)
CREDENTIAL_FILES = ("/root/.aws/credentials", "/root/.docker/config.json", "/root/.netrc")

NCCL_TESTS_BINARIES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf")


@dataclass(frozen=True)
class Expectation:
    """One check: `probe` names the evaluator, `params` its data; `skip` says why it does not apply."""

    name: str
    probe: str
    why: str
    params: Dict[str, Any] = field(default_factory=dict)
    component: Optional[str] = None
    skip: Optional[str] = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "probe": self.probe,
            "why": self.why,
            "params": self.params,
            "component": self.component,
            "skip": self.skip,
        }

    @classmethod
    def from_json(cls, d: dict) -> Expectation:
        return cls(d["name"], d["probe"], d["why"], d.get("params") or {}, d.get("component"), d.get("skip"))


def _comp(lock: dict, name: str) -> Optional[dict]:
    comp = (lock.get("components") or {}).get(name)
    return comp if isinstance(comp, dict) else None


def _absent(name: str) -> str:
    return f"variant has no {name} component"


def derive(lock: dict) -> List[Expectation]:
    """The checks for `lock`, in report order. Pure."""
    python = lock.get("python") or "python3"
    comps = lock.get("components") or {}
    nccl, ofi, fab = _comp(lock, "nccl"), _comp(lock, "aws_ofi_nccl"), _comp(lock, "libfabric")
    efa, mpi, tests = _comp(lock, "efa_installer"), _comp(lock, "openmpi"), _comp(lock, "nccl_tests")
    gdr, torch = _comp(lock, "gdrcopy"), _comp(lock, "torch")
    training = lock.get("training") or {}
    env = {e["name"]: str(e["value"]) for e in lock.get("env") or []}
    out: List[Expectation] = []

    def add(name, probe, why, params=None, component=None, when=True, skip_reason=None):
        skip = None if when else (skip_reason or _absent(component or name))
        out.append(Expectation(name, probe, why, dict(params or {}), component, skip))

    add(
        "labels-match-lock",
        "labels",
        "the lock's labels are what release tooling and humans read",
        {"labels": lock.get("labels") or {}},
    )
    add(
        "env-policy",
        "env_policy",
        "every env var the policy sets has its value; no NCCL_/FI_/RDMAV_ var the policy did not choose",
        {
            "env": env,
            "prefixes": list(POLICY_PREFIXES),
            # a forbidden var is env-forbidden's finding; reporting it twice would blur which check failed
            "ignore": sorted(e["name"] for e in lock.get("env_forbidden") or []),
        },
    )
    add(
        "env-forbidden",
        "env_forbidden",
        "vars the policy forbids (stale tuning that breaks newer plugins) are not set",
        {"forbidden": {e["name"]: e.get("reason", "") for e in lock.get("env_forbidden") or []}},
    )
    add(
        "no-credentials",
        "no_credentials",
        "no AWS key or secret in env, labels or layer history; no credential files",
        {"patterns": list(CREDENTIAL_PATTERNS), "files": list(CREDENTIAL_FILES)},
    )
    add(
        "build-ca-absent",
        "find_absent",
        "the build host's CA bundle is for builder stages only: never in the final image",
        {"patterns": ["build-ca.crt"]},
    )
    add(
        "validators-import",
        "command",
        "pre-flight runs `python -m validators` inside the image",
        {"command": f"{python} -m validators --help", "expect_rc": 0},
    )
    nccl_ver = (nccl or {}).get("version")
    add(
        "nccl-version-ctypes",
        "nccl_ctypes",
        "the libnccl.so.2 the loader resolves reports the locked version via ncclGetVersion",
        {"version": nccl_ver, "python": python},
        "nccl",
        nccl is not None,
    )
    add(
        "nccl-version-header",
        "nccl_header",
        "nccl.h (where headers are shipped) carries the same version as the library",
        {"version": nccl_ver, "prefix": (nccl or {}).get("prefix"), "python": python},
        "nccl",
        nccl is not None,
    )
    add(
        "single-libnccl",
        "single_library",
        "exactly one libnccl.so.2 on the library search path: two means the wrong one can win",
        {"soname": "libnccl.so.2", "python": python, "prefix": (nccl or {}).get("prefix")},
        "nccl",
        nccl is not None,
    )
    fab_present = fab is not None or efa is not None
    add(
        "libfabric-version",
        "libfabric_version",
        "the libfabric the tools load is the locked one (the AWS plugin needs >= 1.22 for EFA)",
        {"version": (fab or {}).get("version")},
        "libfabric",
        fab is not None,
    )
    fab_prefix = (fab or {}).get("prefix") or ((efa or {}).get("prefix") if efa else None)
    add(
        "single-libfabric",
        "single_library",
        "exactly one libfabric.so.1 on the search path: a second breaks the efa provider (EFA_1.2 not found)",
        {"soname": "libfabric.so.1", "python": python, "prefix": fab_prefix},
        "libfabric",
        fab_present,
    )
    ofi_params = {
        "version": (ofi or {}).get("version"),
        "prefix": (ofi or {}).get("prefix"),
        "python": python,
    }
    for name, probe, why in (
        ("plugin-present", "plugin_present", "the aws-ofi-nccl library (libnccl-net*.so) is in the image"),
        ("plugin-ldd", "plugin_ldd", "every library the plugin needs resolves (`ldd`: no 'not found')"),
        (
            "plugin-discoverable",
            "plugin_discoverable",
            "NCCL's search (NCCL_NET_PLUGIN, else libnccl-net.so on LD_LIBRARY_PATH/ldconfig) finds it",
        ),
        ("plugin-version", "plugin_version", "the plugin's embedded version string is the locked version"),
    ):
        add(name, probe, why, ofi_params, "aws_ofi_nccl", ofi is not None)
    add(
        "efa-installer-record",
        "efa_record",
        "the EFA installer left /opt/amazon/efa_installed_packages (what it installed, which version)",
        {"version": (efa or {}).get("version"), "path": "/opt/amazon/efa_installed_packages"},
        "efa_installer",
        efa is not None,
    )
    add(
        "fi-info-efa",
        "fi_info_efa",
        "`fi_info -l` lists the efa provider (without it NCCL falls back to sockets)",
        {"prefix": (efa or {}).get("prefix") or "/opt/amazon/efa"},
        "efa_installer",
        efa is not None,
    )
    add(
        "openmpi-version",
        "openmpi_version",
        "mpirun is the locked Open MPI",
        {"version": (mpi or {}).get("version"), "prefix": (mpi or {}).get("prefix")},
        "openmpi",
        mpi is not None,
    )
    add(
        "mpirun-as-root",
        "mpirun_root",
        "containers run as root: mpirun must accept it (--allow-run-as-root or OMPI_ALLOW_RUN_AS_ROOT)",
        {"prefix": (mpi or {}).get("prefix")},
        "openmpi",
        mpi is not None,
    )
    params = (tests or {}).get("params") or {}
    add(
        "nccl-tests-binaries",
        "nccl_tests",
        "nccl-tests binaries are present and every library they link resolves",
        {
            "binaries": list(params.get("binaries") or NCCL_TESTS_BINARIES),
            "prefix": (tests or {}).get("prefix"),
        },
        "nccl_tests",
        tests is not None,
    )
    add(
        "gdrcopy-library",
        "find_library",
        "GDRCopy's user-space library is installed (the kernel module is the host's)",
        {"patterns": ["libgdrapi.so*"], "prefix": (gdr or {}).get("prefix")},
        "gdrcopy",
        gdr is not None,
    )
    add(
        "torch-nccl",
        "torch_nccl",
        "torch's bundled NCCL against the system's: a mismatch means two NCCLs in one job (pytorch#122571)",
        {
            "python": python,
            "nccl": nccl_ver,
            "policy": ((torch or {}).get("params") or {}).get("nccl", "match"),
        },
        "torch",
        torch is not None,
    )
    add(
        "sagemaker-entry-point",
        "sagemaker",
        "SageMaker runs `train` with the code in /opt/ml/code: the entry point must be there",
        {
            "entry_point": training.get("entry_point"),
            "code_dir": training.get("code_dir") or "/opt/ml/code",
        },
        "training",
        bool(training.get("sagemaker")),
        "variant does not ask for a SageMaker entry point",
    )
    known = {
        "nccl",
        "aws_ofi_nccl",
        "libfabric",
        "efa_installer",
        "openmpi",
        "nccl_tests",
        "gdrcopy",
        "torch",
    }
    for name in sorted(set(comps) - known):
        comp = comps[name] or {}
        add(
            f"{name}-recorded",
            "recorded",
            "a component without a dedicated check: its version is recorded, not verified",
            {"version": comp.get("version")},
            name,
            False,
            f"no static check for {name} yet (version {comp.get('version')} recorded in the lock)",
        )
    return out
