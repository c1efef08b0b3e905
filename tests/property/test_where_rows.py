"""WHERE filters and result rows against the simple reference: random queries with random filters and SELECT lists
on random data files.

* every plan kind (``central``, ``SM-S1`` and the other algorithms, ``auto``) over the tuples the loader keeps gives
  exactly the reference join over the data rows the filters keep (:func:`joinlib.reference.tuples_of_rows`, a
  naive filter of the rows as written), each result once;
* the rows ``joinlib run --out`` writes (:class:`joinlib.rows.RowsSink`, decoding the members' ``rest``) are the
  reference rows (the reference results projected from the rows as written);
* a filter ships fewer bytes than none on the same data (a deterministic example).
"""
from __future__ import annotations

import io
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.data.files import load_rows, load_streams, write_stream
from joinlib.filter_spec import Condition
from joinlib.model import Query
from joinlib.output_spec import STAR, Column, Output
from joinlib.plan.logical import central, uniform
from joinlib.planner.registry import resolve_plan
from joinlib.query import parse_query, query_to_dict
from joinlib.reference import reference_join, tuples_of_rows
from joinlib.rows import RowsSink, reference_rows
from joinlib.sim.engine import run_embedded
from joinlib.testing.exact import assert_same, run_plan
from joinlib.testing.strategies import queries

PAYLOAD = ("p", "s", "b")   # an int, a string, a boolean; each missing or null in some rows
VALUES = ["v0", "v1", "v2"]


@st.composite
def data_rows(draw: st.DrawFn, q: Query) -> dict[str, list[dict[str, Any]]]:
    span, out = draw(st.integers(1, 200)), {}
    for s in q.streams:
        n = draw(st.integers(0, 14))
        rows = []
        for i, ts in enumerate(sorted(draw(st.lists(st.integers(0, span), min_size=n, max_size=n)))):
            row: dict[str, Any] = {"id": i, "ts": ts}
            row.update({a: draw(st.sampled_from(VALUES)) for a in s.join_attrs})
            for f, values in (("p", st.integers(-3, 3)), ("s", st.sampled_from(["ab", "ba", "a", ""])),
                              ("b", st.booleans())):
                kind = draw(st.integers(0, 5))
                if kind:
                    row[f] = None if kind == 1 else draw(values)
            rows.append(row)
        out[s.name] = rows
    return out


@st.composite
def conditions(draw: st.DrawFn, join_attrs: tuple[str, ...]) -> Condition:
    field = draw(st.sampled_from(PAYLOAD + join_attrs))
    op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "IN", "NOT IN", "IS NULL", "IS NOT NULL", "LIKE",
                               "NOT LIKE"]))
    own: st.SearchStrategy[Any] = {"p": st.integers(-3, 3), "s": st.sampled_from(["ab", "a", ""]),
                                   "b": st.booleans()}.get(field, st.sampled_from(VALUES))
    literal: st.SearchStrategy[Any] = draw(st.sampled_from([own, st.integers(-3, 3),
                                                           st.sampled_from(VALUES)]))  # kinds mixed too
    if op in ("IS NULL", "IS NOT NULL"):
        return Condition(field, op)
    if op in ("LIKE", "NOT LIKE"):
        return Condition(field, op, (draw(st.sampled_from(["a%", "%b", "_", "v_", "%", "ab"])),))
    if op in ("IN", "NOT IN"):
        return Condition(field, op, tuple(draw(st.lists(literal, min_size=1, max_size=3, unique=True))))
    return Condition(field, op, (draw(literal),))


@st.composite
def filtered_queries(draw: st.DrawFn) -> Query:
    q = draw(queries(max_streams=3))
    streams = tuple(replace(s, where=tuple(draw(st.lists(conditions(s.join_attrs), max_size=2))))
                    for s in q.streams)
    cols: list[Column] = []
    for i in range(draw(st.integers(1, 4))):
        s = q.streams[draw(st.integers(0, len(q.streams) - 1))]
        field = draw(st.sampled_from(["*", "id", "ts", *PAYLOAD, *s.join_attrs]))
        cols.append(Column(s.name, field, None if field == "*" else f"c{i}"))
    if draw(st.booleans()):
        cols.insert(0, STAR)
    return replace(q, streams=streams, output=Output(tuple(cols)))


