"""The building blocks: the registry is the only component list; every block renders alone to a golden text;
its partial, catalog entry and static checks exist; values are shell-quoted by the block's partial."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from pathlib import Path

import pytest
import yaml
from paths import ROOT, TESTS, assert_golden

from imagebuild import catalog, components
from imagebuild.check.expectations import derive
from imagebuild.matrix import resolve, schema
from imagebuild.matrix.expand import Expanded
from imagebuild.matrix.load import load
from imagebuild.render import dockerfile as render
from imagebuild.variant import Artifact, BaseImage, Component, Variant
from imagebuild.versions import Version

GOLDEN = TESTS / "golden" / "blocks"
MATRICES = ("matrix.yaml", "matrix.local.yaml")
VARIANTS = [v for m in MATRICES for v in load(str(ROOT / m))]

# Literals equal to a component name that are not a component list: another format's keys and names that
# happen to match. Anything else outside the blocks, the catalog and tests is a second list and fails.
NOT_A_COMPONENT = {
    ("imagebuild/reports/summarize.py", "nccl_tests"): "the validator report's `nccl_tests` key",
    ("imagebuild/release/record.py", "nccl_tests"): "the validator report's `nccl_tests` key",
    ("imagebuild/reports/plot.py", "nccl_tests"): "the validator report's `nccl_tests` key",
    ("imagebuild/preflight/sagemaker.py", "torch"): "the name of the torchrun pre-flight probe",
    ("imagebuild/building/inspect_probe.py", "torch"): "the Python module it imports in the probed image",
    ("imagebuild/check/inventory.py", "torch"): "the Python module it imports in the checked image",
    (
        "imagebuild/building/inspect_probe.py",
        "nccl",
    ): "a key of the probe's output (runs in the image)",
}
# Component lists still written out in modules other engineers own this round (the lead migrates them to
# imagebuild.components); pinned so that none grows and a fixed one must leave this list.
NOT_YET_MIGRATED: dict = {}


def _name_literals(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in components.NAMES:
            yield node.lineno, node.value


def test_the_registry_is_the_only_component_list():
    """No component name as a string literal outside its own block, the catalog and tests."""
    stray = []
    counts: dict = {}
    for path in sorted((ROOT / "imagebuild").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        own = path.stem if path.parent.name == "components" else None
        for line, name in _name_literals(path):
            if name == own or (rel, name) in NOT_A_COMPONENT:
                continue
            if rel in NOT_YET_MIGRATED:
                counts[rel] = counts.get(rel, 0) + 1
                continue
            stray.append(f"{rel}:{line}: {name!r}")
    for path in sorted((ROOT / "Dockerfile.templates").rglob("*.j2")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for name in components.NAMES:
                if re.search(rf"[\"']{name}[\"']", line):
                    stray.append(f"{path.relative_to(ROOT)}:{i}: {name!r}")
    assert stray == [], "component names written outside their block:\n" + "\n".join(stray)
    assert counts == NOT_YET_MIGRATED, "update NOT_YET_MIGRATED (it may only shrink)"


def test_registry_order_is_the_layer_order_and_each_block_is_complete():
    layers = [b.layer for b in components.REGISTRY]
    assert layers == sorted(layers) and len(set(layers)) == len(layers)
    assert components.NAMES[0] == "libfabric" and components.NAMES[-1] == "torch"
    for block in components.REGISTRY:
        assert (ROOT / "imagebuild" / "components" / f"{block.name}.py").is_file()
        assert "prefix" in catalog.component(block.name), block.name
        assert block.methods, block.name
        doc = _module_doc(block)
        assert "Parameters:" in doc and "Examples" in doc, block.name
        for pname, values in block.params.items():
            assert values and all(isinstance(v, str) for v in values), (block.name, pname)
        for method in set(block.methods) & {"source", "wheel"}:
            comp = Component(block.name, "1.0", method, "git", prefix="/opt/x")
            template, _ = block.partial(comp)
            assert (ROOT / "Dockerfile.templates" / template).is_file(), (block.name, method)


def _module_doc(block) -> str:
    return sys.modules[type(block).__module__].__doc__ or ""


def _doc_lines(block) -> list:
    text = _module_doc(block).split("Examples (matrix):", 1)[1]
    return [line.strip() for line in text.strip().splitlines() if line.strip()]


def _doc_examples(block) -> list:
    """The matrix snippets under `Examples (matrix):` in the block's docstring, one per line."""
    return [yaml.safe_load(line)[block.name] for line in _doc_lines(block)]


def _base_kinds(block) -> list:
    """The base kind each example is on: `local`, or the one its comment names (`# on a cuda base`)."""
    return [(re.search(r"# on a (\w+) base", line) or [None, "local"])[1] for line in _doc_lines(block)]


