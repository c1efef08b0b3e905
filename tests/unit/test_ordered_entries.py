"""OrderedEntries keeps a dict's order and gives the same positions as a walk of it (DJA's V, issue 27), with the
Fenwick tree's loops in C (``_fenwickc.c``) and in Python (the fallback without a compiler) alike."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.runtime.algorithms import ordered
from joinlib.runtime.algorithms.ordered import OrderedEntries
from tests.kernels import BOTH, kernels


def test_the_kernels_are_built() -> None:
    assert ordered._c is not None, "joinlib/runtime/algorithms/_fenwickc.c is not built: `pip install -e .`"


def test_the_kernels_refuse_what_is_outside_the_tree() -> None:
    tree = ordered._tree(4)
    for call in (lambda: ordered._c.mark(tree, 3), lambda: ordered._c.removed_before(tree, 4),
                 lambda: ordered._c.slot_of(tree, 4, 0), lambda: ordered._c.slots_of(tree, 4, [0]),
                 lambda: ordered._c.positions(tree, [4]), lambda: ordered._c.slots_of(tree, 2, [-1])):
        with pytest.raises(IndexError):
            call()
    with pytest.raises(TypeError):
        ordered._c.removed_before((0, 0), 0)   # not the list ordered.py keeps


def test_the_dja_kernels_refuse_what_is_not_an_ordered_entries() -> None:
    """dja_tick / dja_apply (runtime/algorithms/dja.py's loops) read an OrderedEntries' own dicts and lists."""
    from collections import deque

    fake = type("Fake", (), {"_entries": {}, "_slot": {}, "_keys": (), "_tree": [0]})()
    with pytest.raises(TypeError):
        ordered._c.dja_tick(fake, deque(), [], (0,), True, 0, None)
    with pytest.raises(TypeError):
        ordered._c.dja_apply(fake, [], [], None, None)
    with pytest.raises(AttributeError):
        ordered._c.dja_apply(object(), [], [], None, None)
    oe = OrderedEntries()
    with pytest.raises(TypeError):
        ordered._c.dja_apply(oe, [], [], {}, None)   # s_F without the expiry dict
    with pytest.raises(IndexError):
        ordered._c.dja_apply(oe, [("a",)], [1, 1], None, None)   # past V's end: nothing settled
    assert list(oe.items()) == [(("a",), [0, False])]

ops = st.lists(st.tuples(st.sampled_from(["add", "del"]), st.integers(0, 40)), max_size=300)


@BOTH
@settings(max_examples=300, deadline=None)
@given(ops)
def test_positions_match_a_walk_of_the_dict(c, steps) -> None:
    with kernels(ordered, c):
        _positions(steps)


def _positions(steps) -> None:
    oe, ref = OrderedEntries(), {}
    for op, v in steps:
        key = (v,)
        if op == "add" and key not in ref:
            oe[key] = ref[key] = [v, False]
        elif op == "del" and key in ref:
            del oe[key], ref[key]
        assert list(oe) == list(ref) and len(oe) == len(ref)
    order = list(ref)
    for i, k in enumerate(order):
        assert oe.position(k) == i and oe.at(i) == k and oe[k] is ref[k]
    picked = order[::2]   # the batch forms: keys at many positions, and an update's (gap, count) pairs
    assert oe.keys_at([order.index(k) for k in picked]) == picked
    pairs: list[int] = []
    last = -1
    for i, k in enumerate(order):
        if k in picked:
            pairs += (i - last - 1, ref[k][0])
            last = i
    assert oe.changes(reversed(picked)) == pairs
    for bad in (-1, len(order)):
        try:
            oe.at(bad)
        except IndexError:
            continue
        raise AssertionError(f"at({bad}) did not raise")
    rebuilt = OrderedEntries(ref.items())
    assert [rebuilt.position(k) for k in order] == list(range(len(order)))


counts = st.lists(st.tuples(st.sampled_from(["add", "drop", "flag"]), st.integers(0, 20)), max_size=300)


@BOTH
@settings(max_examples=200, deadline=None)
@given(counts)
def test_count_operations_match_a_dict(c, steps) -> None:
    """add / bump / drop_empty / unflagged (DJA's loops) do what the same edits of a plain dict do, and keep
    the positions."""
    with kernels(ordered, c):
        _counts(steps)


def _counts(steps) -> None:
    oe, ref = OrderedEntries(), dict[tuple[int, ...], list[Any]]()
    for op, v in steps:
        key = (v,)
        if op == "add":
            got = oe.add(key)
            if key in ref:
                ref[key][0] += 1
                assert got == ref[key]
            else:
                ref[key] = [1, False]
                assert got is None
        elif op == "drop" and key in ref:
            oe.bump(key, -1)
            ref[key][0] -= 1
            oe.drop_empty([key])
            if ref[key][0] == 0:
                del ref[key]
        elif op == "flag" and key in ref:
            oe[key][1] = ref[key][1] = True
        assert oe == ref and list(oe) == list(ref)
        asked = [(w,) for w in range(v, v + 5)]
        assert oe.unflagged(asked) == [k for k in asked if k in ref and not ref[k][1]]
    assert [oe.position(k) for k in ref] == list(range(len(ref)))
