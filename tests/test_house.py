"""The house by pipeline stage, read from the source (AST, imports inside functions too).

Each package is a pipeline whose folders are its stages, in order: a module imports its own stage and the
stages before it, never one after it, and a stage never imports the package's top (the commands and the
entry points that drive the stages). No import cycle, at module level or inside a function. validators
never imports imagebuild: it is copied into images and onto nodes alone. A new top-level module or stage
folder fails here until it is given its place, so the top stays small.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path
from typing import Dict, List, Set

import tomllib
from paths import ROOT

# the stages of each package in pipeline order; a name is a top-level module or folder of the package
STAGES: Dict[str, List[Set[str]]] = {
    "imagebuild": [
        {"errors", "retry", "safefile", "jsonfile", "versions", "settings"},  # helpers every stage may use
        {"catalog", "variant", "components"},  # the model: what a variant is and what it holds
        {"adapters"},  # the docker engine, the OCI registry, AWS
        {"matrix"},
        {"render"},
        {"building"},
        {"check"},
        {"release"},
        {"preflight"},
        {"reports"},
        {"cli", "commands", "pipeline", "demo"},  # the top: flags, exit codes, the stages run in order
    ],
    "efa_validators": [
        {"scan"},
        {"parse"},
        {"judge"},
        {"report"},
        {"run", "node"},
        {"cli", "__main__", "cmd_parse", "cmd_preflight", "analyze", "replay", "probe_torch"},
    ],
}
TOP_MODULES = {"imagebuild": 9, "efa_validators": 6}  # .py files beside __init__ (and __main__), at most


FOLDERS = {
    "imagebuild": "imagebuild",
    "efa_validators": "validators/efa_validators",
}  # import name -> folder (pyproject package-dir; efa_validators in a src layout under validators/)
# data the wheel carries inside imagebuild (no __init__.py): import name -> the checkout's top-level folder
DATA_PACKAGES = {"imagebuild.templates": "Dockerfile.templates", "imagebuild.ci": "examples/ci"}


def modules(package: str) -> Dict[str, Path]:
    found = {}
    for path in (ROOT / FOLDERS[package]).rglob("*.py"):
        parts = (package,) + path.relative_to(ROOT / FOLDERS[package]).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: Dict[str, Path]) -> Set[str]:
    """The known modules `name` imports anywhere in its source, relative imports resolved."""
    targets = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def graph() -> Dict[str, Set[str]]:
    known = {**modules("imagebuild"), **modules("efa_validators")}
    return {name: imports(name, path, known) for name, path in known.items()}


def rank(name: str) -> int:
    """The stage index of a module of either package (-1 for the package itself)."""
    package, _, rest = name.partition(".")
    if not rest:
        return -1
    head = rest.split(".")[0]
    for index, stage in enumerate(STAGES[package]):
        if head in stage:
            return index
    raise AssertionError(f"{name}: {package}/{head} has no stage in tests/test_house.py STAGES")


def stage_violations(edges: Dict[str, Set[str]]) -> List[str]:
    found = []
    for src, targets in sorted(edges.items()):
        for dst in sorted(targets):
            same_package = src.split(".")[0] == dst.split(".")[0]
            if not same_package:
                if src.startswith("efa_validators"):
                    found.append(f"{src} imports {dst}: validators runs without imagebuild")
                continue
            if rank(dst) > rank(src):
                found.append(f"{src} imports {dst}, a later stage")
            top = len(STAGES[src.split(".")[0]]) - 1
            if rank(dst) == top and rank(src) != top:
                found.append(f"{src} imports {dst}, the top")
    return found


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_checks_catch_a_later_stage_the_top_a_cycle_and_validators_importing_imagebuild():
    edges = {
        "imagebuild.render.dockerfile": {"imagebuild.building.builder", "imagebuild.errors"},
        "imagebuild.building.builder": {"imagebuild.pipeline", "imagebuild.render.dockerfile"},
        "imagebuild.pipeline": {"imagebuild.building.builder"},
        "efa_validators.parse.nccllog": {"efa_validators.scan.prefix", "imagebuild.errors"},
        "efa_validators.judge.verdict": {"efa_validators.parse.facts"},
    }
    assert stage_violations(edges) == [
        "efa_validators.parse.nccllog imports imagebuild.errors: validators runs without imagebuild",
        "imagebuild.building.builder imports imagebuild.pipeline, a later stage",
        "imagebuild.building.builder imports imagebuild.pipeline, the top",
        "imagebuild.render.dockerfile imports imagebuild.building.builder, a later stage",
    ]
    assert cycles(edges) == [
        ["imagebuild.building.builder", "imagebuild.pipeline", "imagebuild.render.dockerfile"],
    ]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_stage_and_imports_only_its_own_and_earlier_stages():
    edges = graph()
    assert len(edges) > 100 and sum(map(len, edges.values())) > 200  # the walk saw the sources
    for name in edges:
        rank(name)  # a module without a stage fails with its name
    assert stage_violations(edges) == []


def test_there_is_no_import_cycle():
    assert cycles(graph()) == []


def test_the_top_of_each_package_stays_small():
    for package, most in TOP_MODULES.items():
        top = sorted(
            p.stem for p in (ROOT / FOLDERS[package]).glob("*.py") if p.stem not in ("__init__", "__main__")
        )
        assert len(top) <= most, (package, top)


def test_no_package_or_test_folder_takes_a_name_tools_treat_as_output():
    """pytest passes over folders matching norecursedirs, by default build/ and dist/ among them (pytest's
    reference, "norecursedirs"), and source-tree tools skip them too: no package and no tests folder may
    carry such a name, so the suite needs no pytest override and no stage vanishes from a tool's view."""
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "norecursedirs" not in ini  # pytest's default, which skips build/ and dist/
    default = ["*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}"]
    folders = [p for p in (ROOT / "tests").rglob("*") if p.is_dir() and any(p.glob("test_*.py"))]
    folders += [p.parent for f in FOLDERS.values() for p in (ROOT / f).rglob("__init__.py")]
    assert len(folders) > 20
    assert [str(p) for p in folders if any(fnmatch.fnmatch(p.name, pat) for pat in default)] == []


