"""`build.py preflight --sagemaker`: run the validator as a SageMaker training job on the real instances.

Steps, each one a small function:
1. `build_request` (pure): the CreateTrainingJob request. The container's entry point is the validator
   (`python3 -m efa_validators run ... -- <probe command>`), so the code CI tested is what runs; `--dry-run`
   prints this request as JSON and touches nothing (no AWS client is even made).
2. `check_quotas`: the account's Service Quotas for the instance type and count (instances for training
   job usage, max instances per job, longest run time); when short, say exactly what to request.
3. create the job, `wait_for_job` with progress (bounded: `--max-run` plus `--wait-slack`), Ctrl-C stops it.
4. `read_job_logs`: the job's CloudWatch streams (/aws/sagemaker/TrainingJobs, `<job>/algo-N-...`), fed to
   the validator's parser (`efa_validators.analyze.analyze`), then the same JSON/JUnit/Markdown reports as a
   local run, plus `image` (ref and digest, which `build.py release --require-preflight` matches) and
   `sagemaker` (job facts).
Exit codes: 0 pass, 1 fail (checks failed, job failed or ran out of time), 2 bad input, quota short or
AWS unreachable, 3 unknown (no evidence: unknown never passes), 130 interrupted (job stopped).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from efa_validators.report.contract import EXIT_BY_VERDICT
from imagebuild.errors import UserError
from imagebuild.preflight import recipes
from imagebuild.preflight.metrics import metric_definitions

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
MAX_RUN_LIMIT = 28 * 24 * 3600  # SageMaker's ceiling for MaxRuntimeInSeconds (API reference)
REPORT_IN_JOB = "/opt/ml/output/data/preflight.json"  # uploaded with the job's output.tar.gz
# SageMaker starts the same command on every instance; {sm_...} are filled in on each one by
# `validators run` from its resourceconfig.json (efa_validators/run/sagemaker_env.py), so one torchrun
# spans all the instances and NCCL goes over EFA. Underscored flags: torchrun of every 1.x/2.x.
PROBES = {
    "torch": "torchrun --nnodes {sm_nodes} --node_rank {sm_node_rank} --nproc_per_node {gpus} "
    "--master_addr {sm_master} --master_port 29500 -m efa_validators.probe_torch --max-bytes 16G",
    # each instance alone (NVLink, not EFA): for --nodes 1
    "nccl-tests": "all_reduce_perf -b 8 -e 16G -f 2 -g {gpus}",
}
# nccl-tests ACROSS the instances, for an image without torch: one mpirun on the first host over ssh to the
# others, as SageMaker's own MPI distribution runs (aws/sagemaker-training-toolkit src/sagemaker_training/
# mpi.py, commit 018dbf74; efa_validators.run.sm_mpi plays both roles). The ssh key pair is made for this job
# only and reaches the instances as a training input channel (SageMaker mounts channel C at
# /opt/ml/input/data/C); no key is baked into an image. The MPI flags are the recipes' (recipes.MPI_MCA).
SSH_CHANNEL = "efa-preflight-ssh"
SSH_DIR = "/opt/ml/input/data/" + SSH_CHANNEL
SSH_KEY = "id_ed25519"
SM_MPI = "efa_validators.run.sm_mpi"
PROBES["nccl-tests-mpi"] = " ".join(
    [
        "python3",
        "-m",
        SM_MPI,
        "--ssh-dir",
        SSH_DIR,
        "--slots",
        "{gpus}",
        "--",
        "mpirun",
        "--allow-run-as-root",
    ]
    + ["--bind-to", "none", "--tag-output", *recipes.MPI_MCA]
    + ["-x", "NCCL_DEBUG=INFO", "-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "%s=%s" % recipes.PMIX_ENV]
    + ["all_reduce_perf", "-b", "8", "-e", "16G", "-f", "2", "-g", "1"]
)
DEFAULT_PROBE = PROBES["torch"]

# Service Quotas names for SageMaker training (ServiceCode "sagemaker"), as the console lists them.
# Matched case-insensitively; the quota code (L-...) is read from the API, never hard-coded.
QUOTA_INSTANCE_TYPE = "{instance_type} for training job usage"
QUOTA_PER_JOB = "Maximum number of instances per training job"
QUOTA_ALL_JOBS = "Number of instances across all training jobs"
QUOTA_RUNTIME = "Longest run time for a training job"
QUOTA_ALIASES = {QUOTA_PER_JOB: ("Maximum instances per training job",)}  # a shorter name seen in listings
_UNIT_SECONDS = {"seconds": 1, "second": 1, "minutes": 60, "hours": 3600, "days": 86400}

Log = Callable[[str], None]


def log(msg: str) -> None:
    from imagebuild.settings.logs import progress

    progress(msg)  # -q hides it


# -- options ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SageMakerOptions:
    """What `build.py preflight --sagemaker` was asked (imagebuild/commands/preflight.py fills it)."""

    image: Optional[str] = None  # best by digest (repo@sha256:...) so a release can match it
    instance_type: Optional[str] = None  # the ml. prefix is added
    nodes: Optional[int] = None  # default 2: EFA needs two nodes
    role_arn: Optional[str] = None
    max_run: int = 3600
    output_s3: Optional[str] = None
    checkpoint_s3: Optional[str] = None
    job_name: Optional[str] = None  # default efa-preflight-<time>
    probe: str = "torch"  # a key of PROBES
    probe_command: Optional[str] = None
    volume_size: int = 100
    region: Optional[str] = None
    endpoint_url: Optional[str] = None
    out: str = "build/preflight"
    poll: float = 30.0
    wait_slack: float = 3600.0
    skip_quota_check: bool = False
    dry_run: bool = False


# -- the request (pure) ----------------------------------------------------------------------------------
_ROLE_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_JOB_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_INSTANCE_RE = re.compile(r"^(ml\.)?[a-z][a-z0-9-]*\.[0-9]*[a-z]+$")


def _s3(uri: Optional[str], key: str, required: bool) -> Optional[str]:
    if not uri:
        if required:
            raise UserError("required (CreateTrainingJob needs OutputDataConfig.S3OutputPath)", key=key)
        return None
    if not uri.startswith("s3://") or len(uri) < 6:
        raise UserError(f"not an S3 URI: {uri!r}", key=key, hint="s3://bucket/prefix")
    return uri


def _digest_of(image: str) -> Optional[str]:
    return image.rsplit("@", 1)[1] if "@sha256:" in image else None


def _gpus(instance_type: str) -> Optional[int]:
    from efa_validators.judge.profiles import get_profile

    prof = get_profile(instance_type)
    return getattr(prof, "gpus", None) if prof is not None else None


def default_job_name(now: datetime) -> str:
    return "efa-preflight-" + now.strftime("%Y%m%d-%H%M%S")


def build_request(opts: SageMakerOptions, now: Optional[datetime] = None) -> Dict[str, Any]:
    """The CreateTrainingJob request from the options; every bad value is a UserError (exit 2)."""
    now = now or datetime.now(timezone.utc)
    if not opts.image:
        raise UserError("required", key="--image", hint="the pushed image URI, best repo@sha256:...")
    itype = (opts.instance_type or "").strip()
    if not itype or not _INSTANCE_RE.fullmatch(itype):
        raise UserError(f"not an instance type: {itype!r}", key="--instance-type", hint="e.g. p5.48xlarge")
    bare = itype[3:] if itype.startswith("ml.") else itype
    from efa_validators.judge.profiles import unknown_instance_type

    unknown = unknown_instance_type(bare)  # the job's validator would refuse it, after nodes were paid
    if unknown is not None:
        raise UserError(unknown.split(": ", 1)[1], key="--instance-type")
    nodes = opts.nodes if opts.nodes is not None else 2
    if not 1 <= nodes <= 1000:
        raise UserError(f"must be between 1 and 1000, got {nodes}", key="--nodes")
    max_run = int(opts.max_run)
    if not 1 <= max_run <= MAX_RUN_LIMIT:
        raise UserError(f"must be 1..{MAX_RUN_LIMIT} seconds (28 days), got {max_run}", key="--max-run")
    role = opts.role_arn or ""
    if not _ROLE_RE.fullmatch(role):
        raise UserError(
            f"not an IAM role ARN: {role!r}", key="--role-arn", hint="arn:aws:iam::<account>:role/<name>"
        )
    name = opts.job_name or default_job_name(now)
    if not _JOB_RE.fullmatch(name):
        raise UserError(
            f"bad training job name {name!r}", key="--job-name", hint="1-63 of letters, digits, -"
        )
    if not 1 <= int(opts.volume_size) <= 16384:
        raise UserError("must be 1..16384 GB", key="--volume-size")
    gpus = _gpus(bare)
    command = opts.probe_command or PROBES[opts.probe or "torch"]
    try:
        probe = shlex.split(command.replace("{gpus}", str(gpus or 1)).replace("{nodes}", str(nodes)))
    except ValueError as err:
        raise UserError(f"cannot split: {err}", key="--probe-command") from err
    if not probe:
        raise UserError("empty", key="--probe-command")
    validator_timeout = max(60, max_run - 120)  # leave SageMaker's SIGTERM window for the report upload
    # each node sees only its own ranks: its exit code is its command's; the verdict is taken here,
    # from every node's log (CloudWatch), and only a Completed job can pass
    arguments = ["--instance-type", bare, "--nodes", str(nodes), "--timeout", str(validator_timeout),
                 "--exit-by", "command", "--json", REPORT_IN_JOB, "--", *probe]  # fmt: skip
    request: Dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": opts.image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "-m", "efa_validators", "run"],
            "ContainerArguments": arguments,
            "MetricDefinitions": metric_definitions(),
        },
        "RoleArn": role,
        "OutputDataConfig": {"S3OutputPath": _s3(opts.output_s3, "--output-s3", True)},
        "ResourceConfig": {
            "InstanceType": "ml." + bare,
            "InstanceCount": nodes,
            "VolumeSizeInGB": int(opts.volume_size),
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": max_run},
        "EnableNetworkIsolation": False,  # nodes must reach each other (EFA, bootstrap over TCP)
        "Environment": {"NCCL_DEBUG": "INFO"},
        "Tags": [{"Key": "efa-image-build:purpose", "Value": "preflight"}],
    }
    ckpt = _s3(opts.checkpoint_s3, "--checkpoint-s3", False)
    if ckpt:
        request["CheckpointConfig"] = {"S3Uri": ckpt, "LocalPath": "/opt/ml/checkpoints"}
    if SM_MPI in probe:  # the job's own ssh key pair, as an input channel (put there by `ssh_key_upload`)
        uri = "%s/%s/%s/" % (request["OutputDataConfig"]["S3OutputPath"].rstrip("/"), name, SSH_CHANNEL)
        source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}
        request["InputDataConfig"] = [{"ChannelName": SSH_CHANNEL, "DataSource": {"S3DataSource": source}}]
    return request


def _ssh_objects(request: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(bucket, key) of the job's key pair objects, from its ssh input channel; none without one."""
    for channel in request.get("InputDataConfig") or []:
        if channel.get("ChannelName") == SSH_CHANNEL:
            uri = channel["DataSource"]["S3DataSource"]["S3Uri"][len("s3://") :]
            bucket, _, prefix = uri.partition("/")
            return [(bucket, prefix + SSH_KEY), (bucket, prefix + SSH_KEY + ".pub")]
    return []


