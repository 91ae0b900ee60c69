"""Loading matrix.yaml: axes, include/exclude, inheritance, line numbers, and the table of bad inputs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import cli
import pytest
from cli import build_py
from matrices import nccl_variant
from paths import ROOT

from imagebuild.errors import UserError
from imagebuild.matrix.load import expand, load

GOOD = "variants:\n" + nccl_variant("v1")


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_committed_matrix_loads_every_kind_of_base():
    variants = load(str(ROOT / "matrix.yaml"))
    kinds = {v.base.kind for v in variants}
    assert kinds == {"dlc", "cuda"}
    names = [v.name for v in variants]
    assert len(names) == len(set(names)) >= 4
    legacy = [v for v in variants if v.version_of("aws_ofi_nccl") and v.version_of("aws_ofi_nccl") <= "1.5.0"]
    assert legacy, "the committed matrix must keep an aws-ofi-nccl <= 1.5 stack"
    scratch = [v for v in variants if v.base.kind == "cuda" and v.has("gdrcopy") and v.has("nccl_tests")]
    # from nothing: a plugin from source (the legacy stack), or, with an installer that bundles the plugin of
    # its own libfabric's release, the installer's (issue 34: one release's pair)
    assert scratch and all(v.component("aws_ofi_nccl").method in ("source", "installer") for v in scratch)
    assert any(v.component("aws_ofi_nccl").bundled_by == "efa_installer" for v in scratch)


def test_local_matrix_uses_only_local_sources():
    variants = load(str(ROOT / "matrix.local.yaml"))
    assert variants[0].name == "local-debian-nccl2.27"
    for v in variants:
        # the debootstrap base, or the DLC-layout bases made from it (`build.py base --layout dlc`, and
        # `--layout al2023-standin`)
        assert (v.base.image, v.base.kind) in (
            ("localbase/debian:bookworm-minbase", "local"),
            ("localbase/dlc-layout:bookworm-2nccl-torch", "dlc"),
            ("localbase/al2023-dlc-layout:standin-bookworm-sshd", "dlc"),
        )
        for c in v.components:
            assert c.source in ("apt", "pypi", "git", "base"), (v.name, c.name, c.source)
            assert c.source != "base" or v.base.kind == "dlc", (v.name, c.name)
        assert v.training is not None and v.training.entry_point == "train.py"


def test_axes_cross_exclude_and_include(tmp_path):
    path = write(
        tmp_path,
        """\
        defaults:
          base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
          cuda: "12.8"
          labels: {team: ml}
        templates:
          withnccl:
            components: {nccl: {version: "2.27.7", method: wheel}}
        variants:
          - name: x-{a}-{b}
            extends: [withnccl]
            axes:
              a: {"1": {labels: {a: one}}, "2": {labels: {a: two}}}
              b: {p: {}, q: {labels: {team: other}}}
            exclude:
              - {a: "2", b: q}
            include:
              - match: {b: p}
                set: {labels: {extra: "yes"}}
        """,
    )
    variants = load(str(path))
    assert [v.name for v in variants] == ["x-1-p", "x-1-q", "x-2-p"]
    labels = {v.name: dict(v.labels) for v in variants}
    assert labels["x-1-p"]["a"] == "one" and labels["x-1-p"]["extra"] == "yes"
    assert labels["x-1-q"]["team"] == "other" and "extra" not in labels["x-1-q"]
    assert labels["x-2-p"]["team"] == "ml"
    assert all(v.version_of("nccl") == "2.27.7" for v in variants)
    assert dict(variants[0].axes) == {"a": "1", "b": "p"}


def test_null_removes_an_inherited_component(tmp_path):
    path = write(
        tmp_path,
        """\
        defaults:
          base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
          cuda: "12.8"
          components:
            nccl: {version: "2.27.7", method: wheel}
            cuda_runtime: {version: "12.8.90"}
        variants:
          - name: full
          - name: bare
            components: {cuda_runtime: null}
        """,
    )
    full, bare = load(str(path))
    assert full.has("cuda_runtime") and not bare.has("cuda_runtime")


def test_lines_survive_merging(tmp_path):
    path = write(
        tmp_path,
        """\
        defaults:
          base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
          components:
            nccl:
              method: wheel
        variants:
          - name: a
            cuda: "12.8"
        """,
    )
    with pytest.raises(UserError) as err:
        load(str(path))
    # the version is missing from the nccl block written in defaults (line 4)
    assert err.value.line == 4 and err.value.key == "components.nccl.version"


def test_expand_keeps_merged_lines(tmp_path):
    path = write(tmp_path, GOOD)
    (m,) = expand(str(path))
    assert m.body.key_lines["cuda"] == 4


def test_variant_filter_and_unknown_variant(tmp_path):
    path = write(tmp_path, GOOD)
    assert [v.name for v in load(str(path), ["v1"])] == ["v1"]
    with pytest.raises(UserError) as err:
        load(str(path), ["v2"])
    assert err.value.key == "--variant"


# --------------------------------------------------------------------------------------------- bad inputs
# (name, matrix text, line the message must name, key the message must name or None)
BAD = [
    ("yaml-syntax", "variants:\n  - name: v1\n    base: {image: x\n  - name: v2\n", 4, None),
    ("yaml-tab", "variants:\n\t- name: v1\n", 2, None),
    ("duplicate-key", GOOD.replace('    cuda: "12.8"\n', '    cuda: "12.8"\n    cuda: "12.4"\n'), 5, "cuda"),
    (
        "unknown-key",
        GOOD.replace("os: debian12}", "os: debian12, colour: red}"),
        3,
        "variants[0].base.colour",
    ),
    ("unknown-top-key", "varients: []\n" + GOOD, 1, "varients"),
    ("unknown-component", GOOD.replace("nccl: {", "nccx: {"), 6, "variants[0].components.nccx"),
    ("wrong-type-float", GOOD.replace('cuda: "12.8"', "cuda: 12.8"), 4, "variants[0].cuda"),
    (
        "wrong-type-list",
        GOOD.replace("    components:", "    tags: ml:latest\n    components:"),
        5,
        "variants[0].tags",
    ),
    (
        "missing-version",
        GOOD.replace('{version: "2.27.7", method: wheel}', "{method: wheel}"),
        6,
        "components.nccl.version",
    ),
    ("missing-variants", "defaults: {}\n", 1, "variants"),
    (
        "sha-not-64-hex",
        GOOD.replace(
            '{version: "2.27.7", method: wheel}',
            '{version: "2.27.7", source: {pypi: "nvidia-nccl-cu12==2.27.7", filename: x.whl, sha256: abc}}',
        ),
        6,
        "variants[0].components.nccl.source.sha256",
    ),
    (
        "url-not-https",
        GOOD.replace(
            '      nccl: {version: "2.27.7", method: wheel}',
            '      efa_installer: {version: "1.41.0", source: {url: "http://example.org/e.tar.gz", sha256: '
            + '"'
            + "a" * 64
            + '"}}',
        ),
        6,
        "variants[0].components.efa_installer.source.url",
    ),
    ("version-space", GOOD.replace('"2.27.7"', '"2.27 7"'), 6, "variants[0].components.nccl.version"),
    ("version-quote", GOOD.replace('"2.27.7"', '"2.27\'7"'), 6, "variants[0].components.nccl.version"),
    ("version-dollar", GOOD.replace('"2.27.7"', '"2.27$x"'), 6, "variants[0].components.nccl.version"),
    ("version-semicolon", GOOD.replace('"2.27.7"', '"2.27;rm"'), 6, "variants[0].components.nccl.version"),
    ("version-newline", GOOD.replace('"2.27.7"', '"2.27\\n7"'), 6, "variants[0].components.nccl.version"),
    ("name-space", GOOD.replace("name: v1", 'name: "v 1"'), 2, "variants[0].name"),
    ("name-dollar", GOOD.replace("name: v1", 'name: "v$1"'), 2, "variants[0].name"),
    ("name-semicolon", GOOD.replace("name: v1", 'name: "v;1"'), 2, "variants[0].name"),
    ("name-quote", GOOD.replace("name: v1", 'name: "v\'1"'), 2, "variants[0].name"),
    ("name-newline", GOOD.replace("name: v1", 'name: "v\\n1"'), 2, "variants[0].name"),
    ("env-value-dollar", GOOD + '    env: {FOO: "$(id)"}\n', 7, "variants[0].env.FOO"),
    (
        "incompatible",
        GOOD.replace(
            '      nccl: {version: "2.27.7", method: wheel}',
            '      nccl: {version: "2.27.7", method: wheel}\n'
            '      libfabric: {version: "1.17.0", source: {apt: [libfabric1=1.17.0-3]}}\n'
            '      aws_ofi_nccl: {version: "1.21.1", method: source}',
        ),
        8,
        "components.aws_ofi_nccl.version",
    ),
    ("cuda-mismatch", GOOD.replace('cuda: "12.8"', 'cuda: "11.8"'), 6, "components.nccl.version"),
    (
        "include-matches-nothing",
        GOOD.replace(
            "  - name: v1\n",
            "  - name: v{a}\n    axes: {a: {'1': {}}}\n"
            "    include:\n      - match: {a: '2'}\n        set: {}\n",
        ),
        5,
        "variants[0].include[0].match.a",
    ),
    (
        "include-unknown-axis",
        GOOD.replace(
            "  - name: v1\n",
            "  - name: v{a}\n    axes: {a: {'1': {}}}\n"
            "    include:\n      - match: {b: '1'}\n        set: {}\n",
        ),
        5,
        "variants[0].include[0].match.b",
    ),
    (
        "exclude-matches-nothing",
        GOOD.replace(
            "  - name: v1\n",
            "  - name: v{a}-{b}\n    axes: {a: {'1': {}}, b: {x: {}, y: {}}}\n"
            "    exclude:\n      - {a: '1', b: z}\n",
        ),
        5,
        "variants[0].exclude[0].b",
    ),
    ("two-variants-one-name", GOOD + GOOD.split("variants:\n", 1)[1], 7, "variants[1].name"),
    (
        "axis-name-collision",
        GOOD.replace("  - name: v1\n", "  - name: v\n    axes: {a: {'1': {}, '2': {}}}\n"),
        2,
        "variants[0].name",
    ),
    ("unknown-placeholder", GOOD.replace("name: v1", "name: v{nope}"), 2, "variants[0].name"),
    (
        "unknown-template",
        GOOD.replace("  - name: v1\n", "  - name: v1\n    extends: [nothere]\n"),
        3,
        "extends",
    ),
    (
        "registry-host-in-image",
        GOOD.replace("localbase/debian:bookworm-minbase", "registry.example.org/x:1"),
        3,
        "variants[0].base.image",
    ),
    ("unknown-instance", GOOD + "    instance_types: [p9.huge]\n", 7, "instance_types[0]"),
    ("efa-without-plugin", GOOD + "    instance_types: [p5.48xlarge]\n", 5, "components"),
    (
        "runtime-image-on-local",
        GOOD.replace("os: debian12}", "os: debian12, runtime_image: 'x/y:1'}"),
        3,
        "base.runtime_image",
    ),
    (
        "runtime-image-devel",
        GOOD.replace(
            "{image: localbase/debian:bookworm-minbase, kind: local, os: debian12}",
            "{image: 'nvidia/cuda:12.8.1-devel-ubuntu22.04', kind: cuda, os: ubuntu22.04,"
            " runtime_image: 'nvidia/cuda:12.8.1-devel-ubuntu22.04'}",
        ),
        3,
        "base.runtime_image",
    ),
    (
        "devel-by-digest",
        GOOD.replace(
            "{image: localbase/debian:bookworm-minbase, kind: local, os: debian12}",
            "{image: 'nvidia/cuda:12.8.1-devel-ubuntu22.04@sha256:"
            + "a" * 64
            + "', kind: cuda, os: ubuntu22.04}",
        ),
        3,
        "base.image",
    ),
    (
        "socket-with-plugin",
        GOOD.replace(
            '      nccl: {version: "2.27.7", method: wheel}',
            '      nccl: {version: "2.27.7", method: wheel}\n'
            '      libfabric: {version: "1.22.0", source: {apt: [libfabric1=1.22.0-1]}}\n'
            '      aws_ofi_nccl: {version: "1.17.3", method: source, params: {platform_aws: "no"}}',
        )
        + "    options: {nccl_net: socket}\n",
        9,
        "options.nccl_net",
    ),
    (
        "cuda-arch-misses-instance",
        GOOD.replace("method: wheel}", "method: source}")
        + "    instance_types: [p5.48xlarge, p6-b200.48xlarge]\n"
        + "    options: {cuda_arch: '90', nccl_net: socket}\n",
        8,
        "options.cuda_arch",
    ),
    (
        "cuda-arch-unknown",
        GOOD.replace("method: wheel}", "method: source}")
        + "    instance_types: [p6-b300.48xlarge]\n"
        + "    options: {nccl_net: socket}\n",
        7,
        "instance_types[0]",
    ),
    (
        "unknown-param",
        GOOD.replace("method: wheel}", "method: wheel, params: {fast: 'yes'}}"),
        6,
        "components.nccl.params.fast",
    ),
    (
        "no-catalog-commit",
        GOOD.replace(
            '      nccl: {version: "2.27.7", method: wheel}',
            '      nccl: {version: "2.27.7", method: wheel}\n      gdrcopy: {version: "9.9"}',
        ),
        7,
        "components.gdrcopy.version",
    ),
    (
        "source-two-kinds",
        GOOD.replace(
            '{version: "2.27.7", method: wheel}',
            '{version: "2.27.7", source: {apt: [libnccl2=2.27.7-1], base: true}}',
        ),
        6,
        "variants[0].components.nccl.source",
    ),
    ("not-a-mapping", "- just\n- a list\n", 1, None),
    ("empty-file", "", 1, None),
    (
        "git-commit-short",
        GOOD.replace(
            '      nccl: {version: "2.27.7", method: wheel}',
            '      nccl: {version: "2.27.7", method: wheel}\n'
            '      gdrcopy: {version: "2.6", source: '
            '{git: "https://github.com/NVIDIA/gdrcopy.git", commit: v2.6}}',
        ),
        7,
        "variants[0].components.gdrcopy.source.commit",
    ),
]


@pytest.mark.parametrize("case,text,line,key", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exit_2_with_file_line_key_and_nothing_written(tmp_path, case, text, line, key):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    res = build_py("render", "--matrix", str(path), "--out", str(out))
    rc = res.rc
    err = res.err
    assert rc == 2, err
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] and err.count("\nerror:") == 0, err
    assert f"{path}:{line}" in err, err
    if key:
        assert f"key '{key}'" in err, err
    assert not out.exists() or not any(out.iterdir())


def test_bad_input_through_the_real_entry_point(tmp_path):
    """The same through `python build.py` in a subprocess: exit status 2 and no traceback."""
    path = write(tmp_path, GOOD.replace('"2.27.7"', '"2.27;rm -rf /"'))
    proc = cli.build_py_process("list", "--matrix", str(path), timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and f"{path}:6" in proc.stderr


def test_missing_matrix_file_is_bad_input(tmp_path):
    res = build_py("list", "--matrix", str(tmp_path / "nope.yaml"))
    rc = res.rc
    assert rc == 2 and "cannot read file" in res.err


def test_hint_for_close_key(tmp_path):
    path = write(tmp_path, GOOD.replace("    components:", "    componets:"))
    res = build_py("list", "--matrix", str(path))
    assert res.rc == 2
    err = res.err
    assert "did you mean 'components'" in err


def test_list_json_is_the_locks(tmp_path):
    path = write(tmp_path, GOOD)
    res = build_py("list", "--matrix", str(path), "--json")
    assert res.rc == 0
    import json

    (lock,) = json.loads(res.out)
    assert lock["schema"] == "efa-image-build/lock/v1" and lock["components"]["nccl"]["method"] == "wheel"


# ---------------------------------------------------------------- apt pins by upstream version (issue 21)

SSH = """\
variants:
  - name: v
    base: {{image: localbase/debian:bookworm-minbase, kind: local, os: debian12}}
    components:
      openssh: {{version: "{version}", source: {{apt: {apt}, apt_dev: {dev}}}}}
