"""The key table's C form (joinlib/runtime/algorithms/_keytablec.c) does what keyindex.py's Python form does, step
for step: the same random operations on a table and its indexes, once with the kernel and once without, leave the
same state after every step (``seqs``, ``keys``, ``slot``, ``base``, ``dig``, each index's ``best`` and
``settled``, down to which of two equal keys, 1 and 1.0, a dictionary keeps) and give the same answers, in the same
order.  The Bloom kernels are on or off too (the filters' answers then come from the numpy form)."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol import bloom
from joinlib.protocol.bloom import Bloom, KeySet, Matcher
from joinlib.runtime.algorithms import keyindex
from joinlib.runtime.algorithms.keyindex import KeyIndex, KeyTable, LiveSet
from tests.kernels import BOTH, kernels

values = st.one_of(st.integers(-3, 12), st.sampled_from([1.0, 2.0, True, None]), st.text("ab", max_size=2))
keys = st.tuples(values) | st.tuples(values, values)


def test_the_key_table_kernel_is_built() -> None:
    assert keyindex._c is not None, "_keytablec.c is not built: run `pip install -e .` with a C compiler"


@st.composite
def key_sets(draw: st.DrawFn) -> Matcher:
    held = draw(st.lists(keys, max_size=10))
    if draw(st.booleans()):
        return KeySet(bloom=Bloom.of(held, draw(st.sampled_from([0.5, 0.1, 0.01, 1e-6])))).matcher()
    return KeySet(keys=tuple(dict.fromkeys(held))).matcher()


class World:
    """A table with two indexes sharing it and one index with a table of its own, and the live sets of each
    index: one world per form, driven alike."""

    def __init__(self, c: bool, slack: int) -> None:
        self.c = c
        with self.form():
            shared = KeyTable()
            shared.slack = slack
            self.indexes = [KeyIndex(shared), KeyIndex(shared), KeyIndex()]
            self.indexes[2].table.slack = slack
        self.tables = [shared, self.indexes[2].table]
        self.sets: list[list[LiveSet]] = [[], [], []]

    def form(self) -> Any:
        return kernels(keyindex, self.c)

    def state(self) -> Any:
        """Everything, spelled out: repr tells 1 from 1.0 and True, and a set's order."""
        tables = [(repr(list(t.seqs.items())), repr(t.keys), repr(list(t.slot.items())), t.base, bytes(t.dig),
                   [id(u) for u in t.users] == [id(u) for u in self.indexes if u.table is t]) for t in self.tables]
        indexes = [(repr(list(i.best.items())), i.settled, repr(list(i._exact.items())), i._exact_sets, i._exact_cap,
                    i._blooms, [(id(m), tag) for m, tag in i._matchers]) for i in self.indexes]
        return tables, indexes


def _run(ops: list[tuple[Any, ...]], slack: int) -> None:
    worlds = [World(True, slack), World(False, slack)]
    pending: list[dict[int, Any]] = [{}, {}]   # per table: seq -> key
    seq, n = 0, 0
    for op in ops:
        answers = []
        for w in worlds:
            with w.form():
                answers.append(_apply(w, op, pending, seq, n))
        assert answers[0] == answers[1], op
        assert worlds[0].state() == worlds[1].state(), op
        kind = op[0]
        if kind in ("add", "add_settle"):
            t = op[1]
            pending[t].update(zip(range(seq, seq + len(op[2])), op[2], strict=True))
            seq += len(op[2])
        elif kind == "discard":
            for s in op[2]:
                pending[op[1]].pop(s, None)
        elif kind == "sets":
            n += len(op[2])


