"""The printed sbatch script run on the test Slurm inside this project's own image (issue 40 item 1, the
sbatch part): matrix.local.yaml's local-dlc-layout-extend (the image test_twohost_docker.py runs), not the
launcher fixture image.

The Slurm nodes are that image plus Debian's slurm-wlm, munge and libpmix (srun --mpi=pmix dlopens it) and
tests/fixtures/launchers/slurm-start.sh, nothing else: a test image named per run and removed after. Two
slurmd nodes run in one container (slurm-start.sh 2). The script is `build.py preflight --print sbatch` with
only these edits, each named where it is made:
- `CONTAINER=()` for the pyxis line (docs/preflight.md's form for nodes that already run inside the image:
  there is no pyxis in a container). With it go the pyxis mounts (/dev/infiniband: no EFA device here; the
  run folder: the nodes share it because they are one container, with a host folder mounted at output_dir);
- the replay stand-in mounted where the lock given to `--print` puts the GPU binary (the image has no
  nccl-tests; the lock's nccl_tests names the stand-in's prefix and a version with -J). On rank 0 it also
  puts a recorded nccl-tests JSON (tests/fixtures/nccltests/allreduce-v3.json) at the path -J names: what
  nccl-tests would do with the flag as the script passes it, nothing measured.
The test Slurm is Debian's 22.05; p5 asks no --segment, so no line of the script is taken out.
The report is read from where the script says ($PREFLIGHT_OUT/report.json) and says REPLAY. Scripts that lose
the -J folder or the run folder's mkdir fail: the JSON is not where the recipe says, or no report."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from paths import ROOT
from twohost import docker as _docker
from twohost import image_lock, print_recipe

pytestmark = [pytest.mark.docker, pytest.mark.slow]
pytest_plugins = ["twohost_fixtures"]  # fixture: dlc_extend_image

STAND_IN = "/opt/h-sbatch-replay"  # the prefix the lock names for nccl_tests: the stand-in goes there
IMAGE = "localhost:5000/h-sbatch/img@sha256:" + "e" * 64  # the digest the printed script binds its report to
OUT = "/shared/out"  # the cluster file's output_dir: a host folder mounted there
JOB = "/shared/job"  # sbatch --chdir: the submit folder
STAND_IN_SCRIPT = (
    "#!/bin/sh\n"
    "# stand-in for the GPU binary: replays a recorded nccl-tests log; rank 0 puts a recorded nccl-tests\n"
    "# JSON where -J says (nccl-tests' rank 0 writes it); nothing is measured\n"
    'if [ "${SLURM_PROCID:-}" = 0 ]; then\n'
    '  while [ $# -gt 1 ]; do [ "$1" = -J ] && cp /replay-json/allreduce-v3.json "$2"; shift; done\n'
    "fi\n"
    "exec python3 -m efa_validators.replay --rank-filter /replay/good-efa-p5-2node.log\n"
)
SLURM_DOCKERFILE = (
    "FROM {image}\n"
    "USER root\n"
    "RUN apt-get update \\\n"
    " && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\\n"
    "      slurm-wlm munge libpmix-dev \\\n"
    " && rm -rf /var/lib/apt/lists/*\n"
    "COPY slurm-start.sh /usr/local/bin/slurm-start.sh\n"
    "RUN chmod 755 /usr/local/bin/slurm-start.sh\n"
)


@pytest.fixture(scope="module")
def slurm_image(dlc_extend_image, tmp_path_factory):
    """The project's image with Slurm added (slurm-wlm, munge, libpmix): named per run, removed after."""
    ctx = tmp_path_factory.mktemp("slurm-image")
    (ctx / "Dockerfile").write_text(SLURM_DOCKERFILE.format(image=dlc_extend_image))
    (ctx / "slurm-start.sh").write_bytes((ROOT / "tests/fixtures/launchers/slurm-start.sh").read_bytes())
    tag = "h-sbatch-slurm:%s" % uuid.uuid4().hex[:8]
    _docker("build", "-q", "-t", tag, str(ctx), timeout=600)
    try:
        yield tag
    finally:
        _docker("rmi", "--force", tag, check=False)


@pytest.fixture
def slurm(slurm_image, tmp_path):
    """Two slurmd nodes in one container of the Slurm image; yields (its name, the host folder at /shared)."""
    shared = tmp_path / "shared"
    (shared / "job").mkdir(parents=True)
    stand_in = tmp_path / "all_reduce_perf"
    stand_in.write_text(STAND_IN_SCRIPT)
    stand_in.chmod(0o755)
    name = "h-sbatch-%s" % uuid.uuid4().hex[:8]
    mounts = [
        "type=bind,source=%s,target=/shared" % shared,
        "type=bind,source=%s,target=%s/bin/all_reduce_perf,readonly" % (stand_in, STAND_IN),
        "type=bind,source=%s,target=/replay,readonly" % (ROOT / "tests/fixtures/replay"),
        "type=bind,source=%s,target=/replay-json,readonly" % (ROOT / "tests/fixtures/nccltests"),
    ]
    argv = ["run", "-d", "--init", "--name", name, "--hostname", name]
    for m in mounts:
        argv += ["--mount", m]
    _docker(*argv, slurm_image, "sleep", "infinity")
    try:
        started = _docker("exec", name, "slurm-start.sh", "2", check=False, timeout=90)
        assert started.returncode == 0, started.stdout + started.stderr
        yield name, shared
    finally:
        # the job's files are root's: removed from inside, so the host's tmp folder can go
        _docker("exec", name, "rm", "-rf", "/shared/out", "/shared/job", check=False)
        _docker("rm", "--force", name, check=False)


