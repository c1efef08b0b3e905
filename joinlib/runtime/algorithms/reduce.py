"""A reduction: every result at one site R, but each stream ships there only what can still join.

Every stream has a *reducer* at its home.  Each epoch the reducers of the join graph's spanning
tree exchange key sets along its edges -- up the tree, then down -- and a reducer passes one of
its tuples for an edge when the tuple's keys are in the key sets of all its *other* tree
neighbours; what it sends on the edge is the keys of the tuples that newly pass.  A tuple that
passes every neighbour's filter is shipped to R (once), where the join runs as ``central`` would
run it, over replicas that hold only such tuples.  For an acyclic join graph this is a full
reducer (Yannakakis): a tuple travels to R only if, as far as keys go, it can be part of a result;
for a cyclic one the tree's filters are weaker and the join at R checks the other predicates.

Why it is exact: a tuple that takes part in a result with head h has, in every neighbour stream,
a partner that precedes h and so is in that stream's window at h's epoch; by induction from the
leaves, every tuple of the result passes by that epoch and is at R when R joins it.  A head that
does not pass in its own epoch has no partners, and filters may only err on the side of letting
a tuple through (Bloom filters' false positives: ``joinlib.protocol.bloom``).

A direction of a tree edge may be skipped (``Reduce.skip``): its sender sends nothing that way,
and the receiver leaves the sender out of every test (as if its sets held every key).  That only
lets more through, so the argument above holds with the remaining filters.

A cyclic join graph's edges off the tree may exchange key sets too (``Reduce.cross``), after the
tree's rounds: the keys of the tuples that newly pass every tree neighbour.  They filter only what
ships to R, never a tree set (a tree set waiting for them could wait in a circle).  Exact by the
same argument: a result's tuple in the crossing neighbour passes its tree filters by the head's
epoch, so its key is in that epoch's crossing set before anything ships.

Key sets are deltas: a reducer sends the keys of tuples that pass for the first time, tagged with
the latest arrival epoch among them, and the oldest arrival epoch still in its window (both as
epochs back from the message's epoch, a byte each); a receiver
keeps every set whose tag is not below the sender's latest such epoch.  A set of written-out keys whose
tuples arrived in several epochs carries each key's own age (:func:`age_runs`), so each key is forgotten
when its own tuple leaves the sender's window.  Each epoch costs what changed:
a set touches only the pending tuples whose key it holds (a Bloom filter is tested once per distinct
pending key), and a tuple is tested again for an edge only after one of its keys newly matched.
"""
from __future__ import annotations

from collections import deque
from operator import attrgetter, itemgetter
from typing import Any, Callable, Optional, Protocol, Sequence

from joinlib.kernels import kernel
from joinlib.model import Stream, Tup
from joinlib.plan.ir import ReducerOp
from joinlib.protocol.bloom import Bloom, KeySet, Matcher
from joinlib.protocol.messages import Body, Key, KeyFilter, ShippedBatch, WindowSnapshot
from joinlib.runtime.algorithms.base import Decode, Encode, Placed, StepContext
from joinlib.runtime.algorithms.keyindex import KeyIndex, KeyTable
from joinlib.runtime.algorithms.keysets import Outgoing, key_filter, key_matchers, keys_at, tups_outgoing
from joinlib.runtime.algorithms.simple import FullReplica
from joinlib.runtime.lanes import Phase, next_gate
from joinlib.runtime.window import HomeWindow

#: The reducer's per-tuple bookkeeping in C (``_reducerc.c``, built by setup.py: it says why), or None: the Python
#: forms below, the same steps on the same containers (tests/property/test_reducer_c.py compares them).
_c: Any = kernel("joinlib.runtime.algorithms._reducerc")


class _Entry:
    """A tuple of the window not yet sent on every edge or shipped: which edges it went out on, its
    key toward each neighbour whose sets it is tested against (in the order of ``Reducer._filters``),
    and its rank in the window (the order key sets list their keys in)."""

    __slots__ = ("t", "seq", "sent", "shipped", "keys", "rank")

    def __init__(self, t: Tup, keys: tuple[Key, ...], rank: int) -> None:
        self.t = t
        self.seq = t.seq
        self.sent: tuple[str, ...] = ()   # (a tuple: most entries never go out, and those that do on an edge or two)
        self.shipped = False
        self.keys = keys
        self.rank = rank


