"""Every plan — any order, any algorithm mix, central — gives exactly the reference output."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.algorithms import ALGORITHMS
from joinlib.plan import logical as plans_mod
from joinlib.testing import assert_exact
from joinlib.testing.strategies import plans, queries, reductions, stream_data, switched_plans

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_random_plans_are_exact(data):
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(plans(query)))


@SETTINGS
@given(st.data())
def test_uniform_plans_of_each_algorithm_are_exact(data):
    query = data.draw(queries(max_streams=3))
    streams = data.draw(stream_data(query))
    algorithm = data.draw(st.sampled_from(ALGORITHMS))
    assert_exact(query, streams, plans_mod.uniform(query, algorithm))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_central_plan_is_exact(data):
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    site = data.draw(st.sampled_from(query.sites))
    assert_exact(query, streams, plans_mod.central(query, site))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_exact_through_the_wire_codec(data):
    """Messages Avro-encoded and decoded on every hop: what the Kafka transport does."""
    query = data.draw(queries(max_streams=3))
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(plans(query)), roundtrip=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_planner_plans_are_exact(data):
    """Whatever the cost-based planners choose (any model) joins exactly."""
    from joinlib.planner import plan_for
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    planner = data.draw(st.sampled_from(["greedy", "exhaustive", "beam"]))
    model = data.draw(st.sampled_from(["paper", "bytes"]))
    assert_exact(query, streams, plan_for(planner, query, model))


@SETTINGS
@given(st.data())
def test_reductions_are_exact(data):
    """Semijoin programs along any spanning tree, rooted anywhere, results at any node, with key
    sets exact, as Bloom filters, or as tiny filters that let most tuples through."""
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(reductions(query)), roundtrip=data.draw(st.booleans()))


@SETTINGS
@given(st.data())
def test_plan_switches_are_exact(data):
    """Old generations serve the head epochs before a switch, new ones the rest: exact for any
    plans (orders, algorithms, start sites, central) switched at any epochs."""
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(switched_plans(query, streams)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_plan_switches_are_exact_through_the_wire_codec(data):
    query = data.draw(queries(max_streams=3))
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, data.draw(switched_plans(query, streams)), roundtrip=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_auto_plans_are_exact(data):
    """auto's plan — from the query's statistics, or measured on the data — joins exactly."""
    from joinlib.planner.auto import auto
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    assert_exact(query, streams, auto(query, streams if data.draw(st.booleans()) else None))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_auto_candidate_is_exact(data):
    """Every plan auto's generators and descent produce (mixed algorithms, sequences started at any
    node, partial central) joins exactly."""
    from joinlib.costs import WireModel
    from joinlib.planner.auto import rank
    query = data.draw(queries())
    streams = data.draw(stream_data(query))
    ranked = rank(query, WireModel())
    assert_exact(query, streams, data.draw(st.sampled_from([r.plan for r in ranked])))
