"""Reductions that also exchange key sets along a cyclic join graph's off-tree edges (``Reduce.cross``):
the plan's JSON form and its errors, the IR (rounds after the tree's), what runs and ships, the byte
model and auto's candidates.  (Exactness over random queries and plans: tests/property/test_exactness.py
and test_checkpoint.py, whose reductions draw ``cross``; on Kafka: tests/integration/test_cluster.py.)"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, cast

import pytest

from joinlib.costs import WireModel, from_data
from joinlib.data.files import load_streams
from joinlib.data.gen import generate
from joinlib.data.synthetic import SyntheticStats, build_query, topology_edges
from joinlib.errors import PlanError
from joinlib.model import Execution, Network
from joinlib.plan import logical as plans
from joinlib.plan.ir import lower
from joinlib.planner.auto import rank
from joinlib.query import load_query
from joinlib.reference import reference_join
from joinlib.sim.engine import run_embedded
from joinlib.testing import TestingSink

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _clique3_keys(f: float = 0.01, tuple_bytes: int = 1250):
    """The bench's `clique3-keys-f0.01-1250B-w500`: a triangle with a different key on each edge."""
    stats: list[SyntheticStats] = [{"rate": 100.0, "attributes": max(1, tuple_bytes // 5), "tuple_bytes": tuple_bytes,
                                "selectivity": f, "window_ms": 500} for _ in range(3)]
    return build_query("clique3k", stats, topology_edges(3, "complete"), per_edge_attrs=True,
                       network=Network(25.0, 1024.0), execution=Execution(100, 80))


def test_cross_round_trips_through_json_and_says_what_it_does():
    q = _clique3_keys()
    p = plans.reduction(q, q.sites[0], None, None, [("S3", "S1")], cross=True)
    assert p.reduce is not None and p.reduce.cross
    assert len(plans.off_tree(q, p.reduce.tree)) == 1   # a triangle: one edge off any spanning tree
    back = plans.from_json(q, p.to_json())
    spec = cast(dict[str, Any], p.to_json()["reduce"])   # PlanJSON leaves out the bool of "cross"
    assert back == p and spec["cross"] is True
    assert "off-tree edges cross-checked" in p.describe()


@pytest.mark.parametrize("spec,message", [
    ({"cross": "yes"}, r"reduce\.cross: expected true or false"),
    ({"skip": [["S2", "S3"]]}, r"S2->S3 is not a direction of a tree edge"),
    ({"cross": True, "skip": [["S1", "S1"]]}, r"S1->S1 is not a direction of a tree or off-tree edge"),
])
def test_cross_errors_say_what_is_wrong(spec, message):
    q = _clique3_keys()
    with pytest.raises(PlanError, match=message):
        plans.from_json(q, {"reduce": {"site": q.sites[0], "tree": [["S1", "S2"], ["S1", "S3"]], **spec}})


def test_an_acyclic_graph_has_nothing_to_cross():
    stats: list[SyntheticStats] = [{"rate": 100.0, "attributes": 2, "tuple_bytes": 50, "selectivity": 0.1,
                                "window_ms": 500}] * 3
    q = build_query("chain", stats, topology_edges(3, "chain"))
    p = plans.reduction(q, q.sites[0], cross=True)
    assert p.reduce is not None and not p.reduce.cross and "cross" not in p.to_json()["reduce"]


def test_crossing_rounds_come_after_the_tree_and_change_the_signature():
    q = _clique3_keys()
    tree = [("S1", "S2"), ("S1", "S3")]
    with_cross = lower(q, plans.reduction(q, q.sites[0], tree, "S1", (), True))
    without = lower(q, plans.reduction(q, q.sites[0], tree, "S1", (), False))
    s2 = with_cross.reducer("S2")
    assert s2.schedule == (("out", "S1"), ("in", "S1"), ("out", "S3"), ("in", "S3"))
    assert [e.cross for e in s2.edges] == [False, True]
    assert s2.content != without.reducer("S2").content and with_cross.digest() != without.digest()
    assert len(with_cross.flows) == len(without.flows) + 2     # S2 -> S3 and S3 -> S2


def test_crossing_edges_ship_less_and_lose_nothing():
    """The triangle with one key per edge: a spanning tree's filters miss the third predicate; the
    crossing edge's key sets stop what only it would stop (measured and estimated alike)."""
    q = _clique3_keys()
    with tempfile.TemporaryDirectory() as tmp:
        generate(q, tmp, 5000, seed=1)
        streams = load_streams(q, tmp)
    want = reference_join(q, streams)
    model = WireModel(from_data(q, streams))
    got = {}
    for cross in (False, True):
        plan = plans.reduction(q, q.sites[0], None, None, (), cross)
        sink = TestingSink(q)
        rep = run_embedded(q, streams, plan, sink)
        assert sink.counts() == want
        got[cross] = (rep.bytes, model.estimate(q, plan).bytes(5.0))
    assert sum(want.values()) > 0
    assert got[True][0] < got[False][0] / 2, got        # measured: 0.39x of the tree-only reduction
    assert got[True][1] < got[False][1] / 2, got        # the model sees it too


def test_auto_tries_crossing_edges_on_cyclic_graphs_only():
    q = _clique3_keys()
    names = [r.name for r in rank(q, WireModel(from_data(q, _data(q))))]
    assert any(n.endswith("/cross") or "/cross/" in n for n in names)
    stats: list[SyntheticStats] = [{"rate": 100.0, "attributes": 2, "tuple_bytes": 50, "selectivity": 0.1,
                                "window_ms": 500}] * 3
    chain = build_query("chain", stats, topology_edges(3, "chain"))
    assert not any("/cross" in r.name for r in rank(chain, WireModel(from_data(chain, _data(chain)))))


def _data(q):
    with tempfile.TemporaryDirectory() as tmp:
        generate(q, tmp, 2000, seed=2)
        return load_streams(q, tmp)


@pytest.mark.parametrize("spec,node,cross", [("reduce:r2:cross", "r2", True), ("reduce:cross", None, True),
                                             ("reduce:r3", "r3", False)])
def test_plan_names_ask_for_crossing_edges(spec, node, cross):
    from joinlib.planner.registry import resolve_plan
    q = load_query(EXAMPLES / "triangle_keys.yaml")
    p = resolve_plan(q, spec)
    assert p.reduce is not None and p.reduce.cross == cross and (node is None or p.reduce.site == node)
    with pytest.raises(PlanError, match=r"the form is reduce\[:NODE\]\[:cross\]"):
        resolve_plan(q, "reduce:r9:cross")


def test_off_tree_edges_implied_by_one_shared_key_are_left_out():
    """toggle4 joins four streams on one key J: the tree's filters already carry every off-tree
    predicate (equality is transitive), so there is nothing to cross-check and the plan is the tree's."""
    q = load_query(EXAMPLES / "toggle4.yaml")
    reduce = plans.reduction(q).reduce
    assert reduce is not None
    tree = reduce.tree
    assert plans.off_tree(q, tree) == ()
    p = plans.reduction(q, cross=True)
    assert p.reduce is not None and not p.reduce.cross and p == plans.reduction(q)
