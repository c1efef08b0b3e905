"""The semijoin paper's worked examples as table-driven tests.

Fig. 5 / Example 4 (Algorithm 9): W_2 = {<c,y>, <a,x>, <a,y>, <e,x>}, V_2 = [c(1,b=1),
a(2,b=1), e(1,b=0)], M_2@N_1 holds the full tuples of c and a and the partial entry e.
Insert <d,x>, <a,z>, <f,w>; expire <c,y>, <a,x>.  The paper: v_J = <d, f>,
v_C = <0, 2, 1, 1, 1> (for j = c, a, e, d, f), s_F = {<a,z>}; afterwards M_2 has
a -> {<a,y>, <a,z>} (count 2), partial entries e, d, f, and no entry c.
"""
from __future__ import annotations

from joinlib.model import Stream, Tup, Window
from joinlib.runtime.messages import TupleBatch
from joinlib.runtime.sync import DjaReplica, DjaSender, FifoReplica, FifoSender, MixedReplica, MixedSender
from joinlib.state.memory import MemoryWindowStore

S2 = Stream("S2", 1, "n2", Window("time", 1000), ("j",))
IDX = (0,)


def tup(seq: int, j: str, other: str) -> Tup:
    return Tup(1, seq, seq, seq, (j,), other.encode())


CY, AX, AY, EX = tup(0, "c", "y"), tup(1, "a", "x"), tup(2, "a", "y"), tup(3, "e", "x")
DX, AZ, FW = tup(4, "d", "x"), tup(5, "a", "z"), tup(6, "f", "w")


def fig5_before():
    home = MixedSender(S2, IDX)
    home.entries = {("c",): [1, True], ("a",): [2, True], ("e",): [1, False]}
    store = MemoryWindowStore()
    store.add_index(IDX)
    replica = MixedReplica(S2, IDX, store)
    replica.entries = {("c",): [1, True], ("a",): [2, True], ("e",): [0, False]}
    store.insert([CY, AX, AY])
    return home, replica


def test_fig5_update_message():
    home, _ = fig5_before()
    msg = home.tick(0, [DX, AZ, FW], [CY, AX])
    assert msg.vj == [("d",), ("f",)]
    assert msg.vc == [0, 2, 1, 1, 1]
    assert msg.sf == [AZ]
    # V_2 after the update: c removed, a(2, b=1), e(1, b=0), d(1, b=0), f(1, b=0)
    assert home.entries == {("a",): [2, True], ("e",): [1, False], ("d",): [1, False], ("f",): [1, False]}


def test_fig5_resulting_m2():
    home, replica = fig5_before()
    replica.apply(0, home.tick(0, [DX, AZ, FW], [CY, AX]))
    assert list(replica.entries) == [("a",), ("e",), ("d",), ("f",)]
    assert replica.entries[("a",)] == [2, True]
    assert all(replica.entries[(k,)] == [0, False] for k in "edf")
    assert [t.rest for t in replica.store.lookup(IDX, ("a",)).live()] == [b"y", b"z"]
    assert replica.store.lookup(IDX, ("c",)) is None
    assert len(replica.store) == 2


def test_sm_d1_uses_the_same_vectors_without_full_tuples():
    home = DjaSender(S2, IDX)
    home.entries = {("c",): [1, False], ("a",): [2, False], ("e",): [1, False]}
    replica = DjaReplica(S2, IDX)
    replica.entries = {("c",): [1, False], ("a",): [2, False], ("e",): [1, False]}
    msg = home.tick(0, [DX, AZ, FW], [CY, AX])
    assert (msg.vj, msg.vc, msg.sf) == ([("d",), ("f",)], [0, 2, 1, 1, 1], [])
    replica.apply(0, msg)
    assert {k: e[0] for k, e in replica.entries.items()} == {("a",): 2, ("e",): 1, ("d",): 1, ("f",): 1}


def test_sm_s2_request_ships_all_tuples_of_partial_keys_once():
    home, replica = fig5_before()
    replica.apply(0, home.tick(0, [DX, AZ, FW], [CY, AX]))
    store = MemoryWindowStore()
    store.add_index(IDX)
    store.insert([AY, EX, DX, AZ, FW])
    assert replica.partial_keys([("a",), ("e",), ("q",)]) == {("e",)}
    resp = home.semijoin(store, IDX, [("e",), ("a",)])          # a is already full: not re-shipped
    assert resp.rows == [(EX,)]
    assert home.semijoin(store, IDX, [("e",)]).rows == []        # the shipped bit is set
    replica.receive(resp)
    assert replica.entries[("e",)] == [1, True]


# ------------------------------------------------------------------ Algorithm 8 (SM-S1 FIFO count)

CASES = [
    # (window tuples by key, keys requested, tuples expiring, expected k)
    ("nothing shipped", [("a", 3), ("b", 2)], [], 2, 0),
    ("all expiring shipped", [("a", 3), ("b", 2)], ["a", "b"], 2, 2),
    ("only shipped ones count", [("a", 2), ("b", 2), ("a", 2)], ["b"], 3, 1),
    ("shipped later in window", [("a", 2), ("b", 2)], ["b"], 1, 0),
]


def test_algorithm8_fifo_count():
    for name, layout, requested, n_expire, want_k in CASES:
        tups, seq = [], 0
        for key, n in layout:
            for _ in range(n):
                tups.append(Tup(1, seq, seq, seq, (key,), b""))
                seq += 1
        store = MemoryWindowStore()
        store.add_index(IDX)
        store.insert(tups)
        home = FifoSender(S2)
        shipped = home.semijoin(store, IDX, [(k,) for k in requested])
        replica_store = MemoryWindowStore()
        replica_store.add_index(IDX)
        replica = FifoReplica(S2, replica_store)
        replica.receive(shipped)
        dying = store.purge_below(seq=n_expire)
        msg = home.tick(1, [], dying)
        assert msg.expired == want_k, name
        replica.apply(1, msg)
        # the replica's FIFO now holds exactly the shipped tuples that are still in the window
        assert ({t.seq for t in replica_store.tuples()}
                == {r[0].seq for r in shipped.rows} - {t.seq for t in dying}), name
        assert len(replica) == len(replica_store), name


def test_non_redundant_semijoin_ships_each_tuple_once():
    store = MemoryWindowStore()
    store.add_index(IDX)
    store.insert([tup(0, "a", "x"), tup(1, "b", "x"), tup(2, "a", "y")])
    home = FifoSender(S2)
    first = home.semijoin(store, IDX, [("a",)])
    again = home.semijoin(store, IDX, [("a",), ("b",)])
    assert [r[0].seq for r in first.rows] == [0, 2]
    assert [r[0].seq for r in again.rows] == [1]
    assert TupleBatch([]).rows == home.semijoin(store, IDX, [("a",), ("b",)]).rows
