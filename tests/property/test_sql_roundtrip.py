"""SQL and YAML say the same queries: a random query written as SQL parses back to the same query, YAML -> SQL ->
YAML gives the same document, and the embedded run of the SQL query gives the YAML one's results.

The queries are :func:`joinlib.testing.strategies.queries` (chain, star, cycle, complete graphs; time and tuple
windows; shared sites; statistics; Bloom filter rates) with what that strategy leaves out drawn on top: sources of
every format, per-attribute selectivities, processing-only nodes and per-link overrides, idle timeouts, SELECT
lists and sinks, names that need quoting, filters (every operator, literals of every kind)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.filter_spec import OPS, Condition
from joinlib.model import Link, Query, StreamStats
from joinlib.output_spec import STAR, Column, Output
from joinlib.plan.logical import uniform
from joinlib.query import parse_query, query_to_dict
from joinlib.reference import reference_join
from joinlib.source_spec import SourceSpec
from joinlib.sql import parse_sql, query_to_sql
from joinlib.testing.exact import run_plan
from joinlib.testing.strategies import queries, stream_data

NAMES = st.sampled_from(["q", "my-query", "Select", "within", "q_2"])
FIELDS = st.sampled_from(["payload", "p2", "a", "b"])


@st.composite
def sources(draw: st.DrawFn, join_attrs: tuple[str, ...]) -> SourceSpec | None:
    fmt = draw(st.sampled_from([None, "json", "avro", "sourcebatch"]))
    if fmt is None:
        return None
    topic = draw(st.sampled_from(["events.a", "ev-b", "c_1"]))
    start = draw(st.sampled_from(["latest", "earliest"]))
    if fmt == "sourcebatch":
        return SourceSpec(topic, fmt, start=start)
    attrs = draw(st.one_of(st.none(), st.lists(FIELDS, unique=True, max_size=2).map(tuple)))
    return SourceSpec(topic, fmt, draw(st.sampled_from(["ts", "time", "e.t"])),
                      draw(st.sampled_from(["ms", "s", "us", "ns", "iso"])),
                      draw(st.sampled_from([None, "id", "key"])), attrs,
                      None, "http://localhost:8081" if fmt == "avro" else None, start)


LITERALS = st.one_of(st.text(st.sampled_from("ab'%_ \\é"), max_size=4), st.integers(-10**12, 10**12),
                     st.floats(allow_nan=False, allow_infinity=False), st.booleans())


@st.composite
def conditions(draw: st.DrawFn, fields: list[str]) -> Condition:
    """One condition of a stream's filter (any operator, literals of every kind)."""
    field, op = draw(st.sampled_from(fields)), draw(st.sampled_from(OPS))
    if op in ("IS NULL", "IS NOT NULL"):
        return Condition(field, op)
    if op in ("LIKE", "NOT LIKE"):
        return Condition(field, op, (draw(st.text(st.sampled_from("ab%_'"), max_size=4)),))
    if op in ("IN", "NOT IN"):
        kind: st.SearchStrategy[Any] = draw(st.sampled_from([st.text(st.sampled_from("ab'"), max_size=3),
                                                             st.integers(-5, 5), st.booleans()]))
        return Condition(field, op, tuple(draw(st.lists(kind, min_size=1, max_size=3))))
    return Condition(field, op, (draw(LITERALS),))


@st.composite
def rich_queries(draw: st.DrawFn) -> Query:
    q = draw(queries(max_streams=4))
    streams = []
    for s in q.streams:
        sel = tuple((a, draw(st.sampled_from([0.5, 0.01, 0.0002, 1.0]))) for a in s.join_attrs
                    if draw(st.booleans()))
        stats = replace(s.stats, selectivity=sel,
                        attributes=draw(st.one_of(st.none(), st.integers(0, 300)))) \
            if draw(st.booleans()) else s.stats or StreamStats()
        where = tuple(draw(st.lists(conditions(["payload", "id", "ts", *s.join_attrs]), max_size=3)))
        streams.append(replace(s, stats=stats, source=draw(sources(s.join_attrs)), where=where))
    nodes = ("dc",) if draw(st.booleans()) else ()
    sites = q.sites + nodes
    links: tuple[Link, ...] = ()
    if draw(st.booleans()):
        a, b = draw(st.sampled_from([(x, y) for x in sites for y in sites if x != y]))
        links = (Link(a, b, draw(st.sampled_from([0.5, 3.0, 60.0])), draw(st.sampled_from([256.0, 45000.0]))),)
    network = replace(q.network, links=links, nodes=nodes)
    execution = replace(q.execution, idle_timeout_ms=draw(st.sampled_from([5000, 2000, 1])))
    return replace(q, name=draw(NAMES), streams=tuple(streams), network=network, execution=execution,
                   output=draw(outputs(q)))


@st.composite
def outputs(draw: st.DrawFn, q: Query) -> Output:
    if draw(st.booleans()):
        return Output(None, draw(st.sampled_from([None, "rows.out"])))
    cols: list[Column] = []
    for i in range(draw(st.integers(1, 4))):
        s = draw(st.sampled_from(q.names))
        field = draw(st.sampled_from(["*", "id", "ts", "payload", "p2"] + list(q.stream(s).join_attrs)))
        cols.append(Column(s, field, None if field == "*" else f"c{i}"))
    if draw(st.booleans()):
        cols.insert(0, STAR)
    return Output(tuple(cols), draw(st.sampled_from([None, "rows.out"])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rich_queries())
def test_a_query_written_as_sql_parses_back_to_the_same_query(q: Query) -> None:
    assert parse_query(query_to_dict(q), "q.yaml") == q      # a valid query to begin with
    assert parse_sql(query_to_sql(q), "q.sql") == q


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rich_queries())
def test_yaml_to_sql_to_yaml(q: Query) -> None:
    doc = query_to_dict(q)
    assert query_to_dict(parse_sql(query_to_sql(parse_query(doc, "q.yaml")), "q.sql")) == doc


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_embedded_run_of_the_sql_query_is_the_yaml_ones(data: st.DataObject) -> None:
    q = data.draw(queries(max_streams=3))
    streams = data.draw(stream_data(q, max_tuples=12))
    from_yaml = parse_query(query_to_dict(q), "q.yaml")
    from_sql = parse_sql(query_to_sql(from_yaml), "q.sql")
    got = [run_plan(query, streams, uniform(query, "SM-S1")) for query in (from_yaml, from_sql)]
    assert got[0] == got[1] == reference_join(q, streams)
