"""efa_validators.report.jsonout writes
what `json.dumps(indent=2, sort_keys=True, default=str)` writes, byte for byte:
on the reports of the real logs (the JSON every consumer reads) and on random documents."""

import io
import json
import math

from conftest import _nccl_logs_dir, corpus_missing
from hypothesis import given, settings
from hypothesis import strategies as st

from efa_validators.analyze import analyze_paths
from efa_validators.report import jsonout


def _ours(obj) -> str:
    out = io.StringIO()
    jsonout.dump(obj, out.write)
    return out.getvalue()


def _theirs(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


def test_real_reports_are_written_as_json_dumps_writes_them():
    logs = sorted(_nccl_logs_dir().glob("*.log"))
    if not logs:
        corpus_missing(f"no logs in {_nccl_logs_dir()}")
    for log in logs:
        report = analyze_paths([str(log)], workers=1)
        assert _ours(report) == _theirs(report), log.name


class _Odd:
    def __str__(self) -> str:
        return "odd\u00e9\n"


class _Int(int):
    pass


class _Str(str):
    pass


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.builds(_Odd)
    | st.builds(_Int, st.integers(-5, 5))
    | st.builds(_Str, st.text(max_size=4))
)
KEYS = st.text(max_size=6)
DOCS = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(KEYS, inner, max_size=5)
        | st.dictionaries(st.integers(-3, 3), inner, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(DOCS)
def test_random_documents_match_json_dumps(doc):
    assert _ours(doc) == _theirs(doc)


def test_special_floats_and_non_string_keys():
    doc = {"a": [math.nan, math.inf, -math.inf, 1e300, -0.0], "b": {}, "c": [], "d": _Odd()}
    assert _ours(doc) == _theirs(doc)
    assert _ours({1: "x", 3: [True, False]}) == _theirs({1: "x", 3: [True, False]})


def test_large_document_is_written_in_pieces():
    pieces = []
    doc = {"ranks": [{"rank": i, "host": f"h{i}", "evidence": [{"line": i}]} for i in range(5000)]}
    jsonout.dump(doc, pieces.append)
    assert len(pieces) > 3 and max(map(len, pieces)) < len("".join(pieces)) / 3
    assert "".join(pieces) == _theirs(doc)
