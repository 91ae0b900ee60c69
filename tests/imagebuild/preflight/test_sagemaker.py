"""The SageMaker pre-flight against moto's server over real HTTP (started by the tests on 127.0.0.1).

Real: CreateTrainingJob/DescribeTrainingJob in moto, CloudWatch Logs read-back of events this test wrote
into the job's stream (lines of real NCCL logs read by path from shared/nccl-logs), the validator's parser
and report writers. moto implements neither Service Quotas for SageMaker nor StopTrainingJob, so those two
calls ALONE go through botocore's Stubber, on their own clients; and moto reports every training job as
Completed at once, so the Failed / MaxRuntimeExceeded outcomes are tested on `job_outcome`/`judge` with
DescribeTrainingJob documents shaped as the API reference gives them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from cli import build_py
from services import Fault, FaultProxy

from imagebuild.commands.preflight import add_sagemaker_args, sagemaker_options
from imagebuild.errors import UserError
from imagebuild.preflight import sagemaker as smk

pytest_plugins = ["services_fixtures"]  # fixtures: moto_server, aws

ROLE = "arn:aws:iam::123456789012:role/h6-preflight"
DIGEST = "sha256:" + "ab" * 32
IMAGE = f"h6-test/preflight@{DIGEST}"
LOG_01 = "01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log"
LOG_55 = "55-ec2-p4d-1node-ofi1.17.1-init-failed-sendrecv-socket-fallback-deepspeed.log"


def _args(*extra: str) -> smk.SageMakerOptions:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sagemaker", action="store_true")
    add_sagemaker_args(parser)
    base = ["--sagemaker", "--image", IMAGE, "--instance-type", "p4d.24xlarge", "--nodes", "2",
            "--role-arn", ROLE, "--output-s3", "s3://h6-out/preflight", "--max-run", "5400"]  # fmt: skip
    return sagemaker_options(parser.parse_args([*base, *extra]))


def _quota_client(aws, quotas):
    """Service Quotas for SageMaker: not in moto, so this client alone is stubbed (two list calls)."""
    client = boto3.client("service-quotas", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    stub = Stubber(client)
    stub.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "sagemaker"})
    stub.add_response("list_aws_default_service_quotas", {"Quotas": []}, {"ServiceCode": "sagemaker"})
    stub.activate()
    return client, stub


def _quotas(instances=4.0, per_job=20.0, runtime_s=432000.0):
    return [
        {"QuotaName": "ml.p4d.24xlarge for training job usage", "QuotaCode": "L-H6P4D", "Value": instances},
        {"QuotaName": "Maximum number of instances per training job", "QuotaCode": "L-H6MAX",
         "Value": per_job},
        {"QuotaName": "Number of instances across all training jobs", "QuotaCode": "L-H6ALL", "Value": 20.0},
        {"QuotaName": "Longest run time for a training job", "QuotaCode": "L-H6RUN", "Value": runtime_s,
         "Unit": "Seconds"},
    ]  # fmt: skip


def _clients(aws, quotas, stopper=None, sm_endpoint=None):
    sm = boto3.client("sagemaker", endpoint_url=sm_endpoint or aws.endpoint_url, region_name="us-east-1")
    logs = boto3.client("logs", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    sq, stub = _quota_client(aws, quotas)
    return smk.Clients(sm, logs, sq, stopper or sm), stub


def _write_job_logs(aws, job, streams):
    """Put lines into /aws/sagemaker/TrainingJobs/<job>/<stream> as SageMaker would."""
    logs = boto3.client("logs", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    try:
        logs.create_log_group(logGroupName=smk.LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    now = int(time.time() * 1000)
    for stream, lines in streams.items():
        logs.create_log_stream(logGroupName=smk.LOG_GROUP, logStreamName=f"{job}/{stream}")
        events = [{"timestamp": now + i, "message": line} for i, line in enumerate(lines) if line]
        for i in range(0, len(events), 5000):
            logs.put_log_events(
                logGroupName=smk.LOG_GROUP, logStreamName=f"{job}/{stream}", logEvents=events[i : i + 5000]
            )


def test_dry_run_prints_the_request_and_touches_nothing(monkeypatch, capsys):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    args = _args("--dry-run", "--checkpoint-s3", "s3://h6-out/ckpt", "--endpoint-url", "http://127.0.0.1:9")
    assert smk.run_sagemaker_preflight(args, clients=None) == 0
    req = json.loads(capsys.readouterr().out)
    spec = req["AlgorithmSpecification"]
    assert spec["TrainingImage"] == IMAGE
    assert spec["ContainerEntrypoint"] == ["python3", "-m", "efa_validators", "run"]
    argv = spec["ContainerArguments"]
    expected = [
        "--instance-type",
        "p4d.24xlarge",
        "--nodes",
        "2",
        "--timeout",
        "5280",
        "--exit-by",
        "command",  # a node sees its own ranks only: the verdict is taken host-side from every node's log
        "--json",
        smk.REPORT_IN_JOB,
    ]
    assert argv[: argv.index("--")] == expected
    # one torchrun over every instance; {sm_...} are filled in on each instance by `validators run`
    assert (
        argv[argv.index("--") + 1 :]
        == (
            "torchrun --nnodes {sm_nodes} --node_rank {sm_node_rank} --nproc_per_node 8 "
            "--master_addr {sm_master} --master_port 29500 -m efa_validators.probe_torch --max-bytes 16G"
        ).split()
    )
    assert {m["Name"] for m in spec["MetricDefinitions"]} >= {"validator:busbw_plateau_GBps"}
    assert req["ResourceConfig"] == {
        "InstanceType": "ml.p4d.24xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 100,
    }
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 5400}
    assert req["EnableNetworkIsolation"] is False
    assert req["CheckpointConfig"]["S3Uri"] == "s3://h6-out/ckpt"
    assert req["RoleArn"] == ROLE and req["Environment"]["NCCL_DEBUG"] == "INFO"


def test_probe_choice_and_override():
    def probe(*extra):
        argv = smk.build_request(_args(*extra))["AlgorithmSpecification"]["ContainerArguments"]
        return argv[argv.index("--") + 1 :]

    assert probe("--probe", "nccl-tests") == ["all_reduce_perf", "-b", "8", "-e", "16G", "-f", "2", "-g", "8"]
    assert probe("--probe-command", "mpirun -np {nodes} x --rank {sm_node_rank}") == [
        "mpirun", "-np", "2", "x", "--rank", "{sm_node_rank}"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "extra, key",
    [
        (["--role-arn", "admin"], "--role-arn"),
        (["--max-run", "0"], "--max-run"),
        (["--max-run", str(29 * 86400)], "--max-run"),
        (["--instance-type", "p5 big"], "--instance-type"),
        (["--output-s3", "/tmp/out"], "--output-s3"),
        (["--nodes", "0"], "--nodes"),
        (["--job-name", "bad_name!"], "--job-name"),
        (["--probe-command", "'unclosed"], "--probe-command"),
    ],
)
def test_bad_flags_are_user_errors(extra, key):
    with pytest.raises(UserError) as err:
        smk.build_request(_args("--dry-run", *extra))
    assert err.value.key == key


def test_quota_rows_and_what_to_request():
    rows = smk.quota_rows(_quotas(instances=1.0, runtime_s=3600.0), "ml.p4d.24xlarge", 2, 5400)
    by = {r.name: r for r in rows}
    assert by["ml.p4d.24xlarge for training job usage"].ok is False
    assert by["Maximum number of instances per training job"].ok is True
    assert by["Longest run time for a training job"].ok is False
    advice = smk.quota_advice(rows)
    assert len(advice) == 2
    assert "--quota-code L-H6P4D --desired-value 2" in advice[0]
    assert "--quota-code L-H6RUN --desired-value 5400" in advice[1]
    # hours are converted; a quota not listed is unknown (None), never ok
    hours = [dict(q, Value=2.0, Unit="Hours") if "Longest" in q["QuotaName"] else q for q in _quotas()]
    assert {r.name: r for r in smk.quota_rows(hours, "ml.p4d.24xlarge", 2, 5400)}[
        smk.QUOTA_RUNTIME
    ].ok is True
    assert smk.quota_rows([], "ml.p4d.24xlarge", 2, 5400)[0].ok is None


def test_job_outcomes_from_describe_documents():
    failed = {"TrainingJobStatus": "Failed", "SecondaryStatus": "Failed",
              "FailureReason": "AlgorithmError: ExecuteUserScriptError exit code 1"}  # fmt: skip
    assert smk.job_outcome(failed) == (
        "failed",
        "the job failed: AlgorithmError: ExecuteUserScriptError exit code 1",
    )
    timeout = {"TrainingJobStatus": "Stopped", "SecondaryStatus": "MaxRuntimeExceeded",
               "StoppingCondition": {"MaxRuntimeInSeconds": 600}}  # fmt: skip
    outcome, message = smk.job_outcome(timeout)
    assert outcome == "timeout" and "600" in message
    assert smk.job_outcome({"TrainingJobStatus": "Completed"})[0] == "completed"
    # a failed job never passes, even if its logs looked fine; a timeout is a fail
    passing = {"verdict": "pass", "checks": [], "findings": []}
    assert smk.judge(dict(passing), "failed", "x")["verdict"] == "fail"
    assert smk.judge(dict(passing), "timeout", "x")["verdict"] == "fail"
    assert smk.judge(dict(passing, checks=[]), "completed", "ok")["verdict"] == "pass"
    assert smk.judge({"verdict": "unknown", "checks": []}, "completed", "ok")["verdict"] == "unknown"
    assert smk.judge(dict(passing, checks=[]), "stopped", "x")["verdict"] == "unknown"


def test_job_on_moto_logs_read_back_and_judged(aws, nccl_logs_dir, tmp_path, capsys):
    from efa_validators.analyze import analyze

    job = "h6-preflight-e2e"
    lines = (nccl_logs_dir / LOG_01).read_text(errors="replace").splitlines()
    half = len(lines) // 2
    _write_job_logs(aws, job, {"algo-1-1700000000": lines[:half], "algo-2-1700000000": lines[half:]})
    clients, stub = _clients(aws, _quotas())
    args = _args("--job-name", job, "--out", str(tmp_path / "out"), "--poll", "0.1")
    rc = smk.run_sagemaker_preflight(args, clients)
    stub.assert_no_pending_responses()
    report = json.loads((tmp_path / "out" / f"{job}.json").read_text())
    expected = analyze([x for x in lines if x], instance_type="p4d.24xlarge", nodes=2)
    assert report["verdict"] == expected["verdict"] and rc == smk.EXIT_BY_VERDICT[expected["verdict"]]
    assert (report["efa"], report["gdr"]) == (expected["efa"], expected["gdr"]) == (True, True)
    assert report["nccl_tests"]["plateau_busbw"] == expected["nccl_tests"]["plateau_busbw"]
    assert report["image"] == {"ref": IMAGE, "digest": DIGEST}
    assert report["sagemaker"]["job_name"] == job and report["sagemaker"]["log_lines"] == len(lines)
    assert any(c["name"] == "sagemaker-job" and c["status"] == "pass" for c in report["checks"])
    assert (tmp_path / "out" / f"{job}.junit.xml").read_text().startswith("<?xml")
    assert "NCCL/EFA validation" in (tmp_path / "out" / f"{job}.md").read_text()
    # what moto stored is what we asked for
    desc = clients.sagemaker.describe_training_job(TrainingJobName=job)
    assert desc["AlgorithmSpecification"]["ContainerEntrypoint"] == ["python3", "-m", "efa_validators", "run"]
    assert desc["StoppingCondition"]["MaxRuntimeInSeconds"] == 5400
    assert desc["ResourceConfig"]["InstanceCount"] == 2 and desc["EnableNetworkIsolation"] is False
    assert "Completed" in capsys.readouterr().err


def test_failing_log_gives_exit_1_and_no_logs_gives_unknown(aws, nccl_logs_dir, tmp_path):
    job = "h6-preflight-socket"
    lines = (nccl_logs_dir / LOG_55).read_text(errors="replace").splitlines()
    _write_job_logs(aws, job, {"algo-1-1700000000": lines})
    clients, _ = _clients(aws, _quotas())
    args = _args("--job-name", job, "--out", str(tmp_path), "--poll", "0.1", "--nodes", "1")
    assert smk.run_sagemaker_preflight(args, clients) == 1
    report = json.loads((tmp_path / f"{job}.json").read_text())
    assert report["verdict"] == "fail" and report["efa"] is False
    # a job whose logs never reached CloudWatch: no evidence, unknown (exit 3), never a pass
    clients, _ = _clients(aws, _quotas())
    args = _args("--job-name", "h6-preflight-silent", "--out", str(tmp_path), "--poll", "0.1")
    assert smk.run_sagemaker_preflight(args, clients) == 3
    assert json.loads((tmp_path / "h6-preflight-silent.json").read_text())["verdict"] == "unknown"


def test_quota_short_says_what_to_request_and_creates_nothing(aws, tmp_path, capsys):
    clients, stub = _clients(aws, _quotas(instances=0.0))
    args = _args("--job-name", "h6-preflight-noquota", "--out", str(tmp_path))
    with pytest.raises(UserError, match="quotas cannot run 2 x ml.p4d.24xlarge"):
        smk.run_sagemaker_preflight(args, clients)
    err = capsys.readouterr().err
    assert (
        "request-service-quota-increase --service-code sagemaker --quota-code L-H6P4D --desired-value 2"
        in err
    )
    assert clients.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []


def test_ctrl_c_while_waiting_stops_the_job(aws, tmp_path, capsys):
    """A real SIGINT arrives while DescribeTrainingJob is slow (FaultProxy delays it in front of moto)."""
    job = "h6-preflight-interrupted"
    slow = Fault(
        lambda m, p, h: h.get("X-Amz-Target", "").endswith("DescribeTrainingJob"), times=0, delay=4.0
    )
    proxy = FaultProxy(upstream=aws.endpoint_url.split("://")[1], faults=[slow]).start()
    stopper = boto3.client("sagemaker", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    stop_stub = Stubber(stopper)  # StopTrainingJob is not in moto: this client alone is stubbed
    stop_stub.add_response("stop_training_job", {}, {"TrainingJobName": job})
    stop_stub.activate()
    clients, _ = _clients(aws, _quotas(), stopper=stopper, sm_endpoint=f"http://{proxy.host}")
    args = _args("--job-name", job, "--out", str(tmp_path), "--poll", "0.1")
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        assert smk.run_sagemaker_preflight(args, clients) == 130
    finally:
        timer.cancel()
        proxy.stop()
    stop_stub.assert_no_pending_responses()
    assert f"stopped training job {job}" in capsys.readouterr().err
    assert not Path(tmp_path / f"{job}.json").exists()


def test_build_py_preflight_sagemaker_dry_run(monkeypatch):
    """Through the real CLI: `build.py preflight --sagemaker --dry-run` prints the request, exit 0;
    a bad flag is exit 2."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    argv = ["preflight", "--sagemaker", "--dry-run", "--image", IMAGE, "--instance-type", "p5.48xlarge",
            "--nodes", "2", "--role-arn", ROLE, "--output-s3", "s3://h6-out/x",
            "--max-run", "1800"]  # fmt: skip
    res = build_py(*argv)
    assert res.rc == 0
    req = json.loads(res.out)
    assert req["StoppingCondition"]["MaxRuntimeInSeconds"] == 1800
    assert req["ResourceConfig"]["InstanceType"] == "ml.p5.48xlarge"
    res = build_py(*argv[:-2], "--max-run", "0")
    assert res.rc == 2
    assert "--max-run" in res.err


