"""Semijoins over distinct join values (DJA, Sect. 3.2.2): SM-D1 and SM-S2.

SM-D1: the source keeps V_2@N_1, the distinct join values of the remote window with counts
(:class:`DjaReplica`), and ships only the rows whose key is among them; the home probes.  The
home keeps V_2 in step with update messages (v_J new values, v_C counts; :class:`DjaSender`).

SM-S2: the source keeps M_2, a mix of partial entries (values only) and full entries (values
with all their window tuples) (:class:`MixedReplica`).  Rows with a full key probe at once, rows
with a partial key wait for the home's answer ΔW'_2 (all window tuples of the requested keys,
which become full); the update message adds s_F, the new tuples of full keys (Algorithm 9,
:class:`MixedSender`).

The home computes counts from the window's *logical* content (its own FIFO of keys, expired by
the window's bound at each tick), never from the lagged physical purge, and answers requests
from the view of the epoch asked for; so its messages are a function of the data alone.

SM-S2's protocol has a feedback loop the others lack: the update of epoch e + 1 (its s_F) depends
on which keys the request of epoch e made full, and the request of e + 1 depends on that update.
Its lane therefore takes one round trip per epoch; it keeps up while a round trip (with transfer)
fits in the batch interval τ.
"""
from __future__ import annotations

from collections import deque
from operator import attrgetter, itemgetter
from typing import Any, Callable, Iterable, NoReturn, Optional, Sequence

from joinlib.model import Stream, Tup
from joinlib.plan.ir import StepOp
from joinlib.protocol.messages import Body, DjaUpdate, Key, Row, TupleBatch, WindowSnapshot
from joinlib.runtime.algorithms import ordered
from joinlib.runtime.algorithms.base import Decode, Encode, Placed, StepContext, by_key, own_lane, request, store_join
from joinlib.runtime.algorithms.ordered import Entry, OrderedEntries
from joinlib.runtime.algorithms.semijoin import answer, arrivals_of, finish
from joinlib.runtime.algorithms.simple import probe_shipped
from joinlib.runtime.lanes import Phase
from joinlib.runtime.window import HomeWindow
from joinlib.runtime.windowing import Bound, Progress
from joinlib.state.base import WindowStore

_seq_of = attrgetter("seq")


def project(t: Tup, index: tuple[int, ...]) -> Key:
    return tuple([t.key[i] for i in index])


def projector(index: tuple[int, ...]) -> Callable[[Tup], Key]:
    """:func:`project` onto ``index`` as a function, for the per-tuple loops (one look-up per tuple)."""
    if len(index) == 1:
        i = index[0]
        return lambda t: (t.key[i],)
    get = itemgetter(*index)
    return lambda t: get(t.key)


def count_changes(entries: OrderedEntries, touched: set[Key]) -> list[int]:
    """v_C as a delta: the counts of the entries that gained or lost tuples this epoch, as
    flattened (gap, count) pairs over V order (gap = entries skipped since the previous one).
    The paper sends the whole vector every epoch; an untouched entry's count has not changed.
    O(touched log V): positions come from the entries' order index, not from a walk of V."""
    return entries.changes(touched)


def changed_entries(entries: OrderedEntries, vc: list[int]) -> list[tuple[Key, Entry, int]]:
    """(key, entry, new count) of the (gap, count) pairs of :func:`count_changes` (IndexError: a pair
    names a position past V's end)."""
    positions, pos = [], -1
    for j in range(0, len(vc), 2):
        pos += vc[j] + 1
        positions.append(pos)
    keys = entries.keys_at(positions)
    return [(key, entries[key], vc[j + 1]) for key, j in zip(keys, range(0, len(vc), 2), strict=True)]


