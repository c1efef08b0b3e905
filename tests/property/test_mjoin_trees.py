"""MJoin trees with windows on derived (intermediate) streams: any tree of connected MJoins placed on
any nodes gives exactly the reference join's output, each result once (joinlib/mjoin/derived.py)."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.mjoin.derived import deploy, lower_tree
from joinlib.model import Predicate, Query, Tup, equality_classes
from joinlib.pmjoin.tree import Leaf, MJoin, Tree, operators, streams_of
from joinlib.reference import reference_join
from joinlib.runtime.sink import Sink
from joinlib.sim.tree_engine import run_deployment, run_tree
from joinlib.testing import assert_same
from joinlib.testing.strategies import queries, stream_data
from tests.property.test_partitioned_exactness import time_windows

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def trees(draw, query: Query) -> Tree:
    """Merge join-graph-connected items into MJoins of 2-3 inputs at random nodes until one is left."""
    items: list[Tree] = [Leaf(s.name, s.site) for s in query.streams]
    while len(items) > 1:
        a = draw(st.integers(0, len(items) - 1))
        group = [items[a]]
        for _ in range(draw(st.integers(1, 2))):
            names = {n for t in group for n in streams_of(t)}
            linked = [t for t in items if t not in group
                      and any(set(query.neighbours(n)) & set(streams_of(t)) for n in names)]
            if not linked:
                break
            group.append(draw(st.sampled_from(linked)))
        if len(group) < 2:
            continue
        items = [t for t in items if t not in group] + [MJoin(tuple(group), draw(st.sampled_from(query.nodes)))]
    return items[0]


class Collect(Sink):
    def __init__(self) -> None:
        self.got: Counter = Counter()

    def emit(self, inst, head_pos, pos, groups, now) -> None:
        for row, tups in groups:
            for t in tups:
                r = list(row)
                r[pos] = t
                self.got[(tuple(x.id for x in r), r[head_pos].ts)] += 1


def assert_tree_exact(query, streams, tree, roundtrip=False) -> None:
    sink = Collect()
    report = run_tree(lower_tree(query, tree), streams, sink, roundtrip=roundtrip)
    want = reference_join(query, streams)
    assert_same(sink.got, want, f"tree {tree}")
    assert report.results == sum(want.values())


def with_dc(query: Query, add: bool) -> Query:
    """Sometimes a processing-only node ``dc`` where an MJoin may run although no stream is born there."""
    return replace(query, network=replace(query.network, nodes=("dc",))) if add else query


@SETTINGS
@given(st.data())
def test_mjoin_trees_with_derived_windows_are_exact(data):
    query = with_dc(time_windows(data.draw(queries()), data.draw(st.integers(5, 80))), data.draw(st.booleans()))
    streams = data.draw(stream_data(query))
    assert_tree_exact(query, streams, data.draw(trees(query)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mjoin_trees_are_exact_through_the_wire_codec(data):
    """Derived tuples travel as Avro BaseTuples whose ``rest`` is their components: encode and decode
    every message."""
    query = with_dc(time_windows(data.draw(queries(max_streams=4)), data.draw(st.integers(5, 80))),
                    data.draw(st.booleans()))
    streams = data.draw(stream_data(query))
    assert_tree_exact(query, streams, data.draw(trees(query)), roundtrip=True)


def subquery(query: Query, names: list[str], name: str) -> Query:
    keep = [s for s in query.streams if s.name in names]
    streams = tuple(replace(s, pos=i) for i, s in enumerate(keep))
    # what the query implies among the kept streams (equality is transitive): a shared operator computes
    # the same thing for both queries only if they agree on it (joinlib.mjoin.derived.signatures)
    find = equality_classes(query.predicates)
    attrs = [(s.name, a) for s in keep for a in s.join_attrs]
    preds = tuple(Predicate(*x, *y) for i, x in enumerate(attrs) for y in attrs[i + 1:]
                  if x[0] != y[0] and find(x) == find(y))
    nodes = tuple(n for n in query.nodes if n not in {s.site for s in keep})
    return replace(query, name=name, streams=streams, predicates=preds, network=replace(query.network, nodes=nodes))


def subdata(data, query: Query) -> dict:
    return {s.name: [Tup(s.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in data[s.name]] for s in query.streams}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_shared_operator_feeds_every_query_that_uses_it_exactly(data):
    """Q2 reuses an MJoin of Q1's tree (as its root, or below one more join): the operator runs once,
    and both queries' outputs are exactly their reference joins."""
    query = with_dc(time_windows(data.draw(queries()), data.draw(st.integers(5, 80))), data.draw(st.booleans()))
    tree = data.draw(trees(query))
    inner = [op for op in operators(tree) if op is not tree]
    if not inner:
        return
    shared = data.draw(st.sampled_from(inner))
    names = list(streams_of(shared))
    extra = [n for n in query.names if n not in names and set(query.neighbours(n)) & set(names)]
    tree2: Tree = shared
    if extra and data.draw(st.booleans()):
        x = data.draw(st.sampled_from(extra))
        names.append(x)
        tree2 = MJoin((shared, Leaf(x, query.stream(x).site)), data.draw(st.sampled_from(query.nodes)))
    q1, q2 = replace(query, name="Q1"), subquery(query, names, "Q2")
    base = data.draw(stream_data(query))
    d1, d2 = subdata(base, q1), subdata(base, q2)
    dep = deploy([lower_tree(q1, tree), lower_tree(q2, tree2)])
    assert len(dep.ops) <= len(list(operators(tree))) + 1      # the shared MJoin (and all below it) once
    assert sum(dep.owners(i) == ("Q1", "Q2") for i in range(len(dep.ops))) >= len(list(operators(shared)))
    sinks = {"Q1": Collect(), "Q2": Collect()}
    run_deployment(dep, {"Q1": d1, "Q2": d2}, sinks, roundtrip=data.draw(st.booleans()))
    for q, d in ((q1, d1), (q2, d2)):
        want = reference_join(q, d)
        got = sinks[q.name].got
        assert got == want, f"{q.name}: missing {list((want - got).items())[:5]} extra {list((got - want).items())[:5]}"
