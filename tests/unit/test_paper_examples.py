"""The semijoin paper's worked examples as table-driven tests.

Fig. 5 / Example 4 (Algorithm 9): W_2 = {<c,y>, <a,x>, <a,y>, <e,x>}, V_2 = [c(1,b=1),
a(2,b=1), e(1,b=0)], M_2@N_1 holds the full tuples of c and a and the partial entry e.
Insert <d,x>, <a,z>, <f,w>; expire <c,y>, <a,x>.  The paper: v_J = <d, f>,
v_C = <0, 2, 1, 1, 1> (for j = c, a, e, d, f), s_F = {<a,z>}; afterwards M_2 has
a -> {<a,y>, <a,z>} (count 2), partial entries e, d, f, and no entry c.

We send v_C as a delta (issue 11): the (gap, count) pairs of the entries that gained or lost tuples,
here c, a, d, f -- e is unchanged -- so [0,0, 0,2, 1,1, 0,1]; expanded over V it is the paper's vector.
"""
from __future__ import annotations

from joinlib.model import Stream, Tup, Window
from joinlib.protocol.messages import DjaUpdate, ExpiryUpdate, TupleBatch
from joinlib.runtime.algorithms.dja import DjaReplica, DjaSender, MixedReplica, MixedSender
from joinlib.runtime.algorithms.ordered import OrderedEntries
from joinlib.runtime.algorithms.semijoin import FifoReplica, FifoSender
from joinlib.runtime.sensor import Sensor
from joinlib.runtime.window import HomeWindow
from joinlib.state.memory import MemoryWindowStore

S2 = Stream("S2", 1, "n2", Window("time", 1000), ("j",))
IDX = (0,)


def home_window(tups: list[Tup]) -> HomeWindow:
    """The home window of S2 holding ``tups`` (all of epoch 0, τ = 100: every one in the view of epoch 0)."""
    store = MemoryWindowStore()
    store.add_index(IDX)
    w = HomeWindow(S2, store, 100, "n2", Sensor())
    store.insert(tups)
    w.next = 1
    return w


def expiring(*tups: Tup) -> tuple[str, int]:
    """The expiry bound that kills exactly the oldest tuples ``tups`` (ts = seq here)."""
    return ("ts", max(t.ts for t in tups) + 1)


def tup(seq: int, j: str, other: str) -> Tup:
    return Tup(1, seq, seq, seq, (j,), other.encode())


CY, AX, AY, EX = tup(0, "c", "y"), tup(1, "a", "x"), tup(2, "a", "y"), tup(3, "e", "x")
DX, AZ, FW = tup(4, "d", "x"), tup(5, "a", "z"), tup(6, "f", "w")


FIG5_VC = [0, 0, 0, 2, 1, 1, 0, 1]      # (gap, count) of c, a, d, f


def expanded(before: dict, msg) -> list[int]:
    """The paper's whole v_C from the delta: unchanged entries keep their count."""
    counts = [e[0] for e in before.values()] + [0] * len(msg.vj)
    i = -1
    for j in range(0, len(msg.vc), 2):
        i += msg.vc[j] + 1
        counts[i] = msg.vc[j + 1]
    return counts


def fig5_before():
    home = MixedSender(S2, IDX)
    home.entries = OrderedEntries({("c",): [1, True], ("a",): [2, True], ("e",): [1, False]}.items())
    home.fifo.extend((t.ts, t.seq, t.key) for t in (CY, AX, AY, EX))
    store = MemoryWindowStore()
    store.add_index(IDX)
    replica = MixedReplica(S2, IDX, store)
    replica.entries = OrderedEntries({("c",): [1, True], ("a",): [2, True], ("e",): [0, False]}.items())
    store.insert([CY, AX, AY])
    return home, replica


def test_fig5_update_message():
    home, _ = fig5_before()
    before = {k: list(e) for k, e in home.entries.items()}
    msg = home.tick(0, [DX, AZ, FW], expiring(CY, AX))
    assert msg.vj == [("d",), ("f",)]
    assert msg.vc == FIG5_VC
    assert expanded(before, msg) == [0, 2, 1, 1, 1]   # the paper's v_C
    assert msg.sf == [AZ]
    # V_2 after the update: c removed, a(2, b=1), e(1, b=0), d(1, b=0), f(1, b=0)
    assert home.entries == {("a",): [2, True], ("e",): [1, False], ("d",): [1, False], ("f",): [1, False]}