def _resolve_example(block, spec: dict, base_kind: str = "local") -> Variant:
    """One docstring example resolved alone (no compat rules: its neighbours are not there) into a Variant."""
    present = {block.name: schema.ComponentSpec.model_validate(spec)}
    if (spec.get("source") or {}).get("installer"):
        efa = components.block("efa_installer")
        present[efa.name] = schema.ComponentSpec.model_validate(_doc_examples(efa)[0])
    where = Expanded(
        f"{block.name}-example",
        {},
        schema.VariantBody(),
        (),
        sys.modules[type(block).__module__].__file__,
        None,
        ".",
    )
    comp = resolve._component(resolve._Ctx(where), block.name, present[block.name], present)
    return Variant(
        name=where.name,
        base=BaseImage("localbase/debian:bookworm-minbase", base_kind, "debian12"),
        python="/usr/bin/python3",
        components=(comp,),
        options=(("build_ca", False), ("cuda_arch", "90"), ("jobs", 0)),
    )


EXAMPLES = {
    f"{block.name}.example{i}": _resolve_example(block, spec, kind)
    for block in components.REGISTRY
    for i, (spec, kind) in enumerate(zip(_doc_examples(block), _base_kinds(block)), 1)
}
RENDERED = sorted(k for k, v in EXAMPLES.items() if render.render_block(v.components[0], v, render.plan(v)))


def test_every_block_documents_examples_that_resolve():
    """The docstring's Examples are executable: each resolves (EXAMPLES is built from them at import)."""
    for block in components.REGISTRY:
        mine = [v.components[0] for k, v in EXAMPLES.items() if k.startswith(f"{block.name}.example")]
        assert mine and all(c.name == block.name and c.method in block.methods for c in mine), block.name


@pytest.mark.parametrize("key", RENDERED)
def test_each_block_rendered_alone_matches_its_golden(key):
    """UPDATE_GOLDEN=1 rewrites tests/golden/blocks/ after a deliberate change."""
    v = EXAMPLES[key]
    parts = render.render_block(v.components[0], v, render.plan(v))
    text = "".join(f"# ---- {part}\n{parts[part]}\n" for part in sorted(parts))
    assert_golden(text, GOLDEN / f"{key}.Dockerfile")


def test_every_method_a_block_renders_has_a_golden():
    covered = {(EXAMPLES[k].components[0].name, EXAMPLES[k].components[0].method) for k in RENDERED}
    wanted = set()
    for block in components.REGISTRY:
        for method in block.methods:
            comp = Component(block.name, "1.0", method, "git", prefix="/opt/x")
            if block.stage(comp) or (block.built(comp) and block.partial(comp)):
                wanted.add((block.name, method))
    assert wanted - covered == set()
    assert sorted(p.name for p in GOLDEN.glob("*.Dockerfile")) == sorted(f"{k}.Dockerfile" for k in RENDERED)


def test_apt_and_base_methods_render_nothing_of_their_own():
    """apt pins join the system stage and base is already there: no stage or build step of their own. A block
    may configure its packages in the system stage (openssh's sshd), never a base's (configured there), but
    for a base's sshd's StrictModes (mpi-operator's key Secret on .ssh fails it: issue 34)."""
    v = VARIANTS[0]
    for block in components.REGISTRY:
        for method in set(block.methods) & {"apt", "packages", "base"}:
            comp = Component(block.name, "1.0", method, method, prefix="/usr")
            parts = render.render_block(comp, dataclasses.replace(v, components=(comp,)), render.plan(v))
            allowed = {"system"} if method != "base" or block.name == "openssh" else set()
            assert set(parts) <= allowed, (block.name, method)
    base_sshd = Component("openssh", "8.9p1", "base", "base", prefix="/usr")
    text = render.render_block(base_sshd, v, render.plan(v))["system"]
    assert "'StrictModes no'" in text and "grep -x 'strictmodes no'" in text


def test_a_block_quotes_every_value_it_puts_into_a_shell_line():
    v = next(v for v in VARIANTS if any(c.name == "gdrcopy" for c in v.components))
    gdr = next(c for c in v.components if c.name == "gdrcopy")
    hostile = "/opt/gdr$(touch /pwned)"
    comp = dataclasses.replace(gdr, prefix=hostile)
    v = dataclasses.replace(v, components=(comp,))
    text = render.render_block(comp, v, render.plan(v))["build"]
    assert f"prefix='{hostile}'" in text
    assert text.count("$(touch") == 1