def test_nccl_tests_mpi_probe_spans_the_instances_with_a_key_channel_and_no_key_in_the_request():
    req = smk.build_request(_args("--probe", "nccl-tests-mpi", "--job-name", "h6-mpi"))
    args = req["AlgorithmSpecification"]["ContainerArguments"]
    probe = args[args.index("--") + 1 :]
    assert probe[:3] == ["python3", "-m", "efa_validators.run.sm_mpi"]
    assert probe[probe.index("--slots") + 1] == "8"  # p4d: one rank per GPU on each instance
    mpirun = probe[probe.index("--", 3) + 1 :]
    assert mpirun[0] == "mpirun" and mpirun[-9] == "all_reduce_perf" and "^cm,ucx" in mpirun
    (channel,) = req["InputDataConfig"]
    assert channel["ChannelName"] == smk.SSH_CHANNEL and probe[probe.index("--ssh-dir") + 1] == smk.SSH_DIR
    uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    assert uri == "s3://h6-out/preflight/h6-mpi/%s/" % smk.SSH_CHANNEL
    assert "PRIVATE KEY" not in json.dumps(req)  # the key travels in S3, never in the request
    assert "InputDataConfig" not in smk.build_request(_args("--probe", "nccl-tests"))


def test_nccl_tests_mpi_puts_a_fresh_key_pair_for_the_job_and_deletes_it_after(aws, tmp_path):
    s3 = boto3.client("s3", endpoint_url=aws.endpoint_url, region_name="us-east-1")
    s3.create_bucket(Bucket="h6-out")
    clients, stub = _clients(aws, _quotas())
    clients.s3 = s3
    seen = {}
    create = clients.sagemaker.create_training_job

    def create_and_look(**request):  # what the job would read from its channel while it runs
        listing = s3.list_objects_v2(Bucket="h6-out", Prefix="preflight/h6-mpi-keys/")
        for obj in listing.get("Contents", []):
            seen[obj["Key"]] = s3.get_object(Bucket="h6-out", Key=obj["Key"])["Body"].read().decode()
        return create(**request)

    clients.sagemaker.create_training_job = create_and_look
    args = _args(
        "--probe", "nccl-tests-mpi", "--job-name", "h6-mpi-keys", "--out", str(tmp_path), "--poll", "0.1"
    )
    smk.run_sagemaker_preflight(args, clients)
    stub.assert_no_pending_responses()
    prefix = "preflight/h6-mpi-keys/%s/" % smk.SSH_CHANNEL
    assert set(seen) == {prefix + "id_ed25519", prefix + "id_ed25519.pub"}
    assert "PRIVATE KEY" in seen[prefix + "id_ed25519"] and seen[prefix + "id_ed25519.pub"].startswith(
        "ssh-ed25519 "
    )
    assert s3.list_objects_v2(Bucket="h6-out", Prefix="preflight/").get("KeyCount", 0) == 0  # deleted after
    desc = clients.sagemaker.describe_training_job(TrainingJobName="h6-mpi-keys")
    assert desc["InputDataConfig"][0]["ChannelName"] == smk.SSH_CHANNEL