def ssh_key_upload(s3: Any, request: Dict[str, Any]) -> List[Tuple[str, str]]:
    """Make a key pair for this job alone (ssh-keygen, in a private temporary folder) and put both halves
    where the job's ssh channel reads them; the objects written, for `ssh_key_delete` after the job."""
    import subprocess
    import tempfile

    from imagebuild.adapters.aws import aws_call

    objects = _ssh_objects(request)
    if not objects:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / SSH_KEY
        try:
            proc = subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "efa-preflight", "-f", str(key)],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise UserError(f"cannot make the job's ssh key: {err}", key="--probe") from None
        if proc.returncode != 0:
            raise UserError(f"ssh-keygen failed: {proc.stderr.strip()[:300]}", key="--probe")
        for (bucket, name), path in zip(objects, (key, key.with_name(SSH_KEY + ".pub"))):
            aws_call(s3.put_object, Bucket=bucket, Key=name, Body=path.read_bytes())
    return objects


def ssh_key_delete(s3: Any, objects: List[Tuple[str, str]]) -> None:
    """Remove the job's key pair once the job has ended; loud when it cannot."""
    for bucket, name in objects:
        try:
            s3.delete_object(Bucket=bucket, Key=name)
        except Exception as err:  # noqa: BLE001 - report, never mask how the job ended
            log(f"warning: could not delete s3://{bucket}/{name}: {err}; delete it by hand")