def _apply(w: World, op: tuple[Any, ...], pending: list[dict[int, Any]], seq: int, n: int) -> Any:
    kind = op[0]
    if kind == "add":
        _, t, batch = op
        w.tables[t].add_all(batch, list(range(seq, seq + len(batch))))
    elif kind == "add_settle":   # a reducer's batch: added, and every index over the table settled
        _, t, batch = op
        w.tables[t].add_settle(batch, list(range(seq, seq + len(batch))))
    elif kind == "discard":
        _, t, seqs, wrong = op
        ks = [pending[t][s] for s in seqs]
        w.tables[t].discard_all(ks + [pending[t][s] for s in wrong], seqs + [s + 10_000 for s in wrong])
    elif kind == "settle":
        w.indexes[op[1]].settle()
    elif kind == "sets":
        _, i, new, live_tag, rebuild = op
        new = [(n + j + 1, tag, m) for j, (tag, m) in enumerate(new)]
        w.sets[i] = [f for f in w.sets[i] if f[1] >= live_tag] + new
        if rebuild:
            w.indexes[i].settle(w.sets[i])
        else:
            w.indexes[i].more_live(w.sets[i], new)
        index, out = w.indexes[i], []
        for _, tag, m in new:   # what Reducer._matched does with a new set
            held = index.holding(m)
            out.append(held)
            for k in held:
                index.best[k] = max(index.best.get(k, -1), tag)
        return out
    elif kind == "holding":
        _, i, j = op
        sets = w.sets[i]
        return w.indexes[i].holding(sets[j % len(sets)][2]) if sets else None
    return None


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    ops: list[tuple[Any, ...]] = []
    pending: list[dict[int, Any]] = [{}, {}]
    seq = 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["add", "add", "add_settle", "discard", "discard", "settle", "settle", "sets",
                                     "holding"]))
        if kind in ("add", "add_settle"):
            t, batch = draw(st.integers(0, 1)), draw(st.lists(keys, max_size=8))
            ops.append((kind, t, batch))
            pending[t].update(zip(range(seq, seq + len(batch)), batch, strict=True))
            seq += len(batch)
        elif kind == "discard":
            t = draw(st.integers(0, 1))
            if not pending[t]:
                continue
            seqs = draw(st.lists(st.sampled_from(sorted(pending[t])), unique=True))
            wrong = draw(st.lists(st.sampled_from(sorted(pending[t])), unique=True, max_size=2))
            # a pair with a seq the key does not have pending leaves the key as it is
            wrong = [s for s in wrong if s not in seqs]
            ops.append(("discard", t, seqs, wrong))
            for s in seqs:
                del pending[t][s]
        elif kind == "settle":
            ops.append(("settle", draw(st.integers(0, 2))))
        elif kind == "sets":
            new = draw(st.lists(st.tuples(st.integers(0, 9), key_sets()), max_size=3))
            ops.append(("sets", draw(st.integers(0, 2)), new, draw(st.integers(0, 5)), draw(st.booleans())))
        else:
            ops.append(("holding", draw(st.integers(0, 2)), draw(st.integers(0, 5))))
    return ops


@BOTH
@settings(max_examples=400, deadline=None)
@given(operations(), st.sampled_from([0, 1, 64]))
def test_the_c_form_leaves_the_python_forms_state(c, ops, slack) -> None:
    with kernels(bloom, c):
        _run(ops, slack)


@pytest.mark.parametrize("c", [True, False], ids=["c-kernel", "fallback"])
def test_both_forms_refuse_alike(c) -> None:
    """Unequal keys and seqs (zip(strict=True)), and a key that is not pending, raise as the Python form does."""
    with kernels(keyindex, c):
        t = KeyTable()
        KeyIndex(t)
        with pytest.raises(ValueError):
            t.add_all([(1,), (2,)], [0])
        with pytest.raises(KeyError):
            t.discard_all([(3,)], [0])
        with pytest.raises(ValueError):
            t.discard_all([(1,)], [])


def test_the_fallback_is_the_python_form(monkeypatch) -> None:
    """Without the kernel (no compiler at install) the Python form answers: the C functions are not called."""
    class Refuse:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the kernel's {name} called with the kernel off")

    monkeypatch.setattr(keyindex, "_c", None)
    t = KeyTable()
    index = KeyIndex(t)
    t.add_all([(1,), (2,), (1,)], [0, 1, 2])
    index.settle([(1, 3, KeySet(keys=((1,),)).matcher())])
    t.discard_all([(1,)], [0])
    assert t.seqs == {(1,): 2, (2,): 1} and index.best == {(1,): 3, (2,): -1}
    monkeypatch.setattr(keyindex, "_c", Refuse())
    with pytest.raises(AssertionError):
        t.add_all([(3,)], [3])