class DjaSender:
    """SM-D1 at the home node: V_2 as an ordered map key -> count (Sect. 3.2.2), kept from the
    window's logical content: ``fifo`` holds (ts, seq, key) of every tuple in the window."""

    def __init__(self, stream: Stream, index: tuple[int, ...]) -> None:
        self.stream = stream
        self.index = index
        self._key_of = projector(index)
        self.entries = OrderedEntries()  # key -> [count, shipped?]; insertion order = V order
        self.fifo: deque[tuple[int, int, Key]] = deque()

    def jump(self, home: HomeWindow, start: int) -> WindowSnapshot:
        for t in home.boundary(start):
            key = project(t, self.index)
            self.fifo.append((t.ts, t.seq, key))
            self.entries.add(key)
        return WindowSnapshot(home.count_before(start), [], list(self.entries),
                              [e[0] for e in self.entries.values()])

    def _dying(self, bound: Bound) -> list[Key]:
        value, fifo, out = bound[1], self.fifo, []
        if bound[0] == "ts":
            while fifo and fifo[0][0] < value:
                out.append(fifo.popleft()[2])
        else:
            while fifo and fifo[0][1] < value:
                out.append(fifo.popleft()[2])
        return out

    def _update(self, batch: Sequence[Tup], bound: Bound, sf: Optional[list[Tup]]) -> DjaUpdate:
        c = ordered._c
        if c is not None:   # the loops below in one call of the C kernel (_fenwickc.c: dja_tick)
            vj, vc = c.dja_tick(self.entries, self.fifo, batch, self.index, bound[0] == "ts", bound[1], sf)
            return DjaUpdate(vj, vc, sf or [], arrivals_of(self.stream, batch))
        vj, touched, entries = [], set(), self.entries
        add, key_of, fifo = entries.add, self._key_of, self.fifo
        for t in batch:
            key = key_of(t)
            fifo.append((t.ts, t.seq, key))
            touched.add(key)
            e = add(key)
            if e is None:
                vj.append(key)
            elif e[1] and sf is not None:
                sf.append(t)
        bump = entries.bump
        dying = self._dying(bound)
        for key in dying:
            bump(key, -1)
        touched.update(dying)
        vc = count_changes(entries, touched)
        entries.drop_empty(touched)   # only a touched entry can have dropped to 0
        return DjaUpdate(vj, vc, sf or [], arrivals_of(self.stream, batch))

    def tick(self, e: int, batch: Sequence[Tup], bound: Bound) -> Body:
        return self._update(batch, bound, None)

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": 1, "entries": [(k, c, full) for k, (c, full) in self.entries.items()],
                "fifo": list(self.fifo)}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self.entries = OrderedEntries((tuple(k), [c, full]) for k, c, full in data["entries"])
        self.fifo = deque((ts, seq, tuple(k)) for ts, seq, k in data["fifo"])


class MixedSender(DjaSender):
    """SM-S2 at the home node: V_2 with shipped bits; s_F carries new tuples of shipped keys."""

    def tick(self, e: int, batch: Sequence[Tup], bound: Bound) -> Body:
        return self._update(batch, bound, [])

    def semijoin(self, home: HomeWindow, keys: Iterable[Key], e: int) -> TupleBatch:
        """ΔW'_2: the tuples of the window at epoch ``e`` of the requested keys not shipped yet."""
        want = self.entries.unflagged(keys)
        out: list[tuple[Tup, ...]] = []
        if not want:
            return TupleBatch(out)
        entries = self.entries._entries
        for key, tups in home.view(self.index, want, e).items():
            entries[key][1] = True
            out.extend((t,) for t in tups)
        return TupleBatch(out)


SettleArgs = tuple[Optional[dict[Key, list[Tup]]], Optional[dict[Key, int]]]   # dja_apply's sf and expire


