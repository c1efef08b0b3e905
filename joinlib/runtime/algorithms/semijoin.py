"""Semijoins with a key round trip: SM-S1 (result at the source) and SM-D2 (result at the
destination).

SM-S1: the source ships the keys K_1 of its rows; the home answers with ΔW'_2, the matching
window tuples it never shipped before (Algorithm 7's shipped bits, :class:`FifoSender`); the
source keeps them in W'_2 (:class:`FifoReplica`) and probes.  Expiry is a count k of shipped
tuples that left the window (Algorithm 8): W'_2 is a FIFO.

Pipelining: the home answers the request of epoch e from the *view* of its window at e, and
counts k from the window's logical expiry, not from its (lagged) physical purge; its sender
lane runs tick(e), the semijoins of e, tick(e + 1), ... so every answer and count is a function
of the data alone.  The source ships the keys of epoch e + 1 without waiting for the answer of e.

SM-D2: keys K_1 go to the home, which answers with the keys K'_1 that have matches (keeping the
matching window lists), then the source ships the rows with those keys, which the home joins.
No replica, no state across epochs: every phase has a lane of its own.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

from joinlib.model import Stream, Tup
from joinlib.plan.ir import StepOp
from joinlib.protocol.bloom import Matcher
from joinlib.protocol.messages import Body, ExpiryUpdate, Key, TupleBatch, WindowSnapshot
from joinlib.runtime.algorithms.base import (
    Decode,
    Encode,
    Placed,
    StepContext,
    by_key,
    join,
    key_message,
    key_set,
    own_lane,
    request,
    row_bytes_of,
    row_maker,
    store_join,
)
from joinlib.runtime.lanes import Phase, next_gate
from joinlib.runtime.window import HomeWindow
from joinlib.runtime.windowing import Bound, Progress, view_slice
from joinlib.state.base import KeyList, WindowStore


def arrivals_of(stream: Stream, batch: Sequence[Tup]) -> list[int]:
    """Arrival timestamps, needed remotely only for tuple-count windows."""
    return [t.ts for t in batch] if not stream.window.is_time else []


class FifoSender:
    """SM-S1 at the home node: shipped bits and the FIFO expiry count."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.shipped: set[int] = set()          # seqs shipped to the replica and still in the window
        self._heap: list[tuple[int, int]] = []   # the same (seq, ts), oldest first

    def jump(self, home: HomeWindow, start: int) -> WindowSnapshot:
        return WindowSnapshot(home.count_before(start))

    def semijoin(self, home: HomeWindow, index: tuple[int, ...], keys: list[Key], e: int) -> TupleBatch:
        """Algorithm 7: tuples of the window at epoch ``e`` matching ``keys`` that were never shipped."""
        out: list[tuple[Tup, ...]] = []
        shipped = self.shipped
        for tups in home.view(index, keys, e).values():
            for t in tups:
                if t.seq not in shipped:
                    shipped.add(t.seq)
                    heapq.heappush(self._heap, (t.seq, t.ts))
                    out.append((t,))
        out.sort(key=lambda r: r[0].seq)
        return TupleBatch(out)

    def tick(self, e: int, batch: Sequence[Tup], bound: Bound) -> Body:
        """Algorithm 8: k = number of shipped tuples that left the window at epoch ``e``."""
        k, heap = 0, self._heap
        field_, value = bound
        col = 1 if field_ == "ts" else 0
        while heap and heap[0][col] < value:
            self.shipped.discard(heapq.heappop(heap)[0])
            k += 1
        return ExpiryUpdate(k, arrivals_of(self.stream, batch))

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": 1, "shipped": sorted(self._heap)}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self._heap = [(int(s), int(t)) for s, t in data["shipped"]]
        heapq.heapify(self._heap)
        self.shipped = {s for s, _ in self._heap}


