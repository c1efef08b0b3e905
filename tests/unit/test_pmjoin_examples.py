"""Seed 002's worked examples (PMJoin, Zhou et al.) as table-driven tests.

Example 1: three routers n1..n3, S_i at n_i, equijoin on dest, T = 0.5 s, 1-byte tuples, a result
tuple is the sum of its inputs; the per-value rates of Table 1. Centralized 100.1 bytes/s,
distributed 54.03, partitioned by value 0.036 + 0.012 + 0.0216 ≈ 0.07 (the digest's derivation needs
the implied S1-S3 edge). Example 2: five streams on three nodes, T = 10 s, equal tuple sizes (cost
in tuples); STREAMJOINOPT places the joins at n1, n1, n0, n0 for 34 tuples/s.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from joinlib.errors import JoinlibError, PlanError
from joinlib.pmjoin import (
    HashPartition,
    JoinClass,
    MapPartition,
    PMJoinPlan,
    SelectivityModel,
    StreamSpec,
    ValueRateModel,
    ValueRates,
    central_tree,
    optimal,
    plan_pmjoin,
    rate_partition,
    simple,
    stream_join_opt,
    tree_cost,
)
from joinlib.pmjoin.tree import describe, from_json, placements, shipments, streams_of, to_json

# ---------------------------------------------------------------------------------------------- Example 1

VALUES = ("a", "b", "c")
TABLE1 = {  # λ_i^v of Table 1
    "S1": (0.1, 0.1, 100.0),
    "S2": (0.03, 50.0, 0.04),
    "S3": (50.0, 0.01, 0.02),
}


def example1(nodes: tuple[str, ...] = ()) -> ValueRateModel:
    specs = [StreamSpec(s, f"n{i + 1}", sum(r), window_s=0.5) for i, (s, r) in enumerate(TABLE1.items())]
    return ValueRateModel(specs, np.array(list(TABLE1.values())), nodes)


def example1_rates() -> ValueRates:
    return ValueRates(tuple(TABLE1), VALUES, tuple(TABLE1.values()), "dest")


@pytest.mark.parametrize("streams, rate", [
    (("S1",), 100.2), (("S2",), 50.07), (("S3",), 50.03),
    (("S1", "S2"), 9.003), (("S1", "S3"), 7.001), (("S2", "S3"), 2.0008),  # S1-S3: the implied edge
])
def test_example1_table1_rates(streams: tuple[str, ...], rate: float) -> None:
    m = example1()
    assert m.rate(frozenset(m.index(s) for s in streams)) == pytest.approx(rate)


@pytest.mark.parametrize("value, rates", [
    ("a", {("S1", "S2"): 0.003, ("S1", "S3"): 5, ("S2", "S3"): 1.5}),
    ("b", {("S1", "S2"): 5, ("S1", "S3"): 0.001, ("S2", "S3"): 0.5}),
    ("c", {("S1", "S2"): 4, ("S1", "S3"): 2, ("S2", "S3"): 0.0008}),
])
def test_example1_table1_per_value(value: str, rates: dict[tuple[str, str], float]) -> None:
    m = example1().group([VALUES.index(value)])
    for pair, r in rates.items():
        assert m.rate(frozenset(m.index(s) for s in pair)) == pytest.approx(r)


def test_example1_centralized_is_100_1() -> None:
    m = example1()
    best_central = min(tree_cost(central_tree(m, n), m) for n in m.nodes)
    assert best_central == pytest.approx(100.1)
    assert tree_cost(simple(m), m) == pytest.approx(100.1)  # to n1, the fastest stream's node


def test_example1_distributed_is_54_03() -> None:
    m = example1()
    tree = stream_join_opt(m)
    assert describe(tree) == "MJoin@n1(MJoin@n2(S3@n3 -> n2, S2) -> n1, S1)"  # S3 -> n2, S_{2,3} -> n1
    assert tree_cost(tree, m) == pytest.approx(50.03 + 2 * 2.0008)
    assert round(tree_cost(tree, m), 2) == 54.03
    assert optimal(m)[0] == pytest.approx(tree_cost(tree, m))


@pytest.mark.parametrize("value, cost, plan", [
    ("a", 0.036, "MJoin@n3(MJoin@n1(S2@n2 -> n1, S1) -> n3, S3)"),    # S2 -> n1, S_{1,2} -> n3
    ("b", 0.012, "MJoin@n2(MJoin@n1(S3@n3 -> n1, S1) -> n2, S2)"),    # S3 -> n1 -> n2
    ("c", 0.0216, "MJoin@n1(MJoin@n2(S3@n3 -> n2, S2) -> n1, S1)"),
])
def test_example1_partitioned_groups(value: str, cost: float, plan: str) -> None:
    m = example1().group([VALUES.index(value)])
    tree = stream_join_opt(m)
    assert describe(tree) == plan
    assert tree_cost(tree, m) == pytest.approx(cost)
    assert optimal(m)[0] == pytest.approx(cost)


@pytest.mark.parametrize("partition", [
    MapPartition(3, (("a", 0), ("b", 1), ("c", 2)), HashPartition(3)),
    rate_partition(example1_rates(), 3),
])
def test_example1_pmjoin_plan_is_0_07(partition: MapPartition) -> None:
    plan = plan_pmjoin(example1(), VALUES, partition, "dest")
    assert sorted(round(g.cost, 4) for g in plan.groups) == [0.012, 0.0216, 0.036]
    assert plan.cost == pytest.approx(0.0696)
    assert round(plan.cost, 2) == 0.07
    assert plan.tree_for("b") == plan.groups[partition("b")].tree


def test_example1_rate_partition_d2_groups_b_with_c() -> None:
    """V_a = <2,1,3>, V_b = <2,3,1>, V_c = <3,2,1>: b and c rank alike, a apart."""
    p = rate_partition(example1_rates(), 2)
    assert p("b") == p("c") != p("a")


def test_example1_scaled_by_ten() -> None:
    """The digest's live check: rates x10, windows /10 -> 1001 / 540.3 / 0.696 bytes/s."""
    specs = [StreamSpec(s, f"n{i + 1}", 10 * sum(r), window_s=0.05) for i, (s, r) in enumerate(TABLE1.items())]
    m = ValueRateModel(specs, 10 * np.array(list(TABLE1.values())))
    assert tree_cost(simple(m), m) == pytest.approx(1001)
    assert tree_cost(stream_join_opt(m), m) == pytest.approx(540.316)
    assert plan_pmjoin(m, VALUES, rate_partition(example1_rates(), 3)).cost == pytest.approx(0.696)


