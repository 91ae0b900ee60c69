"""What a newcomer meets first: a description in every `--help`, an example cluster file that works, a
recipe refused for a variant without the binary it calls, a demo that installs no torch, a console script."""

from __future__ import annotations

import re
import subprocess
import sys

from cli import build_py

from imagebuild.cli import make_parser


def test_every_command_has_a_description():
    parser = make_parser()
    choices = parser._subparsers._group_actions[0].choices  # noqa: SLF001
    assert len(choices) >= 12
    for name, sub in choices.items():
        assert sub.description and len(sub.description) > 40, f"`build.py {name} --help` has no description"


def test_example_cluster_file_prints_a_recipe_and_a_variant_without_nccl_tests_is_refused(
    project_root, monkeypatch, tmp_path
):
    monkeypatch.chdir(project_root)
    # the example's p4d (sm_80) is refused for the local variant built for sm_90: the same file on p5
    example = (project_root / "examples" / "cluster" / "hosts-p4d.yaml").read_text()
    cluster = tmp_path / "hosts-p5.yaml"
    cluster.write_text(example.replace("p4d.24xlarge", "p5.48xlarge"))
    rc, _out, err = build_py(
        "preflight", "--print", "mpirun", "--cluster", "examples/cluster/hosts-p4d.yaml", "--matrix",
        "matrix.local.yaml", "--variant", "local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6",
    )  # fmt: skip
    assert rc == 2 and "sm_80" in err and "sm_90" in err
    base = [
        "preflight",
        "--print",
        "mpirun",
        "--cluster",
        str(cluster),
        "--matrix",
        "matrix.local.yaml",
        "--image",
        "r/i@sha256:" + "a" * 64,
    ]
    rc, out, _err = build_py(*base, "--variant", "local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6")
    assert rc == 0
    assert "mpirun --allow-run-as-root -np 16" in out and "/bin/all_reduce_perf" in out
    rc, _out, err = build_py(*base, "--variant", "local-debian-nccl2.27")
    assert rc == 2
    assert "has neither nccl_tests nor torch" in err and "components.nccl_tests" in err


def test_make_demo_installs_no_torch_and_make_test_does(project_root):
    def commands(target: str) -> str:
        proc = subprocess.run(
            ["make", "-n", "-B", target], cwd=project_root, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return "\n".join(line for line in proc.stdout.splitlines() if "pip install" in line)

    demo = commands("demo")
    assert "'.[plot]'" in demo and "torch" not in demo and "test" not in demo
    assert "torch" in commands("test")
    text = (project_root / "pyproject.toml").read_text()  # (tomllib is 3.11+; the project supports 3.10)
    core = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    plot = re.search(r"^plot = \[(.*?)\]", text, re.M).group(1)
    assert "torch" not in core and "torch" not in plot and "matplotlib" in plot


def test_console_script_runs_the_same_cli(project_root):
    text = (project_root / "pyproject.toml").read_text()
    assert re.search(r'^\[project\.scripts\]\nefa-image-build = "imagebuild\.cli:main"', text, re.M)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from imagebuild.cli import main; sys.exit(main())",
            "list",
            "--help",
        ],
        cwd=project_root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--shard" in proc.stdout


def test_help_lines_in_the_lazy_table_are_each_modules_own():
    """`build.py --help` lists cli.COMMANDS without importing them: it must say what each module says."""
    from imagebuild.cli import COMMANDS

    actions = make_parser()._subparsers._group_actions[0]._choices_actions  # noqa: SLF001
    assert [(a.dest, a.help) for a in actions] == [(name, help) for name, _module, help in COMMANDS]


def test_a_command_imports_only_its_own_module(project_root, tmp_path):
    """render needs pydantic, yaml and jinja2; never docker, boto3 or another command's module."""
    code = (
        "import sys; from imagebuild.cli import main; rc = main(sys.argv[1:]); "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('docker', 'boto3', 'botocore', 'imagebuild', 'jinja2', 'pydantic', 'yaml')))); sys.exit(rc)"
    )

    def modules(*argv: str) -> set:
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv], cwd=project_root, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return set(proc.stdout.splitlines()[-1].split())

    loaded = modules("render", "--matrix", "matrix.local.yaml", "--out", str(tmp_path / "build"))
    assert {"imagebuild.commands.render", "jinja2", "pydantic", "yaml"} <= loaded
    heavy = {"docker", "boto3", "botocore", "imagebuild.building.builder", "imagebuild.commands.build"}
    assert not loaded & heavy
    commands = {m for m in modules("schema") if m.startswith("imagebuild.commands.")}
    assert commands == {"imagebuild.commands.render"}


def test_top_level_help_describes_the_tool_in_whole_sentences():
    """Issue 42 item 4: the description was the module docstring's first line, cut mid-sentence ("one module
    per verb under")."""
    res = build_py("--help")
    assert res.rc == 0, res.err
    body = " ".join(res.out.split())
    description = " ".join(make_parser().description.split())
    assert description in body and description.endswith(".")
    assert "one module per verb" not in body and not description.rstrip(".").endswith("under")


def test_a_hint_names_the_command_the_user_has(tmp_path, monkeypatch):
    """Issue 42 item 4: a team has the `efa-image-build` console script, not this checkout's build.py; a
    hint that says what to run next names PROG (push with no build summary said `build.py build`)."""
    from imagebuild.cli import PROG

    monkeypatch.chdir(tmp_path)
    res = build_py("push", "--summary", tmp_path / "none.json", "--registry", "127.0.0.1:1")
    assert res.rc == 2 and f"`{PROG} build`" in res.err, res.err
    assert "build.py" not in res.err


def _hint_strings(path):
    """String constants of `path` that are not docstrings: what the tool prints."""
    import ast

    tree = ast.parse(path.read_text())
    exprs = [n.value for n in ast.walk(tree) if isinstance(n, ast.Expr)]
    docs = {id(v) for v in exprs if isinstance(v, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def test_no_printed_text_names_build_py_as_the_command(project_root):
    """Every message, hint and help line of the host side and the validators names the installed command."""
    found = [
        f"{p.relative_to(project_root)}:{line}"
        for folder in ("imagebuild", "validators")
        for p in sorted((project_root / folder).rglob("*.py"))
        for line, text in _hint_strings(p)
        if "build.py " in text
    ]
    assert found == []
