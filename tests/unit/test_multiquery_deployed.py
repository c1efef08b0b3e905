"""Continuous queries' trees split into operator deployments (joinlib.mjoin.deployed), the plan
messages that run one operator (control_check.tree_scope), and an operator that publishes its results."""
from __future__ import annotations

import itertools
from typing import Optional

import pytest

from joinlib.control.check import plan_payload, tree_scope
from joinlib.errors import PlanError
from joinlib.mjoin.deployed import RunningOp, operator_key, split, users
from joinlib.mjoin.derived import TreeProgram, deploy, lower_tree
from joinlib.mjoin.output import OpOutput
from joinlib.model import Tup
from joinlib.pmjoin.tree import from_json
from joinlib.query import parse_query, query_to_dict
from joinlib.runtime.sink import CollectingSink


def _src(topic: str) -> dict:
    return {"topic": topic, "format": "json", "time": {"field": "ts", "unit": "ms"}, "id": "id"}


def query(name: str, third: str, site: str, *, window: str = "1s", s1_topic: str = "e1", interval: str = "100ms",
          extra_pred: Optional[str] = None):
    streams = {"S1": {"site": "x", "window": window, "source": _src(s1_topic)},
               "S2": {"site": "y", "window": "1s", "source": _src("e2")},
               third: {"site": site, "window": "1s", "source": _src("e" + third)}}
    join = ["S1.dest = S2.dest", f"S2.dest = {third}.dest"] + ([extra_pred] if extra_pred else [])
    return parse_query({"name": name, "streams": streams, "join": join, "execution": {"interval": interval}}, name)


def tree(third: str, site: str, inner: str = "y") -> dict:
    return {"mjoin": site, "inputs": [{"mjoin": inner, "inputs": [{"stream": "S1", "node": "x"},
                                                                  {"stream": "S2", "node": "y"}]},
                                      {"stream": third, "node": site}]}


def program(q, t) -> TreeProgram:
    return lower_tree(q, from_json(t))


def runs():
    c = itertools.count()
    return lambda: f"r{next(c):011d}"


def test_the_same_join_of_the_same_sources_is_one_operator_and_a_later_query_reuses_it():
    p1 = program(query("Q1", "S3", "z"), tree("S3", "z"))
    p2 = program(query("Q2", "S4", "w"), tree("S4", "w"))
    assert operator_key(p1, 0) == operator_key(p2, 0)   # S1+S2 at y
    assert operator_key(p1, 1) != operator_key(p2, 1)
    new_run = runs()
    first = split(p1, {}, new_run, 0)
    assert [n.op.streams for n in first.new] == [("S1", "S2")] and first.reused == ()
    op = first.new[0].op
    assert first.uses == (op.name,) and op.producer == f"{op.name}.mj0" and op.node == "y"
    assert first.new[0].plan["only"] == "S1+S2" and first.new[0].plan["external"] == {}
    assert first.plan["external"] == {"S1+S2": {"op": op.producer, "run": op.run, "origin_ms": 0}}
    second = split(p2, {op.key: op}, new_run, 60_000)
    assert second.new == () and second.reused == (op.name,) and second.uses == (op.name,)
    assert second.plan["external"]["S1+S2"]["origin_ms"] == 0   # the reader moves it to its own origin


@pytest.mark.parametrize("change", [
    {"s1_topic": "other"},          # another source topic: other records
    {"window": "2s"},               # another window
    {"interval": "200ms"},          # other epochs: other on-time records
    {"inner": "x"},                 # the join at another node
])
def test_what_makes_another_operator(change):
    inner = change.pop("inner", "y")
    p1 = program(query("Q1", "S3", "z"), tree("S3", "z"))
    p2 = program(query("Q2", "S4", "w", **change), tree("S4", "w", inner))
    assert operator_key(p1, 0) != operator_key(p2, 0)


def test_a_reused_operator_brings_what_is_below_it_and_references_are_counted():
    """A 4-way chain ((S1 S2) S3) S4: reusing the 3-way operator takes its own reads with it."""
    def q4(name: str):
        streams = {f"S{i}": {"site": s, "window": "1s", "source": _src(f"e{i}")}
                   for i, s in zip(range(1, 5), "xyzw", strict=True)}
        return parse_query({"name": name, "streams": streams,
                            "join": ["S1.dest = S2.dest", "S2.dest = S3.dest", "S3.dest = S4.dest"]}, name)
    t = {"mjoin": "w", "inputs": [{"mjoin": "z", "inputs": [{"mjoin": "y", "inputs": [
        {"stream": "S1", "node": "x"}, {"stream": "S2", "node": "y"}]}, {"stream": "S3", "node": "z"}]},
        {"stream": "S4", "node": "w"}]}
    p, new_run = program(q4("A"), t), runs()
    a = split(p, {}, new_run, 0)
    inner, mid = (n.op for n in a.new)
    assert mid.uses == (mid.name, inner.name) and set(a.uses) == {inner.name, mid.name}
    assert a.new[1].plan["external"] == {"S1+S2": inner.external()}
    b = split(program(q4("B"), t), {mid.key: mid}, new_run, 0)   # only the 3-way one is advertised
    assert b.new == () and b.reused == (mid.name,) and set(b.uses) == {inner.name, mid.name}
    held = [("A", a.uses), ("B", b.uses)]
    assert users(inner.name, held) == ["A", "B"] and users(inner.name, held, leaving="A") == ["B"]
    assert RunningOp.from_json(mid.name, mid.run, 0, mid.to_json()) == mid


def _payload(q, plan: dict, live: bool = True) -> dict:
    p = {"query": query_to_dict(q), "plan": plan, "run": "r1"}
    if live:
        p["live"] = {"origin_ms": 0, "sources": {}}
    return p


