"""A window with a history (joinlib/runtime/window.py, ``HomeWindow.open_history``): the tuples of one stream from
before epoch 0 that its first batch takes in.  A reader of a shared operator keeps the derived tuples made within a
window before its origin this way (docs/multiquery.md "What a reusing query sees"): its results whose latest tuple
is at or after the origin must be exactly the reference join's over every stream's tuples, the history included.
Results headed before the origin are the reader's output's to drop (``OpOutput``'s floor), so both sides are cut
there.  Time windows; any plan (order, algorithm mix, central: where an MJoin operator's query runs) over random
data."""
from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.model import Query, Tup
from joinlib.plan import logical
from joinlib.reference import Result, reference_join
from joinlib.runtime.deploy import generations, hosts_for
from joinlib.runtime.sensor import TotalsSensor
from joinlib.runtime.sink import LatencyTap
from joinlib.sim.engine import drive, sim_network
from joinlib.testing import assert_same
from joinlib.testing.sink import TestingSink
from joinlib.testing.strategies import plans, queries, stream_data
from tests.property.test_partitioned_exactness import time_windows

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_with_history(query: Query, streams: dict[str, list[Tup]], plan: Any, name: str,
                     since: int) -> Counter[Result]:
    """``plan`` run embedded (as :func:`joinlib.sim.engine.run_embedded`) with stream ``name``'s window opened
    from ``since`` (< 0) on before anything is fed: its results headed at or after 0."""
    sink = TestingSink(query)
    specs = generations(query, plan)
    net = sim_network(query)
    hosts = hosts_for(specs, net, LatencyTap(sink), TotalsSensor(), None)
    hosts[query.stream(name).site].windows[(query.name, 0, name)].open_history(since)
    for s in query.streams:
        hosts[s.site].feed(query.name, s.name, streams.get(s.name, []))
    last = max((t.ts for tups in streams.values() for t in tups), default=0) // query.execution.interval_ms
    for h in hosts.values():
        h.set_last(query.name, max(last, 0))
    drive(net, hosts, max(last, 0), query.execution.interval_ms, lambda h, at: h.advance(query.name, int(at)))
    return Counter({r: n for r, n in sink.counts().items() if r[1] >= 0})


@st.composite
def with_history(draw: st.DrawFn, query: Query) -> tuple[dict[str, list[Tup]], str, int]:
    """Random data of ``query`` where one stream's tuples are moved back by up to a few epochs, some before 0
    (the history), those before ``since`` dropped (the reader drops them before they reach the window)."""
    streams = draw(stream_data(query))
    name = draw(st.sampled_from([s.name for s in query.streams]))
    tau = query.execution.interval_ms
    back = draw(st.integers(1, 4 * tau))
    since = -draw(st.integers(1, 4 * tau))
    moved = [Tup(t.pos, t.id, t.ts - back, t.seq, t.key, t.rest) for t in streams[name]]
    return {**streams, name: [t for t in moved if t.ts >= since]}, name, since


def _query(data: st.DataObject) -> Query:
    """Time windows only (an MJoin tree has no other; a tuple window's history would need its counts before 0)."""
    return time_windows(data.draw(queries()), data.draw(st.integers(5, 80)))


def _check(query: Query, plan: Any, data: st.DataObject) -> None:
    streams, name, since = data.draw(with_history(query))
    want = Counter({r: n for r, n in reference_join(query, streams).items() if r[1] >= 0})
    got = run_with_history(query, streams, plan, name, since)
    assert_same(got, want, f"history of {name} from {since}; plan {plan.to_json()}")


@SETTINGS
@given(st.data())
def test_random_plans_see_a_windows_history(data):
    query = _query(data)
    _check(query, data.draw(plans(query)), data)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_central_plans_see_a_windows_history(data):
    """The plan an MJoin operator's query runs (``central`` at its node)."""
    query = _query(data)
    _check(query, logical.central(query, data.draw(st.sampled_from(query.sites))), data)


def test_the_first_batch_takes_the_history_and_older_tuples_stay_late():
    from joinlib.query import parse_query
    from joinlib.runtime.lanes import Lane
    from joinlib.runtime.sensor import Sensor
    from joinlib.runtime.window import HomeWindow
    from joinlib.state.memory import MemoryWindowStore

    q = parse_query({"name": "q", "join": ["A.k = B.k"], "streams": {
        "A": {"site": "n1", "window": "100ms"}, "B": {"site": "n2", "window": "100ms"}},
        "execution": {"interval": "10ms"}}, "q")
    late: list[str] = []
    sensor = Sensor()
    sensor.on_late = lambda site, kind: late.append(kind)   # type: ignore[method-assign]
    w = HomeWindow(q.stream("A"), MemoryWindowStore(), 10, "n1", sensor)
    w.use(Lane("reader", [], 0, None))   # a reader at epoch 0: the batches stay
    w.open_history(-50)
    assert (w.since, w.watermark) == (-50, -50)
    tups = [Tup(0, i, ts, i, ("x",), b"") for i, ts in enumerate([-60, -50, -1, 3, 12])]
    w.feed(tups, 20)
    assert w.insert(0) and [t.ts for t in w.batches[0]] == [-50, -1, 3] and late == ["input"]
    assert w.insert(1) and [t.ts for t in w.batches[1]] == [12]
    assert [t.ts for t in w.store.tuples()] == [-50, -1, 3, 12]
    again = HomeWindow(q.stream("A"), MemoryWindowStore(), 10, "n1", sensor)
    again.restore(w.snapshot(lambda t: t, False), lambda t: t)
    assert again.since == -50
