"""The distributed update (DNU) reaches the plan of the centralised one (CNU: Algorithm 1 on the
reported statistics) after every change, whatever the statistics, the join graph, the order in
which the relays' messages arrive, and when several streams change at once.

Each DNU node sees only its own streams' statistics: the others' are poisoned in its view of the
query (:class:`joinlib.adaptive.dnu.DnuNode`), so a node that used them would diverge."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.adaptive import protocol
from joinlib.adaptive.cnu import CnuPlanner
from joinlib.adaptive.dnu import DnuNode
from joinlib.adaptive.jep import JEP
from joinlib.adaptive.planner import algorithm1
from joinlib.adaptive.protocol import Message, PlanUpdate, StatsReport
from joinlib.adaptive.stats import StreamStatistics, with_stats
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.model import Network

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def query(m: int, topology: str, sites: list[str]):
    stats = [SyntheticStats(rate=100, tuple_bytes=150, selectivity=0.01, window_ms=500) for _ in range(m)]
    return build_query(f"q{m}", stats, topology_edges(m, topology), network=Network(5, 1024), sites=sites)


@st.composite
def scenarios(draw):
    m = draw(st.integers(2, 6))
    topology = draw(st.sampled_from(["complete", "chain", "star", "cycle"]))
    # mostly one stream per node (the paper's model); sometimes two streams share a node
    sites = [f"N{i + 1}" for i in range(m)]
    if m > 2 and draw(st.booleans()):
        sites[-1] = sites[0]
    q = query(m, topology, sites)
    changes = []
    for _ in range(draw(st.integers(1, 6))):
        batch = []
        for s in draw(st.lists(st.sampled_from(q.names), min_size=1, max_size=3, unique=True)):
            rate = draw(st.sampled_from([0.0, 10.0, 50.0, 100.0, 137.5, 200.0, 400.0]))
            batch.append(StreamStatistics(s, rate, draw(st.sampled_from([40.0, 150.0, 151.0, 600.0])),
                                          rate * 0.5, (("J", draw(st.sampled_from([0.005, 0.01, 0.02, 0.5]))),)))
        changes.append(batch)
    return q, changes, draw(st.integers(0, 2**32 - 1)), draw(st.booleans())


def deliver(nodes, pending, rng, wire_codec):
    """Every message, one at a time in a random order (through the Avro codec when asked)."""
    count = 0
    while pending:
        msg = pending.pop(rng.randrange(len(pending)))
        if wire_codec:
            msg = protocol.decode(protocol.encode(msg))
        count += 1
        pending += nodes[msg.dst].on_relay(msg)
    return count


@SETTINGS
@given(scenarios())
def test_dnu_reaches_the_cnu_plan_after_every_change(scenario):
    q, changes, seed, wire_codec = scenario
    rng = random.Random(seed)
    initial = algorithm1(q)
    nodes = {site: DnuNode(site, q, initial) for site in dict.fromkeys(s.site for s in q.streams)}
    cnu = CnuPlanner(q.sites[0], q, initial)
    site_of = {s.name: s.site for s in q.streams}
    mid = 0
    for epoch, batch in enumerate(changes):
        pending: list[Message] = []
        for stats in batch:           # simultaneous triggers: all sent before any is delivered
            mid += 1
            pending += nodes[site_of[stats.stream]].trigger(mid, stats.stream, stats)
            cnu.on_report(mid, StatsReport(stats.stream, epoch, stats))
            cnu.switched()            # the centralised update, one report at a time
        deliver(nodes, pending, rng, wire_codec)
        dnu = JEP(tuple(nodes[site_of[h]].heads[h].sep for h in q.names))
        assert dnu == cnu.jep, f"after change {epoch}:\nDNU {dnu.describe()}\nCNU {cnu.jep.describe()}"
        assert cnu.jep == algorithm1(with_stats(q, cnu.reported_stats()))


def test_cnu_sends_the_plan_to_every_node_and_asks_for_new_windows():
    """Algorithm 2's messages: n − 1 plan updates (N_q updates itself) when all n nodes are
    affected, and one window request per window newly kept somewhere."""
    q = query(4, "complete", ["N1", "N2", "N3", "N4"])
    cnu = CnuPlanner("N1", q, algorithm1(q))
    out = cnu.on_report(7, StatsReport("S4", 17, StreamStatistics("S4", 50.0, 150.0, 25.0, (("J", 0.01),))))
    updates = [m for m in out if isinstance(m.body, PlanUpdate)]
    assert sorted(m.dst for m in updates) == ["N1", "N2", "N3", "N4"]
    assert all(isinstance(m.body, PlanUpdate) and not m.body.notify for m in updates)
    remote = [m for m in out if m.dst != "N1"]
    assert all(m.mid == cnu.gen == 1 for m in out)
    assert len([m for m in remote if isinstance(m.body, PlanUpdate)]) == 3
    # a second report waits for the switch; an identical plan sends nothing
    assert cnu.on_report(8, StatsReport("S4", 19, StreamStatistics("S4", 51.0, 150.0, 25.5, (("J", 0.01),)))) == []
    assert cnu.switched() == []
