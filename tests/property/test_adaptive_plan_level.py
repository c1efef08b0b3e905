"""Adaptive re-planning with the plan-level pricing (the default, ``PlanLevel``): the distributed
update reaches the centralised plan after every change, and runs with a fence margin of 0 (the
experiment's) stay exact, with and without restarts."""
from __future__ import annotations

import dataclasses
import random

from hypothesis import given
from hypothesis import strategies as st

from joinlib.adaptive.cnu import CnuPlanner
from joinlib.adaptive.dnu import DnuNode
from joinlib.adaptive.embedded import Restart
from joinlib.adaptive.jep import JEP
from joinlib.adaptive.planner import PlanLevel, algorithm1, plan_level
from joinlib.adaptive.protocol import Message, StatsReport
from joinlib.adaptive.stats import with_stats
from joinlib.testing.strategies import queries
from tests.property.test_adaptive_dnu import SETTINGS, deliver, scenarios
from tests.property.test_adaptive_exactness import SETTINGS as RUN_SETTINGS
from tests.property.test_adaptive_exactness import assert_exact, changing_data, configs


@SETTINGS
@given(scenarios())
def test_dnu_reaches_the_cnu_plan_with_plan_level_pricing(scenario):
    q, changes, seed, wire_codec = scenario
    model = PlanLevel()
    rng = random.Random(seed)
    initial = algorithm1(q, model)
    nodes = {site: DnuNode(site, q, initial, model) for site in dict.fromkeys(s.site for s in q.streams)}
    cnu = CnuPlanner(q.sites[0], q, initial, model)
    site_of = {s.name: s.site for s in q.streams}
    mid = 0
    for epoch, batch in enumerate(changes):
        pending: list[Message] = []
        for stats in batch:
            mid += 1
            pending += nodes[site_of[stats.stream]].trigger(mid, stats.stream, stats)
            cnu.on_report(mid, StatsReport(stats.stream, epoch, stats))
            cnu.switched()
        deliver(nodes, pending, rng, wire_codec)
        dnu = JEP(tuple(nodes[site_of[h]].heads[h].sep for h in q.names))
        assert dnu == cnu.jep, f"after change {epoch}:\nDNU {dnu.describe()}\nCNU {cnu.jep.describe()}"
        assert cnu.jep == plan_level(with_stats(q, cnu.reported_stats()), model)


@RUN_SETTINGS
@given(st.data())
def test_adaptive_runs_with_fence_margin_zero_are_exact(data):
    query = data.draw(queries())
    streams = data.draw(changing_data(query))
    config = dataclasses.replace(data.draw(configs(query)), fence_margin=0)
    restarts = []
    if data.draw(st.booleans()):
        span = max([t.ts for v in streams.values() for t in v] or [0]) + 3 * query.execution.interval_ms
        restarts = [Restart(data.draw(st.sampled_from(query.sites)), data.draw(st.floats(1, span)))]
    assert_exact(query, streams, config, restarts)
