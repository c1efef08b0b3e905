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
keeps every set whose tag is not below the sender's latest such epoch.  A tuple that did not pass
is re-tested only against the sets that arrived since, so each epoch costs what changed.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Optional, Sequence

from joinlib.model import Stream, Tup
from joinlib.plan.ir import ReducerOp
from joinlib.protocol.bloom import Bloom, Hashes, KeySet, Matcher, key_hash
from joinlib.protocol.messages import Body, Key, KeyFilter, ShippedBatch, WindowSnapshot
from joinlib.runtime.algorithms.base import Decode, Encode, Placed, StepContext, keys_bytes
from joinlib.runtime.algorithms.simple import FullReplica
from joinlib.runtime.lanes import Phase
from joinlib.runtime.window import HomeWindow


class _Entry:
    """A tuple of the window not yet sent on every edge or shipped: which edges it went out on,
    and per neighbour the latest tag of a key set it matched and how many sets were tested."""

    __slots__ = ("t", "sent", "shipped", "mt", "chk", "hs")

    def __init__(self, t: Tup) -> None:
        self.t = t
        self.sent: set[str] = set()
        self.shipped = False
        self.mt: dict[str, int] = {}
        self.chk: dict[str, int] = {}
        self.hs: dict[str, Hashes] = {}


