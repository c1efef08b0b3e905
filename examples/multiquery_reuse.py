"""The paper's motivating example (seed 001, Sect. 2.1), on joinlib.multiquery.

Q2 = FLIGHTS ⋈ CHECK-INS is deployed first; then Q1 = FLIGHTS ⋈ WEATHER ⋈ CHECK-INS arrives.  By
intermediate sizes alone Q1 would join FLIGHTS ⋈ WEATHER first; the integrated planner instead reuses Q2's
advertised FLIGHTS ⋈ CHECK-INS (same signature, and it carries the columns Q1 needs, FL.destn included):
Q1 then pays only the transfer of that stream, not the shipping of FLIGHTS and CHECK-INS again.

    python examples/multiquery_reuse.py
"""
from __future__ import annotations

from joinlib.multiquery.cost import Deployments
from joinlib.multiquery.planners import Context, get_planner
from joinlib.multiquery.streams import BaseStream, Bound, Catalogue, ContinualQuery, JoinPredicate, Selection
from joinlib.multiquery.topology import parse_topology

TOPOLOGY = """
links:
  - {from: flights, to: n1, latency: 2ms}
  - {from: checkins, to: n1, latency: 2ms}
  - {from: weather, to: n3, latency: 2ms}
  - {from: n1, to: n2, latency: 5ms}
  - {from: n2, to: n3, latency: 5ms}
  - {from: n1, to: n3, latency: 6ms}
  - {from: n3, to: sink3, latency: 2ms}
  - {from: n3, to: sink4, latency: 3ms}
"""
top = parse_topology(TOPOLOGY, "example")
cat = Catalogue({"FL": BaseStream("FL", "flights", 500.0), "CI": BaseStream("CI", "checkins", 80.0),
                 "WR": BaseStream("WR", "weather", 5.0)})
atl = Selection("FL.departing = 'ATLANTA'", 0.1)
fl_ci = JoinPredicate("FL.num = CI.flnum", 0.02)
fl_wr = JoinPredicate("FL.destn = WR.city", 0.05)
q2 = ContinualQuery("Q2", ("FL", "CI"), (fl_ci,), (atl,), ("FL.status", "CI.status", "FL.destn"), "sink3")


q1 = ContinualQuery("Q1", ("FL", "WR", "CI"), (fl_ci, fl_wr), (atl,), ("FL.status", "WR.forecast", "CI.status"),
                     "sink4")

for name in ("optimal", "optimal-noreuse", "ptd-optimal"):
    d = Deployments()
    b2 = Bound(q2, cat, top.index)
    d.deploy(get_planner("optimal").run(Context(top, b2, d)), b2)
    b1 = Bound(q1, cat, top.index)
    plan = get_planner(name).run(Context(top, b1, d))
    print(f"Q1 {name:<16} {plan.root.text(top):<42} marginal network usage {plan.cost(top):6.1f}")
