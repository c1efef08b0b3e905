"""A step's probe in C (``joinlib/runtime/_rowsc.c``: ``by_key1``, ``time_groups``, ``time_join``) against the Python
form of :func:`joinlib.runtime.algorithms.base.join`, which is the definition: the same groups in the same order,
rows of one head sharing one list, and None (the Python form then answers) for what the kernel does not read."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import joinlib.runtime.algorithms.base as base
from joinlib.model import Tup
from joinlib.state.base import KeyList
from joinlib.state.memory import MemoryWindowStore

_c = base._rows_c
assert _c is not None, "joinlib.runtime._rowsc is not built (python setup.py build_ext --inplace)"

SIZE = 30


def by_key_py(rows, p, i):
    out: dict = {}
    for row in rows:
        out.setdefault((row[p].key[i],), []).append(row)
    return out


time_groups_py = base.time_groups   # the definition


def _same(a, b):
    assert [(id(r), [t.seq for t in g]) for r, g in a] == [(id(r), [t.seq for t in g]) for r, g in b]
    # rows of one head in a row share one list, in both forms
    assert [id(g) == id(a[j - 1][1]) for j, (_, g) in enumerate(a) if j] == \
        [id(g) == id(b[j - 1][1]) for j, (_, g) in enumerate(b) if j]


@st.composite
def windows(draw):
    """A memory window of stream 1 (key index (0,)), purged below a drawn bound, and rows whose slot 0 holds a
    head of stream 0 probing it."""
    keys = st.sampled_from(["a", "b", "c", 7, -3])
    n = draw(st.integers(0, 40))
    ts = sorted(draw(st.lists(st.integers(0, 100), min_size=n, max_size=n)))
    store = MemoryWindowStore()
    store.add_index((0,))
    store.insert([Tup(1, j, t, j, (draw(keys),), b"") for j, t in enumerate(ts)])
    store.purge_below(ts=draw(st.integers(0, 40)))
    heads = sorted(draw(st.lists(st.integers(0, 130), max_size=12)))
    rows = [(Tup(0, 100 + j, h, j, (draw(keys),), b""), None) for j, h in enumerate(heads)]
    rows += [rows[j] for j in draw(st.lists(st.integers(0, max(len(rows) - 1, 0)), max_size=4))] if rows else []
    return store, rows


@settings(max_examples=300, deadline=None)
@given(windows(), st.booleans(), st.integers(0, 60))
def test_the_kernel_probes_as_the_python_form(w, right, size):
    store, rows = w
    table = store.table((0,))
    bykey = _c.by_key1(rows, 0, 0)
    assert bykey == by_key_py(rows, 0, 0) and list(bykey) == list(by_key_py(rows, 0, 0))
    found = {k: table[k] for k in bykey if k in table}
    want = time_groups_py(bykey, found, 0, size, right)
    _same(_c.time_groups(bykey, found, 0, size, right), want)
    _same(_c.time_join(rows, 0, 0, table, 0, size, right), want)


def test_what_the_kernel_does_not_read_is_declined():
    t = Tup(0, 1, 5, 0, ("a",), b"")
    assert _c.by_key1([[t]], 0, 0) is None                       # a row that is not a tuple
    assert _c.by_key1([(t,)], 0, 1) is None                      # no such key value
    assert _c.by_key1([(Tup(0, 1, 5, 0, ([1],), b""),)], 0, 0) is None   # an unhashable value
    kl = KeyList()
    kl.ts, kl.tups, kl.seq = [1, "x"], [t, t], [0, 1]  # type: ignore[list-item]
    assert _c.time_groups({("a",): [(t,)]}, {("a",): kl}, 0, SIZE, True) is None   # a ts that is not an int
    kl.ts = [1, 2**70]
    assert _c.time_groups({("a",): [(t,)]}, {("a",): kl}, 0, SIZE, True) is None   # beyond 64 bits
    assert _c.time_groups({("a",): [(t,)]}, {("a",): object()}, 0, SIZE, True) is None   # not a key list


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError):
        _c.time_join((), 0, 0, {}, 0, SIZE, True)