def test_pmjoin_plan_json_round_trip_and_description() -> None:
    plan = plan_pmjoin(example1(), VALUES, rate_partition(example1_rates(), 3), "dest")
    back = PMJoinPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back == plan
    assert [back.partition(v) for v in VALUES + ("zzz",)] == [plan.partition(v) for v in VALUES + ("zzz",)]
    text = plan.describe()
    assert "D = 3" in text and "0.0696 bytes/s" in text and "MJoin@n3(MJoin@n1(S2@n2 -> n1, S1) -> n3, S3)" in text


def test_empty_group_gets_the_unpartitioned_plan() -> None:
    plan = plan_pmjoin(example1(), VALUES, MapPartition(4, (("a", 0), ("b", 1), ("c", 2)), HashPartition(4)))
    assert plan.groups[3].values == 0 and plan.groups[3].cost == 0
    assert plan.groups[3].tree == stream_join_opt(example1())


# ---------------------------------------------------------------------------------------------- Example 2

def example2() -> SelectivityModel:
    where = {"S0": "n0", "S1": "n0", "S2": "n1", "S3": "n1", "S4": "n2"}
    rates = {"S0": 10, "S1": 35, "S2": 25, "S3": 30, "S4": 15}
    specs = [StreamSpec(s, where[s], rates[s], window_s=10) for s in where]
    edges = [("S0", "S1", 0.01), ("S2", "S3", 0.001), ("S0", "S3", 0.004), ("S0", "S4", 0.01)]
    idx = {s: i for i, s in enumerate(where)}
    classes = [JoinClass(f"{a}-{b}", ((idx[a], f), (idx[b], f))) for a, b, f in edges]
    return SelectivityModel(specs, classes, same_size=True)


