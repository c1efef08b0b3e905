"""One conformance suite for every WindowStore: each must behave like a plain list of tuples.

Every test runs against every store kind (``memory``: the reference implementation,
``redis``: :class:`joinlib.adapters.redis_store.RedisWindowStore`, ``redis-mirror``:
:class:`~joinlib.adapters.redis_store.MirroredRedisWindowStore` and ``redis-blocks``:
:class:`~joinlib.adapters.redis_blocks.RedisBlockStore` on a real Redis from the
``redis_url`` fixture - no Redis is a failure, never a skip).  A block store writes behind: re-opening
one flushes it first (what a node does before each checkpoint).  The observable state is
compared with a model that is just ``{seq: Tup}``:

* table-driven cases: operation scripts with their expected results written out;
* a hypothesis state machine: random inserts (in order, out of order, duplicates,
  re-inserts of purged tuples), lookups, purges by ts and by seq, removals of oldest
  tuples, indexes added after inserts, and - for stores that persist - re-opening the
  store on the same prefix, checked against the model after every step.

Universe of tuples: seq 0..n-1 with ts non-decreasing in seq (seq is the rank in
(ts, id) order), so the two purge forms cut a prefix as in a real stream.
"""
from __future__ import annotations

import uuid
from typing import Callable, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from joinlib.model import Tup
from joinlib.state.base import KeyList
from joinlib.state.memory import MemoryWindowStore

STORE_KINDS = ["memory", "redis", "redis-mirror", "redis-blocks"]


# --------------------------------------------------------------------------- store makers

class Maker:
    """Fresh stores of one kind; ``reopen`` gives a new handle on the same stored state."""

    kind = "?"
    persistent = False

    def new(self):
        raise NotImplementedError

    def reopen(self, store):
        return store

    def close(self) -> None:
        pass


class MemoryMaker(Maker):
    kind = "memory"

    def new(self):
        return MemoryWindowStore()


class RedisMaker(Maker):
    kind = "redis"
    persistent = True

    def __init__(self, url: str, kind: str = "redis") -> None:
        import redis

        from joinlib.adapters.redis_client import clear_namespace
        from joinlib.adapters.redis_store import MirroredRedisWindowStore, RedisBlockStore, RedisWindowStore
        self._cls = {"redis": RedisWindowStore, "redis-mirror": MirroredRedisWindowStore,
                     "redis-blocks": RedisBlockStore}[kind]
        self._clear = clear_namespace
        self.kind = kind
        self.client = redis.Redis.from_url(url)
        self.namespace = f"conf-{uuid.uuid4().hex[:10]}"

    def new(self):
        return self._cls(self.client, f"{self.namespace}/{uuid.uuid4().hex[:8]}")

    def reopen(self, store):
        if hasattr(store, "flush"):
            store.flush()
        return self._cls(self.client, store.prefix)

    def close(self) -> None:
        self._clear(self.client, self.namespace)
        self.client.close()


@pytest.fixture(params=STORE_KINDS)
def maker(request):
    if request.param == "memory":
        m: Maker = MemoryMaker()
    else:
        m = RedisMaker(request.getfixturevalue("redis_url"), request.param)
    yield m
    m.close()


# --------------------------------------------------------------------------- observation helpers

def obs(t: Tup) -> tuple:
    """Everything observable about a tuple, key value types included."""
    return (t.pos, t.id, t.ts, t.seq, tuple((type(v).__name__, v) for v in t.key), bytes(t.rest))


def live(kl: KeyList) -> tuple[list, list, list]:
    """(ts, seq, tuples) of a KeyList's live part; checks the lists are parallel and in seq order."""
    ts, seq, tups = kl.ts[kl.lo:], kl.seq[kl.lo:], kl.tups[kl.lo:]
    assert len(ts) == len(seq) == len(tups) == len(kl)
    assert ts == [t.ts for t in tups] and seq == [t.seq for t in tups]
    assert seq == sorted(seq) and len(set(seq)) == len(seq)
    assert kl.live() == tups
    return ts, seq, [obs(t) for t in tups]


