"""Fuzz the matrix loader: whatever the bytes, the answer is variants or one UserError, never a traceback."""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path

import pytest
import yaml
from cli import build_py
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.errors import UserError
from imagebuild.matrix.load import load

GOOD = """\
defaults:
  base: {image: localbase/debian:bookworm-minbase, kind: local, os: debian12}
  cuda: "12.8"
variants:
  - name: v{a}
    axes: {a: {"1": {}, "2": {labels: {x: y}}}}
    components:
      nccl: {version: "2.27.7", method: wheel}
      libfabric: {version: "1.17.0", source: {apt: [libfabric1=1.17.0-3]}}
    include:
      - match: {a: "1"}
        set: {env: {NCCL_DEBUG: INFO}}
"""

KEYS = [
    "variants",
    "defaults",
    "templates",
    "name",
    "base",
    "image",
    "kind",
    "os",
    "cuda",
    "components",
    "nccl",
    "version",
    "source",
    "url",
    "sha256",
    "git",
    "commit",
    "pypi",
    "apt",
    "env",
    "axes",
    "include",
    "exclude",
    "match",
    "set",
    "extends",
    "labels",
    "tags",
    "training",
    "options",
    "libfabric",
    "efa_installer",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=True),
    st.sampled_from(["2.27.7", "local", "https://x.org/a", "a" * 64, "$x", "a;b", "v{a}", "{", ""]),
    st.text(max_size=8),
)
trees = st.recursive(
    scalars,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), kids, max_size=5),
    ),
    max_leaves=25,
)


def _check(text: str) -> None:
    with tempfile.TemporaryDirectory(prefix="h2fuzz") as d:
        path = Path(d) / "m.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load(str(path))
        except UserError as err:
            assert str(err)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_structured_documents_never_crash(tree):
    _check(yaml.safe_dump({"variants": [tree]} if not isinstance(tree, dict) else tree))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(GOOD)), st.integers(0, 20), st.text(max_size=6))
def test_mutated_text_never_crashes(at, cut, insert):
    _check(GOOD[:at] + insert + GOOD[at + cut :])


def test_an_apt_pin_without_an_upstream_version_is_a_user_error():
    """Found by the mutation test above: `libfabric1=.17.0-3` reached Version() and raised ValueError."""
    bad = GOOD.replace("libfabric1=1.17.0-3", "libfabric1=.17.0-3", 1)
    assert bad != GOOD
    with tempfile.TemporaryDirectory(prefix="h2fuzz") as d:
        path = Path(d) / "m.yaml"
        path.write_text(bad)
        with pytest.raises(UserError, match="no upstream version"):
            load(str(path))


def test_alias_bomb_is_refused(tmp_path):
    bomb = (
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join('*' + p for _ in range(9))}]\n" for c, p in zip("bcdefgh", "abcdefg")
        )
        + "variants: []\n"
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb)
    with pytest.raises(UserError, match="too many values"):
        load(str(path))


# -- hostile values anywhere a matrix holds text: refused, or quoted wherever a shell reads them -------------
HOSTILE = "aZ09._-/:=+@%, ;|&$`'\"\\<>(){}*?!#~\n\t\r"
SHELL_META = set(" ;|&$`'\"\\<>(){}*?!#~\n\t\r")
PLACES = [  # where a value goes, and a valid value there (the hostile text is spliced into it)
    (("description",), "Debian 12 image"),
    (("labels", "com.example.x"), "team a"),
    (("labels", None), "com.example.key"),  # the value becomes a label key
    (("env", "MY_VAR"), "/opt/x:1"),
    (("tags", 0), "repo/img:tag1"),
    (("packages", 0), "curl=7.88.1-10"),
    (("instance_types", 0), "p5.48xlarge"),
    (("cuda",), "12.8"),
    (("base", "image"), "localbase/debian:bookworm-minbase"),
    (("base", "python"), "/usr/bin/python3"),
    (("components", "nccl", "version"), "2.27.7"),
    (("components", "nccl", "prefix"), "/opt/nccl"),
    (("components", "libfabric", "source", "apt", 0), "libfabric1=1.17.0-3"),
    (("components", "efa_installer", "source", "url"), "https://x.org/aws-efa-installer-1.41.0.tar.gz"),
    (("components", "efa_installer", "source", "filename"), "efa-1.41.0.tar.gz"),
    (("training", "source_dir"), "code"),
    (("training", "entry_point"), "train.py"),
    (("options", "cuda_arch"), "90"),
    (("name",), "v"),
    (("file",), "m"),  # the matrix file's own name
]


