"""Rows built at a live result site (:class:`joinlib.rows.TupleRecords`, :func:`joinlib.rows.group_rows`) from the
tuples live sources decode (:class:`joinlib.ingest.records.Decoder`), against the reference rows projected from the
records as written; and Avro rows (:mod:`joinlib.rows_avro`) decode to the same rows with their schema.

Random queries, filters, SELECT lists and records come from ``test_where_rows``'s strategies; the records go through
the live decoder as JSON (ids and event times from ``id`` and ``ts``), carrying every field (``carry = 'all'``: the
decoder names them, the way it does for a query writing rows to a sink topic) or the SELECT list's fields.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.ingest.records import Decoder, Event
from joinlib.model import Query, Tup
from joinlib.output_spec import Column, Output
from joinlib.query import carried_by_default
from joinlib.reference import reference_join, tuples_of_rows
from joinlib.rows import Record, TupleRecords, group_rows, names_every_field, reference_rows
from joinlib.rows_avro import AvroRows, decode_row, row_schema
from joinlib.source_spec import SourceSpec
from tests.property.test_where_rows import data_rows, filtered_queries

ORIGIN = 1_700_000_000_000


def live(q: Query, carry_all: bool) -> Query:
    """``q`` with a live JSON source per stream (a sink topic, so that 'all' is named)."""
    out = replace(q.output, topic="rows")
    streams = tuple(replace(s, source=SourceSpec(
        f"ev.{s.name}", "json", "ts", "ms", "id",
        None if carry_all else carried_by_default(out, s.name, s.join_attrs))) for s in q.streams)
    return replace(q, streams=streams, output=out)


def decoded(q: Query, rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[int, Tup]]:
    """Per stream, the tuples the live decoder makes of the records (as JSON, event times ORIGIN + ts) it keeps."""
    out: dict[str, dict[int, Tup]] = {}
    for s in q.streams:
        assert s.source is not None
        dec = Decoder(s, s.source, ORIGIN, named=names_every_field(q))
        out[s.name] = {}
        for i, r in enumerate(rows[s.name]):
            ev = dec.decode(orjson.dumps({**r, "ts": r["ts"] + ORIGIN}), 0, i)
            if isinstance(ev, Event):
                out[s.name][ev.id] = Tup(s.pos, ev.id, ev.ts, i, ev.key, ev.rest)
    return out


def key(row: Record) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_live_rows_equal_the_reference_rows(data: st.DataObject) -> None:
    q = live(data.draw(filtered_queries()), carry_all=True)
    rows = data.draw(data_rows(q))
    tuples = decoded(q, rows)
    want = reference_join(q, tuples_of_rows(q, rows))
    results = [r for r, n in want.items() for _ in range(n)]
    assert q.output.columns is not None
    got: list[Record] = []
    records = TupleRecords(q, ORIGIN)
    for ids, ts in results:   # each result as one group, its last stream's tuple completing it
        row = [tuples[s.name][i] for s, i in zip(q.streams, ids, strict=True)]
        head = next(p for p, t in enumerate(row) if t.ts == ts)
        last = len(row) - 1 if head != len(row) - 1 else 0   # a result's head is in the row, not among the tuples
        group = tuple(None if p == last else t for p, t in enumerate(row))
        got += group_rows(q.output.columns, q.names, records, head, last, [(group, [row[last]])], ORIGIN)
    shifted = {n: [{**r, "ts": r["ts"] + ORIGIN} for r in rs] for n, rs in rows.items()}
    expected = reference_rows(q, shifted, [(ids, ts + ORIGIN) for ids, ts in results])
    assert Counter(map(key, got)) == Counter(map(key, expected))


def test_carried_attributes_are_named_by_the_source_spec() -> None:
    """A source carrying the SELECT list's fields (sorted by the decoder) -- no names travel."""
    from joinlib.query import parse_query
    q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
        "A": {"site": "a", "window": "1s"}, "B": {"site": "b", "window": "1s"}},
        "output": {"select": ["A.z", "A.b AS ab", "B.id AS bid"]}}, "q.yaml")
    q = live(q, carry_all=False)
    assert q.streams[0].source is not None and q.streams[0].source.attributes == ("z", "b")
    rows = {"A": [{"id": 1, "ts": 5, "k": "x", "z": 1.5, "b": "u", "other": 3}], "B": [{"id": 2, "ts": 6, "k": "x"}]}
    t = decoded(q, rows)
    assert len(t["A"][1].rest) < len(orjson.dumps(rows["A"][0]))
    assert q.output.columns is not None
    group = ((None, t["B"][2]), [t["A"][1]])   # B's tuple (the latest: the head) completed by A's
    got = list(group_rows(q.output.columns, q.names, TupleRecords(q, ORIGIN), 1, 0, [group], ORIGIN))
    assert got == [{"z": 1.5, "ab": "u", "bid": 2, "ids": {"A": 1, "B": 2}, "ts": ORIGIN + 6}]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_avro_rows_decode_to_the_rows(data: st.DataObject) -> None:
    q = data.draw(filtered_queries())
    assert q.output.columns is not None
    named = tuple(c for c in q.output.columns if c.field != "*") or (Column(q.names[0], "id", "first"),)
    q = replace(q, output=Output(named, "rows", "avro", "http://registry"))
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1),
                        st.floats(allow_nan=False), st.text(max_size=5))
    row: Record = {c.name: data.draw(st.integers(0, 2 ** 40) if c.field in ("id", "ts") else scalars)
                   for c in named}
    row["ids"] = {n: data.draw(st.integers(0, 2 ** 50)) for n in q.names}
    row["ts"] = data.draw(st.integers(0, 2 ** 45))
    schema = row_schema(q)
    value = AvroRows(schema, 42).encode(row)
    assert value[:5] == b"\x00\x00\x00\x00\x2a"
    import fastavro
    parsed = fastavro.parse_schema(schema)
    schemas: dict[int, Any] = {42: parsed}
    assert decode_row(value, schemas.get) == row
    assert decode_row(value, lambda i: None) is None and decode_row(b"{}", schemas.get) is None