def test_the_lock_path_copies_agree():
    """nodecheck runs alone inside images under check (no package imports), so it keeps its own copy."""
    from efa_validators.node import nodecheck
    from efa_validators.run import imagebind

    assert (nodecheck.LOCK_PATH, nodecheck.LOCK_ENV) == (imagebind.LOCK_PATH, imagebind.LOCK_ENV)


def test_the_wheel_lists_every_package_under_its_import_name():
    """pyproject maps the import name efa_validators onto the folder validators/ (PyPI's `validators` would
    shadow that name): its explicit package list must hold every package folder, or the wheel drops one."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {**FOLDERS, **DATA_PACKAGES}
    found = [n for package in FOLDERS for n, path in modules(package).items() if path.name == "__init__.py"]
    for name, folder in DATA_PACKAGES.items():  # each folder of data is a package of its own in the wheel
        subs = [p for p in (ROOT / folder).rglob("*") if p.is_dir() and p.name != "__pycache__"]
        found += [name] + [".".join([name, *p.relative_to(ROOT / folder).parts]) for p in subs]
    found = sorted(found)
    assert sorted(tool["packages"]) == found and "efa_validators.run" in found


def test_the_checkout_imports_efa_validators_from_its_own_folder():
    """One name, one folder: efa_validators lives at validators/efa_validators/ (a src layout under the
    design's validators/), no link stands in for it, and the tests import the checkout's own copy (pytest's
    pythonpath names validators/), never an installed one from elsewhere."""
    import efa_validators

    assert not any(p.is_symlink() for p in ROOT.iterdir())
    assert Path(efa_validators.__file__).resolve() == ROOT / "validators" / "efa_validators" / "__init__.py"
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["pythonpath"] == [".", "validators"]
