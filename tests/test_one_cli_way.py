"""Tests call the two command lines one way, through tests/cli.py (issue #11 item 7): so a change to how a
CLI is run (stdin, env, timeouts, the exit status of argparse) is made once, and the next test written
follows the rule because this one fails when it does not."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List

from paths import TESTS

ENTRY_MODULES = ("imagebuild.cli", "efa_validators.cli", "efa_validators.__main__")


def _is_host_python(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "executable" and ast.unparse(node.value) == "sys"


def _names_build_py(node: ast.expr) -> bool:
    """`"build.py"`, or a path ending in it (`ROOT / "build.py"`, `str(...)` of one)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.endswith("build.py") and " " not in node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _names_build_py(node.right)
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "str" and node.args:
        return _names_build_py(node.args[0])
    return False


def violations(source: str) -> List[str]:
    """Where a test module calls a CLI by itself: imports an entry point's main, or builds a `build.py` or
    a host `python -m efa_validators` argv (a list that names build.py, or sys.executable then
    -m efa_validators)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in ENTRY_MODULES:
            if any(alias.name == "main" for alias in node.names):
                found.append(f"line {node.lineno}: imports main from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ENTRY_MODULES:
                    found.append(f"line {node.lineno}: imports {alias.name}")
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = node.elts
            if any(_names_build_py(e) for e in items):
                found.append(f"line {node.lineno}: builds a build.py argv")
            words = [e.value if isinstance(e, ast.Constant) else None for e in items]
            for i in range(len(items) - 2):
                if _is_host_python(items[i]) and words[i + 1] == "-m" and words[i + 2] == "efa_validators":
                    found.append(f"line {node.lineno}: builds a python -m efa_validators argv")
    return found


def _test_modules() -> List[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p != TESTS / "cli.py" and "fixtures" not in p.parts)


def test_no_test_module_calls_a_cli_except_through_tests_cli():
    modules = _test_modules()
    assert len(modules) > 50, "the walk found too few test modules to mean anything"
    bad = {str(p.relative_to(TESTS)): v for p in modules if (v := violations(p.read_text(encoding="utf-8")))}
    assert bad == {}


def test_the_rule_catches_each_way_around_it():
    """Each form the rule forbids, as someone might write it: a rule that cannot fail is no rule."""
    cases = [
        "from imagebuild.cli import main\n",
        "from imagebuild.cli import main as cli_main\n",
        "from efa_validators.cli import main\n",
        "import imagebuild.cli\n",
        "import sys\nsubprocess.run([sys.executable, 'build.py', 'list'])\n",
        "subprocess.run([sys.executable, str(ROOT / 'build.py'), 'list'])\n",
        "argv = ('build.py', 'list')\n",
        "subprocess.run([sys.executable, '-m', 'efa_validators', 'parse', 'x.log'])\n",
    ]
    for source in cases:
        assert violations(source), source
    allowed = [
        "from cli import build_py, BUILD_PY\nbuild_py('list')\n",
        "from imagebuild.cli import make_parser, COMMANDS\n",
        '"""`build.py list` prints the matrix."""\n',
        "cmd = ['python3', '-m', 'efa_validators', 'run']  # inside a container: not this interpreter\n",
        "assert spec == ['python3', '-m', 'efa_validators', 'run']\n",
    ]
    for source in allowed:
        assert violations(source) == [], source