def project(key: tuple, index: tuple) -> tuple:
    return tuple(key[i] for i in index)


class Model:
    """The specification: a dict seq -> tuple and a set of indexes."""

    def __init__(self) -> None:
        self.tups: dict[int, Tup] = {}
        self.indexes: set[tuple] = set()

    def sorted(self) -> list[Tup]:
        return [self.tups[s] for s in sorted(self.tups)]

    def insert(self, tups) -> None:
        for t in tups:
            self.tups.setdefault(t.seq, t)

    def lookup(self, index, keys) -> dict:
        out = {}
        for k in keys:
            found = [t for t in self.sorted() if project(t.key, index) == k]
            if found and k not in out:
                out[k] = found
        return out

    def purge(self, *, ts=None, seq=None) -> list[Tup]:
        gone = [t for t in self.sorted() if (t.ts < ts if ts is not None else t.seq < seq)]
        for t in gone:
            del self.tups[t.seq]
        return gone

    def removable(self) -> list[Tup]:
        """Tuples that are the oldest with their key under every index."""
        out = []
        for t in self.sorted():
            if all(not any(u.seq < t.seq and project(u.key, ix) == project(t.key, ix)
                           for u in self.tups.values()) for ix in self.indexes):
                out.append(t)
        return out

    def first_seq_at_or_after(self, ts) -> Optional[int]:
        return next((t.seq for t in self.sorted() if t.ts >= ts), None)


def assert_same(store, model: Model, keys_by_index: Callable[[tuple], list]) -> None:
    """The store's whole observable state equals the model's."""
    want = model.sorted()
    assert len(store) == len(want)
    assert [obs(t) for t in store.tuples()] == [obs(t) for t in want]
    for ix in model.indexes:
        keys = keys_by_index(ix)
        got = store.lookup_many(ix, keys)
        exp = model.lookup(ix, keys)
        assert list(got) == list(exp), f"index {ix}: keys {list(got)} != {list(exp)}"
        for k, kl in got.items():
            ts, seq, tups = live(kl)
            assert tups == [obs(t) for t in exp[k]], f"index {ix} key {k!r}"
        for k in keys[:3]:
            one = store.lookup(ix, k)
            if k in exp:
                assert one is not None and live(one)[2] == [obs(t) for t in exp[k]]
            else:
                assert one is None
    for at in {t.ts for t in want} | {-1, 0, 10**6} | {t.ts + 1 for t in want[:3]}:
        assert store.first_seq_at_or_after(at) == model.first_seq_at_or_after(at)


# --------------------------------------------------------------------------- table-driven cases

TS = [0, 0, 1, 2, 2, 2, 5, 7, 7, 9, 12, 12, 15, 20, 21, 21]
U = [Tup(1, 100 + i, ts, i, (i % 3, "ab"[i % 2]), b"p%d" % i) for i, ts in enumerate(TS)]


def tups(*seqs) -> list[Tup]:
    return [U[s] for s in seqs]


def seqs_of(ts_list) -> list[int]:
    return [t.seq for t in ts_list]