"""


def _ssh(tmp_path, version="9.2p1", apt='["openssh-server=1:9.2p1-*"]', dev="[]"):
    return write(tmp_path, SSH.format(version=version, apt=apt, dev=dev))


def test_an_apt_pin_by_upstream_version_loads_and_keeps_the_exact_form(tmp_path):
    (v,) = load(str(_ssh(tmp_path, apt='["openssh-server=1:9.2p1-*", "openssh-client=1:9.2p1-*"]')))
    (ssh,) = v.components
    assert (ssh.version, ssh.packages) == ("9.2p1", ("openssh-server=1:9.2p1-*", "openssh-client=1:9.2p1-*"))
    (v,) = load(str(_ssh(tmp_path, apt="[openssh-server=1:9.2p1-2+deb12u10]")))
    assert v.components[0].packages == ("openssh-server=1:9.2p1-2+deb12u10",)


@pytest.mark.parametrize(
    "apt,dev,key,words",
    [
        ('["openssh-server=1:9.3p1-*"]', "[]", "openssh.version", "is 9.3p1"),
        ('["openssh-server=1:9.2p1-2+deb12u10", "openssh-client=1:8.9p1-*"]', "[]", "source.apt[1]", "8.9p1"),
        ('["openssh-server=1:9.2p1-*"]', '["libssh-dev=1:9.2p1-*"]', "source.apt_dev[0]", "pinned exactly"),
        ('["openssh-server=1:9.2*"]', "[]", "source.apt", "name=[epoch:]upstream-*"),
        ('["openssh-server=*"]', "[]", "source.apt", "name=[epoch:]upstream-*"),
    ],
)
def test_a_bad_pin_by_upstream_version_is_exit_2_naming_it(tmp_path, apt, dev, key, words):
    with pytest.raises(UserError) as err:
        load(str(_ssh(tmp_path, apt=apt, dev=dev)))
    assert key in (err.value.key or "") and words in str(err.value) + (err.value.hint or "")