# -- quotas ------------------------------------------------------------------------------------------------
@dataclass
class QuotaRow:
    name: str
    code: Optional[str]
    value: Optional[float]  # None: not found (unknown)
    needed: float
    unit: str = "count"

    @property
    def ok(self) -> Optional[bool]:
        return None if self.value is None else self.value >= self.needed


def _seconds(value: float, unit: Optional[str]) -> float:
    return value * _UNIT_SECONDS.get((unit or "seconds").lower(), 1)


def quota_rows(quotas: List[Dict[str, Any]], instance_type: str, count: int, max_run: int) -> List[QuotaRow]:
    """Match the account's quotas to what this job needs (pure, over ListServiceQuotas' `Quotas`)."""
    by_name = {str(q.get("QuotaName", "")).strip().lower(): q for q in quotas}
    wanted = [
        (QUOTA_INSTANCE_TYPE.format(instance_type=instance_type), float(count), "count"),
        (QUOTA_PER_JOB, float(count), "count"),
        (QUOTA_ALL_JOBS, float(count), "count"),
        (QUOTA_RUNTIME, float(max_run), "seconds"),
    ]
    rows = []
    for name, needed, unit in wanted:
        q = next(
            (by_name[n.lower()] for n in [name, *QUOTA_ALIASES.get(name, ())] if n.lower() in by_name), None
        )
        if q is None:
            rows.append(QuotaRow(name, None, None, needed, unit))
            continue
        value = float(q.get("Value", 0))
        if unit == "seconds":
            value = _seconds(value, q.get("Unit"))
        rows.append(QuotaRow(name, q.get("QuotaCode"), value, needed, unit))
    return rows