def _doc() -> dict:
    return {
        "defaults": {
            "base": {"image": "localbase/debian:bookworm-minbase", "kind": "local", "os": "debian12"},
            "cuda": "12.8",
        },
        "variants": [
            {
                "name": "v",
                "components": {
                    "nccl": {"version": "2.27.7", "method": "wheel"},
                    "libfabric": {"version": "1.17.0", "source": {"apt": ["libfabric1=1.17.0-3"]}},
                },
            }
        ],
    }


def _place(doc: dict, where: tuple, value: str) -> None:
    node = doc["variants"][0]
    if where[0] == "training":
        node["training"] = {"source_dir": "code", "entry_point": "train.py"}
    if where[:2] == ("components", "efa_installer"):
        source = {"url": "https://x.org/aws-efa-installer-1.41.0.tar.gz", "sha256": "a" * 64}
        node["components"] = {"nccl": node["components"]["nccl"], "efa_installer": {"version": "1.41.0"}}
        node["components"]["efa_installer"]["source"] = source
    *path, last = where
    for key in path:
        node = node.setdefault(key, [] if key in ("tags", "packages", "instance_types", "apt") else {})
    if last is None:
        node[value] = "x"
    elif isinstance(last, int):
        node[:] = [value]
    else:
        node[last] = value


def _shell_lines(dockerfile: str) -> str:
    """The RUN instructions, continuation lines joined: everything a shell reads."""
    out, in_run = [], False
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if stripped.startswith("RUN "):
            in_run = True
        if in_run:
            out.append(line)
            in_run = stripped.endswith("\\")
    return "\n".join(out)


def _instructions(dockerfile: str) -> list:
    """The instruction keywords in order, as the Dockerfile parser sees them (an added line shows here)."""
    out, continued = [], False
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            out.append(stripped.split()[0].upper())
        if not stripped.startswith("#"):
            continued = stripped.endswith("\\")
    return out


def _render(tmp: Path, doc: dict, name: str = "m.yaml"):

    (tmp / "code").mkdir(exist_ok=True)
    (tmp / "code" / "train.py").write_text("print('hi')\n")
    path = tmp / name
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    out = tmp / "out"
    return build_py("render", "--matrix", str(path), "--out", str(out)).rc, out


_BASELINE: dict = {}


def _baseline(tmp: Path, where: tuple, seed: str) -> str:
    """The RUN lines with the valid value in place: text that is there anyway is no injection."""
    if where not in _BASELINE:
        doc = _doc()
        if where != ("file",):
            _place(doc, where, seed)
        rc, out = _render(tmp, doc)
        assert rc == 0, f"the seed of {where} must render"
        (text,) = [p.read_text() for p in out.glob("*/Dockerfile")]
        _BASELINE[where] = (_shell_lines(text), _instructions(text))
    return _BASELINE[where]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PLACES), st.text(alphabet=HOSTILE, max_size=10), st.integers(0, 40))
def test_hostile_values_are_refused_or_never_reach_a_shell_unquoted(place, hostile, at):
    """Exit 0 or 2, never a traceback; nothing written on 2; on 0 the value is in no RUN line unquoted."""
    where, seed = place
    value = seed[:at] + hostile + seed[at:]
    with tempfile.TemporaryDirectory(prefix="h13fuzz") as d:
        tmp = Path(d)
        (tmp / "base").mkdir()
        (tmp / "w").mkdir()
        doc = _doc()
        name = "m.yaml"
        if where == ("file",):
            name = value.replace("/", "_") + ".yaml"
        else:
            _place(doc, where, value)
        rc, out = _render(tmp / "w", doc, name)  # a traceback fails the test by itself
        assert rc in (0, 2)
        if rc == 2:
            assert not out.exists() or not any(out.iterdir()), "nothing is written on exit 2"
            return
        base, instructions = _baseline(tmp / "base", where, seed)
        for dockerfile in out.glob("*/Dockerfile"):
            text = dockerfile.read_text()
            assert _instructions(text) == instructions, f"{value!r} ({where}) changed the instructions"
            if not SHELL_META & set(value):
                continue
            shell = _shell_lines(text)
            for quoted in sorted(
                {shlex.quote(value), json.dumps(value), json.dumps(value).replace("$", "\\$")}
            ):
                shell = shell.replace(quoted, "")
            assert value not in shell or value in base, f"{value!r} ({where}) unquoted in a RUN line"