def _write(tmp: Path, q: Query, rows: dict[str, list[dict[str, Any]]]) -> None:
    for name, rs in rows.items():
        write_stream(tmp / f"{name}.jsonl", rs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_every_plan_gives_the_filtered_reference_and_its_rows(tmp_path: Path, data: st.DataObject) -> None:
    q = data.draw(filtered_queries())
    assert parse_query(query_to_dict(q), "q.yaml") == q   # a valid query, and its filters round-trip
    rows = data.draw(data_rows(q))
    _write(tmp_path, q, rows)
    names: dict[str, dict[int, tuple[str, ...]]] = {}
    streams = load_streams(q, tmp_path, names)
    want = reference_join(q, tuples_of_rows(q, load_rows(q, tmp_path)))
    algorithm = data.draw(st.sampled_from(["SM-S1", "SP-S", "SP-D", "SM-S2", "SM-D1", "SM-D2"]))
    for what, plan in (("central", central(q, q.streams[0].site)), (algorithm, uniform(q, algorithm)),
                       ("auto", resolve_plan(q, "auto", streams=streams))):
        assert_same(run_plan(q, streams, plan), want, f"{what} against the filtered reference")
    f = io.BytesIO()
    run_embedded(q, streams, uniform(q, "SM-S1"), RowsSink(q, f, names, streams))
    got = [orjson.loads(line) for line in f.getvalue().splitlines()]
    results = [r for r, n in want.items() for _ in range(n)]
    expected = reference_rows(q, load_rows(q, tmp_path), results)
    def key(row: dict[str, Any]) -> bytes:   # the columns' order is the SELECT list's; a star's fields any order
        return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
    assert sorted(map(key, got)) == sorted(map(key, expected))
    assert all(list(r)[-2:] == ["ids", "ts"] for r in got)


def test_a_filtered_stream_ships_fewer_bytes(tmp_path: Path) -> None:
    q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
        "A": {"site": "a", "window": "1s"}, "B": {"site": "b", "window": "1s"}}}, "q.yaml")
    rows = {"A": [{"id": i, "ts": 10 * i, "k": f"v{i % 3}", "n": i, "pad": "x" * 40} for i in range(60)],
            "B": [{"id": i, "ts": 10 * i + 5, "k": f"v{i % 3}", "n": i, "pad": "y" * 40} for i in range(60)]}
    _write(tmp_path, q, rows)
    filtered = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
        "A": {"site": "a", "window": "1s", "where": "n >= 50"}, "B": {"site": "b", "window": "1s"}}}, "q.yaml")
    shipped = {}
    for name, query in (("all", q), ("filtered", filtered)):
        streams = load_streams(query, tmp_path)
        report = run_embedded(query, streams, central(query, "b"), RowCounter())
        shipped[name] = report.bytes
        assert report.results == sum(reference_join(query, tuples_of_rows(query, load_rows(query, tmp_path))).values())
    assert len(load_streams(filtered, tmp_path)["A"]) == 10
    assert shipped["filtered"] < shipped["all"] / 3, shipped


class RowCounter:
    """A sink that counts (the report has the bytes)."""

    count = 0

    def emit(self, inst: Any, head_pos: int, pos: int, groups: list[Any], now: float) -> None:
        self.count += sum(len(t) for _, t in groups)


def test_ranks_count_the_kept_rows_only(tmp_path: Path) -> None:
    q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
        "A": {"site": "a", "window": "2 tuples", "where": "keep = TRUE"}, "B": {"site": "b", "window": "1s"}}},
        "q.yaml")
    _write(tmp_path, q, {"A": [{"id": i, "ts": i, "k": "x", "keep": i % 2 == 0} for i in range(6)],
                         "B": [{"id": 0, "ts": 10, "k": "x"}]})
    a = load_streams(q, tmp_path)["A"]
    assert [(t.id, t.seq) for t in a] == [(0, 0), (2, 1), (4, 2)]
    # a tuple window of 2 holds the last two *kept* rows: ids 2 and 4 (not 4 and 5)
    assert Counter(ids[0] for ids, _ in run_plan(q, load_streams(q, tmp_path), central(q, "b"))) == {2: 1, 4: 1}