def list_quotas(sq: Any) -> List[Dict[str, Any]]:
    """Every applied SageMaker quota (paged); AWS defaults fill in the ones never changed."""
    from imagebuild.adapters.aws import aws_call

    def pages(op: Any) -> List[Dict[str, Any]]:
        out, token = [], None
        for _ in range(100):  # bounded: SageMaker has a few hundred quotas, 100 per page
            kwargs = {"ServiceCode": "sagemaker"}
            if token:
                kwargs["NextToken"] = token
            page = aws_call(op, **kwargs)
            out += page.get("Quotas") or []
            token = page.get("NextToken")
            if not token:
                break
        return out

    applied = pages(sq.list_service_quotas)
    names = {q.get("QuotaName") for q in applied}
    defaults = pages(sq.list_aws_default_service_quotas)
    return applied + [q for q in defaults if q.get("QuotaName") not in names]


def quota_advice(rows: List[QuotaRow]) -> List[str]:
    """What to ask for, one line per short quota, with the CLI call that requests it."""
    out = []
    for r in rows:
        if r.ok is False:
            code = r.code or "<quota code>"
            out.append(
                f"quota short: {r.name!r} is {r.value:g} {r.unit}, this job needs {r.needed:g}: request it "
                "in "
                f"Service Quotas (aws service-quotas request-service-quota-increase --service-code sagemaker "
                f"--quota-code {code} --desired-value {r.needed:g})"
            )
    return out


# -- waiting, stopping, judging ----------------------------------------------------------------------------
TERMINAL = ("Completed", "Failed", "Stopped")


