"""nccl-tests' flags from the cluster file: iterations, warm-ups, buffer registration, JSON output.

Pure: (lock, cluster) -> the words after the binary. Each flag is gated on the nccl-tests the image holds (its
lock), by real version comparison, as NVIDIA/nccl-tests src/common.cu has it at these tags:
- `-n` iterations and `-w` warm-ups: every release (`int iters = 20; int warmup_iters = 1;`); AWS's nccl-tests
  scripts run `-n 100` (awslabs/awsome-distributed-ai micro-benchmarks/nccl-tests/slurm/
  nccl-tests-container.sbatch at commit a59b4db5d9a9921474ea1d7d7a4e3cb7ad780f0b), the default here;
- `-R` local buffer registration: from v2.13.10 (commit d2d40cc8249378efa4d7e2c949528c15eeb7d8e7), and only
  with NCCL >= 2.19 (older: "Option -R (register) is not supported before NCCL 2.19. Ignoring"); `-R 2`
  (symmetric) from v2.16.0 (commit 9b9de7da81c3fcbee62e5e3a5e621391673f3cd3) and NCCL >= 2.27 (older NCCL: it
  falls back to local registration);
- `-J FILE` JSON output: from v2.17.3 (commit 00f52811b818e751245303378a97db59fae083c1, `{"output_file",
  required_argument, 0, 'J'}`), written by rank 0 beside the report; efa_validators parse reads it.

Cluster file keys (all optional; `test_args` instead gives every flag verbatim, and then none of these):
    iters: 100                 # -n (default 100)
    warmup_iters: 5            # -w (default: nccl-tests' own, 1)
    register: 1                # -R: 0 off (default), 1 local, 2 symmetric
    json_output: nccl-tests.json   # -J FILE (default where nccl-tests has it; false: none)
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional

from imagebuild.components import nccl, nccl_tests
from imagebuild.errors import UserError
from imagebuild.versions import Version

KEYS = {"iters", "warmup_iters", "register", "json_output"}
BASE_ARGS = "-b 8 -e 16G -f 2 -g 1 -c 1"  # 8 B .. 16 GiB by doubling, one GPU per rank, values checked
ITERS = 100  # awsome-distributed-ai nccl-tests-container.sbatch (a59b4db5): `-n 100`
JSON_FILE = "nccl-tests.json"  # beside preflight-report.json (the run's directory)
REGISTER_FROM = {1: "2.13.10", 2: "2.16.0"}  # nccl-tests release with -R, -R 2 (src/common.cu)
REGISTER_NCCL = {1: "2.19.0", 2: "2.27.0"}  # the NCCL each needs (src/common.cu, the messages above)
JSON_FROM = "2.17.3"  # nccl-tests release with -J


def _where(cluster: Dict[str, Any], key: str) -> Dict[str, Any]:
    return {"file": cluster.get("_file"), "line": (cluster.get("_lines") or {}).get(key), "key": key}


def _version(lock: Dict[str, Any], name: str) -> Optional[Version]:
    ver = ((lock.get("components") or {}).get(name) or {}).get("version")
    try:
        return Version(str(ver)) if ver else None
    except ValueError:
        return None


def _count(cluster: Dict[str, Any], key: str, least: int) -> Optional[int]:
    val = cluster.get(key)
    if val is None:
        return None
    if not isinstance(val, int) or isinstance(val, bool) or not least <= val <= 1_000_000:
        raise UserError(
            f"must be a whole number from {least} to 1000000, got {val!r}", **_where(cluster, key)
        )
    return val


def _json_file(cluster: Dict[str, Any]) -> Optional[str]:
    val = cluster.get("json_output", JSON_FILE)
    if val is False:
        return None
    bad = not isinstance(val, str) or not val or val.startswith("-") or any(c in val for c in "\0\n\r")
    if bad or len(val) > 4096:
        raise UserError(
            f"must be a file name (not starting with '-') or false, got {val!r}",
            **_where(cluster, "json_output"),
        )
    return val


def args(lock: Dict[str, Any], cluster: Dict[str, Any]) -> List[str]:
    """The flags after the nccl-tests binary: `test_args` verbatim, else the base flags with the keys above.

    A flag the image's nccl-tests (or NCCL) lacks is exit 2 naming the key, where asked for; -J is left out
    where nccl-tests predates it and the file was not asked for by name."""
    asked = sorted(k for k in KEYS if k in cluster)
    if cluster.get("test_args"):
        if asked:
            raise UserError(
                f"test_args gives every nccl-tests flag verbatim; {', '.join(asked)} would be ignored",
                **_where(cluster, asked[0]),
                hint="drop test_args, or write those flags into it",
            )
        return shlex.split(cluster["test_args"])
    tests, nccl_v = _version(lock, nccl_tests.NAME), _version(lock, nccl.NAME)
    words = shlex.split(BASE_ARGS) + ["-n", str(_count(cluster, "iters", 1) or ITERS)]
    warmup = _count(cluster, "warmup_iters", 0)
    if warmup is not None:
        words += ["-w", str(warmup)]
    register = cluster.get("register", 0)
    if register not in (0, 1, 2) or isinstance(register, bool):
        raise UserError(f"must be 0, 1 or 2, got {register!r}", **_where(cluster, "register"))
    if register:
        for what, least, have in (
            ("nccl-tests", REGISTER_FROM[register], tests),
            ("NCCL", REGISTER_NCCL[register], nccl_v),
        ):
            if have is None or have < Version(least):
                raise UserError(
                    f"-R {register} needs {what} >= {least}; the image has {have or 'an unknown version'}",
                    **_where(cluster, "register"),
                    hint="leave register out (0), or use an image with a newer one",
                )
        words += ["-R", str(register)]
    out = _json_file(cluster)
    if out is not None:
        if tests is None or tests < Version(JSON_FROM):
            if "json_output" in cluster:
                raise UserError(
                    f"-J needs nccl-tests >= {JSON_FROM}; the image has {tests or 'an unknown version'}",
                    **_where(cluster, "json_output"),
                    hint="json_output: false",
                )
        else:
            where = cluster.get("_json_dir")  # a recipe's shared folder: rank 0's host writes the file
            if where and not out.startswith("/"):  # and its per-job prefix where jobs share the folder
                out = where.rstrip("/") + "/" + cluster.get("_json_prefix", "") + out
            words += ["-J", out]
    return words
