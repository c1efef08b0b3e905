"""The window store's kernel (joinlib/state/_storec.c) against its Python form (joinlib/state/memory.py).

Two MemoryWindowStores, one run with the kernel and one without, go through the same random steps: in-order
batches (with gaps that later batches fill), replicas' batches (late, out of order, repeated, already purged),
purges by ts and by seq, removals of oldest tuples, indexes added at any point (prefixes, the whole key, picks of
one or several positions) and look-ups.  After every step their whole state must be the same: the window's and
every index's KeyLists (``ts``, ``seq``, the very tuples, ``lo``) and the tables' key order.
"""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import joinlib.state.memory as mem
from joinlib.model import Tup
from joinlib.state.base import KeyList
from joinlib.state.memory import MemoryWindowStore
from tests.kernels import kernels

N = 400      # the stream: seq 0..N-1, ts non-decreasing in seq
INDEXES = [(0,), (0, 1), (0, 1, 2), (1,), (2,), (2, 0), (1, 2)]
KEYS = [(a, b, c) for a in range(3) for b in ("x", "y") for c in (0, 1.5)]


def _stream(keys: list[int], gaps: list[int]) -> list[Tup]:
    out, ts = [], 0
    for i in range(N):
        ts += gaps[i % len(gaps)]
        out.append(Tup(0, 1000 + i, ts, i, KEYS[keys[i % len(keys)] % len(KEYS)], b"r"))
    return out


def _kl(kl: KeyList) -> tuple[Any, ...]:
    return (kl.ts, kl.seq, [id(t) for t in kl.tups], kl.lo)


def _state(s: MemoryWindowStore) -> Any:
    return (_kl(s._all), [(index, [(k, _kl(kl)) for k, kl in table.items()])
                          for index, (table, _) in s._indexes.items()])


def _do(store: MemoryWindowStore, c: bool, op: str, *args: Any) -> Any:
    """``store.op(*args)`` with the kernel on or off: its answer, or the exception's type and text."""
    with kernels(mem, c):
        try:
            if op == "purge_below":
                return [id(t) for t in store.purge_below(**args[0])]
            if op == "lookup":
                kl = store.lookup(*args)
                return None if kl is None else _kl(kl)
            if op == "lookup_many":
                return {k: _kl(kl) for k, kl in store.lookup_many(*args).items()}
            return getattr(store, op)(*args)
        except Exception as e:  # noqa: BLE001 - both forms must raise alike
            return (type(e).__name__, str(e))


def _oldest_everywhere(s: MemoryWindowStore, t: Tup) -> bool:
    """Is ``t`` the oldest stored tuple with its key at every index (what remove_oldest needs)?"""
    for table, proj in s._indexes.values():
        kl = table.get(proj(t.key))
        if kl is None or kl.seq[kl.lo] != t.seq:
            return False
    return True


step = st.one_of(
    st.tuples(st.just("batch"), st.integers(0, 25), st.integers(0, 3)),           # next n, skipping some
    st.tuples(st.just("replica"), st.lists(st.integers(0, N - 1), max_size=20)),  # any seqs, any order
    st.tuples(st.just("purge_ts"), st.integers(-1, 3 * N)),
    st.tuples(st.just("purge_seq"), st.integers(-1, N + 1)),
    st.tuples(st.just("remove_prefix"), st.integers(1, 6)),
    st.tuples(st.just("remove_one"), st.integers(0, 50)),
    st.tuples(st.just("index"), st.sampled_from(INDEXES)),
    st.tuples(st.just("lookup"), st.sampled_from(INDEXES), st.integers(0, len(KEYS) - 1)),
    st.tuples(st.just("load"), st.booleans()),
)


def test_kernel_built() -> None:
    assert mem._c is not None, "joinlib.state._storec is not built (python setup.py build_ext --inplace)"


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(st.integers(0, 100), min_size=1, max_size=7), gaps=st.lists(st.integers(0, 3), min_size=1,
       max_size=5), first=st.lists(st.sampled_from(INDEXES), max_size=3, unique=True),
       steps=st.lists(step, max_size=60))