class FifoReplica:
    """SM-S1's W'_2@N_1: shipped tuples, removed k at a time from the old end (Algorithm 8)."""

    def __init__(self, stream: Stream, store: WindowStore) -> None:
        self.stream, self.store = stream, store
        self.progress: Progress | None = None if stream.window.is_time else Progress()
        self._fifo: list[tuple[int, Tup]] = []  # heap by seq: a FIFO in stream order

    def apply(self, e: int, body: Body) -> None:
        if isinstance(body, WindowSnapshot):
            if self.progress is not None:
                self.progress.start_at(e + 1, body.base)
            return
        assert isinstance(body, ExpiryUpdate)
        gone = [heapq.heappop(self._fifo)[1] for _ in range(body.expired)]
        self.store.remove_oldest(gone)
        if self.progress is not None:
            self.progress.add_epoch(e, body.arrivals)
            self.progress.prune(e)

    def receive(self, body: TupleBatch) -> None:
        tups = [r[0] for r in body.rows]
        self.store.insert(tups)
        for t in tups:
            heapq.heappush(self._fifo, (t.seq, t))

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": 1, "fifo": [encode(t) for _, t in sorted(self._fifo, key=lambda x: x[0])],
                "progress": self.progress.snapshot() if self.progress is not None else None}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        tups = [decode(b) for b in data["fifo"]]
        self._fifo = [(t.seq, t) for t in tups]
        self.progress = Progress.restored(data["progress"]) if data["progress"] is not None else None

    def __len__(self) -> int:
        return len(self._fifo)


# ----------------------------------------------------------------------------- phases

def ship_keys(ctx: StepContext, st: StepOp, flow: str) -> Placed:
    """At the source (SM-S1, SM-D2's first leg): send the keys of the epoch's rows, keep the rows."""
    def ship(e: int) -> bool:
        if e < ctx.start:
            return True
        if not ctx.ready(st, e):
            return False
        rows = ctx.rows_in(st, e)
        bykey = by_key(st, rows)
        ctx.hold(("rows", st.sig, e), rows)
        ctx.send(st.home, flow, e, request(ctx, st, list(bykey)))
        return True
    return Placed(st.loc, own_lane(st, "ship"), Phase((0,), "ship", ship, gates=(ctx.ready_gate(st),)))


def answer(ctx: StepContext, st: StepOp, respond: Callable[[list[Key], int], TupleBatch],
           held: Callable[[Matcher, int], list[Key]]) -> Placed:
    """At the home, in the sender's lane (SM-S1, SM-S2): answer the request of epoch e with
    ΔW'_2 = ``respond(keys, e)``; a request sent as a Bloom filter asks for ``held(m, e)``, the keys
    of the candidates of epoch e that pass it."""
    req, resp, rank = st.flow("req"), st.flow("resp"), (1, st.seq_index, st.j)

    def requested(body: Body, e: int) -> list[Key]:
        keys, m = key_set(body)
        return keys if keys is not None else held(m, e)

    def semijoin(e: int) -> bool:
        if e < ctx.start:
            return True
        body = ctx.take(req, e)
        if body is None:
            return False
        ctx.send(st.loc, resp, e, respond(requested(body, e), e))
        return True
    return Placed(st.home, ("serve", st.replica or ""), Phase(rank, "semijoin", semijoin, ctx.waits(req)),
                  ("home", st.stream))


def finish(ctx: StepContext, st: StepOp, rank: tuple[int, ...]) -> Placed:
    """Back at the source, in the replica's lane (SM-S1, SM-S2): store ΔW'_2 in the replica and
    probe it with the rows waiting for the answer.  (A restarted node may find the answer before
    it has redone the request: it waits for the rows.)"""
    resp, sig = st.flow("resp"), st.replica or ""

    def probe(e: int) -> bool:
        if e < ctx.start:
            return True
        if not ctx.holds(("rows", st.sig, e)):
            return False
        body = ctx.take(resp, e)
        if body is None:
            return False
        assert isinstance(body, TupleBatch)
        rep = ctx.replica(sig)
        rep.receive(body)
        ctx.output(st, e, store_join(ctx, st, ctx.release(("rows", st.sig, e)), rep.store, rep.progress))
        return True
    return Placed(st.loc, ("hold", sig), Phase(rank, "probe", probe, ctx.waits(resp)))


