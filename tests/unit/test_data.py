"""The JSONL loader: tuple construction, ordering contract, errors, and the Avro fast path."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.data.files import iter_rows, load_rows, load_stream, load_streams, write_stream
from joinlib.errors import DataError
from joinlib.protocol import values as values_module
from joinlib.protocol.values import _encode_slow, decode_values, encode_values
from joinlib.query import parse_query
from tests.kernels import BOTH, kernels

QUERY = parse_query({
    "name": "t",
    "streams": {"A": {"site": "x", "window": "1s"}, "B": {"site": "y", "window": "10 tuples"}},
    "join": ["A.k = B.k", "A.j = B.m"],
}, "t.yaml")
A, B = QUERY.streams


def write_lines(path: Path, lines: list) -> Path:
    """Rows given as dicts are JSON-encoded, strings written verbatim (for broken lines)."""
    text = "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
    path.write_text(text)
    return path


def row(id_: object, ts: object, k: object = "v1", j: object = 1, **rest: object) -> dict:
    return {"id": id_, "ts": ts, "k": k, "j": j, **rest}


def test_tuples_have_pos_key_rest_and_seq(tmp_path: Path) -> None:
    write_lines(tmp_path / "A.jsonl", [row(0, 5, "a", 1, zeta="z", alpha=2, mid=None), row(1, 7, "b", 2.5)])
    write_lines(tmp_path / "B.jsonl", [{"id": 3, "ts": 1, "m": 9, "k": "a", "x": True}])
    tups = load_streams(QUERY, tmp_path)
    a0, a1 = tups["A"]
    assert (a0.pos, a0.id, a0.ts, a0.seq, a0.key) == (0, 0, 5, 0, ("a", 1))
    assert decode_values(a0.rest) == [2, None, "z"]  # alpha, mid, zeta: sorted attribute names
    assert (a1.seq, a1.key, decode_values(a1.rest)) == (1, ("b", 2.5), [])
    (b0,) = tups["B"]
    assert (b0.pos, b0.key, decode_values(b0.rest)) == (1, ("a", 9), [True])  # key in join_attrs order k, m


def test_rest_is_exactly_encode_values(tmp_path: Path) -> None:
    extra = {f"a{i}": f"{i:04d}" for i in range(30)}
    write_lines(tmp_path / "A.jsonl", [row(0, 0, **extra), row(1, 1, **extra, n=1.5)])
    t0, t1 = load_stream(A, tmp_path / "A.jsonl")
    assert t0.rest == encode_values([extra[k] for k in sorted(extra)])
    assert t1.rest == encode_values([extra[k] for k in sorted(extra)][:-1] + [extra["a9"], 1.5])


def test_ties_are_ordered_by_id_and_seq_follows(tmp_path: Path) -> None:
    write_lines(tmp_path / "A.jsonl", [row(5, 1), row(9, 2), row(3, 2), row(7, 2), row(1, 4)])
    tups = load_stream(A, tmp_path / "A.jsonl")
    assert [(t.ts, t.id) for t in tups] == [(1, 5), (2, 3), (2, 7), (2, 9), (4, 1)]
    assert [t.seq for t in tups] == [0, 1, 2, 3, 4]
    assert [(r["ts"], r["id"]) for r in iter_rows(tmp_path / "A.jsonl")] == [(t.ts, t.id) for t in tups]


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "A.jsonl", [row(0, 1), "", "   ", row(1, 0)])
    with pytest.raises(DataError, match=r"A\.jsonl:4: ts 0 is smaller than the previous row's ts 1"):
        load_stream(A, path)
    with pytest.raises(DataError, match=r"A\.jsonl:4: ts 0"):
        list(iter_rows(path))


def test_rows_with_different_attribute_sets(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "A.jsonl", [row(0, 0, p="x"), row(1, 1, q="y"), row(2, 2, p="z"),
                                              row(3, 3, p="x", q="y")])
    assert [decode_values(t.rest) for t in load_stream(A, path)] == [["x"], ["y"], ["z"], ["x", "y"]]


ERRORS = [
    ("out of order", [row(0, 5), row(1, 3)], "A.jsonl:2", "smaller than the previous"),
    ("duplicate id", [row(0, 1), row(1, 2), row(0, 3)], "A.jsonl:3", "repeats the id of line 1"),
    ("duplicate id in tie", [row(4, 1), row(4, 1)], "A.jsonl:2", "repeats the id"),
    ("bad json", [row(0, 1), '{"id": 1, "ts": '], "A.jsonl:2", "invalid JSON"),
    ("not an object", [row(0, 1), "[1, 2]"], "A.jsonl:2", "expected a JSON object"),
    ("scalar line", ["17"], "A.jsonl:1", "expected a JSON object"),
    ("missing id", [{"ts": 1, "k": "a", "j": 1}], "A.jsonl:1", "missing 'id'"),
    ("missing ts", [row(0, 1), {"id": 1, "k": "a", "j": 1}], "A.jsonl:2", "missing 'ts'"),
    ("missing ts same width", [row(0, 1), {"id": 1, "k": "a", "j": 1, "foo": 2}], "A.jsonl:2", "missing 'ts'"),
    ("float ts", [row(0, 1.5)], "A.jsonl:1", "'ts' must be an integer"),
    ("string id", [row("7", 1)], "A.jsonl:1", "'id' must be an integer"),
    ("bool id", [row(True, 1)], "A.jsonl:1", "'id' must be an integer"),
    ("negative ts", [row(0, 1), row(1, -4)], "A.jsonl:2", "must not be negative"),
    ("missing join attribute", [row(0, 1), {"id": 1, "ts": 2, "k": "a"}], "A.jsonl:2", "missing join attribute 'j'"),
    ("list join value", [row(0, 1, k=[1])], "A.jsonl:1", "must be a scalar"),
    ("object payload", [row(0, 1, p={"x": 1})], "A.jsonl:1", "cannot encode the attributes"),
]


@pytest.mark.parametrize("case, lines, where, message", ERRORS, ids=[e[0] for e in ERRORS])
def test_load_errors(tmp_path: Path, case: str, lines: list, where: str, message: str) -> None:
    path = write_lines(tmp_path / "A.jsonl", lines)
    with pytest.raises(DataError) as exc:
        load_stream(A, path)
    assert where in str(exc.value) and message in str(exc.value), str(exc.value)


@pytest.mark.parametrize("case, lines, where, message",
                         [e for e in ERRORS if "join" not in e[0] and "payload" not in e[0]],
                         ids=[e[0] for e in ERRORS if "join" not in e[0] and "payload" not in e[0]])
def test_iter_rows_errors(tmp_path: Path, case: str, lines: list, where: str, message: str) -> None:
    path = write_lines(tmp_path / "A.jsonl", lines)
    with pytest.raises(DataError) as exc:
        list(iter_rows(path))
    assert where in str(exc.value) and message in str(exc.value), str(exc.value)


def test_missing_file_names_stream_and_path(tmp_path: Path) -> None:
    write_lines(tmp_path / "A.jsonl", [row(0, 1)])
    with pytest.raises(DataError, match=r"B\.jsonl: data file of stream B not found"):
        load_streams(QUERY, tmp_path)
    with pytest.raises(DataError, match="not found"):
        load_rows(QUERY, tmp_path)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    (tmp_path / "A.jsonl").mkdir()
    with pytest.raises(DataError, match="cannot read"):
        load_stream(A, tmp_path / "A.jsonl")


def test_write_then_load_rows_round_trip(tmp_path: Path) -> None:
    rows = [row(i, i // 3, f"v{i % 4}", i % 2, payload=f"p{i}") for i in range(3000)]
    assert write_stream(tmp_path / "sub" / "A.jsonl", rows) == 3000
    write_stream(tmp_path / "sub" / "B.jsonl", [{"id": 0, "ts": 0, "k": "v1", "m": 1}])
    assert load_rows(QUERY, tmp_path / "sub")["A"] == rows
    assert list(iter_rows(tmp_path / "sub" / "A.jsonl")) == rows


def test_empty_file_is_an_empty_stream(tmp_path: Path) -> None:
    (tmp_path / "A.jsonl").write_text("")
    assert load_stream(A, tmp_path / "A.jsonl") == []


_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
    st.integers(min_value=2 ** 63, max_value=2 ** 64 - 1),  # fastavro writes these as doubles
    st.floats(allow_nan=False), st.text(max_size=80),
    st.text(alphabet="abcdefgh", min_size=4, max_size=4),
)


@BOTH
@settings(max_examples=300, deadline=None)
@given(st.lists(_scalar, max_size=300))
def test_encode_rest_matches_fastavro(c: bool, values: list) -> None:
    """The C kernel (_avroc.encode_values) and the Python forms, byte for byte fastavro's."""
    with kernels(values_module, c):
        assert encode_values(tuple(values)) == _encode_slow(values)
        assert encode_values(list(values)) == _encode_slow(values)


@BOTH
@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=70), max_size=200))
def test_encode_rest_strings_match_fastavro(c: bool, values: list) -> None:
    with kernels(values_module, c):
        assert encode_values(tuple(values)) == _encode_slow(values)


def test_encode_rest_uniform_and_mixed_lengths() -> None:
    for values in (("abcd",) * 300, ("a", "bb", "ccc"), ("é",), ("x" * 63, "y" * 64), ()):
        assert encode_values(values) == _encode_slow(list(values))