# Each case: a list of operations, each with its expected result.
#   ("index", ix)                      add_index
#   ("insert", [seq...])               insert those tuples of U, in that order
#   ("lookup", ix, [key...], {key: [seq...]})
#   ("purge_ts", T, [seq...]) / ("purge_seq", S, [seq...])   purged seqs, in order
#   ("remove", [seq...])               remove_oldest
#   ("state", [seq...])                tuples() and len
#   ("first", ts, seq-or-None)
CASES = {
    "empty store": [
        ("state", []),
        ("index", (0,)),
        ("lookup", (0,), [(0,), (1,)], {}),
        ("purge_ts", 100, []),
        ("purge_seq", 100, []),
        ("first", 0, None),
        ("remove", []),
        ("insert", []),
        ("state", []),
    ],
    "in-order insert and lookup": [
        ("index", (0,)),
        ("insert", [0, 1, 2, 3, 4, 5, 6]),
        ("state", [0, 1, 2, 3, 4, 5, 6]),
        ("lookup", (0,), [(0,), (1,), (2,), (3,)], {(0,): [0, 3, 6], (1,): [1, 4], (2,): [2, 5]}),
        ("insert", [7, 8]),
        ("lookup", (0,), [(1,)], {(1,): [1, 4, 7]}),
    ],
    "out-of-order insert keeps seq order": [
        ("index", (1,)),
        ("insert", [5, 1, 3]),
        ("insert", [0, 4, 2]),
        ("state", [0, 1, 2, 3, 4, 5]),
        ("lookup", (1,), [("a",), ("b",)], {("a",): [0, 2, 4], ("b",): [1, 3, 5]}),
    ],
    "duplicates are ignored": [
        ("index", (0,)),
        ("insert", [0, 1, 2]),
        ("insert", [2, 1, 3, 3, 0]),
        ("insert", [4, 4]),
        ("state", [0, 1, 2, 3, 4]),
        ("lookup", (0,), [(0,), (1,)], {(0,): [0, 3], (1,): [1, 4]}),
    ],
    "purge by ts is strict and returns seq order": [
        ("index", (0,)),
        ("insert", list(range(10))),
        ("purge_ts", 2, [0, 1, 2]),
        ("purge_ts", 2, []),
        ("first", 2, 3),
        ("purge_ts", 7, [3, 4, 5, 6]),
        ("lookup", (0,), [(0,), (1,), (2,)], {(0,): [9], (1,): [7], (2,): [8]}),
        ("state", [7, 8, 9]),
        ("purge_ts", 1000, [7, 8, 9]),
        ("state", []),
        ("lookup", (0,), [(0,), (1,), (2,)], {}),
    ],
    "purge by seq": [
        ("index", (1, 0)),
        ("insert", list(range(8))),
        ("purge_seq", 0, []),
        ("purge_seq", 3, [0, 1, 2]),
        ("purge_seq", 3, []),
        ("lookup", (1, 0), [("a", 1), ("b", 1), ("a", 0)], {("a", 1): [4], ("b", 1): [7], ("a", 0): [6]}),
        ("purge_seq", -5, []),
        ("state", [3, 4, 5, 6, 7]),
    ],
    "remove_oldest one key after another": [
        ("index", (0,)),
        ("insert", list(range(9))),
        ("remove", [0, 3]),
        ("lookup", (0,), [(0,)], {(0,): [6]}),
        ("remove", [1, 2, 6]),
        ("state", [4, 5, 7, 8]),
        ("lookup", (0,), [(0,), (1,), (2,)], {(1,): [4, 7], (2,): [5, 8]}),
        ("first", 0, 4),
    ],
    "remove_oldest without indexes removes anywhere": [
        ("insert", list(range(6))),
        ("remove", [4, 1]),
        ("state", [0, 2, 3, 5]),
    ],
    "add_index after inserts indexes what is stored": [
        ("insert", [0, 1, 2, 3, 4, 5]),
        ("purge_seq", 2, [0, 1]),
        ("index", (1,)),
        ("lookup", (1,), [("a",), ("b",)], {("a",): [2, 4], ("b",): [3, 5]}),
        ("index", (1,)),  # idempotent
        ("index", (0, 1)),
        ("lookup", (0, 1), [(0, "a"), (2, "b"), (0, "b")], {(2, "b"): [5], (0, "b"): [3]}),
        ("insert", [6, 7]),
        ("lookup", (0, 1), [(0, "a"), (1, "b")], {(0, "a"): [6], (1, "b"): [7]}),
        ("lookup", (1,), [("a",)], {("a",): [2, 4, 6]}),
    ],
    "re-inserting purged tuples": [
        ("index", (0,)),
        ("insert", [0, 1, 2, 3, 4]),
        ("purge_seq", 3, [0, 1, 2]),
        ("insert", [1, 4]),
        ("state", [1, 3, 4]),
        ("lookup", (0,), [(1,), (0,)], {(1,): [1, 4], (0,): [3]}),
        ("purge_ts", 1, [1]),
    ],
    "first_seq_at_or_after with ties": [
        ("insert", list(range(16))),
        ("first", -10, 0),
        ("first", 0, 0),
        ("first", 2, 3),
        ("first", 3, 6),
        ("first", 21, 14),
        ("first", 22, None),
        ("purge_ts", 12, list(range(10))),
        ("first", 0, 10),
    ],
    "lookup order of keys, absent and repeated keys": [
        ("index", (0,)),
        ("insert", [0, 1, 2]),
        ("lookup", (0,), [(2,), (9,), (0,), (2,)], {(2,): [2], (0,): [0]}),
    ],
}


