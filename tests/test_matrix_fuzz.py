"""Fuzz the matrix loader: whatever the bytes, the answer is variants or one UserError, never a traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.errors import UserError
from imagebuild.matrix import load

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
