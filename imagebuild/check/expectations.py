"""What an image must show, derived from its variant lock alone: checks as data.

In the spirit of container-structure-test, every check is a plain record (name, probe, parameters) that the
testinfra module `imagebuild.check.test_image` evaluates inside a container of the image. The list is the
same for every lock: a check whose component is not in the variant is kept with a `skip` reason, so a report
always says what was *not* checked, and a skipped check is never counted as a pass.
"""

from __future__ import annotations

import shlex
from typing import List

from efa_validators.scan.redact import AWS_KEY_ID
from imagebuild import components
from imagebuild.check import custom
from imagebuild.components.expectation import Expectation

# Env vars whose whole namespace the policy owns: one set in the image but absent from the lock is a finding.
POLICY_PREFIXES = ("NCCL_", "FI_", "RDMAV_")

# Credentials must never be in env, labels or layer history. [AWS access key id formats; AWS CLI config keys]
CREDENTIAL_PATTERNS = (
    AWS_KEY_ID,  # the key id formats the redaction table masks (efa_validators/scan/redact.py)
    r"(?i)aws_secret_access_key",
    r"(?i)aws_session_token",
    r"(?i)-----BEGIN [A-Z ]*PRIVATE KEY-----",
)
CREDENTIAL_FILES = ("/root/.aws/credentials", "/root/.docker/config.json", "/root/.netrc")

# What a compiler leaves on disk, by real file (gcc and g++ on PATH are links to these; `cc1` is the C
# compiler proper that every gcc driver runs), and the CUDA headers every CUDA build includes.
COMPILERS = ("nvcc", "cc1", "cc1plus", "*-linux-gnu-gcc-[0-9]*", "*-linux-gnu-g++-[0-9]*", "clang-[0-9]*")
CUDA_HEADERS = ("cuda.h", "cuda_runtime.h", "cuda_runtime_api.h")

# exits 1 naming the validators modules without bytecode the image's interpreter would load
_EVERY_MODULE_COMPILED = (
    "import importlib.util as u, os, sys, efa_validators; d = os.path.dirname(efa_validators.__file__); "
    "missing = sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs "
    "if f.endswith('.py') and not os.path.exists(u.cache_from_source(os.path.join(r, f)))); "
    "print('not compiled: ' + ' '.join(missing) if missing else 'all compiled'); "
    "sys.exit(1 if missing else 0)"
)


def derive(lock: dict) -> List[Expectation]:
    """The checks for `lock`, in report order, the team's own (`checks:` in the lock) after the derived
    ones. Pure."""
    python = lock.get("python") or "python3"
    comps = lock.get("components") or {}
    training = lock.get("training") or {}
    env = {e["name"]: str(e["value"]) for e in lock.get("env") or []}
    out: List[Expectation] = []

    def add(name, probe, why, params=None, component=None, when=True, skip_reason=None):
        skip = None if when else (skip_reason or components.absent(component or name))
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
    base = lock.get("base") or {}
    add(
        "runtime-no-build-tools",
        "no_build_tools",
        "compilers, CUDA headers and static libraries stay in the builder: the image a job runs has none",
        {
            "compilers": list(COMPILERS),
            "headers": list(CUDA_HEADERS),
            "prefixes": sorted({c["prefix"] for c in comps.values() if (c or {}).get("prefix")}),
        },
        when=base.get("kind") != "dlc",
        skip_reason="a DLC base ships AWS's own toolchain (nvcc, headers); extending it keeps them",
    )
    add(
        "validators-compiled",
        "command",
        "every validators module has its bytecode: a read-only image would compile them at each start "
        "(before validators-import, whose run could write some)",
        {"command": f"{python} -c {shlex.quote(_EVERY_MODULE_COMPILED)}", "expect_rc": 0},
    )
    add(
        "validators-import",
        "command",
        "pre-flight runs `python -m efa_validators` inside the image",
        {"command": f"{python} -m efa_validators --help", "expect_rc": 0},
    )
    for block in components.REGISTRY:
        out += block.checks(lock)
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
    checked = {e.component for e in out}
    for name in sorted(set(comps) - checked):
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
    return out + custom.expectations(lock)  # the team's own, last: custom:<name>
