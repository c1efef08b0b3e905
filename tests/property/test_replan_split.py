"""The trigger split of a replan (docs/live.md "Replan"), embedded: an old run that ends after head epoch E - 1 and
a new run -- another plan, a partitioned one too, generations numbered after the old run's -- that serves the head
epochs from E on, fed only the tuples from one window before E (its jump-start: the sources read again from there,
ranked afresh), give together exactly the reference join: their results are disjoint and their union is the
reference's, for any switch epoch."""
from __future__ import annotations

from collections import Counter
from typing import Optional, Union

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.control.compile import Compiled
from joinlib.control.run_plan import Generations, PartitionedRun
from joinlib.model import Query, Tup
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.reference import Result, reference_join
from joinlib.runtime.deploy import hosts_for
from joinlib.runtime.sensor import TotalsSensor
from joinlib.sim.engine import _feed, drive, sim_network
from joinlib.testing.exact import assert_same
from joinlib.testing.sink import TestingSink
from joinlib.testing.strategies import plans, queries, reductions, stream_data
from tests.property.test_partitioned_exactness import partitioned, time_windows


def run_part(query: Query, streams: dict[str, list[Tup]], plan: Union[Plan, Partitioned], last: int,
             first_epoch: int = 0, gen_base: int = 0, stop: Optional[int] = None) -> Counter[Result]:
    """One run of a replan, embedded: ``plan`` serving the head epochs ``[first_epoch, stop]`` (the compiled plan
    message's instance specs, as a node installs them), its generations numbered from ``gen_base``."""
    run_plan = PartitionedRun(plan) if isinstance(plan, Partitioned) else Generations.of(plan)
    specs = Compiled(query, run_plan, first_epoch=first_epoch, gen_base=gen_base).lowered().specs
    assert all(s.start >= first_epoch and s.gen >= gen_base for s in specs)
    sink = TestingSink(query)
    net = sim_network(query)
    hosts = hosts_for(specs, net, sink, TotalsSensor())
    _feed(query, streams, plan, hosts)
    for h in hosts.values():
        h.set_last(query.name, last if stop is None else stop)
    drive(net, hosts, last, query.execution.interval_ms, lambda h, at: h.advance(query.name, int(at)))
    return sink.counts()


def jump_start(query: Query, streams: dict[str, list[Tup]], first_epoch: int, slack: int) -> dict[str, list[Tup]]:
    """What the new run reads: each stream's tuples from one window (and ``slack``) before the switch, ranked from 0
    again (a run's ranks start where it starts reading)."""
    since = first_epoch * query.execution.interval_ms - max(s.window.size for s in query.streams) - slack
    return {name: [Tup(t.pos, t.id, t.ts, i, t.key, t.rest) for i, t in enumerate(t for t in tups if t.ts >= since)]
            for name, tups in streams.items()}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_old_and_new_run_split_the_reference_exactly(data):
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    ts = [t.ts for tups in streams.values() for t in tups]
    last = max(ts, default=0) // query.execution.interval_ms
    if last < 1:
        return
    first = data.draw(st.integers(1, last))
    old = data.draw(st.one_of(plans(query), reductions(query)))
    new = data.draw(st.one_of(plans(query), reductions(query), partitioned(query, streams)))
    got_old = run_part(query, streams, old, last, stop=first - 1)
    got_new = run_part(query, jump_start(query, streams, first, data.draw(st.integers(0, 50))), new, last,
                       first_epoch=first, gen_base=1)
    assert not set(got_old) & set(got_new), "a result from both runs"
    assert_same(got_old + got_new, reference_join(query, streams), f"switch at epoch {first}")
