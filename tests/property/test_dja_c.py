"""DJA's loops in C (``_fenwickc.c``: ``dja_tick`` for DjaSender._update, ``dja_apply`` for DjaReplica.apply) and in
Python (the fallback without a compiler) give the same messages, the same state and the same errors.

A home (DjaSender for SM-D1, MixedSender for SM-S2) and its replica (DjaReplica / MixedReplica) run random epochs:
batches of tuples over a small key domain, expiry bounds by ts or by seq (killing tuples of the same epoch too),
SM-S2's requests (the home flags the keys, the replica receives their window tuples), updates through the wire
(encode/decode), corrupted updates (a position past V's end or before its start, an odd pair: the replica must say
it is out of sync; a new value it has already), each undone by a restore, and snapshots and restores of either side
at random points.  The same run with the kernels on and off must give the same trace: every message's bytes, and
the whole state (OrderedEntries' dict, slots, keys and tree, the FIFO, the replica's s_F / expiry dicts and store)
after every epoch."""
from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.model import Stream, Tup, Window
from joinlib.protocol.messages import DjaUpdate, TupleBatch
from joinlib.protocol.wire import decode_body, encode_body
from joinlib.runtime.algorithms import ordered
from joinlib.runtime.algorithms.dja import DjaReplica, DjaSender, MixedReplica, MixedSender
from joinlib.runtime.algorithms.ordered import OrderedEntries
from joinlib.state.memory import MemoryWindowStore
from tests.kernels import kernels

S = Stream("S2", 1, "n2", Window("time", 1000), ("a", "b"))
NO_CODEC: Any = None   # DJA's snapshots hold no tuples: no encode / decode


def test_the_kernels_are_built() -> None:
    assert ordered._c is not None and hasattr(ordered._c, "dja_tick") and hasattr(ordered._c, "dja_apply"), \
        "joinlib/runtime/algorithms/_fenwickc.c is not built (or is old): `pip install -e .`"


