"""The house rules between the layers, read from the source (AST), plus the pipeline's hand-over.

Commands parse flags and map results to exit codes: no module under imagebuild/commands/ imports docker,
boto3 or botocore, and none runs another command through argv (`cli.main([...])`). The three SDKs are
imported under imagebuild/adapters/ only. build/bake work on the folders render returned, not on what a
glob of the output folder finds.
"""

from __future__ import annotations

import ast
from typing import List

from paths import ROOT

from imagebuild import pipeline

COMMANDS = ROOT / "imagebuild" / "commands"
SDKS = {"docker", "boto3", "botocore"}


def _imported(tree: ast.AST) -> List[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def layer_violations(source: str) -> List[str]:
    """What a command module must not do: import an SDK, or call the CLI's main (argv to a command)."""
    tree = ast.parse(source)
    found = [f"imports {n}" for n in _imported(tree) if n.split(".")[0] in SDKS]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "imagebuild.cli":
            found += [f"imports cli.{a.name}" for a in node.names if a.name in ("main", "entry")]
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in ("main", "cli_main", "entry"):
                found.append(f"calls {name}() at line {node.lineno}")
    return found


def test_the_checker_catches_each_kind_of_violation():
    bad = (
        "import docker\nfrom botocore.config import Config\nimport boto3.session\n"
        "from imagebuild.cli import main as cli_main\n"
        "def run(args):\n    return cli_main(['render', '--out', args.out])\n"
    )
    found = layer_violations(bad)
    assert found == [
        "imports docker",
        "imports botocore.config",
        "imports boto3.session",
        "imports cli.main",
        "calls cli_main() at line 6",
    ]
    thin = "from imagebuild import pipeline\ndef run(a):\n    return pipeline.build(a)\n"
    assert layer_violations(thin) == []


def test_no_command_imports_an_sdk_or_calls_another_command_through_argv():
    modules = sorted(COMMANDS.glob("*.py"))
    assert len(modules) >= 12  # every verb's module is read (a moved folder must not pass by being empty)
    problems = {p.name: v for p in modules for v in [layer_violations(p.read_text())] if v}
    assert problems == {}


def test_the_sdks_are_imported_only_in_the_adapters():
    adapters = ROOT / "imagebuild" / "adapters"
    users = {
        sdk: {
            str(p.relative_to(ROOT))
            for p in (ROOT / "imagebuild").rglob("*.py")
            if any(n.split(".")[0] == sdk for n in _imported(ast.parse(p.read_text())))
        }
        for sdk in SDKS
    }
    assert all(users.values()), users  # each SDK is used somewhere: the walk saw the sources
    outside = {u for found in users.values() for u in found if (ROOT / u).parent != adapters}
    assert outside == set()


def test_build_works_on_the_folders_render_wrote_not_on_what_is_lying_in_out(tmp_path):
    stale = tmp_path / "an-old-variant"
    stale.mkdir()
    (stale / "variant.lock.json").write_text("{}")  # fresh mtime: the old mtime look-up would take it
    source = pipeline.RenderOptions(matrix=str(ROOT / "matrix.local.yaml"), out=tmp_path)
    dirs = pipeline.Selection(render=source, out=tmp_path).dirs()
    assert dirs and stale not in dirs
    assert all((d / "Dockerfile").is_file() for d in dirs)
    # without rendering: the last render's variants (its rendered.json), not what else lies in the folder
    assert pipeline.Selection(render=None, out=tmp_path).dirs() == dirs
    (tmp_path / "rendered.json").unlink()  # no render left its index: every rendered folder there is
    assert stale in pipeline.Selection(render=None, out=tmp_path).dirs()
