"""The SageMaker metric regexes against what really gets printed: the validator's summary lines (from
`python -m efa_validators parse`, run for real on real logs) and nccl-tests' own footer lines in real logs."""

from __future__ import annotations

import re

import cli

from imagebuild.preflight import metrics

LOG_10 = "10-aws-batch-p5-allreduce-table-17GB.log"  # mpirun-prefixed table with the Avg bus bandwidth footer
LOG_01 = "01-eks-p4d-2node-efa-gdr-nccl2.9.9-allreduce.log"


def _parse_cli(path, instance_type, project_root):
    out = cli.validators_process("parse", str(path), "--instance-type", instance_type, cwd=project_root)
    assert out.returncode in (0, 1, 3), out.stderr
    return out.stdout.splitlines()


def test_regexes_capture_the_validators_printed_lines(nccl_logs_dir, project_root):
    from efa_validators.analyze import analyze

    for name, itype in ((LOG_10, "p5.48xlarge"), (LOG_01, "p4d.24xlarge")):
        printed = _parse_cli(nccl_logs_dir / name, itype, project_root)
        found = metrics.scrape(printed)
        lines = (nccl_logs_dir / name).read_text(errors="replace").splitlines()
        tests = analyze(lines, instance_type=itype)["nccl_tests"]
        assert metrics.last(found, "validator:busbw_plateau_GBps") == round(tests["plateau_busbw"], 2)
        assert metrics.last(found, "validator:busbw_avg_GBps") == round(tests["avg_busbw"], 2)
    assert metrics.last(metrics.scrape(_parse_cli(nccl_logs_dir / LOG_10, "p5.48xlarge", project_root)),
                        "validator:wrong") == 0.0  # fmt: skip


def test_regexes_capture_nccl_tests_footer_in_real_logs(nccl_logs_dir):
    lines = (nccl_logs_dir / LOG_10).read_text(errors="replace").splitlines()
    found = metrics.scrape(lines)
    # the footer, as printed there behind mpirun's [1,0]<stdout>: prefix
    footer = [x for x in lines if "Avg bus bandwidth" in x]
    assert footer and footer[-1].startswith("[1,0]<stdout>:")
    expected = float(re.search(r":\s*([0-9.]+)\s*$", footer[-1]).group(1))
    assert metrics.last(found, "nccl_tests:avg_busbw_GBps") == expected == 156.742
    assert metrics.last(found, "nccl_tests:out_of_bounds") == 0.0
    # table rows and headers are not mistaken for metrics
    assert found["validator:wrong"] == [] and found["validator:busbw_plateau_GBps"] == []


def test_definitions_fit_sagemaker_limits():
    defs = metrics.metric_definitions()
    assert len(defs) <= 40  # SageMaker allows at most 40 metric definitions per job
    for d in defs:
        assert 1 <= len(d["Name"]) <= 255 and 1 <= len(d["Regex"]) <= 500
        assert re.compile(d["Regex"]).groups == 1