def test_fig5_resulting_m2():
    home, replica = fig5_before()
    replica.apply(0, home.tick(0, [DX, AZ, FW], expiring(CY, AX)))
    assert list(replica.entries) == [("a",), ("e",), ("d",), ("f",)]
    assert replica.entries[("a",)] == [2, True]
    assert all(replica.entries[(k,)] == [0, False] for k in "edf")
    assert [t.rest for t in replica.store.lookup(IDX, ("a",)).live()] == [b"y", b"z"]
    assert replica.store.lookup(IDX, ("c",)) is None
    assert len(replica.store) == 2


def test_sm_d1_uses_the_same_vectors_without_full_tuples():
    home = DjaSender(S2, IDX)
    home.entries = OrderedEntries({("c",): [1, False], ("a",): [2, False], ("e",): [1, False]}.items())
    home.fifo.extend((t.ts, t.seq, t.key) for t in (CY, AX, AY, EX))
    replica = DjaReplica(S2, IDX)
    replica.entries = OrderedEntries({("c",): [1, False], ("a",): [2, False], ("e",): [1, False]}.items())
    msg = home.tick(0, [DX, AZ, FW], expiring(CY, AX))
    assert isinstance(msg, DjaUpdate)
    assert (msg.vj, msg.vc, msg.sf) == ([("d",), ("f",)], FIG5_VC, [])
    replica.apply(0, msg)
    assert {k: e[0] for k, e in replica.entries.items()} == {("a",): 2, ("e",): 1, ("d",): 1, ("f",): 1}


def test_sm_s2_request_ships_all_tuples_of_partial_keys_once():
    home, replica = fig5_before()
    replica.apply(0, home.tick(0, [DX, AZ, FW], expiring(CY, AX)))
    window = home_window([AY, EX, DX, AZ, FW])
    assert replica.partial_keys([("a",), ("e",), ("q",)]) == {("e",)}
    resp = home.semijoin(window, [("e",), ("a",)], 0)           # a is already full: not re-shipped
    assert resp.rows == [(EX,)]
    assert home.semijoin(window, [("e",)], 0).rows == []         # the shipped bit is set
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
        window = home_window(tups)
        home = FifoSender(S2)
        shipped = home.semijoin(window, IDX, [(k,) for k in requested], 0)
        replica_store = MemoryWindowStore()
        replica_store.add_index(IDX)
        replica = FifoReplica(S2, replica_store)
        replica.receive(shipped)
        dying = window.store.purge_below(seq=n_expire)
        msg = home.tick(1, [], ("seq", n_expire))
        assert isinstance(msg, ExpiryUpdate)
        assert msg.expired == want_k, name
        replica.apply(1, msg)
        # the replica's FIFO now holds exactly the shipped tuples that are still in the window
        assert ({t.seq for t in replica_store.tuples()}
                == {r[0].seq for r in shipped.rows} - {t.seq for t in dying}), name
        assert len(replica) == len(replica_store), name


def test_non_redundant_semijoin_ships_each_tuple_once():
    window = home_window([tup(0, "a", "x"), tup(1, "b", "x"), tup(2, "a", "y")])
    home = FifoSender(S2)
    first = home.semijoin(window, IDX, [("a",)], 0)
    again = home.semijoin(window, IDX, [("a",), ("b",)], 0)
    assert [r[0].seq for r in first.rows] == [0, 2]
    assert [r[0].seq for r in again.rows] == [1]
    assert TupleBatch([]).rows == home.semijoin(window, IDX, [("a",), ("b",)], 0).rows


def test_semijoin_answers_from_the_view_of_the_epoch_asked():
    """A window holding more than one epoch (purges lag, inserts run ahead): the answer for epoch e
    has only the tuples heads of e may join -- of epochs <= e, not expired by e."""
    s = Stream("S2", 1, "n2", Window("time", 50), ("j",))
    store = MemoryWindowStore()
    store.add_index(IDX)
    w = HomeWindow(s, store, 100, "n2", Sensor())
    old, mid, new = Tup(1, 0, 20, 0, ("a",)), Tup(1, 1, 120, 1, ("a",)), Tup(1, 2, 250, 2, ("a",))
    store.insert([old, mid, new])
    w.next = 3
    # epoch 1 (heads 100..199): view [100-50, 200) -> old (20) is dead, new (250) is not there yet
    assert [r[0].id for r in FifoSender(s).semijoin(w, IDX, [("a",)], 1).rows] == [1]
    # epoch 2: view [150, 300) -> only new
    assert [r[0].id for r in FifoSender(s).semijoin(w, IDX, [("a",)], 2).rows] == [2]
