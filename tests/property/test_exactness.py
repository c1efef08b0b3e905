"""Every plan — any order, any algorithm mix, central — gives exactly the reference output."""
from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib import plan as plans_mod
from joinlib.engine import run_embedded
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink
from tests.strategies import plans, queries, stream_data

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(query, data, plan, roundtrip=False) -> Counter:
    sink = CollectingSink(query)
    run_embedded(query, data, plan, sink, roundtrip=roundtrip)
    return Counter((ids, ts) for ids, ts, _ in sink.results)


def assert_exact(query, data, plan, roundtrip=False) -> None:
    got, want = run(query, data, plan, roundtrip), reference_join(query, data)
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"plan {plan.to_json()}\nmissing {list(missing.items())[:5]}\nextra {list(extra.items())[:5]}")


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
    algorithm = data.draw(st.sampled_from(plans_mod.ALGORITHMS))
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