def sms1_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    parts_ = [ship_keys(ctx, st, st.flow("req")), finish(ctx, st, (1, st.seq_index, st.j))]
    if st.home == ctx.site:
        sender: FifoSender = ctx.sender(st.replica or "")
        home, index = ctx.home(st.stream), st.key.index
        parts_.append(answer(ctx, st, lambda keys, e: sender.semijoin(home, index, keys, e),
                             lambda m, e: home.held_keys(index, m, e)))
    return parts_


def smd2_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    return [ship_keys(ctx, st, st.flow("keys")), _d2_match(ctx, st), _d2_ship(ctx, st), _d2_finish(ctx, st)]


def _d2_match(ctx: StepContext, st: StepOp) -> Placed:
    """At the home: the keys with tuples in the window of epoch e go back; their lists stay."""
    keys_f, match_f = st.flow("keys"), st.flow("match")
    rb = row_bytes_of(*(ctx.q.stream(n) for n in st.input.streams))   # the query's: one per step, not per epoch

    def match(e: int) -> bool:
        if e < ctx.start:
            return True
        home = ctx.home(st.stream)
        if home.next <= e:
            return False
        body = ctx.take(keys_f, e)
        if body is None:
            return False
        keys, m = key_set(body)
        asked = len(keys) if keys is not None else getattr(body, "n", 0)
        if keys is None:
            keys = home.held_keys(st.key.index, m, e)
        lower, end = home.lower(e), (e + 1) * ctx.tau
        found = {k: kl for k, kl in home.store.lookup_many(st.key.index, keys).items()
                 if view_slice(kl, lower, end)}
        ctx.hold(("found", st.sig, e), found)
        ctx.send(st.loc, match_f, e, key_message(list(found), ctx.q.execution.bloom_fpr,
                                                 rb * asked if rb is not None else None))
        return True
    gates = (next_gate(ctx.home(st.stream), ctx.start),) if st.home == ctx.site else ()   # (placed at st.home)
    return Placed(st.home, own_lane(st, "match"), Phase((0,), "semijoin", match, ctx.waits(keys_f), gates),
                  ("home", st.stream))


def _d2_ship(ctx: StepContext, st: StepOp) -> Placed:
    """At the source: ship the rows whose key matched."""
    match_f, data_f = st.flow("match"), st.flow("data")

    def ship(e: int) -> bool:
        if e < ctx.start:
            return True
        if not ctx.holds(("rows", st.sig, e)):
            return False
        body = ctx.take(match_f, e)
        if body is None:
            return False
        _, m = key_set(body)
        rows = ctx.release(("rows", st.sig, e))
        pk = st.key.probe_key
        ctx.send(st.home, data_f, e, TupleBatch([tuple(filter(None, r)) for r in rows
                                                 if (k := pk(r)) is not None and m.has(k)]))
        return True
    return Placed(st.loc, own_lane(st, "ship2"), Phase((0,), "ship", ship, ctx.waits(match_f)))


def _d2_finish(ctx: StepContext, st: StepOp) -> Placed:
    """At the home: join the shipped rows with the lists kept by the match phase."""
    data_f = st.flow("data")
    row_of = row_maker(ctx.m, st, ctx.q)

    def probe(e: int) -> bool:
        if e < ctx.start:
            return True
        if not ctx.holds(("found", st.sig, e)):
            return False
        body = ctx.take(data_f, e)
        if body is None:
            return False
        assert isinstance(body, TupleBatch)
        found: dict[Key, KeyList] = ctx.release(("found", st.sig, e))
        rows = list(map(row_of, body.rows))
        progress = ctx.home(st.stream).progress
        ctx.output(st, e, join(ctx, st, rows, lambda keys: {k: found[k] for k in keys if k in found}, progress))
        return True
    return Placed(st.home, own_lane(st, "finish"), Phase((0,), "probe", probe, ctx.waits(data_f)),
                  ("home", st.stream))


__all__ = ["FifoSender", "FifoReplica", "sms1_phases", "smd2_phases", "ship_keys", "answer", "finish",
           "arrivals_of"]
