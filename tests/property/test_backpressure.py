"""The node service's back-pressure (joinlib.node.backpressure: InboundGate, SourceGate) never stalls
a run and keeps it exact.

The harness of the checkpoint suite drives every site's host; here each site's inbound messages are
one FIFO queue (a node topic partition: every sender's flows in their send order, interleaved), and a
site whose gate says "pause" gets no message until the gate resumes.  One site reads its own sources
slowly (so the others' messages pile up ahead of it: the inbound gate's case) or reads its messages
slowly (so its own sources run ahead of its joins: the source gate's).  If pausing could wait for a
record behind a paused queue's head, the run would stop with hosts unfinished.
"""
from __future__ import annotations

import random

from hypothesis import event, given
from hypothesis import strategies as st

from joinlib.model import Execution, Network, Predicate, Query, Stream, Tup, Window
from joinlib.node.backpressure import InboundGate, SourceGate
from joinlib.plan import logical as plans_mod
from joinlib.reference import reference_join
from joinlib.testing import assert_same
from tests.property.test_checkpoint import SETTINGS, Harness, _describe, runs


class GatedHarness(Harness):
    """:class:`Harness` with FIFO inbound queues behind a gate per site, each source stream its own
    channel behind a :class:`SourceGate` per site, and one slow site (``slow``: its inbound messages, or
    with ``slow_messages`` false its sources, come rarely)."""

    def __init__(self, query, data, plan, seed: int, slow: str, ahead_s: float, slow_messages: bool = False,
                 most_s: float = 0.0, budget: int = 0) -> None:
        super().__init__(query, data, plan, seed)
        tau = query.execution.interval_ms
        self.gates = {s: InboundGate(s, tau, ahead_s=ahead_s) for s in self.sites}
        self.src_gates = {s: SourceGate(tau, ahead_s=ahead_s, most_s=most_s, budget=budget) for s in self.sites}
        self.slow, self.slow_messages = slow, slow_messages
        # per (site, channel): a stream's feeds in order; the end marker is a channel of its own
        self.channels: dict[tuple[str, str], list[tuple]] = {}
        for site, items in self.src.items():
            for inp in items:
                self.channels.setdefault((site, inp[1] if inp[0] == "feed" else "<end>"), []).append(inp)

    def _open(self, site: str, channel: str) -> bool:
        return channel not in self.src_gates[site].paused

    def step(self) -> bool:
        options = [("src", s, c) for (s, c), items in self.channels.items() if items and self._open(s, c)]
        options += [("msg", s, "") for s in self.sites if self.net.q[s] and not self.gates[s].paused]
        if not options:
            return False
        slow = ("msg" if self.slow_messages else "src", self.slow)
        others = [o for o in options if o[:2] != slow]
        kind, site, channel = self.rng.choice(others if others and self.rng.random() < 0.9 else options)
        if kind == "src":
            inp = self.channels[(site, channel)].pop(0)
        else:
            env = self.net.q[site].pop(0)
            self.gates[site].received(env.part, env.gen, env.flow, env.epoch)
            inp = ("msg", env)
        self.give(site, inp)
        self.gates[site].decide(self.nodes[site])
        self.src_gates[site].decide(self.nodes[site], self.query.name)
        self.steps += 1
        return True


@SETTINGS
@given(st.data())
def test_gated_inbound_queues_neither_stall_nor_change_the_output(data):
    query, streams, plan = data.draw(runs())
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    h = GatedHarness(query, streams, plan, seed, slow=data.draw(st.sampled_from(query.sites), label="slow"),
                     ahead_s=data.draw(st.sampled_from([0.0, 0.02, 0.05, 1.0]), label="ahead_s"),
                     slow_messages=data.draw(st.booleans(), label="slow messages"),
                     most_s=data.draw(st.sampled_from([0.0, 0.1, 2.0]), label="most_s"),
                     budget=data.draw(st.sampled_from([0, 3, 10**9]), label="budget"))
    h.run()
    pauses = sum(g.pauses for g in h.gates.values())
    event(f"inbound gate paused: {'yes' if pauses else 'no'}")
    event(f"source gate paused: {'yes' if sum(g.pauses for g in h.src_gates.values()) else 'no'}")
    assert_same(h.results(), reference_join(query, streams), _describe(query, plan, seed, []))


def _chain3() -> tuple[Query, dict[str, list[Tup]]]:
    q = Query("chain3", (Stream("A", 0, "a", Window("time", 40), ("k",)),
                         Stream("B", 1, "b", Window("time", 30), ("k", "x")),
                         Stream("C", 2, "c", Window("time", 25), ("x",))),
              (Predicate("A", "k", "B", "k"), Predicate("B", "x", "C", "x")),
              Network(5, 1000), Execution(10, 20))
    rnd = random.Random(3)
    data = {}
    for s in q.streams:
        ts = sorted(rnd.randrange(0, 400) for _ in range(200))
        data[s.name] = [Tup(s.pos, i, t, i, tuple(f"v{rnd.randrange(4)}" for _ in s.join_attrs), b"r")
                        for i, t in enumerate(ts)]
    return q, data


def test_central_site_reading_its_sources_slowly_pauses_its_inbound_topic_and_stays_exact():
    """Central at site a, whose own source is read slowly: b and c ship every epoch to a and run far
    ahead; a's gate pauses (repeatedly) and the output is the reference join."""
    q, data = _chain3()
    h = GatedHarness(q, data, plans_mod.central(q, "a"), seed=11, slow="a", ahead_s=0.05)
    h.run()
    assert h.gates["a"].pauses >= 2
    assert not h.gates["a"].paused
    assert_same(h.results(), reference_join(q, data), "central at a")
    # the other sites receive nothing under central: their gates never had a reason to pause
    assert h.gates["b"].pauses == h.gates["c"].pauses == 0


def test_central_site_joining_slowly_pauses_its_own_sources_and_stays_exact():
    """Central at site a, which takes its inbound messages slowly: its own source runs ahead of its joins
    (inserted, not purged); a's source gate pauses that stream (repeatedly) and the output is exact."""
    q, data = _chain3()
    h = GatedHarness(q, data, plans_mod.central(q, "a"), seed=5, slow="a", ahead_s=0.05, slow_messages=True)
    h.run()
    assert h.src_gates["a"].pauses >= 2
    assert_same(h.results(), reference_join(q, data), "central at a, slow messages")


def test_a_source_runs_ahead_past_the_first_depth_until_it_holds_its_budget():
    """The same slow joins: with a deep second threshold, the first one pauses the source only once it holds
    its budget of tuples -- never with a budget it cannot reach, at once with a budget of one."""
    q, data = _chain3()
    roomy = GatedHarness(q, data, plans_mod.central(q, "a"), seed=5, slow="a", ahead_s=0.05, slow_messages=True,
                         most_s=1000.0, budget=10**9)
    roomy.run()
    assert roomy.src_gates["a"].pauses == 0
    assert_same(roomy.results(), reference_join(q, data), "a deep source gate")
    tight = GatedHarness(q, data, plans_mod.central(q, "a"), seed=5, slow="a", ahead_s=0.05, slow_messages=True,
                         most_s=1000.0, budget=1)
    tight.run()
    assert tight.src_gates["a"].pauses >= 2
    assert_same(tight.results(), reference_join(q, data), "a source gate at its budget")
