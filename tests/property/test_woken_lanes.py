"""``Host.run`` after nothing but messages runs only the lanes of the (query, partition) they reached
(joinlib/runtime/host.py): that must never leave a lane that could run unrun.

The checkpoint suite's harness drives every site's host one input at a time in a random order (feeds,
messages in any order, the end marker); after every input and its run, every lane of the host is run once
more, round robin over all of them: nothing may move.  Plans: any plan with generations (switches), and
partitioned plans (PMJoin: several partitions per host, the case the woken runs are for).
"""
from __future__ import annotations

from hypothesis import event, given
from hypothesis import strategies as st

from joinlib.plan import partitioned as pm
from joinlib.reference import reference_join
from joinlib.runtime.lanes import run_lanes
from joinlib.runtime.sensor import Sensor
from joinlib.testing import assert_same
from joinlib.testing.strategies import queries, stream_data
from tests.property.test_checkpoint import SETTINGS, Harness, _describe, _Queues, make_host, runs
from tests.property.test_partitioned_exactness import partitioned, time_windows


class _PartQueues(_Queues):
    """The harness's queues, for partitioned plans too: a message is known by its partition as well (the
    flows of every partition are numbered alike)."""

    def send(self, env) -> None:
        self.q[env.dst].append(env)
        self.sent += 1


class CheckedHarness(Harness):
    """:class:`Harness` that checks after every run that the host left no lane able to move."""

    def __init__(self, query, data, plan, seed: int) -> None:
        self.woken_runs = 0
        super().__init__(query, data, plan, seed)

    def _queues(self) -> _Queues:
        return _PartQueues(self.sites)

    def _make_host(self, name, factory):
        host = make_host(self.specs, name, self.net, self.sinks[name], factory)
        if isinstance(self.plan, pm.Partitioned):
            self.plan.route(self.query, host)
        return host

    def give(self, site: str, inp: tuple) -> None:
        node = self.nodes[site]
        self.woken_runs += node._woken is not None and inp[0] == "msg"
        super().give(site, inp)
        stuck = [repr(lane) for lane in node._lanes if not lane.done]
        assert not run_lanes(node._lanes, site, Sensor()), (
            f"after {inp[0]} at {site}, a full run moved lanes the host's run left: {stuck[:6]}")


@SETTINGS
@given(st.data())
def test_a_run_after_messages_leaves_no_lane_able_to_move(data):
    query, streams, plan = data.draw(runs())
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = CheckedHarness(query, streams, plan, seed)
    h.run()
    event(f"woken runs: {'yes' if h.woken_runs else 'no'}")
    assert_same(h.results(), reference_join(query, streams), _describe(query, plan, seed, []))


@SETTINGS
@given(st.data())
def test_partitioned_runs_after_messages_leave_no_lane_able_to_move(data):
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    plan = data.draw(partitioned(query, streams))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = CheckedHarness(query, streams, plan, seed)
    h.run()
    event(f"partitions: {len(plan.plans)}")
    event(f"woken runs: {'yes' if h.woken_runs else 'no'}")
    assert_same(h.results(), reference_join(query, streams), f"plan {plan.to_json()} seed {seed}")