class DjaReplica:
    """SM-D1's V_2@N_1: distinct join values with counts, in V_2's order."""

    def __init__(self, stream: Stream, index: tuple[int, ...]) -> None:
        self.stream, self.index = stream, index
        self._key_of = projector(index)
        self.entries = OrderedEntries()  # key -> [count, full?]

    def apply(self, e: int, body: Body) -> None:
        if isinstance(body, WindowSnapshot):
            self.entries = OrderedEntries((tuple(k), [c, False]) for k, c in zip(body.keys, body.counts, strict=True))
            self._start_entries()
            return
        assert isinstance(body, DjaUpdate)
        c = ordered._c
        settle = self._kernel_settle() if c is not None else None
        if c is not None and settle is not None:
            # the loops below in one call of the C kernel (_fenwickc.c: dja_apply); another _settle stays here
            try:
                c.dja_apply(self.entries, body.vj, body.vc, *settle)
            except IndexError:
                self._out_of_sync()
            return
        for key in body.vj:
            self.entries[key] = [0, False]
        try:
            changed = changed_entries(self.entries, body.vc)
        except IndexError:
            self._out_of_sync()
        dead = []
        for key, entry, p in changed:
            self._settle(key, entry, p)
            if p == 0:
                dead.append(key)
        for key in dead:
            del self.entries[key]

    def _out_of_sync(self) -> NoReturn:
        raise RuntimeError(f"DJA count changes of {self.stream.name} name entries past the "
                           f"{len(self.entries)} the replica has: replicas out of sync") from None

    def _settle(self, key: Key, entry: list[Any], p: int) -> None:
        """Take the window's new count ``p`` of tuples with ``key`` (an override keeps :meth:`apply` in Python
        unless it also overrides :meth:`_kernel_settle`)."""
        entry[0] = p

    def _kernel_settle(self) -> Optional[SettleArgs]:
        """The ``sf`` and ``expire`` arguments with which dja_apply does this class's :meth:`_settle` (None, None:
        this one), or None if the kernel cannot: a subclass that overrides ``_settle`` gets the Python loop, the
        kernel knowing only the settles written into it."""
        return (None, None) if type(self)._settle is DjaReplica._settle else None

    def _start_entries(self) -> None:
        """Entries just taken from a snapshot (all partial)."""

    def __contains__(self, key: Key) -> bool:
        return key in self.entries

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": 1, "entries": [(k, c, full) for k, (c, full) in self.entries.items()]}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self.entries = OrderedEntries((tuple(k), [c, full]) for k, c, full in data["entries"])


class MixedReplica(DjaReplica):
    """SM-S2's M_2@N_1: partial entries (join values) and full entries (their tuples)."""

    def __init__(self, stream: Stream, index: tuple[int, ...], store: WindowStore) -> None:
        super().__init__(stream, index)
        self.store = store
        self.progress: Optional[Progress] = None if stream.window.is_time else Progress()
        self._sf: dict[Key, list[Tup]] = {}
        self._expire: dict[Key, int] = {}

    def apply(self, e: int, body: Body) -> None:
        if isinstance(body, WindowSnapshot):
            super().apply(e, body)
            if self.progress is not None:
                self.progress.start_at(e + 1, body.base)
            return
        assert isinstance(body, DjaUpdate)
        sf_in = body.sf
        sf: dict[Key, list[Tup]] = {}
        self._sf = sf
        if sf_in:
            key_of = self._key_of
            for t in sf_in:
                sf.setdefault(key_of(t), []).append(t)
        expire: dict[Key, int] = {}
        self._expire = expire
        super().apply(e, body)
        if sf:
            raise RuntimeError(f"s_F of {self.stream.name} names keys the replica holds no full tuples of")
        # One store call each for the new and the expired tuples (a round trip each on Redis), none when there are
        # none (most epochs: ten tuples an epoch, of keys rarely full).
        if sf_in:
            self.store.insert(sorted(sf_in, key=_seq_of))
        if expire:
            gone = [t for key, kl in self.store.lookup_many(self.index, expire).items()
                    for t in kl.live()[:expire[key]]]
            gone.sort(key=_seq_of)
            self.store.remove_oldest(gone)
        if self.progress is not None:
            self.progress.add_epoch(e, body.arrivals)
            self.progress.prune(e)

    def _settle(self, key: Key, entry: list[Any], p: int) -> None:
        if not entry[1]:
            return  # partial entries keep c = 0: M_2 holds none of their full tuples
        q = len(self._sf.pop(key, ()))
        k = entry[0] + q - p  # Algorithm 9, line 36: expired full tuples of this key
        if k:
            self._expire[key] = k
        entry[0] = p

    def _kernel_settle(self) -> Optional[SettleArgs]:
        """dja_apply does this :meth:`_settle` on the two dicts it fills (Algorithm 9's s_F and expiries)."""
        return (self._sf, self._expire) if type(self)._settle is MixedReplica._settle else None

    def _start_entries(self) -> None:
        for entry in self.entries.values():
            entry[0] = 0  # partial entries keep c = 0

    def partial_keys(self, keys: Iterable[Key]) -> set[Key]:
        return set(self.entries.unflagged(keys))

    def receive(self, body: TupleBatch) -> None:
        """ΔW'_2 arrived: the requested entries become full."""
        tups = [r[0] for r in body.rows]
        if not tups:
            return
        self.store.insert(tups)
        for key, kl in self.store.lookup_many(self.index, set(map(self._key_of, tups))).items():
            entry = self.entries[key]
            entry[1] = True
            entry[0] = len(kl)

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        out = super().snapshot(encode)
        out["progress"] = self.progress.snapshot() if self.progress is not None else None
        return out

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        super().restore(data, decode)
        self.progress = Progress.restored(data["progress"]) if data["progress"] is not None else None