class Reducer:
    """The state of one stream's reducer (see the module docstring)."""

    def __init__(self, op: ReducerOp, stream: Stream, tau: int, fpr: Optional[float],
                 fp_cost: Optional[dict[str, Optional[float]]] = None) -> None:
        """``fp_cost[nbr]``: what a key set for ``nbr`` would let through if everything passed it
        (the neighbour's declared window bytes, :func:`~.base.window_bytes`); missing: keys only."""
        self.op, self.stream, self.tau, self.fpr = op, stream, tau, fpr
        self.fp_cost = dict(fp_cost or {})
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

    # ------------------------------------------------------------------ the window
    def admit(self, e: int, batch: Sequence[Tup], lower: tuple[str, int]) -> None:
        """Epoch e: B_e enters the window, tuples below ``lower`` leave it."""
        for t in batch:
            self.window.append((t.ts, t.seq, e))
            self.pending[t.seq] = _Entry(t)
        col, value = (0, lower[1]) if lower[0] == "ts" else (1, lower[1])
        w = self.window
        while w and w[0][col] < value:
            seq = w.popleft()[1]
            self.pending.pop(seq, None)

    def start(self, tuples: Sequence[Tup], tau: int) -> None:
        """A generation starting mid-stream: the window as it is at the boundary."""
        for t in tuples:
            self.window.append((t.ts, t.seq, t.ts // tau))
            self.pending[t.seq] = _Entry(t)

    def oldest(self, e: int) -> int:
        """The oldest arrival epoch in the window (e + 1 when it is empty)."""
        return self.window[0][2] if self.window else e + 1

    # ------------------------------------------------------------------ filters
    def take(self, nbr: str, e: int, body: KeyFilter) -> None:
        """The key set ``nbr`` sent for epoch e."""
        lf = self.live_from[nbr] = max(self.live_from[nbr], e - body.live)
        fs = [f for f in self.filters[nbr] if f[1] >= lf]
        if body.keys or body.n:
            self.received[nbr] += 1
            ks = KeySet(bloom=Bloom(body.bits, body.hashes, body.n)) if body.bits else KeySet(keys=tuple(body.keys))
            fs.append((self.received[nbr], e - body.back, ks.matcher()))
        self.filters[nbr] = fs

    def _matches(self, x: _Entry, nbr: str) -> bool:
        lf = self.live_from[nbr]
        if x.mt.get(nbr, -1) >= lf:
            return True
        start, best = x.chk.get(nbr, 0), -1
        key: Optional[Key] = None
        for idx, tag, m in self.filters[nbr]:
            if idx <= start or tag < lf:
                continue
            if key is None:
                key = tuple(x.t.key[i] for i in self._keys[nbr])
            h = x.hs.get(nbr)
            if h is None and m._bloom is not None:
                h = x.hs[nbr] = key_hash(key)
            if m.has(key, h) and tag > best:
                best = tag
        x.chk[nbr] = self.received[nbr]
        if best >= 0:
            x.mt[nbr] = best
            return True
        return False

    def _passes(self, x: _Entry, but: Optional[str], among: tuple[str, ...]) -> bool:
        """Matched by the sets of every neighbour of ``among`` but ``but`` (a neighbour skipped toward us:
        always)."""
        return all(self._matches(x, n) for n in among if n != but)

    # ------------------------------------------------------------------ what goes out
    def out(self, nbr: str, e: int) -> KeyFilter:
        """The key set for ``nbr``: keys of the tuples that newly pass every other *tree* neighbour.  A
        crossing edge's set arrives after the tree's rounds, so tree sets never wait for it (and a
        set sent on a crossing edge does not depend on another one: no wait is circular)."""
        tree = self._tree_filters
        newly = [x for x in self.pending.values() if nbr not in x.sent and self._passes(x, nbr, tree)]
        for x in newly:
            x.sent.add(nbr)
        self._settle(newly)
        mine = self._keys[nbr]
        ks = KeySet.of((tuple(x.t.key[i] for i in mine) for x in newly), self.fpr, keys_bytes,
                       self.fp_cost.get(nbr))
        back = e - max((x.t.ts // self.tau for x in newly), default=e)
        if ks.bloom is not None:
            return KeyFilter(back, e - self.oldest(e), [], ks.bloom.bits, ks.bloom.k, ks.bloom.n)
        return KeyFilter(back, e - self.oldest(e), list(ks.keys or ()))

    def ship(self, e: int, batch: Sequence[Tup]) -> ShippedBatch:
        """The tuples that newly pass every neighbour (crossing edges' too), for the result site."""
        newly = [x for x in self.pending.values() if not x.shipped and self._passes(x, None, self._filters)]
        for x in newly:
            x.shipped = True
        self._settle(newly)
        arrivals = [t.ts for t in batch] if not self.stream.window.is_time else []
        return ShippedBatch(sorted((x.t for x in newly), key=lambda t: t.seq), arrivals)

    def _settle(self, done: list[_Entry]) -> None:
        """Forget the entries with nothing left to do (sent on every edge it sends on, shipped if it
        ships)."""
        n, ships = self._sends, self.op.replica is not None
        for x in done:
            if len(x.sent) == n and (x.shipped or not ships):
                del self.pending[x.t.seq]

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {
            "v": 1, "window": list(self.window),
            "pending": [(encode(x.t), sorted(x.sent), x.shipped, sorted(x.mt.items()), sorted(x.chk.items()))
                        for x in self.pending.values()],
            "filters": {n: [(i, tag, _plain(m)) for i, tag, m in fs] for n, fs in self.filters.items()},
            "received": dict(self.received), "live_from": dict(self.live_from),
        }

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self.window = deque((w[0], w[1], w[2]) for w in data["window"])
        self.pending = {}
        for b, sent, shipped, mt, chk in data["pending"]:
            x = _Entry(decode(b))
            x.sent, x.shipped, x.mt, x.chk = set(sent), shipped, dict(mt), dict(chk)
            self.pending[x.t.seq] = x
        self.filters = {n: [(i, tag, _matcher(m)) for i, tag, m in fs] for n, fs in data["filters"].items()}
        self.received, self.live_from = dict(data["received"]), dict(data["live_from"])


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

def reducer_phases(ctx: StepContext, red: Reducer, home: HomeWindow, ship_flow: Optional[str],
                   lane: tuple[str, str]) -> list[Placed]:
    """The reducer's lane at its home: admit the epoch's batch, the rounds of key sets in tree
    order, then ship what passes (its first epoch, when it starts mid-stream, is the jump start)."""
    op, start = red.op, ctx.start
    phases = [Phase((0,), "tick", _admit(ctx, red, home, ship_flow))]
    for i, (way, nbr) in enumerate(op.schedule, start=1):
        edge = op.edge(nbr)
        flow = edge.in_flow if way == "in" else edge.out_flow
        assert flow is not None  # the schedule has no skipped direction
        fn = _take(ctx, red, nbr, flow) if way == "in" else _send(ctx, red, nbr, edge.home, flow)
        phases.append(Phase((i,), "semijoin", fn))
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