_RANK = attrgetter("rank")
_SEQ = attrgetter("seq")


#: per key table of a reducer: the function taking the key from a batch's join values, the table, the position in
#: ``Reducer._filters`` of a neighbour testing the key, and the key's positions in the join values
_Extract = tuple[Callable[[list[tuple[Any, ...]]], list[Key]], KeyTable, int, tuple[int, ...]]


#: the channel of :meth:`Reducer.ship` among the dirty sets (the others are named by their neighbour)
_SHIP = ""


class Reducer:
    """The state of one stream's reducer (see the module docstring).

    Work is proportional to what changed, not to the window: pending tuples are indexed by their key
    toward each neighbour, and per (neighbour, key) the reducer keeps the latest tag of a live set
    holding that key.  A set that arrives touches only the keys it names (explicit keys), or tests
    each distinct pending key once (a Bloom filter); a tuple is re-tested for an edge only when one of
    its keys newly matched since it was last tested (its seq is then *dirty* for that edge).

    Per channel (an edge it sends on, or shipping) the candidates to test are the entries admitted since the
    channel last looked (``_fresh``, already in window order) and the seqs made dirty since (``_again``).  An
    entry that leaves is not taken out of them: they are emptied every time the channel looks, and what is
    no longer pending is skipped then."""

    def __init__(self, op: ReducerOp, stream: Stream, tau: int, fpr: Optional[float],
                 fp_cost: Optional[dict[str, Optional[float]]] = None,
                 stale: Optional[dict[str, Optional[float]]] = None) -> None:
        """``fp_cost[nbr]``: what a key set for ``nbr`` would let through if everything passed it
        (the neighbour's declared window bytes, :func:`~.base.window_bytes`); missing: keys only.
        ``stale[nbr]``: what a key kept live an epoch too long lets through at ``nbr``
        (:func:`~.base.stale_key_bytes`); missing: sets of several epochs always carry their ages."""
        self.op, self.stream, self.tau, self.fpr = op, stream, tau, fpr
        self.fp_cost = dict(fp_cost or {})
        self.stale = dict(stale or {})
        self.window: deque[tuple[int, int, int]] = deque()     # (ts, seq, epoch) of the window's tuples
        self.pending: dict[int, _Entry] = {}                    # seq -> entry
        # per neighbour whose key sets it takes (not those skipped toward it: they pass everything)
        self.filters: dict[str, list[tuple[int, int, Matcher]]] = {e.stream: [] for e in op.filters}
        self.received: dict[str, int] = {e.stream: 0 for e in op.filters}
        self.live_from: dict[str, int] = {e.stream: 0 for e in op.filters}
        self._keys = {e.stream: e.mine for e in op.edges}
        self._filters = tuple(e.stream for e in op.filters)
        self._tree_filters = tuple(e.stream for e in op.filters if not e.cross)
        self._sends = len(op.sends)
        self._rank = 0
        # per neighbour: pending seqs by key, and the latest tag of a live set holding the key
        self._pos = {n: i for i, n in enumerate(self._filters)}
        self._index, self._extract = self._indexes()
        # only channels something looks at: a fresh list is emptied when its channel looks (a reducer that ships
        # nothing has no shipping channel, else that list would keep every tuple it ever admitted)
        self._channels = (*(e.stream for e in op.sends), *((_SHIP,) if op.replica else ()))
        self._fresh: dict[str, list[_Entry]] = {}
        self._again: dict[str, set[int]] = {}
        self._dirty: dict[str, list[set[int]]] = {}
        self._clean_channels()

    # ------------------------------------------------------------------ the window
    def admit(self, e: int, batch: Sequence[Tup], lower: tuple[str, int]) -> None:
        """Epoch e: B_e enters the window, tuples below ``lower`` leave it."""
        if _c is not None:
            _c.admit(self, e, batch, 0 if lower[0] == "ts" else 1, lower[1])
            return
        self._add_all(batch, e)
        self._settle_keys()
        col, value = (0, lower[1]) if lower[0] == "ts" else (1, lower[1])
        w, pending, gone = self.window, self.pending, []
        while w and w[0][col] < value:
            x = pending.pop(w.popleft()[1], None)
            if x is not None:
                gone.append(x)
        if gone:
            self._forget_all(gone)

    def start(self, tuples: Sequence[Tup], tau: int) -> None:
        """A generation starting mid-stream: the window as it is at the boundary."""
        for t in tuples:
            self._add_all([t], t.ts // tau)
        self._settle_keys()

    def oldest(self, e: int) -> int:
        """The oldest arrival epoch in the window (e + 1 when it is empty)."""
        return self.window[0][2] if self.window else e + 1

    def _add_all(self, batch: Sequence[Tup], e: Optional[int]) -> None:
        """New pending tuples of arrival epoch e, in the window (e None: already there, a snapshot's):
        indexed by their keys and fresh for every channel (their keys are tested against the live sets by
        :meth:`_settle_keys`, once per batch).  One loop for the batch: this runs for every input tuple."""
        if _c is not None:   # its entries are _c.Entry
            _c.add(self, batch, e)
            return
        pending, rank = self.pending, self._rank
        seqs = [t.seq for t in batch]
        cols = []
        for key_of, table, _, _ in self._extract:   # per key table: the batch's keys, indexed in one call
            col = key_of([t.key for t in batch])
            table.add_all(col, seqs)
            cols.append(col)
        ranks = range(rank, rank + len(batch))
        if len(self._filters) == 1:   # the common case (a leaf, or one neighbour filtering)
            new = [_Entry(t, (k,), r) for t, k, r in zip(batch, cols[0], ranks, strict=True)]
        elif not cols:       # no neighbour's sets test it (every direction toward it skipped)
            new = [_Entry(t, (), r) for t, r in zip(batch, ranks, strict=True)]
        elif len(cols) == 1:  # several neighbours, one key toward all of them
            n = len(self._filters)
            new = [_Entry(t, (k,) * n, r) for t, k, r in zip(batch, cols[0], ranks, strict=True)]
        else:
            by_filter = [cols[c] for c in self._col_of]
            new = [_Entry(t, ks, r) for t, ks, r in zip(batch, zip(*by_filter, strict=True), ranks, strict=True)]
        pending.update(zip(seqs, new, strict=True))
        rank += len(batch)
        if e is not None:
            self.window.extend([(t.ts, t.seq, e) for t in batch])
        for fresh in self._fresh.values():
            fresh.extend(new)
        self._rank = rank

    def _readd(self, t: Tup, sent: Sequence[str], shipped: bool) -> None:
        """A pending tuple of a snapshot (already in the window), with what it had done."""
        self._add_all([t], None)
        x = self.pending[t.seq]
        x.sent, x.shipped = tuple(dict.fromkeys(sent)), bool(shipped)

    def _indexes(self) -> tuple[dict[str, KeyIndex], list[_Extract]]:
        """Per neighbour whose sets are tested, its index; and per distinct key toward them (the positions of the
        join values), the function taking it from a batch's join values, its table (shared by the indexes of the
        neighbours testing that key: a tuple's key is added and forgotten once), the position in ``_filters``
        of a neighbour testing it and the positions themselves (the C form reads the keys at them directly, the
        function is its fallback).  ``_col_of``: per neighbour (in ``_filters`` order), its key's number."""
        tables: dict[tuple[int, ...], int] = {}
        extract: list[_Extract] = []
        index: dict[str, KeyIndex] = {}
        self._col_of: list[int] = []
        for i, n in enumerate(self._filters):
            pos = tuple(self._keys[n])
            if pos not in tables:
                tables[pos] = len(extract)
                extract.append((_keys_of(pos), KeyTable(), i, pos))
            c = tables[pos]
            index[n] = KeyIndex(extract[c][1])
            self._col_of.append(c)
        return index, extract

    def _settle_keys(self) -> None:
        for index in self._index.values():
            index.settle()

    def _forget_all(self, xs: list[_Entry]) -> None:
        """Take the entries of ``xs`` (done with, or gone from the window) out of the key tables, a call per
        table."""
        if _c is not None:
            _c.forget_all(self, xs)
            return
        seqs = [x.seq for x in xs]
        for _, table, i, _ in self._extract:
            table.discard_all([x.keys[i] for x in xs], seqs)

    # ------------------------------------------------------------------ filters
    def take(self, nbr: str, e: int, body: KeyFilter) -> None:
        """The key set ``nbr`` sent for epoch e."""
        if _c is not None:   # the same steps
            _c.take(self, nbr, e, body, key_matchers)
            return
        lf = self.live_from[nbr] = max(self.live_from[nbr], e - body.live)
        was = self.filters[nbr]
        fs = self.filters[nbr] = [f for f in was if f[1] >= lf]
        if body.keys or body.n:
            new = []
            for tag, m in key_matchers(e, body):
                if tag >= lf:   # a run whose tuples already left the sender's window holds nothing live
                    self.received[nbr] += 1
                    new.append((self.received[nbr], tag, m))
            fs.extend(new)
            self._index[nbr].more_live(fs, new)
            for _, tag, m in new:
                self._matched(nbr, tag, m)
        # sets that expired stay in the index's forms for a while (KeyIndex.more_live)

    def _matched(self, nbr: str, tag: int, m: Matcher) -> None:
        """A new set of ``nbr`` tagged ``tag``: the keys it holds match (again); their tuples that did not
        match ``nbr`` before are dirty for every other edge and for shipping."""
        if _c is not None:
            _c.matched(self, nbr, tag, self._index[nbr].holding(m))
            return
        index, lf = self._index[nbr], self.live_from[nbr]
        best, dirty = index.best, self._dirty[nbr]
        for k in index.holding(m):
            old = best[k]
            if tag > old:
                best[k] = tag
                if old < lf <= tag:
                    got = index.seqs[k]
                    seqs = (got,) if isinstance(got, int) else got
                    for d in dirty:
                        d.update(seqs)

    def _clean_channels(self) -> None:
        """Every channel with nothing fresh or dirty; ``_dirty[nbr]``: the dirty sets a match of ``nbr``'s adds to
        (every channel's but ``nbr``'s own)."""
        self._fresh = {c: [] for c in self._channels}
        self._again = {c: set() for c in self._channels}
        self._dirty = {n: [d for c, d in self._again.items() if c != n] for n in self._filters}

    def _passing(self, xs: list[_Entry], but: Optional[str], among: tuple[str, ...]) -> list[_Entry]:
        """The entries of ``xs`` matched by the live sets of every neighbour of ``among`` but ``but`` (a
        neighbour skipped toward us: always).  One loop with the look-ups hoisted: this runs for every
        candidate of every channel, every epoch."""
        pos = self._pos
        tests = [(pos[n], self._index[n].best, self.live_from[n]) for n in among if n != but]
        out = []
        for x in xs:
            keys = x.keys
            for i, best, lf in tests:
                if best[keys[i]] < lf:
                    break
            else:
                out.append(x)
        return out

    def _candidates(self, channel: str) -> list[_Entry]:
        """The pending tuples that may have come to pass for ``channel`` since it last looked, in window
        order; the channel is clean afterwards."""
        pending, again = self.pending, self._again[channel]
        fresh = [x for x in self._fresh[channel] if x.seq in pending]
        self._fresh[channel] = []
        if not again:
            return fresh
        got = {x.seq: x for x in fresh}
        for seq in again:
            x = pending.get(seq)
            if x is not None:
                got[seq] = x
        again.clear()
        return sorted(got.values(), key=_RANK)

    # ------------------------------------------------------------------ what goes out
    def out(self, nbr: str, e: int) -> KeyFilter:
        """The key set for ``nbr``: keys of the tuples that newly pass every other *tree* neighbour.  A
        crossing edge's set arrives after the tree's rounds, so tree sets never wait for it (and a
        set sent on a crossing edge does not depend on another one: no wait is circular)."""
        return key_filter(self.out_keys(nbr, e), self.fpr, self.fp_cost.get(nbr), self.stale.get(nbr))

    def out_keys(self, nbr: str, e: int) -> Outgoing:
        """What :meth:`out` sends, before the choice between keys and a filter (the tuples are marked sent)."""
        if _c is not None:   # the same steps, and the Outgoing made in the kernel
            return _c.out_keys(self, nbr, e, self._tree_filters, self.tau, Outgoing)  # type: ignore[no-any-return]
        newly = self._passing([x for x in self._candidates(nbr) if nbr not in x.sent], nbr, self._tree_filters)
        for x in newly:
            x.sent += (nbr,)
        self._settle(newly)
        if nbr in self._pos:   # its key toward nbr is kept already (nbr's sets test it)
            i = self._pos[nbr]
            keys = [x.keys[i] for x in newly]
        else:
            keys = keys_at(self._keys[nbr], [x.t for x in newly])
        tau = self.tau
        ages = [e - x.t.ts // tau for x in newly]
        return Outgoing(keys, min(ages, default=0), e - self.oldest(e), ages)

    def ship(self, e: int, batch: Sequence[Tup]) -> ShippedBatch:
        """The tuples that newly pass every neighbour (crossing edges' too), for the result site."""
        if _c is not None:
            newly = _c.pass_channel(self, _SHIP, None, self._filters)
        else:
            newly = self._passing([x for x in self._candidates(_SHIP) if not x.shipped], None, self._filters)
            for x in newly:
                x.shipped = True
            self._settle(newly)
        arrivals = [t.ts for t in batch] if not self.stream.window.is_time else []
        return ShippedBatch(sorted((x.t for x in newly), key=_SEQ), arrivals)

    def _settle(self, done: list[_Entry]) -> None:
        """Forget the entries with nothing left to do (sent on every edge it sends on, shipped if it
        ships)."""
        n, ships, pending = self._sends, self.op.replica is not None, self.pending
        over = [x for x in done if len(x.sent) == n and (x.shipped or not ships)]
        for x in over:
            del pending[x.seq]
        if over and self._filters:
            self._forget_all(over)

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, encode: Encode) -> dict[str, Any]:
        """The window, the pending tuples and the live sets; the indexes are rebuilt on restore."""
        return {
            "v": 2, "window": list(self.window),
            "pending": [(encode(x.t), sorted(x.sent), x.shipped) for x in self.pending.values()],
            "filters": {n: [(i, tag, _plain(m)) for i, tag, m in fs] for n, fs in self.filters.items()},
            "received": dict(self.received), "live_from": dict(self.live_from),
        }

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        """The inverse of :meth:`snapshot` (a version 1 snapshot's per-tuple match marks are recomputed
        from the live sets, which it holds too)."""
        self.window = deque((w[0], w[1], w[2]) for w in data["window"])
        self.filters = {n: [(i, tag, _matcher(m)) for i, tag, m in fs] for n, fs in data["filters"].items()}
        self.received, self.live_from = dict(data["received"]), dict(data["live_from"])
        self.pending, self._rank = {}, 0
        self._index, self._extract = self._indexes()
        for n, index in self._index.items():
            index.live(self.filters[n])
        self._clean_channels()
        for b, sent, shipped, *_ in data["pending"]:
            self._readd(decode(b), sent, shipped)
        self._settle_keys()


class PassReducer(Reducer):
    """A reducer whose sets no neighbour tests (every direction toward it skipped): each tuple passes every
    test the moment it is admitted, so a channel's newly passing tuples are exactly those admitted since it
    last looked.  It keeps the window's (ts, seq, epoch) and, per channel, those tuples -- no entries, no key
    indexes: what :class:`Reducer` would compute, with none of its per-tuple bookkeeping (in a reduction that
    ``auto`` trims with skips, often one stream in three).  A tuple that leaves the window before a channel
    looked is dropped from it, as the reducer forgets it.  Snapshots are :class:`Reducer`'s (version 2)."""

    def __init__(self, op: ReducerOp, stream: Stream, tau: int, fpr: Optional[float],
                 fp_cost: Optional[dict[str, Optional[float]]] = None,
                 stale: Optional[dict[str, Optional[float]]] = None) -> None:
        assert not op.filters, "a reducer that takes sets is not a pass-through"
        super().__init__(op, stream, tau, fpr, fp_cost, stale)
        self._new: dict[str, list[Tup]] = {c: [] for c in self._channels}

    def admit(self, e: int, batch: Sequence[Tup], lower: tuple[str, int]) -> None:
        if _c is not None:   # the same steps (one stream in three of the demo's reduction, every epoch)
            _c.pass_admit(self, e, batch, 0 if lower[0] == "ts" else 1, lower[1])
            return
        self.window.extend([(t.ts, t.seq, e) for t in batch])
        for new in self._new.values():
            new.extend(batch)
        col, value = (0, lower[1]) if lower[0] == "ts" else (1, lower[1])
        w, gone = self.window, set()
        while w and w[0][col] < value:
            gone.add(w.popleft()[1])
        if gone:   # only tuples no channel looked at yet can be among them
            for c, new in self._new.items():
                if new and new[0].seq in gone:
                    self._new[c] = [t for t in new if t.seq not in gone]

    def start(self, tuples: Sequence[Tup], tau: int) -> None:
        self.window.extend([(t.ts, t.seq, t.ts // tau) for t in tuples])
        for new in self._new.values():
            new.extend(tuples)

    def out_keys(self, nbr: str, e: int) -> Outgoing:
        newly, self._new[nbr] = self._new[nbr], []
        return tups_outgoing(newly, e, self.tau, self._keys[nbr], e - self.oldest(e))

    def ship(self, e: int, batch: Sequence[Tup]) -> ShippedBatch:
        newly, self._new[_SHIP] = self._new[_SHIP], []
        arrivals = [t.ts for t in batch] if not self.stream.window.is_time else []
        return ShippedBatch(sorted(newly, key=_SEQ), arrivals)

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        """:meth:`Reducer.snapshot`'s form: the pending tuples are those some channel has not looked at yet."""
        waiting = {c: {t.seq for t in new} for c, new in self._new.items()}
        pending = {t.seq: t for new in self._new.values() for t in new}
        sends = [e.stream for e in self.op.sends]
        rows = [(encode(t), sorted(c for c in sends if seq not in waiting[c]),
                 _SHIP in waiting and seq not in waiting[_SHIP]) for seq, t in sorted(pending.items())]
        return {"v": 2, "window": list(self.window), "pending": rows, "filters": {}, "received": {},
                "live_from": {}}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self.window = deque((w[0], w[1], w[2]) for w in data["window"])
        self._new = {c: [] for c in self._channels}
        for b, sent, shipped, *_ in data["pending"]:
            t = decode(b)
            for c, new in self._new.items():
                if (c == _SHIP and not shipped) or (c != _SHIP and c not in sent):
                    new.append(t)


def make_reducer(op: ReducerOp, stream: Stream, tau: int, fpr: Optional[float],
                 fp_cost: Optional[dict[str, Optional[float]]] = None,
                 stale: Optional[dict[str, Optional[float]]] = None) -> Reducer:
    """The reducer of ``op``: a :class:`PassReducer` when it takes no sets."""
    return (PassReducer if not op.filters else Reducer)(op, stream, tau, fpr, fp_cost, stale)


def _keys_of(positions: tuple[int, ...]) -> Callable[[list[tuple[Any, ...]]], list[Key]]:
    """The keys at ``positions`` of a batch's join values, as a function (a list comprehension per batch)."""
    if len(positions) == 1:
        i = positions[0]
        return lambda keys: [(key[i],) for key in keys]
    get = itemgetter(*positions)
    return lambda keys: [get(key) for key in keys]


def _plain(m: Matcher) -> Any:
    if m._bloom is not None:
        return ("bloom", m._bloom.bits, m._bloom.k, m._bloom.n)
    return ("keys", sorted(m._set or (), key=repr))


def _matcher(data: Any) -> Matcher:
    if data[0] == "bloom":
        return KeySet(bloom=Bloom(data[1], data[2], data[3])).matcher()
    return KeySet(keys=tuple(tuple(k) for k in data[1])).matcher()


class ReducedReplica(FullReplica):
    """A reduction's replica of a stream at the result site: the tuples that passed (new and older
    ones), expired locally like the home window; the heads of epoch e are the passed tuples of e."""

    def apply(self, e: int, body: Body) -> None:
        if not isinstance(body, ShippedBatch):
            super().apply(e, body)  # the jump start's WindowSnapshot
            return
        self.store.insert(body.tuples)
        if self.progress is not None:
            self.progress.add_epoch(e, body.arrivals)
        if self.keep_batches:
            first = e * self.tau
            self.batches[e] = [t for t in body.tuples if t.ts >= first]
        self.next = e + 1
        self.maintain()


# ----------------------------------------------------------------------------- phases

class AheadCheck(Protocol):
    """Where a reducer's sets sent ahead by a look-ahead (:mod:`joinlib.runtime.ahead`) are checked: on
    ``flows`` the reducer's lane hands its set to :meth:`check` instead of sending it."""

    flows: set[str]

    def check(self, flow: str, e: int, out: Outgoing) -> None: ...


def reducer_phases(ctx: StepContext, red: Reducer, home: HomeWindow, ship_flow: Optional[str],
                   lane: tuple[str, str], ahead: Optional[AheadCheck] = None) -> list[Placed]:
    """The reducer's lane at its home: admit the epoch's batch, the rounds of key sets in tree
    order, then ship what passes (its first epoch, when it starts mid-stream, is the jump start).
    ``ahead``: the sets on its flows went ahead; the lane makes them at their place in the rounds (its
    state moves as before) and has them checked rather than sent."""
    op, start = red.op, ctx.start
    phases = [Phase((0,), "tick", _admit(ctx, red, home, ship_flow), gates=(next_gate(home),))]
    for i, (way, nbr) in enumerate(op.schedule, start=1):
        edge = op.edge(nbr)
        flow = edge.in_flow if way == "in" else edge.out_flow
        assert flow is not None  # the schedule has no skipped direction
        wait = None
        if way == "in":
            fn, wait = _take(ctx, red, nbr, flow), ctx.waits(flow)
        elif ahead is not None and flow in ahead.flows:
            fn = _check(ctx, red, nbr, flow, ahead)
        else:
            fn = _send(ctx, red, nbr, edge.home, flow)
        phases.append(Phase((i,), "semijoin", fn, wait))
    if ship_flow is not None:
        def ship(e: int) -> bool:
            if e < start:
                return True
            ctx.send(op.site, ship_flow, e, red.ship(e, home.batches[e]))
            return True
        phases.append(Phase((len(phases),), "ship", ship))
    return [Placed(op.home, lane, p, ("home", op.stream)) for p in phases]


def _admit(ctx: StepContext, red: Reducer, home: HomeWindow, ship_flow: Optional[str]) -> Any:
    op, start = red.op, ctx.start

    def admit(e: int) -> bool:
        if home.next <= e:
            return False
        if e < start:  # the jump start of a generation starting mid-stream
            red.start(home.boundary(start), ctx.tau)
            if ship_flow is not None:
                ctx.send(op.site, ship_flow, e, WindowSnapshot(home.count_before(start)))
            return True
        red.admit(e, home.batches[e], home.lower(e))
        return True
    return admit


def _take(ctx: StepContext, red: Reducer, nbr: str, flow: str) -> Any:
    def take(e: int) -> bool:
        if e < ctx.start:
            return True
        body = ctx.take(flow, e)
        if body is None:
            return False
        assert isinstance(body, KeyFilter)
        red.take(nbr, e, body)
        return True
    return take


def _send(ctx: StepContext, red: Reducer, nbr: str, dst: str, flow: str) -> Any:
    def send(e: int) -> bool:
        if e < ctx.start:
            return True
        ctx.send(dst, flow, e, red.out(nbr, e))
        return True
    return send


def _check(ctx: StepContext, red: Reducer, nbr: str, flow: str, ahead: AheadCheck) -> Any:
    def check(e: int) -> bool:
        if e >= ctx.start:
            ahead.check(flow, e, red.out_keys(nbr, e))
        return True
    return check