def test_version_decisions_compare_numbers_not_strings():
    """aws-ofi-nccl 1.13+ with a wheel cudart gets --enable-cudart-dynamic: 1.9 must not count as >= 1.13."""
    v = next(v for v in VARIANTS if v.name.startswith("local-debian-cu13"))
    ofi = next(c for c in v.components if c.name == "aws_ofi_nccl")
    for version, dynamic in (("1.9.0", False), ("1.13.2", True), ("1.17.3", True)):
        comp = dataclasses.replace(ofi, version=version)
        vv = dataclasses.replace(v, components=tuple(comp if c is ofi else c for c in v.components))
        text = render.render_block(comp, vv, render.plan(vv))["build"]
        assert ("--enable-cudart-dynamic" in text) is dynamic, version


def test_homes_and_dirs_come_from_the_blocks():
    v = next(v for v in VARIANTS if v.name.startswith("cuda12.8-efa1.51-nccl2.27.7"))
    p = render.plan(v)
    assert p.libfabric_home == "/opt/amazon/efa" and p.mpi_home == "/opt/amazon/openmpi"
    assert p.nccl_home == "/opt/nvidia/nccl" and p.cuda_home == "/usr/local/cuda"
    assert p.ldconfig_dirs[:2] == ["/opt/amazon/openmpi/lib", "/opt/amazon/efa/lib"]
    ld = next(e.value for e in v.env if e.name == "LD_LIBRARY_PATH")
    assert ld.split("${")[0].split(":") == p.ldconfig_dirs
    assert p.runtime_from == "efa"
    assert p.runtime_copies == [c.prefix for c in p.built]
    bare = dataclasses.replace(v, components=())
    q = render.plan(bare)
    assert (q.libfabric_home, q.nccl_home, q.runtime_from, q.ldconfig_dirs) == ("/usr", "/usr", "system", [])


def test_every_block_checks_turn_on_with_the_component_and_skip_without():
    for block in components.REGISTRY:
        absent = derive({"components": {}})
        present = derive({"components": {block.name: {"version": "1.0", "prefix": "/opt/x"}}})
        mine = [e for e in present if e.component == block.name]
        assert mine, block.name  # its own checks, or a `recorded` entry that says none exist
        if block.checks({"components": {}}):
            # on, or off for a reason of their own (a DLC-only check on a local base; nccl.pc only from
            # source), never "absent"
            assert all(e.skip != components.absent(block.name) for e in mine), block.name
            assert any(e.skip is None for e in mine), block.name
            assert all(e.skip for e in absent if e.component == block.name), block.name
        else:
            assert [e.probe for e in mine] == ["recorded"] and mine[0].skip


def test_an_unknown_component_in_an_old_lock_is_recorded_not_checked():
    exps = derive({"components": {"mystery": {"version": "9"}}})
    (rec,) = [e for e in exps if e.component == "mystery"]
    assert rec.probe == "recorded" and "no static check" in rec.skip


def test_a_git_archive_adds_git_to_the_builder_tools():
    block = components.block("gdrcopy")
    art = Artifact(kind="git", filename="g.tar", url="https://example.invalid/g.git", commit="0" * 40)
    assert block.build_tools(
        Component("gdrcopy", "2.6", "source", "git", "/opt/gdrcopy", artifacts=(art,))
    ) == ["git", "make", "gcc", "g++"]  # g++: the test binaries are C++
    assert block.build_tools(Component("gdrcopy", "2.6", "source", "url", "/opt/gdrcopy")) == [
        "make",
        "gcc",
        "g++",
    ]


def test_every_check_a_block_asks_for_has_an_evaluator():
    from imagebuild.check.probes import PROBES

    lock = {"components": {b.name: {"version": "1.0", "prefix": "/opt/x"} for b in components.REGISTRY}}
    probes = {e.probe for e in derive(lock) if not e.skip}  # a skipped check is never evaluated
    assert probes - set(PROBES) == set()


def test_installer_names_one_open_mpi_from_130():
    """`--mpi=openmpi4` unless the matrix asks for 5; installers before 1.30 have no such flag."""
    efa = components.block("efa_installer")

    def flags(version, **params):
        c = Component(
            name="efa_installer",
            version=version,
            method="installer",
            source="url",
            params=tuple(params.items()),
        )
        return efa.flags(c)

    assert flags("1.49.0")[-1] == "--mpi=openmpi4" and flags("1.30.0")[-1] == "--mpi=openmpi4"
    assert flags("1.49.0", openmpi="5")[-1] == "--mpi=openmpi5"
    assert not any(f.startswith("--mpi") for f in flags("1.29.1"))


def test_catalogued_installers_are_pinned_and_cited():
    data = catalog.efa_installers()
    assert data["gpg"]["fingerprint"].replace(" ", "") and data["layout"]["mpi_flag_from"]
    for version, entry in data["versions"].items():
        assert entry["source"], version
        assert entry["sha256"] is None or re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), version
    newest = max(data["versions"], key=Version)
    assert Version(newest) >= Version("1.51.0")
