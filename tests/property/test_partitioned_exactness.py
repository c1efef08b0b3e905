"""Partitioned plans (PMJoin): any partition function, any number of partitions, any plan per
partition -- the output is exactly the reference join's, each result once."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.errors import PlanError
from joinlib.model import Query, Window
from joinlib.plan import logical as plans_mod
from joinlib.plan import partitioned as pm
from joinlib.plan.partition import HashPartition
from joinlib.pmjoin import partitioned as choose_pm
from joinlib.testing import assert_exact
from joinlib.testing.strategies import plans, queries, reductions, stream_data

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def time_windows(query: Query, size: int) -> Query:
    """The query with every tuple-count window made a time window (those do not partition)."""
    return replace(query, streams=tuple(s if s.window.is_time else replace(s, window=Window("time", size))
                                        for s in query.streams))


@st.composite
def partitioned(draw, query: Query, streams) -> pm.Partitioned:
    by = pm.attribute_class(query)
    parts = draw(st.sampled_from([1, 2, 5]))
    fn = choose_pm.function_for(query, streams, by, draw(st.sampled_from(pm.SCHEMES)), parts)
    each = [draw(st.one_of(plans(query), reductions(query),
                           st.sampled_from(query.nodes).map(lambda n: plans_mod.central(query, n))))
            for _ in range(fn.d)]
    return pm.Partitioned(by, fn, tuple(each))


@SETTINGS
@given(st.data())
def test_partitioned_plans_are_exact(data):
    query = time_windows(data.draw(queries()), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(partitioned(query, streams)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_partitioned_plans_are_exact_through_the_wire_codec(data):
    """Partitions travel on the wire (the envelope's ``part``): encode and decode every message."""
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(partitioned(query, streams)), roundtrip=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_pmjoin_with_auto_per_partition_is_exact(data):
    """``pmjoin[:hash|range|rate][:D]`` and ``pmjoin:site``: auto chooses each partition's plan on the partition's
    data."""
    from joinlib.planner.registry import resolve_plan
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    scheme = data.draw(st.sampled_from(pm.SCHEMES))
    spec = "pmjoin:site" if scheme == "site" else f"pmjoin:{scheme}:{data.draw(st.sampled_from([1, 2, 5]))}"
    plan = choose_pm.build(query, streams, spec, lambda q, s: resolve_plan(q, "auto", streams=s))
    assert_exact(query, streams, plan)


def test_values_of_a_result_share_a_partition_and_broadcast_streams_go_everywhere():
    from joinlib.model import Predicate, Stream
    w = Window("time", 10)
    q = Query("q", (Stream("A", 0, "a", w, ("k",)), Stream("B", 1, "b", w, ("k", "x")), Stream("C", 2, "c", w, ("y",))),
              (Predicate("A", "k", "B", "k"), Predicate("B", "x", "C", "y")))
    assert pm.attribute_class(q) == (("A", "k"), ("B", "k"))
    p = pm.Partitioned(pm.attribute_class(q), HashPartition(3), (plans_mod.central(q),) * 3)
    router = p.router(q)
    assert router["C"] is None and router["A"] is not None


@pytest.mark.parametrize("spec,want", [("pmjoin", ("rate", pm.DEFAULT_PARTS)), ("pmjoin:range", ("range", 4)),
                                       ("pmjoin:7", ("rate", 7)), ("pmjoin:hash:2", ("hash", 2))])
def test_spec(spec, want):
    assert pm.parse_spec(spec) == want


@pytest.mark.parametrize("spec", ["pmjoin:zig", "pmjoin:0", "pmjoin:hash:x"])
def test_bad_specs_say_what_is_accepted(spec):
    with pytest.raises(PlanError, match=r"pmjoin\[:hash\|range\|rate\]\[:D\].*or pmjoin:site"):
        pm.parse_spec(spec)


def test_tuple_windows_are_refused_with_the_reason():
    from joinlib.model import Predicate, Stream
    q = Query("q", (Stream("A", 0, "a", Window("tuples", 10), ("k",)), Stream("B", 1, "b", Window("time", 10), ("k",))),
              (Predicate("A", "k", "B", "k"),))
    with pytest.raises(PlanError, match="A has a tuple-count window"):
        pm.check_partitionable(q)