# ----------------------------------------------------------------------------- phases

def sms2_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    rank = (1, st.seq_index, st.j)
    out = [_s2_probe(ctx, st, rank + (0,)), finish(ctx, st, rank + (1,))]
    if st.home == ctx.site:
        sender: MixedSender = ctx.sender(st.replica or "")
        home = ctx.home(st.stream)
        out.append(answer(ctx, st, lambda keys, e: sender.semijoin(home, keys, e),
                          lambda m, e: sender.entries.held_unflagged(m)))
    return out


def _s2_probe(ctx: StepContext, st: StepOp, rank: tuple[int, ...]) -> Placed:
    """At the source, in the replica's lane: probe full keys now, request the partial ones."""
    sig, req = st.replica or "", st.flow("req")

    def probe(e: int) -> bool:
        if e < ctx.start:
            return True
        if not ctx.ready(st, e):
            return False
        rep: MixedReplica = ctx.replica(sig)
        entries = rep.entries._entries   # M_2's dict, read once per key (MixedReplica.partial_keys in one pass)
        now_rows: list[Row] = []
        later: list[Row] = []
        partial: list[Key] = []
        for k, rs in by_key(st, ctx.rows_in(st, e)).items():
            x = entries.get(k)
            if x is not None and not x[1]:
                partial.append(k)
                later.extend(rs)
            else:
                now_rows.extend(rs)
        ctx.output(st, e, store_join(ctx, st, now_rows, rep.store, rep.progress), final=False)
        ctx.hold(("rows", st.sig, e), later)
        ctx.send(st.home, req, e, request(ctx, st, partial))
        return True
    return Placed(st.loc, ("hold", sig), Phase(rank, "probe", probe, gates=(ctx.ready_gate(st),)))


def smd1_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    sig = st.replica or ""
    data = st.flow("data")

    def ship(e: int) -> bool:
        """At the source (in the replica's lane, after its update of epoch e): ship the rows whose
        key is in V_2."""
        if e < ctx.start:
            return True
        if not ctx.ready(st, e):
            return False
        rep: DjaReplica = ctx.replica(sig)
        v2 = rep.entries._entries   # V_2's dict (membership only)
        rows = [r for k, rs in by_key(st, ctx.rows_in(st, e)).items() if k in v2 for r in rs]
        ctx.send(st.home, data, e, TupleBatch([tuple(filter(None, r)) for r in rows]))
        return True

    return [Placed(st.loc, ("hold", sig), Phase((1, st.seq_index, st.j), "ship", ship, gates=(ctx.ready_gate(st),))),
            probe_shipped(ctx, st, data)]


__all__ = ["DjaSender", "MixedSender", "DjaReplica", "MixedReplica", "sms2_phases", "smd1_phases", "own_lane"]