def test_same_state(keys: list[int], gaps: list[int], first: list[tuple[int, ...]], steps: list[Any]) -> None:
    assert mem._c is not None
    tups = _stream(keys, gaps)
    stores = {True: MemoryWindowStore(), False: MemoryWindowStore()}
    for index in first:
        for c, s in stores.items():
            _do(s, c, "add_index", index)
    nxt = 0
    for op, *args in steps:
        calls: list[tuple[Any, ...]] = []
        if op == "batch":
            n, skip = args
            batch = [tups[q] for q in range(nxt, min(N, nxt + n)) if skip == 0 or q % (skip + 1)]
            nxt = min(N, nxt + n)
            calls.append(("insert", batch))
        elif op == "replica":
            calls.append(("insert", [tups[q] for q in args[0]]))
        elif op == "purge_ts":
            calls.append(("purge_below", {"ts": args[0]}))
        elif op == "purge_seq":
            calls.append(("purge_below", {"seq": args[0]}))
        elif op == "remove_prefix":
            calls.append(("remove_oldest", stores[False].tuples()[:args[0]]))
        elif op == "remove_one":
            live = stores[False].tuples()
            if live and _oldest_everywhere(stores[False], live[args[0] % len(live)]):
                calls.append(("remove_oldest", [live[args[0] % len(live)]]))
        elif op == "index":
            calls.append(("add_index", args[0]))
        elif op == "lookup":
            index, k = args
            if index in stores[False]._indexes:
                key = mem.projector(index)(KEYS[k])
                calls.append(("lookup", index, key))
                calls.append(("lookup_many", index, [key, mem.projector(index)(KEYS[-1 - k]), ("none",)]))
        elif op == "load":
            calls.append(("load", stores[False].snapshot() if args[0] else []))
        for call in calls:
            answers = {c: _do(s, c, *call) for c, s in stores.items()}
            assert answers[True] == answers[False], call
            assert _state(stores[True]) == _state(stores[False]), call


@pytest.mark.parametrize("index", INDEXES)
def test_compaction_and_errors(index: tuple[int, ...]) -> None:
    """Long lists of one key (compacted at the same points) and the impossible states: a purged tuple whose key
    an index lacks (KeyError), purge_below without a bound (TypeError), keys of the wrong shape (IndexError)."""
    tups = [Tup(0, i, i // 3, i, KEYS[i % 2], b"") for i in range(600)]
    stores = {c: MemoryWindowStore() for c in (True, False)}
    for c, s in stores.items():
        _do(s, c, "add_index", index)
    for lo in range(0, 600, 7):
        for call in (("insert", tups[lo:lo + 7]), ("purge_below", {"seq": lo - 40}), ("purge_below", {"ts": lo // 5})):
            answers = {c: _do(s, c, *call) for c, s in stores.items()}
            assert answers[True] == answers[False]
            assert _state(stores[True]) == _state(stores[False])
    answers = {c: _do(s, c, "purge_below", {}) for c, s in stores.items()}
    assert answers[True] == answers[False] == ("TypeError", "drop_below needs ts or seq")
    for s in stores.values():   # an index that lost a key: the purge's KeyError
        table = s._indexes[index][0]
        del table[next(iter(table))]
    answers = {c: _do(s, c, "purge_below", {"seq": 10**6}) for c, s in stores.items()}
    assert answers[True] == answers[False] and answers[True][0] == "KeyError"
    assert _state(stores[True]) == _state(stores[False])
    short = [Tup(0, 10**6, 10**6, 10**6, (7,), b"")]
    answers = {c: _do(s, c, "insert", short) for c, s in stores.items()}
    assert answers[True] == answers[False]
    assert _state(stores[True]) == _state(stores[False])


def test_unknown_projector() -> None:
    """A projector the kernel does not know is called, as the Python form calls it."""
    def odd(key: Any) -> Any:
        return (key[1], len(key))

    tups = [Tup(0, i, i, i, KEYS[i % len(KEYS)], b"") for i in range(30)]
    stores = {c: MemoryWindowStore() for c in (True, False)}
    for c, s in stores.items():
        s._indexes[(9,)] = ({}, odd)
        _do(s, c, "insert", tups[:20])
        _do(s, c, "purge_below", {"ts": 7})
        _do(s, c, "insert", tups[20:])
    assert _state(stores[True]) == _state(stores[False])


def test_picks_are_known_by_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """A projector of positions that are not a prefix (memory._Pick) is picked by the kernel, not called; the
    Python form calls it per tuple.  Both give the same keys."""
    calls = []
    call = mem._Pick.__call__

    def counted(self: Any, key: Any) -> Any:
        calls.append(key)
        return call(self, key)

    monkeypatch.setattr(mem._Pick, "__call__", counted)
    tups = [Tup(0, i, i, i, KEYS[i % len(KEYS)], b"") for i in range(12)]
    stores = {c: MemoryWindowStore() for c in (True, False)}
    for c, s in stores.items():
        calls.clear()
        for index in ((1,), (2, 0)):
            s.add_index(index)
        _do(s, c, "insert", tups)
        _do(s, c, "purge_below", {"ts": 5})
        assert (calls == []) == c, calls
    assert _state(stores[True]) == _state(stores[False])
