"""Host-side reports: `build.py report` makes a PNG and a Markdown summary from a validator report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cli
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import ROOT, TESTS

from efa_validators.judge.bandwidth import judge
from efa_validators.judge.profiles import get_profile
from efa_validators.parse.nccltests import NcclTestsParser
from efa_validators.report.formats import to_markdown
from imagebuild.reports.plot import human_size

FIXTURES = TESTS / "fixtures" / "nccltests"


def make_report(name: str, instance_type, nodes) -> dict:
    p = NcclTestsParser()
    for i, line in enumerate((FIXTURES / name).read_text(errors="replace").splitlines(), 1):
        p.feed(line, i, name)
    nt = p.result()
    checks, findings = judge(nt, get_profile(instance_type), nodes, None)
    verdict = "fail" if any(c["status"] == "fail" for c in checks) else "pass"
    return {
        "schema": "efa-image-build/report/v1",
        "verdict": verdict,
        "efa": True,
        "gdr": True,
        "network": "Libfabric",
        "nccl_version": "2.27.3",
        "plugin": {"name": "aws-ofi-nccl", "version": "1.16.2"},
        "instance_type": instance_type,
        "nodes": nodes,
        "nccl_tests": nt,
        "checks": checks,
        "findings": findings,
    }


def build_py(*args, cwd=ROOT):
    return cli.build_py_process("report", *args, cwd=str(cwd), timeout=120)


def colour_pixels(png: Path, rgb) -> int:
    from matplotlib import image

    img = image.imread(str(png))[:, :, :3]
    target = [c / 255.0 for c in rgb]
    dist = abs(img[:, :, 0] - target[0]) + abs(img[:, :, 1] - target[1]) + abs(img[:, :, 2] - target[2])
    return int((dist < 0.08).sum())


WIRE_RED = (0xD6, 0x27, 0x28)
FLOOR_GREEN = (0x2C, 0xA0, 0x2C)
PLATEAU_PURPLE = (0x94, 0x67, 0xBD)


def test_report_command_writes_plot_and_markdown(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(make_report("new-allreduce-2node.log", "p5.48xlarge", 2)))
    png, md = tmp_path / "busbw.png", tmp_path / "summary.md"
    res = build_py(str(rep), "--plot", str(png), "--markdown", str(md))
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the wire speed, the expected floor and the plateau marker are drawn
    assert colour_pixels(png, WIRE_RED) > 60
    assert colour_pixels(png, FLOOR_GREEN) > 500
    assert colour_pixels(png, PLATEAU_PURPLE) > 200
    text = md.read_text()
    assert "PASS" in text  # whichever writer made it (efa_validators.report or the compact one)
    assert "busbw" in text and "16 GiB" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busbw.png", "r.json", "summary.md"]
    # published with the mode a plain open() gives, not a temp file's private 0600
    mask = os.umask(0)
    os.umask(mask)
    assert png.stat().st_mode & 0o777 == 0o666 & ~mask == md.stat().st_mode & 0o777


def test_plot_without_profile_draws_no_expectation(tmp_path):
    report = make_report("new-allreduce-2node.log", None, None)
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(report))
    png = tmp_path / "p.png"
    assert build_py(str(rep), "--plot", str(png)).returncode == 0
    assert colour_pixels(png, WIRE_RED) < 10 and colour_pixels(png, FLOOR_GREEN) < 50


def test_markdown_to_stdout_by_default(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(make_report("new-allreduce-2node-slow.log", "p5.48xlarge", 2)))
    res = build_py(str(rep))
    assert res.returncode == 0, res.stderr
    assert "FAIL" in res.stdout and "busbw-below-expected" in res.stdout


@pytest.mark.parametrize(
    "content, where",
    [
        ('{"verdict": "pass",\n "nccl_tests": [1, }', "r.json:2"),
        ("[1, 2]", "r.json:1"),
        ('{"schema": "something/else", "verdict": "pass"}', "key 'schema'"),
        ('{"hello": 1}', "key 'verdict'"),
        ('{"verdict": "pass", "nccl_tests": 3}', "key 'nccl_tests'"),
        ('{"verdict": "pass", "nccl_tests": {"rows": 5}}', "key 'nccl_tests.rows'"),
        ('{"verdict": "pass", "findings": [1]}', "key 'findings'"),
    ],
)
def test_bad_report_is_exit_2_and_writes_nothing(tmp_path, content, where):
    rep = tmp_path / "r.json"
    rep.write_text(content)
    res = build_py(str(rep), "--plot", str(tmp_path / "p.png"), "--markdown", str(tmp_path / "m.md"))
    assert res.returncode == 2
    assert where in res.stderr and "Traceback" not in res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_plot_needs_a_table(tmp_path):
    report = make_report("new-allreduce-2node.log", "p5.48xlarge", 2)
    report["nccl_tests"] = None
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(report))
    res = build_py(str(rep), "--plot", str(tmp_path / "p.png"), "--markdown", str(tmp_path / "m.md"))
    assert res.returncode == 2 and "nccl_tests" in res.stderr and "Traceback" not in res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_missing_report_file_is_exit_2(tmp_path):
    res = build_py(str(tmp_path / "none.json"))
    assert res.returncode == 2 and "cannot read" in res.stderr


def test_markdown_of_an_all_unknown_report_says_unknown():
    text = to_markdown({"verdict": "unknown", "efa": None, "nccl_tests": {"rows": [], "collective": None}})
    assert (
        "**UNKNOWN**" in text
        and "| EFA | unknown |" in text
        and "| busbw plateau | unknown GB/s @ unknown B |" in text
        and "null" not in text
    )


@pytest.mark.parametrize(
    "size, label",
    [(8, "8 B"), (1024, "1 KiB"), (3 << 19, "1.5 MiB"), (1 << 30, "1 GiB"), (16 << 30, "16 GiB")],
)
def test_human_size(size, label):
    assert human_size(size) == label


def test_missing_output_directory_is_exit_2(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(make_report("new-allreduce-2node.log", "p5.48xlarge", 2)))
    res = build_py(str(rep), "--plot", str(tmp_path / "no" / "p.png"))
    assert res.returncode == 2 and "key '--plot'" in res.stderr and "does not exist" in res.stderr


_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 1 << 35), st.floats(allow_nan=True), st.text(max_size=8)
)
_cell = st.dictionaries(st.sampled_from(["time", "algbw", "busbw", "wrong"]), _scalar, max_size=4)
_row = st.fixed_dictionaries(
    {"size": st.one_of(st.integers(-1, 1 << 35), _scalar)},
    optional={"out_of_place": st.one_of(_cell, _scalar), "in_place": st.one_of(_cell, _scalar)},
)
_nt = st.fixed_dictionaries(
    {"rows": st.lists(_row, max_size=6)},
    optional={
        k: _scalar for k in ("collective", "plateau_busbw", "plateau_size", "avg_busbw", "wrong", "hosts")
    },
)
_report = st.fixed_dictionaries(
    {"verdict": _scalar},
    optional={"nccl_tests": st.one_of(st.none(), _nt), "instance_type": _scalar, "nodes": _scalar},
)


@settings(max_examples=25, deadline=None)
@given(_report)
def test_random_reports_give_a_plot_or_a_user_error_never_a_crash(tmp_path_factory, report):
    from imagebuild.errors import UserError
    from imagebuild.reports.plot import plot_busbw

    out = tmp_path_factory.mktemp("p") / "p.png"
    try:
        plot_busbw(report, str(out))
    except UserError:
        assert not out.exists()
        return
    assert out.read_bytes()[:4] == b"\x89PNG"