epochs = st.lists(st.fixed_dictionaries({
    "keys": st.lists(st.tuples(st.integers(0, 9), st.sampled_from(["x", "y", 3])), max_size=14),
    "ts_step": st.integers(0, 3),           # each tuple's ts: the previous one's plus 0..3 (ties included)
    "expire": st.integers(0, 12),           # the bound moves up by this much (by ts or by seq)
    "ask": st.lists(st.integers(0, 13), max_size=4),     # SM-S2's requests: the keys of these batch tuples
    "corrupt": st.sampled_from([None, None, None, "past", "before", "odd", "huge", "again"]),
    "restore": st.sampled_from([None, None, None, "home", "replica", "both"]),
}), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(mixed=st.booleans(), by_ts=st.booleans(), index=st.sampled_from([(0,), (1,), (0, 1), (1, 0)]),
       plan=epochs)
def test_the_kernels_give_the_messages_and_state_of_the_python_loops(mixed, by_ts, index, plan) -> None:
    on, off = _run(mixed, by_ts, index, plan, True), _run(mixed, by_ts, index, plan, False)
    assert len(on) == len(off)
    for a, b in zip(on, off, strict=True):
        assert a == b


def _oe(oe: OrderedEntries) -> str:
    """All of an OrderedEntries' state, with types (True is not 1) and dict order."""
    return repr((list(oe._entries.items()), list(oe._slot.items()), oe._keys, oe._tree))


def _state(home: DjaSender, rep: DjaReplica) -> tuple[str, ...]:
    out: tuple[str, ...] = (_oe(home.entries), repr(list(home.fifo)), _oe(rep.entries))
    if isinstance(rep, MixedReplica):
        out += (repr(rep._expire), repr([(k, [t.seq for t in v]) for k, v in rep._sf.items()]),
                repr([t.seq for t in rep.store.tuples()]))
    return out


def _run(mixed: bool, by_ts: bool, index: tuple[int, ...], plan: list[dict[str, Any]], c: bool) -> list[Any]:
    trace: list[Any] = []
    with kernels(ordered, c):
        home: DjaSender = MixedSender(S, index) if mixed else DjaSender(S, index)
        store = MemoryWindowStore()
        store.add_index(index)
        rep: DjaReplica = MixedReplica(S, index, store) if mixed else DjaReplica(S, index)
        window: list[Tup] = []      # the window's tuples (the home's FIFO), to answer requests
        seq = ts = bound = 0
        for e, ep in enumerate(plan):
            batch = []
            for key in ep["keys"]:
                ts += ep["ts_step"]
                batch.append(Tup(1, seq, ts, seq, key))
                seq += 1
            window += batch
            bound += ep["expire"]
            window = [t for t in window if (t.ts if by_ts else t.seq) >= bound]
            msg = home.tick(e, batch, ("ts" if by_ts else "seq", bound))
            assert isinstance(msg, DjaUpdate)
            data = encode_body(msg)
            trace.append((e, data, repr(msg)))
            got = decode_body(data)
            assert isinstance(got, DjaUpdate)
            if ep["corrupt"] is not None:
                saved = pickle.dumps(rep.snapshot(NO_CODEC))
                if ep["corrupt"] == "again":   # a new value the replica has: its entry starts again, at its place
                    bad = DjaUpdate(list(got.vj) + list(rep.entries)[:1], [], [], list(got.arrivals))
                else:
                    bad = DjaUpdate(list(got.vj), _corrupt(got.vc, ep["corrupt"], len(rep.entries) + len(got.vj)),
                                    list(got.sf), list(got.arrivals))
                try:
                    rep.apply(e, bad)
                    trace.append(("applied", _state(home, rep)))
                except Exception as err:   # noqa: BLE001 -- the type and the words are compared
                    trace.append((type(err).__name__, str(err), _state(home, rep)))
                rep.restore(pickle.loads(saved), NO_CODEC)
                if isinstance(rep, MixedReplica):
                    rep._sf, rep._expire = {}, {}
            rep.apply(e, got)
            if mixed and ep["ask"]:
                assert isinstance(home, MixedSender)
                asked = [tuple(batch[i % len(batch)].key[j] for j in index) for i in ep["ask"]] if batch else []
                want = home.entries.unflagged(dict.fromkeys(asked))
                for k in want:
                    home.entries[k][1] = True
                tups = [t for t in window if tuple(t.key[i] for i in index) in want]
                assert isinstance(rep, MixedReplica)
                rep.receive(TupleBatch([(t,) for t in tups]))
            if ep["restore"] in ("home", "both"):
                data_h = pickle.loads(pickle.dumps(home.snapshot(NO_CODEC)))
                home = type(home)(S, index)
                home.restore(data_h, NO_CODEC)
            if ep["restore"] in ("replica", "both"):
                data_r = pickle.loads(pickle.dumps(rep.snapshot(NO_CODEC)))
                rep = MixedReplica(S, index, store) if mixed else DjaReplica(S, index)
                rep.restore(data_r, NO_CODEC)
            trace.append(_state(home, rep))
    return trace


def _corrupt(vc: list[int], how: str, live: int) -> list[int]:
    if how == "past":       # a pair past V's end
        return vc + [live, 1]
    if how == "before":     # a position before V's start
        return [-2, 1] + vc
    if how == "odd":        # a count missing
        return vc + [0]
    return vc + [2 ** 62, 1, 2 ** 62, 1, -(2 ** 63), 1]   # gaps beyond any long long once summed


def test_a_settle_of_another_subclass_stays_in_python() -> None:
    """The kernel does DjaReplica's and MixedReplica's _settle only: another override is called, as before."""
    seen: list[tuple[Any, int]] = []

    class Counting(DjaReplica):
        def _settle(self, key, entry, p):
            seen.append((key, p))
            super()._settle(key, entry, p)

    for c in (True, False):
        seen.clear()
        with kernels(ordered, c):
            home, rep = DjaSender(S, (0,)), Counting(S, (0,))
            rep.apply(0, home.tick(0, [Tup(1, 0, 0, 0, (1, "x")), Tup(1, 1, 0, 1, (2, "x"))], ("ts", 0)))
            rep.apply(1, home.tick(1, [], ("ts", 1)))
        assert seen == [((1,), 1), ((2,), 1), ((1,), 0), ((2,), 0)] and len(rep.entries) == 0


def test_a_settle_below_mixed_replica_stays_in_python() -> None:
    """A subclass of MixedReplica that overrides _settle inherits MixedReplica's _kernel_settle, which declines:
    the override is called with the kernels on too."""
    seen: list[tuple[Any, int]] = []

    class Counting(MixedReplica):
        def _settle(self, key, entry, p):
            seen.append((key, p))
            super()._settle(key, entry, p)

    for c in (True, False):
        seen.clear()
        with kernels(ordered, c):
            store = MemoryWindowStore()
            store.add_index((0,))
            home, rep = MixedSender(S, (0,)), Counting(S, (0,), store)
            assert rep._kernel_settle() is None
            rep.apply(0, home.tick(0, [Tup(1, 0, 0, 0, (1, "x")), Tup(1, 1, 0, 1, (2, "x"))], ("ts", 0)))
            rep.apply(1, home.tick(1, [], ("ts", 1)))
        assert seen == [((1,), 1), ((2,), 1), ((1,), 0), ((2,), 0)] and len(rep.entries) == 0


@pytest.mark.parametrize("c", [True, False], ids=["c-kernels", "fallback"])
def test_many_keys_rebuild_the_tree_at_the_same_moments(c: bool) -> None:
    """Thousands of keys in and out: the tree is rebuilt (by add's and __setitem__'s rule) on both sides alike."""
    with kernels(ordered, c):
        home, rep = DjaSender(S, (0, 1)), DjaReplica(S, (0, 1))
        sizes = []
        for e in range(60):
            batch = [Tup(1, 100 * e + i, e, 100 * e + i, (e * 100 + i, "x")) for i in range(100)]
            rep.apply(e, decode_body(encode_body(home.tick(e, batch, ("ts", e - 5)))))
            sizes.append((len(home.entries._tree), len(rep.entries._tree)))
            assert list(rep.entries.items()) == [(k, [v[0], False]) for k, v in home.entries.items()]
    assert sizes == _sizes()


def _sizes() -> list[tuple[int, int]]:
    with kernels(ordered, False):
        home, rep = DjaSender(S, (0, 1)), DjaReplica(S, (0, 1))
        out = []
        for e in range(60):
            batch = [Tup(1, 100 * e + i, e, 100 * e + i, (e * 100 + i, "x")) for i in range(100)]
            rep.apply(e, home.tick(e, batch, ("ts", e - 5)))
            out.append((len(home.entries._tree), len(rep.entries._tree)))
    return out
