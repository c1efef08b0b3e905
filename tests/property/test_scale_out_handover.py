"""Scale-out within a site (joinlib.node.scale_out) moves one plan partition of a site at a time: its
host -- one plan instance, the partition's windows -- is snapshotted and restored elsewhere, and reads its
inputs again from the snapshot's positions.  Here every (site, partition) is a host of its own, driven as
tests/property/test_checkpoint.py drives sites; at random points partitions are handed over (the new host
restores the snapshot at once) or taken over after their owner died (it restores an older snapshot, the
doomed work in between lost).  The output must stay exactly the reference join, each result once."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.reference import reference_join
from joinlib.runtime.host import Host
from joinlib.testing import assert_same
from joinlib.testing.strategies import queries, stream_data
from tests.property.test_checkpoint import FEWER, Harness, _Queues
from tests.property.test_partitioned_exactness import partitioned, time_windows


def _unit(site: str, part: int) -> str:
    return f"{site}/p{part}"


class _UnitQueues(_Queues):
    """Messages to the host of (destination site, the envelope's partition)."""

    def send(self, env) -> None:
        src, dst = _unit(env.src, env.part), _unit(env.dst, env.part)
        key = (dst, env.gen, env.flow, env.epoch)
        self.bodies.setdefault((src,) + key, env.body)
        self.by_src[src].append(key)
        self.envs[src].append(env)
        self.q[dst].append(env)
        self.sent += 1


class PartHarness(Harness):
    """A host per (site, plan partition): what a scaled-out plan's instances run, wherever they run it."""

    def _sites(self) -> list[str]:
        self.units: dict[str, tuple[str, int]] = {}
        for spec in self.specs:
            for site in dict.fromkeys([s.site for s in self.query.streams] + list(spec.ir.nodes)):
                self.units[_unit(site, spec.part)] = (site, spec.part)
        self.routes = self.plan.router(self.query)
        return list(self.units)

    def _queues(self) -> _Queues:
        return _UnitQueues(self.sites)

    def _site_of(self, unit: str) -> str:
        return self.units[unit][0]

    def _tuples(self, unit: str, stream: str, data: dict[str, list[Tup]], lo: int, hi: int) -> list[Tup]:
        route, part = self.routes[stream], self.units[unit][1]
        return [t for t in super()._tuples(unit, stream, data, lo, hi) if route is None or route(t) == part]

    def _make_host(self, unit: str, factory: Any) -> Host:
        site, part = self.units[unit]
        host = Host(site, self.net, self.sinks[unit], store_factory=factory)
        for spec in self.specs:
            if spec.part == part:
                host.install(spec)
        return host

    def give(self, unit: str, inp: tuple) -> None:
        node = self.nodes[unit]
        self.log[unit].append(inp)
        if inp[0] == "feed":
            node.feed(self.query.name, inp[1], inp[2], inp[3], part=self.units[unit][1])
        elif inp[0] == "msg":
            node.on_message(inp[1])
        else:
            node.set_last(self.query.name, inp[1])
        node.run()

    def crash(self, unit: str, snap, deliver: bool = False, messages_first: bool = False) -> None:
        """The partition restarts elsewhere from ``snap``: with ``deliver``, what its doomed host sent first
        reaches the other partitions' hosts (every envelope of a unit is of its partition)."""
        if deliver:
            for env in self.net.envs[unit][snap.sent:]:
                dst = _unit(env.dst, env.part)
                queue = self.net.q[dst]
                i = next((i for i, x in enumerate(queue) if x is env), None)
                if i is not None and dst != unit:
                    self.give(dst, ("msg", queue.pop(i)))
        super().crash(unit, snap, False, messages_first)


@FEWER
@given(st.data())
def test_partitions_handed_over_and_taken_over_keep_the_run_exact(data):
    query = time_windows(data.draw(queries(max_streams=3)), data.draw(st.integers(5, 80)))
    streams = data.draw(stream_data(query))
    plan = data.draw(partitioned(query, streams))
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    want = reference_join(query, streams)
    clean = PartHarness(query, streams, plan, seed)
    clean.run()
    assert_same(clean.results(), want, f"no move; plan {plan.to_json()}")
    total = clean.steps
    h = PartHarness(query, streams, plan, seed)
    moves = []
    for _ in range(data.draw(st.integers(1, 3), label="moves")):
        unit = data.draw(st.sampled_from(h.sites))
        k = total * data.draw(st.integers(0, 100)) // 100
        taken_over = data.draw(st.booleans(), label="owner died (else handed over)")
        d = (total - k) * data.draw(st.integers(0, 50)) // 100 if taken_over else 0
        moves.append((unit, k, d))
        h.run(max(0, k - h.steps))
        snap = h.snapshot(unit)
        h.run(d)
        h.crash(unit, copy.copy(snap), data.draw(st.booleans(), label="deliver doomed sends"))
    h.run()
    assert_same(h.results(), want, f"plan {plan.to_json()} seed {seed} moves {moves}")
