"""The look-ahead's window by epoch blocks (:class:`joinlib.runtime.ahead.LookAhead`) against the reducer's form it
stands for, a deque of (ts, seq, arrival epoch) popped from the front while below the lower bound, with the
pending tuples filtered by the seqs popped: the same sets (keys, tags, ages) at every epoch, the same window and
pending tuples, through snapshots, for time and tuple-count bounds and tuples in any ts order."""
from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.protocol.avro import decode_tuple, encode_tuple
from joinlib.runtime.ahead import LookAhead
from joinlib.runtime.algorithms.keysets import Outgoing, keys_at

TAU = 10


class DequeLookAhead:
    """The definition: the look-ahead as it was written before the blocks."""

    def __init__(self) -> None:
        self.window: deque = deque()
        self.pending: list = []

    def start(self, tuples, tau):
        self.window.extend((t.ts, t.seq, t.ts // tau) for t in tuples)
        self.pending.extend(tuples)

    def admit(self, e, batch, lower):
        w = self.window
        w.extend([(t.ts, t.seq, e) for t in batch])
        self.pending += batch
        col, value = (0, lower[1]) if lower[0] == "ts" else (1, lower[1])
        if w and w[0][col] < value:
            gone = set()
            while w and w[0][col] < value:
                gone.add(w.popleft()[1])
            self.pending = [t for t in self.pending if t.seq not in gone]

    def out_keys(self, e):
        newly, self.pending = self.pending, []
        oldest = self.window[0][2] if self.window else e + 1
        if not newly:
            return Outgoing([], 0, e - oldest, [])
        ages = [e - t.ts // TAU for t in newly]
        return Outgoing(keys_at((0,), newly), min(ages), e - oldest, ages)


def _op():
    edge = SimpleNamespace(mine=(0,))
    return SimpleNamespace(edge=lambda nbr: edge)


@st.composite
def runs(draw):
    """Epochs of batches (ts near the epoch, some disorder), each with a lower bound that only rises, a set made
    after some of them, and a snapshot restored at some."""
    by_ts = draw(st.booleans())
    seq, lower, epochs = 0, -1, []
    boot = []
    for _ in range(draw(st.integers(0, 4))):   # a jump start's window
        boot.append(Tup(0, seq, draw(st.integers(0, 30)), seq, (draw(st.integers(0, 5)),)))
        seq += 1
    for e in range(4, 4 + draw(st.integers(1, 25))):
        batch = []
        for _ in range(draw(st.integers(0, 5))):
            batch.append(Tup(0, seq, e * TAU + draw(st.integers(-8, TAU - 1)), seq, (draw(st.integers(0, 5)),)))
            seq += 1
        lower = max(lower, draw(st.integers(lower, (e * TAU if by_ts else seq) + 3)))
        epochs.append((e, batch, ("ts" if by_ts else "seq", lower), draw(st.booleans()), draw(st.booleans())))
    return boot, epochs


@settings(deadline=None)   # a loaded machine runs an example past the default 200 ms
@given(runs())
def test_blocks_make_the_deque_s_sets(run):
    boot, epochs = run
    look, ref = LookAhead(_op(), "S2", TAU), DequeLookAhead()
    if boot:
        look.start(boot, TAU)
        ref.start(boot, TAU)
    for e, batch, lower, make, restore in epochs:
        look.admit(e, batch, lower)
        ref.admit(e, batch, lower)
        assert look.window == list(ref.window)
        assert [t.seq for t in look.pending] == [t.seq for t in ref.pending]
        if make:
            assert look.out_keys(e) == ref.out_keys(e)
        if restore:
            back = LookAhead(_op(), "S2", TAU)
            back.restore(look.snapshot(encode_tuple), decode_tuple)
            look = back


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(-40, 400), st.integers(0, 3), st.integers(0, 3)), max_size=12),
       st.integers(0, 45), st.sampled_from([(0,), (1,), (0, 1), (1, 0)]), st.integers(0, 9))
def test_tups_outgoing_in_c_is_its_python_form(rows, e, positions, live):
    """Keys at one or several positions, ages by floor division (negative ts too), the least age, 0 for none."""
    from joinlib.runtime.algorithms import keysets
    tups = [Tup(0, i, ts, i, (a, b)) for i, (ts, a, b) in enumerate(rows)]
    assert keysets._red_c is not None
    got = keysets._red_c.tups_outgoing(tups, e, TAU, positions, live, Outgoing)
    ages = [e - t.ts // TAU for t in tups]
    assert got == Outgoing(keys_at(positions, tups), min(ages, default=0), live, ages)
