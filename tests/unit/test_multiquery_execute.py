"""Multi-query plans run (joinlib/multiquery/execute.py): a planner's operator tree, reuses included, as
MJoin trees over runtime queries; an operator the second query reuses runs once, and each query's output
is its reference join (issue 15)."""
from __future__ import annotations

from collections import Counter

import pytest

from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.errors import PlanError
from joinlib.mjoin.derived import deploy, lower_tree
from joinlib.mjoin.tree_plans import union_query
from joinlib.multiquery.cost import Deployments, OperatorPlan, PlanNode
from joinlib.multiquery.execute import runtime_query, to_tree
from joinlib.multiquery.planners import Context, plan_optimal
from joinlib.multiquery.streams import BaseStream, Bound, Catalogue, ContinualQuery, JoinPredicate, Selection
from joinlib.multiquery.topology import transit_stub
from joinlib.pmjoin.tree import Leaf, MJoin
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink
from joinlib.sim.tree_engine import run_deployment

TOP = transit_stub(stubs=2, per_stub=3, seed=4)
HOMES = {"S1": "s0n1", "S2": "s0n2", "S3": "s1n1", "S4": "s1n2"}
CAT = Catalogue({s: BaseStream(s, n, 20.0, ("p",)) for s, n in HOMES.items()})
JOINS = (JoinPredicate("S1.k=S2.k", 0.1), JoinPredicate("S2.k=S3.k", 0.1), JoinPredicate("S2.k=S4.k", 0.1))
Q1 = ContinualQuery("q1", ("S1", "S2", "S3"), JOINS[:2], (), ("S1.p",), "s1n0")
Q2 = ContinualQuery("q2", ("S1", "S2", "S4"), (JOINS[0], JOINS[2]), (), ("S1.p",), "s1n0")


def _node(name: str) -> int:
    return TOP.index[name]


def _src(s: str) -> PlanNode:
    return PlanNode("source", frozenset((s,)), 20.0, _node(HOMES[s]))


def _join(a: PlanNode, b: PlanNode, at: str) -> PlanNode:
    return PlanNode("join", a.streams | b.streams, 1.0, _node(at), a, b)


S12 = _join(_src("S1"), _src("S2"), "s0n0")
HAND = (OperatorPlan("q1", _join(S12, _src("S3"), "s1n0"), _node("s1n0")),
        OperatorPlan("q2", _join(PlanNode("reuse", S12.streams, 1.0, _node("s0n0")), _src("S4"), "s1n2"),
                     _node("s1n0")))


def _run(plans: tuple[OperatorPlan, ...], tmp_path) -> tuple[int, dict[str, tuple[Counter, Counter]]]:
    """Run both plans' trees deployed together; (operators, per query (got, want))."""
    trees = [to_tree(p, TOP, plans[:i]) for i, p in enumerate(plans)]
    nodes = [TOP.nodes[v.node] for p in plans for v in p.joins()]
    queries = [runtime_query(q, CAT, 1000, nodes, layout=JOINS) for q in (Q1, Q2)]
    generate(union_query("u", queries), tmp_path, 4000, 9)
    data = {q.name: load_streams(q, tmp_path) for q in queries}
    dep = deploy([lower_tree(q, t) for q, t in zip(queries, trees, strict=True)])
    sinks = {q.name: CollectingSink(q) for q in queries}
    run_deployment(dep, data, sinks)
    return len(dep.ops), {q.name: (Counter((ids, ts) for ids, ts, _ in sinks[q.name].results),
                                   Counter(reference_join(q, data[q.name]))) for q in queries}


def test_a_reuse_becomes_the_advertised_operator_and_runs_once(tmp_path):
    assert to_tree(HAND[1], TOP, HAND[:1]) == MJoin((MJoin((Leaf("S1", "s0n1"), Leaf("S2", "s0n2")), "s0n0"),
                                                     Leaf("S4", "s1n2")), "s1n2")
    ops, outputs = _run(HAND, tmp_path)
    assert ops == 3   # S1 x S2 at s0n0 once, and the two roots
    for got, want in outputs.values():
        assert got == want and sum(want.values()) > 0


def test_the_optimal_planners_plans_run_exactly(tmp_path):
    """Whatever the integrated optimum with reuse picks (here a reuse or not), its trees give the reference join."""
    d = Deployments()
    plans = []
    for q in (Q1, Q2):
        b = Bound(q, CAT, TOP.index)
        p = plan_optimal(Context(TOP, b, d))
        d.deploy(p, b)
        plans.append(p)
    ops, outputs = _run(tuple(plans), tmp_path)
    assert ops == 4 - len(plans[1].reused())
    for got, want in outputs.values():
        assert got == want


def test_what_cannot_run_is_one_clear_error():
    with pytest.raises(PlanError, match="no deployed plan joins those streams"):
        to_tree(HAND[1], TOP, ())
    with_selection = ContinualQuery("q3", ("S1", "S2"), JOINS[:1], (Selection("S1.p > 3", 0.5),), ("S1.p",), "s0n0")
    with pytest.raises(PlanError, match="selections"):
        runtime_query(with_selection, CAT, 1000)
