"""Lemma 1's count, and the placement searches against brute force: tree DP = every assignment of a
node (or an advertised stream) to every join, for K <= 4 inputs on N <= 16 nodes; the subset DP and
the tree enumeration find the same optimum; the reconstructed plan costs what the search estimated."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.multiquery.cost import OperatorPlan, PlanNode
from joinlib.multiquery.search import (
    Atom,
    Problem,
    Reuse,
    brute_force_tree,
    exhaustive_search,
    lemma1,
    merge_orders,
    place_tree,
    solve,
    tree_mask,
    trees,
)
from joinlib.multiquery.topology import transit_stub

TOP16 = transit_stub(2, 8, seed=3)
TOP9 = transit_stub(3, 3, seed=5)


def test_lemma1_counts():
    assert lemma1(5, 64) == 3_019_898_880
    assert [merge_orders(k) for k in range(1, 7)] == [1, 1, 3, 18, 180, 2700]
    assert lemma1(2, 10) == 10 and lemma1(1, 64) == 1
    # distinct trees (2K-3)!!, which Lemma 1's merge sequences over-count from K = 4 on
    assert [sum(1 for _ in trees((1 << k) - 1)) for k in range(1, 6)] == [1, 1, 3, 15, 105]
    assert lemma1(5, 8) / lemma1(5, 64) < 0.01


@st.composite
def problems(draw, max_k=4):
    top = draw(st.sampled_from([TOP9, TOP16]))
    k = draw(st.integers(2, max_k))
    names = [f"S{i}" for i in range(k)]
    rates = {s: draw(st.floats(0.5, 100)) for s in names}
    sel = draw(st.floats(0.001, 0.5))
    nodes = st.integers(0, top.n - 1)
    atoms = []
    for s in names:
        node = draw(nodes)
        atoms.append(Atom(PlanNode("source", frozenset((s,)), rates[s], node), node))
    cands = sorted(draw(st.sets(nodes, min_size=1, max_size=top.n)))
    adverts: dict[frozenset[str], list[Reuse]] = {}
    for _ in range(draw(st.integers(0, 2))):
        t = frozenset(draw(st.sets(st.sampled_from(names), min_size=2, max_size=k)))
        node = draw(nodes)
        adverts.setdefault(t, []).append(Reuse(t, node, node, rate(rates, sel, t)))
    target = draw(st.one_of(st.none(), nodes))
    return top, Problem(atoms, cands, target, top.dist, lambda t: rate(rates, sel, t),
                        lambda t: adverts.get(t, []))


def rate(rates, sel, streams):
    r = 1.0
    for s in streams:
        r *= rates[s]
    return r * sel ** (len(streams) - 1)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_tree_dp_placement_equals_brute_force(case):
    top, p = case
    full = (1 << len(p.atoms)) - 1
    for t in trees(full):
        cost, root = place_tree(p, t)
        assert abs(cost - brute_force_tree(p, t)) <= 1e-6 * max(1.0, cost)
        if p.target is not None:  # the placed tree costs what the DP says
            assert abs(OperatorPlan("q", root, p.target).cost(top) - cost) <= 1e-6 * max(1.0, cost)


@settings(max_examples=60, deadline=None)
@given(problems(max_k=5))
def test_subset_dp_equals_every_tree_placed(case):
    top, p = case
    s, e = solve(p), exhaustive_search(p)
    assert abs(s.estimate - e.estimate) <= 1e-6 * max(1.0, e.estimate)
    assert s.root.streams == e.root.streams == p.union((1 << len(p.atoms)) - 1)
    assert s.examined == e.examined == lemma1(len(p.atoms), len(p.cands))
    if p.target is not None:
        assert abs(OperatorPlan("q", s.root, p.target).cost(top) - s.estimate) <= 1e-6 * max(1.0, s.estimate)


def test_reuse_costs_only_the_transfer_from_the_advertised_node():
    top = TOP16
    atoms = [Atom(PlanNode("source", frozenset((s,)), 10.0, n), n) for s, n in (("A", 0), ("B", 15))]
    ad = Reuse(frozenset("AB"), 3, 3, 1.0)
    p = Problem(atoms, list(range(top.n)), 3, top.dist, lambda t: 1.0, lambda t: [ad] if t == frozenset("AB") else [])
    res = solve(p)
    assert res.root.kind == "reuse" and res.root.node == 3 and res.estimate == 0.0
    assert tree_mask((0, 1)) == 3