def job_outcome(desc: Dict[str, Any]) -> Tuple[str, str]:
    """(outcome, message) for a finished job: completed | failed | timeout | stopped (pure)."""
    status = desc.get("TrainingJobStatus")
    secondary = desc.get("SecondaryStatus") or ""
    reason = desc.get("FailureReason") or ""
    max_run = (desc.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds")
    if secondary == "MaxRuntimeExceeded" or "MaxRuntimeExceeded" in reason:
        return "timeout", f"the job ran past MaxRuntimeInSeconds={max_run} and was stopped (a hang?)"
    if status == "Completed":
        return "completed", "the job completed"
    if status == "Failed":
        return "failed", f"the job failed: {reason or 'no FailureReason given'}"
    if status == "Stopped":
        return "stopped", "the job was stopped before it finished"
    return "unknown", f"job status {status!r}"


def judge(report: Dict[str, Any], outcome: str, message: str) -> Dict[str, Any]:
    """Fold the job's fate into the verdict: only a completed job can pass; failed/timeout is fail."""
    status = "pass" if outcome == "completed" else "fail" if outcome in ("failed", "timeout") else "unknown"
    report.setdefault("checks", []).append(
        {"name": "sagemaker-job", "status": status, "detail": message, "evidence": []}
    )
    if status != "pass":
        report.setdefault("findings", []).insert(
            0,
            {
                "id": "sagemaker-job-" + outcome,
                "severity": "error",
                "message": message,
                "evidence": [],
                "remedy": "read the job's CloudWatch logs; raise --max-run if it was only slow",
            },
        )
    if status == "fail" or report.get("verdict") not in EXIT_BY_VERDICT:
        report["verdict"] = "fail" if status == "fail" else "unknown"
    elif status == "unknown" and report.get("verdict") == "pass":
        report["verdict"] = "unknown"
    return report


def wait_for_job(sm: Any, name: str, poll: float, deadline_s: float, say: Log = log) -> Dict[str, Any]:
    """Poll DescribeTrainingJob until the job ends or `deadline_s` passes (then TimeoutError)."""
    from imagebuild.adapters.aws import aws_call

    start = time.monotonic()
    seen = None
    while True:
        desc = aws_call(sm.describe_training_job, TrainingJobName=name)
        state = (desc.get("TrainingJobStatus"), desc.get("SecondaryStatus"))
        if state != seen:
            say(f"  [{time.monotonic() - start:7.0f}s] {name}: {state[0]} / {state[1]}")
            seen = state
        if desc.get("TrainingJobStatus") in TERMINAL:
            return desc
        if time.monotonic() - start > deadline_s:
            raise TimeoutError(f"{name} still {state[0]} after {deadline_s:.0f}s")
        time.sleep(poll)


def read_job_logs(logs: Any, name: str, max_events: int = 2_000_000) -> Iterator[str]:
    """Every message of the job's log streams (`<job>/algo-N-<epoch>`), stream by stream, oldest first."""
    from imagebuild.adapters.aws import aws_call

    streams, token = [], None
    for _ in range(1000):
        kwargs = {"logGroupName": LOG_GROUP, "logStreamNamePrefix": name + "/"}
        if token:
            kwargs["nextToken"] = token
        try:
            page = aws_call(logs.describe_log_streams, **kwargs)
        except Exception as err:  # noqa: BLE001 - botocore ClientError
            if getattr(err, "response", {}).get("Error", {}).get("Code") == "ResourceNotFoundException":
                return
            raise
        streams += [s["logStreamName"] for s in page.get("logStreams") or []]
        token = page.get("nextToken")
        if not token:
            break
    count = 0
    for stream in sorted(streams):
        token = None
        while True:
            kwargs = {"logGroupName": LOG_GROUP, "logStreamName": stream, "startFromHead": True}
            if token:
                kwargs["nextToken"] = token
            page = aws_call(logs.get_log_events, **kwargs)
            for event in page.get("events") or []:
                yield from str(event.get("message", "")).splitlines() or [""]
                count += 1
                if count >= max_events:
                    return
            nxt = page.get("nextForwardToken")
            if not page.get("events") or not nxt or nxt == token:
                break
            token = nxt


# -- reports -----------------------------------------------------------------------------------------------
def analyze_lines(lines: List[str], instance_type: str, nodes: int) -> Dict[str, Any]:
    """The validator's parser over the job's lines (the same parser as a local run)."""
    from efa_validators.analyze import analyze

    return analyze(lines, instance_type=instance_type, nodes=nodes, source=f"cloudwatch:{LOG_GROUP}")


def write_reports(report: Dict[str, Any], out: Path, name: str) -> List[Path]:
    """JSON, JUnit and Markdown with the validator's own writers (the same as a local run)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    texts = [(out / f"{name}.json", json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")]
    from efa_validators.report.formats import to_junit, to_markdown

    texts.append((out / f"{name}.junit.xml", to_junit(report)))
    texts.append((out / f"{name}.md", to_markdown(report)))
    for path, text in texts:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        paths.append(path)
    return paths


# -- the whole flow ----------------------------------------------------------------------------------------
@dataclass
class Clients:
    """The AWS clients the flow uses; `stopper` is the one StopTrainingJob goes through (tests stub it)."""

    sagemaker: Any
    logs: Any
    quotas: Any
    stopper: Any = None
    extra: Dict[str, Any] = field(default_factory=dict)
    s3: Any = None  # the job's ssh key pair (probe nccl-tests-mpi) goes through it

    @classmethod
    def for_options(cls, opts: SageMakerOptions) -> Clients:
        from imagebuild.adapters.aws import aws_client

        region, url = opts.region, opts.endpoint_url
        sm = aws_client("sagemaker", region, url)
        logs, quotas = aws_client("logs", region, url), aws_client("service-quotas", region, url)
        return cls(sm, logs, quotas, sm, s3=aws_client("s3", region, url))


def run_sagemaker_preflight(opts: SageMakerOptions, clients: Optional[Clients] = None) -> int:
    """Quota check, create the job, wait, read its logs, judge, write reports; returns the exit code."""
    from imagebuild.adapters.aws import aws_call

    request = build_request(opts)
    if opts.dry_run:
        print(json.dumps(request, indent=2, sort_keys=True))
        return 0
    name = request["TrainingJobName"]
    itype = request["ResourceConfig"]["InstanceType"]
    nodes = request["ResourceConfig"]["InstanceCount"]
    max_run = request["StoppingCondition"]["MaxRuntimeInSeconds"]
    clients = clients or Clients.for_options(opts)
    if not opts.skip_quota_check:
        rows = quota_rows(list_quotas(clients.quotas), itype, nodes, max_run)
        for r in rows:
            state = "unknown (not listed)" if r.ok is None else "ok" if r.ok else "SHORT"
            have = "?" if r.value is None else f"{r.value:g}"
            log(f"quota {r.name}: {have} (need {r.needed:g} {r.unit}) {state}")
        advice = quota_advice(rows)
        if advice:
            for line in advice:
                log(line)
            raise UserError(f"the account's SageMaker quotas cannot run {nodes} x {itype} for {max_run}s")
    created = False
    keys: List[Tuple[str, str]] = []
    try:
        keys = ssh_key_upload(clients.s3, request)
        try:
            aws_call(clients.sagemaker.create_training_job, **request)
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - ClientError: ValidationException, ResourceLimitExceeded
            code = getattr(err, "response", {}).get("Error", {}).get("Code", "")
            hint = "request more quota in Service Quotas" if code == "ResourceLimitExceeded" else None
            raise UserError(
                f"SageMaker refused the training job: {err}", key="CreateTrainingJob", hint=hint
            ) from err
        created = True
        log(f"created training job {name}: {nodes} x {itype}, max run {max_run}s")
        try:
            desc = wait_for_job(clients.sagemaker, name, float(opts.poll), max_run + float(opts.wait_slack))
        except TimeoutError as err:
            _stop(clients, name)
            desc = {
                "TrainingJobStatus": "Stopped",
                "SecondaryStatus": "MaxRuntimeExceeded",
                "FailureReason": f"MaxRuntimeExceeded: {err}",
                "StoppingCondition": request["StoppingCondition"],
            }
        outcome, message = job_outcome(desc)
        log(f"{name}: {message}")
        lines = list(read_job_logs(clients.logs, name))
        log(f"read {len(lines)} log lines from {LOG_GROUP}/{name}/*")
    except KeyboardInterrupt:
        if created:
            _stop(clients, name)
            log(f"interrupted: stopped training job {name}")
        else:
            log("interrupted before the job was created: nothing to stop")
        return 130
    finally:
        ssh_key_delete(clients.s3, keys)
    report = analyze_lines(lines, itype[3:], nodes)
    report = judge(report, outcome, message)
    report["image"] = {"ref": request["AlgorithmSpecification"]["TrainingImage"],
                       "digest": _digest_of(request["AlgorithmSpecification"]["TrainingImage"])}  # fmt: skip
    report["sagemaker"] = {
        "job_name": name,
        "job_arn": desc.get("TrainingJobArn"),
        "status": desc.get("TrainingJobStatus"),
        "secondary_status": desc.get("SecondaryStatus"),
        "failure_reason": desc.get("FailureReason"),
        "instance_type": itype,
        "instance_count": nodes,
        "max_run": max_run,
        "billable_seconds": desc.get("BillableTimeInSeconds"),
        "log_lines": len(lines),
        "final_metrics": desc.get("FinalMetricDataList"),
    }
    if report["image"]["digest"] is None:
        log(
            "warning: --image has no @sha256 digest; this report cannot clear "
            "`efa-image-build release --require-preflight`"
        )
    for path in write_reports(report, Path(opts.out), name):
        log(f"wrote {path}")
    print(f"verdict: {report['verdict']}")
    return EXIT_BY_VERDICT.get(report["verdict"], 3)


def _stop(clients: Clients, name: str) -> None:
    """StopTrainingJob, best effort but loud: a job left running burns a cluster's money."""
    try:
        (clients.stopper or clients.sagemaker).stop_training_job(TrainingJobName=name)
    except Exception as err:  # noqa: BLE001 - report, never mask the reason we are stopping
        log(
            f"warning: could not stop training job {name}: {err}; "
            "stop it by hand (aws sagemaker stop-training-job)"
        )
