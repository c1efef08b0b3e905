"""Live queries' trees split into operator deployments (joinlib.mjoin.deployed.split), over random
queries and random trees: every plan message it makes is one a node accepts, a reader names the producer
of each derived input, nothing below a reused operator is deployed again, the references held cover
everything a query reads, and a query submitted twice deploys nothing the second time."""
from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.control.check import tree_scope
from joinlib.mjoin.deployed import operator_key, split
from joinlib.mjoin.derived import lower_tree, moved
from joinlib.model import Tup
from joinlib.pmjoin.tree import MJoin, operators
from joinlib.protocol.avro import decode_tuple_list, encode_tuple_list
from joinlib.testing.strategies import queries
from tests.property.test_mjoin_trees import trees, with_dc
from tests.property.test_partitioned_exactness import time_windows

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _runs():
    c = itertools.count()
    return lambda: f"r{next(c):011d}"


def _below(tree, i: int) -> set[int]:
    """Indexes (in lower_tree's order) of the operators strictly below operator ``i``."""
    ops = list(operators(tree))
    inside = {id(t) for t in operators(ops[i])} - {id(ops[i])}
    return {k for k, t in enumerate(ops) if id(t) in inside}


@SETTINGS
@given(st.data())
def test_splits_of_random_trees_are_valid_and_reuse_whole_subtrees(data):
    query = with_dc(time_windows(data.draw(queries()), data.draw(st.integers(5, 80))), data.draw(st.booleans()))
    t1, t2 = data.draw(trees(query)), data.draw(trees(query))
    p1, p2 = lower_tree(replace(query, name="A"), t1), lower_tree(replace(query, name="B"), t2)
    new_run = _runs()
    first = split(p1, {}, new_run, 0)
    assert len(first.new) == len(p1.ops) - 1 and first.reused == ()
    running = {n.op.key: n.op for n in first.new}
    second = split(p2, running, new_run, data.draw(st.integers(0, 10**6)))
    for prog, sp in ((p1, first), (p2, second)):
        for n in sp.new:   # an operator deployment's message: its operator, reading what it names
            i, ext = tree_scope(prog, n.plan)
            assert i is not None and prog.ops[i].output == n.plan["only"] and n.op.producer.endswith(f".mj{i}")
            assert all(e["op"] in {m.op.producer for m in first.new + second.new} for e in ext.values())
        i, ext = tree_scope(prog, sp.plan)
        assert i == len(prog.ops) - 1
    names = {n.op.name for n in first.new + second.new}
    assert set(second.uses) <= names and set(second.reused) <= {n.op.name for n in first.new}
    by_name = {n.op.name: n.op for n in first.new}
    for r in second.reused:   # reused with everything below it: nothing there deployed again
        assert set(by_name[r].uses) <= set(second.uses)
        k = next(k for k in range(len(p2.ops)) if operator_key(p2, k) == by_name[r].key)
        below = {operator_key(p2, j) for j in _below(t2, k)}
        assert not below & {n.op.key for n in second.new}
    again = split(lower_tree(replace(query, name="C"), t1), running, new_run, 0)   # the first tree once more
    tops = [t for t in t1.inputs if isinstance(t, MJoin)] if isinstance(t1, MJoin) else []
    assert again.new == () and len(again.reused) == len(tops) and set(again.uses) == set(first.uses)


@given(st.lists(st.integers(-5000, 5000), min_size=1, max_size=8), st.integers(-5000, 5000),
       st.integers(-3000, 3000))
def test_moved_derived_tuples_keep_their_components_and_drop_only_what_is_too_old(stamps, delta, horizon):
    comps = [[Tup(0, 10 * i, ts, i, ("k",), b"a"), Tup(1, 10 * i + 1, ts - 7, i, ("k",), b"")]
             for i, ts in enumerate(stamps)]
    derived = [Tup(0, i, max(c.ts for c in cs), i, ("k", "k"), encode_tuple_list(cs)) for i, cs in enumerate(comps)]
    out = moved(derived, 3, delta, horizon)
    assert [t.id for t in out] == [t.id for t in derived if t.ts + delta >= horizon]
    for t in out:
        assert t.pos == 3 and t.ts == derived[t.id].ts + delta
        assert [(c.id, c.ts, c.rest) for c in decode_tuple_list(t.rest)] == [
            (c.id, c.ts + delta, c.rest) for c in comps[t.id]]