@pytest.mark.parametrize("streams, rate, window", [
    (("S0",), 10, 100), (("S1",), 35, 350), (("S2",), 25, 250), (("S3",), 30, 300), (("S4",), 15, 150),
    (("S2", "S3"), 15, 75), (("S0", "S2", "S3"), 9, 30), (("S0", "S1"), 70, 350),
])
def test_example2_table2(streams: tuple[str, ...], rate: float, window: float) -> None:
    m = example2()
    g = frozenset(m.index(s) for s in streams)
    assert m.rate(g) == pytest.approx(rate)
    assert m.window(g) == pytest.approx(window)


def test_example2_streamjoinopt() -> None:
    m = example2()
    tree = stream_join_opt(m)
    # S2 ⋈ S3 local at n1; S0 shipped to n1 (case 1); S_{0,2,3} and S4 pending (case 2); S1: case 1 at n0
    assert describe(tree) == "MJoin@n0(MJoin@n1(S0@n0 -> n1, S2, S3) -> n0, S4@n2 -> n0, S1)"
    edges = {("S2", "S3"): "n1", ("S0", "S3"): "n1", ("S0", "S4"): "n0", ("S0", "S1"): "n0"}
    assert [join_node(tree, a, b) for a, b in edges] == ["n1", "n1", "n0", "n0"]
    assert placements(tree) == ["n1", "n0"]  # the joins meeting at one node form one MJoin there
    assert [(s, src, dst, round(c, 6)) for s, src, dst, c in shipments(tree, m)] == [
        (("S0",), "n0", "n1", 10), (("S0", "S2", "S3"), "n1", "n0", 9), (("S4",), "n2", "n0", 15)]
    assert tree_cost(tree, m) == pytest.approx(34)
    assert optimal(m)[0] <= 34 + 1e-9


def join_node(tree: object, a: str, b: str) -> str:
    """The node of the lowest MJoin with a and b in different inputs: where edge a-b is evaluated."""
    from joinlib.pmjoin.tree import MJoin
    assert isinstance(tree, MJoin)
    for t in tree.inputs:
        if isinstance(t, MJoin) and {a, b} <= set(streams_of(t)):
            return join_node(t, a, b)
    return tree.node


def test_tree_json_round_trip() -> None:
    tree = stream_join_opt(example2())
    assert from_json(json.loads(json.dumps(to_json(tree)))) == tree
    with pytest.raises(PlanError, match="not an MJoin tree"):
        from_json({"oops": 1})


# ---------------------------------------------------------------------------------------------- nodes, errors

def test_processing_only_node_is_a_candidate_but_never_cheaper_under_uniform_links() -> None:
    """Three equal streams whose pairwise joins are fast: all pending, one MJoin. Under the paper's
    col ∈ {0, 1} a processing-only node ships every input, so a member's node wins (20 < 30)."""
    specs = [StreamSpec(f"S{i}", f"r{i}", 10, window_s=1) for i in range(3)]
    m = SelectivityModel(specs, [JoinClass("k", ((0, 1.0), (1, 1.0), (2, 1.0)))], nodes=("dc",))
    assert m.nodes == ("r0", "r1", "r2", "dc")
    tree = stream_join_opt(m)
    assert tree_cost(tree, m) == pytest.approx(20)
    assert tree_cost(central_tree(m, "dc"), m) == pytest.approx(30)


@pytest.mark.parametrize("make, message", [
    (lambda: StreamSpec("S", "n", 1), "exactly one of a time window"),
    (lambda: StreamSpec("S", "n", -1, window_s=1), "must be a finite number >= 0"),
    (lambda: HashPartition(0), "integer >= 1"),
    (lambda: central_tree(example1(), "nowhere"), "unknown node 'nowhere'"),
    (lambda: JoinClass("k", ((0, 0.0),)), "must be in \\(0, 1\\]"),
    (lambda: PMJoinPlan.from_json({"kind": "other"}), "not a PMJoin plan"),
])
def test_user_mistakes_are_joinlib_errors(make: object, message: str) -> None:
    with pytest.raises(JoinlibError, match=message):
        make()  # type: ignore[operator]


def test_disconnected_join_graph_is_refused() -> None:
    specs = [StreamSpec(f"S{i}", f"n{i}", 10, window_s=1) for i in range(3)]
    m = SelectivityModel(specs, [JoinClass("k", ((0, 0.1), (1, 0.1)))])
    with pytest.raises(PlanError, match="not connected"):
        stream_join_opt(m)
    with pytest.raises(PlanError, match="not connected"):
        optimal(m)