def _run_case(store, ops, maker: Maker) -> None:
    for op in ops:
        kind = op[0]
        if kind == "index":
            store.add_index(op[1])
        elif kind == "insert":
            store.insert(tups(*op[1]))
        elif kind == "lookup":
            got = store.lookup_many(op[1], op[2])
            assert list(got) == list(op[3]), op
            for k, kl in got.items():
                assert live(kl)[1] == op[3][k], (op, k)
                assert live(kl)[2] == [obs(t) for t in tups(*op[3][k])]
        elif kind == "purge_ts":
            assert [obs(t) for t in store.purge_below(ts=op[1])] == [obs(t) for t in tups(*op[2])], op
        elif kind == "purge_seq":
            assert [obs(t) for t in store.purge_below(seq=op[1])] == [obs(t) for t in tups(*op[2])], op
        elif kind == "remove":
            store.remove_oldest(tups(*op[1]))
        elif kind == "state":
            assert seqs_of(store.tuples()) == op[1], op
            assert len(store) == len(op[1])
            assert [obs(t) for t in store.tuples()] == [obs(t) for t in tups(*op[1])]
        elif kind == "first":
            assert store.first_seq_at_or_after(op[1]) == op[2], op
        else:  # pragma: no cover
            raise ValueError(kind)
        store = maker.reopen(store) if maker.persistent else store


@pytest.mark.parametrize("case", list(CASES))
def test_table(maker, case):
    _run_case(maker.new(), CASES[case], maker)


# --------------------------------------------------------------------------- edge cases

def test_keys_equal_across_types_find_the_same_tuples(maker):
    """1 == 1.0 == True and 0 == 0.0 == -0.0 == False: the dict semantics of the memory store."""
    s = maker.new()
    s.add_index((0,))
    data = [Tup(0, i, i, i, (v, i), b"") for i, v in enumerate([1, 1.0, True, 0, -0.0, False, 2.5, None, "1"])]
    s.insert(data)
    got = s.lookup_many((0,), [(1,), (0.0,), (2.5,), (None,), ("1",), (3,)])
    assert {k: live(kl)[1] for k, kl in got.items()} == {(1,): [0, 1, 2], (0.0,): [3, 4, 5], (2.5,): [6],
                                                         (None,): [7], ("1",): [8]}
    # the stored keys come back with their own types
    assert [tuple(type(v) for v in t.key) for t in live_tups(got[(1,)])] == [(int, int), (float, int), (bool, int)]


def live_tups(kl: KeyList) -> list[Tup]:
    return kl.tups[kl.lo:]


def test_awkward_values_in_keys_and_payloads(maker):
    weird = ["", "a\x1fb", "\x1e", "{x}", "}{", ":i:0:", "é✓", "\ud800", "'\"", "N", "None", "-0", "1e3",
             10**30, -(10**30), 1.5e300, float("inf"), float("-inf"), -7, "\x00", " "]
    s = maker.new()
    s.add_index((0,))
    s.add_index((1, 0))
    data = [Tup(3, 10**12 + i, 2**50 + i, i, (v, i % 2), bytes(range(i, i + 40)) * (i % 3))
            for i, v in enumerate(weird)]
    s.insert(data)
    for i, v in enumerate(weird):
        got = s.lookup_many((0,), [(v,)])
        assert [obs(t) for t in live_tups(got[(v,)])] == [obs(data[i])], v
        got = s.lookup_many((1, 0), [(i % 2, v)])
        assert [obs(t) for t in live_tups(got[(i % 2, v)])] == [obs(data[i])], v
    assert [obs(t) for t in s.purge_below(ts=2**50 + 5)] == [obs(t) for t in data[:5]]
    assert s.first_seq_at_or_after(2**50) == 5