def test_plan_messages_that_run_one_operator_are_checked():
    q = query("Q1", "S3", "z")
    t = tree("S3", "z")
    prog = plan_payload(q, _payload(q, {"mjoin_tree": t}))
    assert tree_scope(prog, {"mjoin_tree": t}) == (None, {})
    assert tree_scope(prog, {"mjoin_tree": t, "only": "S1+S2", "external": {}}) == (0, {})
    ext = {"S1+S2": {"op": "op-a.mj0", "run": "r0", "origin_ms": 0}}
    assert tree_scope(prog, {"mjoin_tree": t, "external": ext}) == (1, ext)
    bad: list[tuple[dict, str]] = [
        ({"mjoin_tree": t, "only": "S1+S2+S3"}, "not an inner operator"),
        ({"mjoin_tree": t, "only": "S9"}, "not an inner operator"),
        ({"mjoin_tree": t, "external": {}}, "must name the producer"),
        ({"mjoin_tree": t, "external": {"S1+S2": {"op": 3}}}, "plan.external is"),
    ]
    for plan, words in bad:
        with pytest.raises(PlanError, match=words):
            plan_payload(q, _payload(q, plan))
    with pytest.raises(PlanError, match="needs 'live'"):
        plan_payload(q, _payload(q, {"mjoin_tree": t}, live=False))


def test_partitioned_trees_stay_replayed_only():
    q = query("Q1", "S3", "z")
    plan = {"mjoin_trees": [tree("S3", "z")] * 2, "by": [["S1", "dest"]], "function": {"kind": "hash", "parts": 2}}
    with pytest.raises(PlanError, match="replayed streams"):
        plan_payload(q, _payload(q, plan))


def test_a_published_operator_hands_every_epoch_over_and_a_reader_keeps_its_own_results():
    """An inner operator with no reader in its deployment still buffers and hands over its derived stream
    (under its own name, input 0), epoch by epoch; a floor drops results older than the reader's origin."""
    prog = program(query("Q1", "S3", "z"), tree("S3", "z"))
    dep = deploy([prog])
    alone = type(dep)((dep.ops[0],), ((),), ((),), (dep.windows[0],), dep.queries)
    out = OpOutput(alone, 0, CollectingSink(prog.base), publish=True)
    assert out.publishes and not OpOutput(alone, 0, CollectingSink(prog.base)).publishes
    row = (Tup(0, 1, 150, 0, ("a",)), Tup(1, 2, 160, 0, ("a",)))
    out.emit(1, [(row, [row[1]])], 0.0)
    (e0, f0), (e1, f1) = out.handover(1, every_reader=False)
    assert (e0, [(s, len(t)) for _, s, t in f0]) == (0, [("S1+S2", 0)])
    assert (e1, [(s, [x.ts for x in t]) for _, s, t in f1]) == (1, [("S1+S2", [160])])
    floored = OpOutput(alone, 0, CollectingSink(prog.base), publish=True, floor=200)
    floored.emit(1, [(row, [row[1]])], 0.0)
    assert [t for _, feeds in floored.handover(1, every_reader=False) for _, _, t in feeds] == [[], []]


def _with_rates(third: str, site: str, rates: tuple[float, float, float]):
    streams = {n: {"site": s, "window": "1s", "source": _src("e" + n), "rate": r, "selectivity": 0.01,
                   "tuple_bytes": 100} for n, s, r in zip(("S1", "S2", third), ("x", "y", site), rates, strict=True)}
    return parse_query({"name": f"R{third}", "streams": streams,
                        "join": ["S1.dest = S2.dest", f"S2.dest = {third}.dest"]}, f"R{third}")


def test_a_new_query_is_built_on_a_running_operator_when_that_ships_less():
    """Seed 001's marginal cost on the live system: STREAMJOINOPT alone would ship S1 and S2 to w (2 x 100
    tuples/s x 100 B); on the running S1+S2 join at y only S4 ships (100 x 100 B).  Without it, or when the
    query joins S1 and S2 otherwise, the base tree stays."""
    from joinlib.mjoin.deployed import choose_tree, marginal_cost, reuse_candidates
    from joinlib.mjoin.tree_plans import streamjoinopt
    from joinlib.pmjoin.stats import selectivity_model
    from joinlib.pmjoin.tree import describe
    q1 = _with_rates("S3", "z", (100, 100, 10))
    op = split(program(q1, tree("S3", "z")), {}, runs(), 0).new[0].op
    q2 = _with_rates("S4", "w", (100, 100, 100))
    base, model = streamjoinopt(q2), selectivity_model(q2)
    assert describe(base) == "MJoin@w(S1@x -> w, S2@y -> w, S4)"
    keys = frozenset({op.key})
    costs = {describe(t): marginal_cost(q2, t, keys, model) for t in reuse_candidates(q2, base, [op])}
    assert costs == {"MJoin@w(S1@x -> w, S2@y -> w, S4)": 20_000.0,
                     "MJoin@y(MJoin@y(S1@x -> y, S2), S4@w -> y)": 10_000.0,
                     "MJoin@w(MJoin@y(S1@x -> y, S2) -> w, S4)": 40_000.0}
    best, cost = choose_tree(q2, base, [op], model)
    assert (describe(best), cost) == ("MJoin@y(MJoin@y(S1@x -> y, S2), S4@w -> y)", 10_000.0)
    assert split(lower_tree(q2, best), {op.key: op}, runs(), 0).reused == (op.name,)
    assert choose_tree(q2, base, [], model) == (base, 20_000.0)
    doc = query_to_dict(q2)
    doc["streams"]["S1"]["window"] = "2s"   # another S1 window: another operator
    other = parse_query(doc, "other")
    assert choose_tree(other, streamjoinopt(other), [op], selectivity_model(other))[0] == streamjoinopt(other)