def _script(tmp_path: Path, image: str) -> str:
    lock = image_lock(image)
    # the named edit of the lock: the GPU binary's place is the stand-in's, a nccl-tests with -J (2.17.3+)
    lock["components"]["nccl_tests"] = {"prefix": STAND_IN, "version": "2.17.6"}
    cluster = (
        "nodes: 2\ninstance_type: p5.48xlarge\ngpus_per_node: 2\n"
        "container_image: localhost:5000/h-sbatch/img:1\n"
        "timeout: 120\nidle_timeout: 60\noutput_dir: %s\nname: h-sbatch\n" % OUT
    )
    lines = print_recipe("sbatch", tmp_path, lock, cluster, IMAGE).splitlines()
    [at] = [i for i, line in enumerate(lines) if line.startswith("CONTAINER=(")]
    lines[at] = "CONTAINER=()"  # the named substitution: no pyxis, the nodes already run inside the image
    return "\n".join(lines) + "\n"


def _submit(slurm, text: str) -> tuple:
    """sbatch --wait (bounded) from the submit folder; returns (sbatch's process, job id, job output)."""
    name, shared = slurm
    (shared / "job" / "p.sbatch").write_text(text)
    submit = ["exec", name, "sbatch", "--wait", "--parsable", "--chdir", JOB, JOB + "/p.sbatch"]
    run = _docker(*submit, check=False, timeout=300)
    job_id = run.stdout.strip().split(";")[0]
    assert job_id.isdigit(), run.stdout + run.stderr[-2000:]  # sbatch refused the script
    log = shared / "job" / ("h-sbatch-%s.out" % job_id)
    return run, job_id, log.read_text() if log.exists() else ""


def test_the_printed_sbatch_script_runs_on_slurm_in_the_projects_image(dlc_extend_image, slurm, tmp_path):
    text = _script(tmp_path, dlc_extend_image)
    assert '-J "$PREFLIGHT_OUT"/nccl-tests.json' in text  # -J in the job's shared folder
    run, job_id, out = _submit(slurm, text)
    folder = slurm[1] / "out" / ("preflight-%s" % job_id)  # $PREFLIGHT_OUT: output_dir/preflight-<job>
    assert run.returncode == 0 and "ranks exit 0, verdict exit 0" in out, out[-3000:]
    report = json.loads((folder / "report.json").read_text())
    assert report["replay"] is True and "image" not in report  # a replay names no image, clears no gate
    assert report["verdict"] == "pass", [(f["id"], f["message"]) for f in report["findings"]]
    assert report["ranks_seen"] == 16 and report["nodes_seen"] == 2  # the recorded job, replayed by 4 ranks
    assert "REPLAY" in (folder / "report.md").read_text().splitlines()[0]  # the verdict says REPLAY
    assert sorted(p.name for p in folder.glob("rank-*.log")) == ["rank-%d.log" % r for r in range(4)]
    recorded = (ROOT / "tests/fixtures/nccltests/allreduce-v3.json").read_text()
    assert (folder / "nccl-tests.json").read_text() == recorded  # -J's file where the script says
    assert not (slurm[1] / "job" / "nccl-tests.json").exists()  # not in rank 0's working folder


@pytest.mark.parametrize("drop", ["json-folder", "mkdir"])
def test_a_printed_script_without_its_json_folder_or_run_folder_fails(
    dlc_extend_image, slurm, tmp_path, drop
):
    """Each piece is needed: without -J's folder the JSON lands in rank 0's working folder, not beside the
    report; without the mkdir of $PREFLIGHT_OUT no rank can keep its log and no report is made."""
    text = _script(tmp_path, dlc_extend_image)
    if drop == "json-folder":
        assert text.count('-J "$PREFLIGHT_OUT"/nccl-tests.json') == 1
        text = text.replace('-J "$PREFLIGHT_OUT"/nccl-tests.json', "-J nccl-tests.json")
    else:
        assert text.count('mkdir -p "$PREFLIGHT_OUT"\n') == 1
        text = text.replace('mkdir -p "$PREFLIGHT_OUT"\n', "")
    run, job_id, out = _submit(slurm, text)
    folder = slurm[1] / "out" / ("preflight-%s" % job_id)
    if drop == "json-folder":
        assert not (folder / "nccl-tests.json").exists(), out[-3000:]
        assert (slurm[1] / "job" / "nccl-tests.json").exists(), out[-3000:]  # rank 0's working folder
    else:
        assert run.returncode != 0 and not (folder / "report.json").exists(), out[-3000:]
        assert "rank-0.log: directory %s/%s does not exist" % (OUT, folder.name) in out, out[-3000:]