def test_large_batches(maker):
    """Batches beyond what one Lua unpack takes (chunking), one key with many tuples."""
    n = 9000
    data = [Tup(0, i, i // 3, i, (i % 2,), b"x") for i in range(n)]
    s = maker.new()
    s.add_index((0,))
    s.insert(data[::2][::-1])  # out of order
    s.insert(data)             # half duplicates
    assert len(s) == n
    got = s.lookup_many((0,), [(0,), (1,)])
    assert live(got[(0,)])[1] == list(range(0, n, 2))
    assert len(got[(1,)]) == n // 2
    assert len(s.purge_below(seq=8500)) == 8500
    s.remove_oldest(data[8500:8510])
    assert seqs_of(s.tuples()) == list(range(8510, n))
    assert live(s.lookup_many((0,), [(1,)])[(1,)])[1] == list(range(8511, n, 2))


def test_lookup_on_a_missing_index_raises_key_error(maker):
    s = maker.new()
    s.add_index((0,))
    s.insert(tups(0, 1))
    with pytest.raises(KeyError):
        s.lookup_many((1,), [("a",)])
    with pytest.raises(KeyError):
        s.lookup((1,), ("a",))


def test_remove_oldest_refuses_a_tuple_that_is_not_the_oldest(maker):
    s = maker.new()
    s.add_index((0,))
    s.insert(tups(0, 1, 2, 3))
    with pytest.raises(AssertionError):
        s.remove_oldest(tups(3))


def test_keylists_are_parallel_lists_usable_by_bisection(maker):
    """The runtime bisects kl.ts / kl.seq from kl.lo: they must be plain lists in seq order."""
    from bisect import bisect_left
    s = maker.new()
    s.add_index((1,))
    s.insert(U)
    s.purge_below(ts=2)
    kl = s.lookup((1,), ("a",))
    assert isinstance(kl, KeyList) and isinstance(kl.ts, list) and isinstance(kl.seq, list)
    ts, seq, _ = live(kl)
    assert seq == [4, 6, 8, 10, 12, 14]
    assert bisect_left(kl.ts, 7, kl.lo) - kl.lo == 2


def test_snapshot_load_tuples_and_clear(maker):
    """snapshot() is every tuple in seq order, load() replaces the content keeping the indexes (also
    across store kinds), tuples() lists the content, clear() drops everything."""
    s = maker.new()
    s.add_index((0,))
    s.insert(U)
    s.purge_below(seq=3)
    snap = s.snapshot()
    assert seqs_of(snap) == list(range(3, 16)) and seqs_of(s.tuples()) == seqs_of(snap)
    s.insert([])  # the snapshot is a value: later changes do not show in it
    s.purge_below(seq=10)
    assert seqs_of(snap) == list(range(3, 16))
    t = maker.new()
    t.add_index((0,))
    t.insert(U[:2])
    t.load(snap)
    assert [obs(x) for x in t.tuples()] == [obs(x) for x in U[3:]]
    assert live(t.lookup((0,), (2,)))[1] == [5, 8, 11, 14]
    mem = MemoryWindowStore()  # into another kind of store: the same observable state
    mem.add_index((0,))
    mem.load(snap)
    assert [obs(x) for x in mem.tuples()] == [obs(x) for x in t.tuples()]
    t.clear()
    assert len(t) == 0 and t.tuples() == [] and t.snapshot() == []
    if maker.persistent:
        assert len(maker.reopen(t)) == 0


def test_reopening_sees_the_same_state(maker):
    """A new handle on the same stored state (a restarted node for Redis) sees everything."""
    s = maker.new()
    s.add_index((0,))
    s.insert(U)
    s.purge_below(seq=4)
    s.remove_oldest(tups(4))
    r = maker.reopen(s)
    assert [obs(t) for t in r.tuples()] == [obs(t) for t in U[5:]]
    assert live(r.lookup((0,), (2,)))[1] == [5, 8, 11, 14]
    r.insert(U[:2])
    s2 = maker.reopen(r)
    assert seqs_of(s2.tuples()) == [0, 1] + list(range(5, 16))
    assert live(s2.lookup((0,), (0,)))[1] == [0, 6, 9, 12, 15]


# --------------------------------------------------------------------------- random operations

VALUES = [0, 1, 2, 1.0, True, "a", "b", None, 2.5, "x\x1fy"]


@st.composite
def universes(draw) -> list[Tup]:
    n = draw(st.integers(1, 40))
    steps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    out, now = [], draw(st.integers(-5, 5))
    for i in range(n):
        now += steps[i]  # ties when 0
        key = (draw(st.sampled_from(VALUES)), draw(st.sampled_from(VALUES[:3] + ["a", "b"])),
               draw(st.integers(0, 2)))
        out.append(Tup(draw(st.integers(0, 3)), 1000 + i, now, i, key, draw(st.binary(max_size=6))))
    return out


INDEXES = [(0,), (1,), (2,), (0, 1), (2, 0), (0, 1, 2)]


def make_machine(maker: Maker):
    class StoreMachine(RuleBasedStateMachine):
        @initialize(universe=universes(), first_indexes=st.lists(st.sampled_from(INDEXES), max_size=2))
        def setup(self, universe, first_indexes):
            self.u = universe
            self.store = maker.new()
            self.model = Model()
            for ix in first_indexes:
                self.store.add_index(ix)
                self.model.indexes.add(ix)

        def keys(self, ix):
            ks = [project(t.key, ix) for t in self.u]
            return ks[:12] + [tuple("zz" for _ in ix)]

        @rule(data=st.data())
        def insert_next(self, data):
            """In order: the next tuples after everything stored."""
            top = max(self.model.tups, default=-1)
            k = data.draw(st.integers(0, 8))
            batch = self.u[top + 1:top + 1 + k]
            self.store.insert(batch)
            self.model.insert(batch)

        @rule(data=st.data())
        def insert_any(self, data):
            """Out of order, duplicates (within the batch and with the store), re-inserts."""
            batch = data.draw(st.lists(st.sampled_from(self.u), max_size=10))
            self.store.insert(batch)
            self.model.insert(batch)

        @rule(data=st.data())
        def lookup(self, data):
            if not self.model.indexes:
                return
            ix = data.draw(st.sampled_from(sorted(self.model.indexes)))
            keys = data.draw(st.lists(st.sampled_from(self.keys(ix)), max_size=6))
            got = self.store.lookup_many(ix, keys)
            exp = self.model.lookup(ix, keys)
            assert list(got) == list(exp)
            for k in got:
                assert live(got[k])[2] == [obs(t) for t in exp[k]]

        @rule(data=st.data())
        def purge_ts(self, data):
            ts = data.draw(st.sampled_from([t.ts for t in self.u] + [self.u[-1].ts + 1, -100]))
            got = self.store.purge_below(ts=ts)
            assert [obs(t) for t in got] == [obs(t) for t in self.model.purge(ts=ts)]

        @rule(seq=st.integers(-2, 45))
        def purge_seq(self, seq):
            got = self.store.purge_below(seq=seq)
            assert [obs(t) for t in got] == [obs(t) for t in self.model.purge(seq=seq)]

        @precondition(lambda self: bool(self.model.tups))
        @rule(data=st.data())
        def remove_oldest(self, data):
            n = data.draw(st.integers(1, 4))
            gone = []
            for _ in range(n):
                cands = self.model.removable()
                if not cands:
                    break
                t = data.draw(st.sampled_from(cands))
                gone.append(t)
                del self.model.tups[t.seq]
            self.store.remove_oldest(gone)

        @rule(ix=st.sampled_from(INDEXES))
        def add_index(self, ix):
            self.store.add_index(ix)
            self.model.indexes.add(ix)

        @precondition(lambda self: maker.persistent)
        @rule()
        def reopen(self):
            self.store = maker.reopen(self.store)

        @rule()
        def snapshot_and_load(self):
            """A snapshot loaded into a fresh store (with the same indexes) is the same store: how a
            checkpoint, a plan switch or a partition hand-off moves a window."""
            snap = self.store.snapshot()
            assert [obs(t) for t in snap] == [obs(t) for t in self.store.tuples()]
            fresh = maker.new()
            for ix in sorted(self.model.indexes):
                fresh.add_index(ix)
            fresh.insert(self.u[:3])  # load replaces what was there
            fresh.load(snap)
            self.store = fresh

        @rule()
        def load_into_itself(self):
            """load keeps the store's indexes and replaces its tuples."""
            self.store.load(self.store.snapshot())

        @invariant()
        def same_state(self):
            if hasattr(self, "store"):
                assert_same(self.store, self.model, self.keys)

    return StoreMachine


def test_random_operations_match_the_model(maker):
    run_state_machine_as_test(
        make_machine(maker),
        settings=settings(max_examples=120, stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


# --------------------------------------------------------------------------- Redis specifics

@pytest.fixture
def rclient(redis_url):
    import redis
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.mark.parametrize("kind,keys_per_store", [("blocks", 2), ("mirror", 5), ("redis", 5)])
def test_redis_factory_keys_share_a_slot_per_node_and_clear_by_namespace(redis_url, rclient, kind, keys_per_store):
    """Block stores: the records and the index set; the others: the tuples, the index set and one sorted
    set per key value (3 here)."""
    from redis.crc import key_slot

    from joinlib.adapters.redis_client import clear_namespace
    from joinlib.adapters.redis_store import redis_store_factory
    ns, other = f"ns-{uuid.uuid4().hex[:8]}", f"ns-{uuid.uuid4().hex[:8]}"
    f, g = redis_store_factory(redis_url, ns, kind=kind), redis_store_factory(redis_url, other, kind=kind)
    try:
        a, b, c = f("r1/home/S1"), f("r1/SM-S1/S2/3"), g("r1/home/S1")
        for s in (a, b, c):
            s.add_index((0,))
            s.insert(U[:5])
        a.insert(U[5:])
        assert (len(a), len(b), len(c)) == (16, 5, 5)
        assert f.flush() == (2 if kind == "blocks" else 0) and g.flush() == (1 if kind == "blocks" else 0)
        keys = [k for k in rclient.scan_iter(match=f"{{{ns}/*", count=1000)]
        assert len(keys) == 2 * keys_per_store and len({key_slot(k) for k in keys}) == 1
        assert clear_namespace(rclient, ns) == len(keys)
        assert len(f("r1/home/S1")) == 0 and len(g("r1/home/S1")) == 5  # other namespace untouched
        assert not list(rclient.scan_iter(match=f"{{{ns}/*"))
    finally:
        clear_namespace(rclient, other)
        f.close()
        g.close()


def test_redis_store_rejects_decoding_clients(redis_url):
    import redis

    from joinlib.adapters.redis_store import RedisWindowStore
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(ValueError):
        RedisWindowStore(c, "x")
    c.close()


def test_redis_store_survives_a_script_cache_flush(redis_url, rclient):
    """EVALSHA after SCRIPT FLUSH (a restarted Redis) reloads the scripts."""
    from joinlib.adapters.redis_store import RedisWindowStore
    s = RedisWindowStore(rclient, f"flush-{uuid.uuid4().hex[:8]}")
    try:
        s.add_index((0,))
        s.insert(U[:3])
        rclient.script_flush()
        s.insert(U[3:6])
        kl = s.lookup((0,), (0,))
        assert kl is not None and live(kl)[1] == [0, 3]
    finally:
        s.clear()
