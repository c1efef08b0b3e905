"""Simple joins: local probes, SP-S (probe a full replica at the source) and SP-D (ship the
rows to the destination and probe there).

SP-S's replica W_2@N_1 is a complete copy of the remote window: the home ships every batch B_2
(:class:`FullSender`), the replica inserts it and expires tuples by its own clock
(:class:`FullReplica`), lagging its purges behind the slowest probe that reads it.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from joinlib.model import Stream, Tup
from joinlib.plan.ir import StepOp
from joinlib.protocol.messages import Body, TupleBatch, WindowSnapshot
from joinlib.runtime.algorithms.base import Decode, Encode, Placed, StepContext, own_lane, row_maker, store_join
from joinlib.runtime.lanes import Lane, Phase, lowest_epoch, next_gate
from joinlib.runtime.window import HomeWindow
from joinlib.runtime.windowing import Bound, Progress, purge_bound
from joinlib.state.base import WindowStore


class FullSender:
    """SP-S at the home node: W_2 is exported to the source node — ship every batch B_2."""

    def jump(self, home: HomeWindow, start: int) -> WindowSnapshot:
        return WindowSnapshot(home.count_before(start), home.boundary(start))

    def tick(self, e: int, batch: Sequence[Tup], bound: Bound) -> Body:
        return TupleBatch([(t,) for t in batch])

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": 1}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        pass


class FullReplica:
    """SP-S's W_2@N_1: a complete copy, expired locally like the home window once every probe
    reading it (``users``) is past the expiring tuples' last epoch."""

    def __init__(self, stream: Stream, store: WindowStore, tau: int) -> None:
        self.stream, self.store, self.tau = stream, store, tau
        self.progress: Optional[Progress] = None if stream.window.is_time else Progress()
        self.batches: dict[int, list[Tup]] = {}
        self.keep_batches = False  # a sequence headed by the stream starts here (it takes them)
        self.next = 0              # applied through next - 1
        self.purged = 0
        self.users: list[Lane] = []

    def apply(self, e: int, body: Body) -> None:
        if isinstance(body, WindowSnapshot):
            self.store.insert(sorted(body.tuples, key=lambda t: t.seq))
            if self.progress is not None:
                self.progress.start_at(e + 1, body.base)
            self.next = self.purged = e + 1
            return
        assert isinstance(body, TupleBatch)
        batch = [r[0] for r in body.rows]
        self.store.insert(batch)
        if self.progress is not None:
            self.progress.add_epoch(e, [t.ts for t in batch])
        if self.keep_batches:
            self.batches[e] = batch
        self.next = e + 1
        self.maintain()

    def maintain(self) -> None:
        low = lowest_epoch(self.users, self.next)
        if low > self.purged:
            if self.progress is None:   # a time window: purge_bound's ts, directly
                self.store.purge_below(ts=low * self.tau - self.stream.window.size)
            else:
                self.store.purge_below(**purge_bound(self.stream, low, self.tau, self.progress))
            if self.progress is not None:
                self.progress.prune(low)
            self.purged = low

    def snapshot(self, encode: Encode) -> dict[str, Any]:
        return {"v": 1, "next": self.next, "purged": self.purged,
                "progress": self.progress.snapshot() if self.progress is not None else None,
                "batches": {e: [encode(t) for t in b] for e, b in self.batches.items()}}

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self.next, self.purged = data["next"], data["purged"]
        self.progress = Progress.restored(data["progress"]) if data["progress"] is not None else None
        self.batches = {int(e): [decode(b) for b in bs] for e, bs in data["batches"].items()}


# ----------------------------------------------------------------------------- phases

def local_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    """A step whose input already lives at the probed stream's site: probe the home window."""
    def probe(e: int) -> bool:
        if e < ctx.start:
            return True
        if home.next <= e or not ctx.ready(st, e):   # (both only read: the cheaper first)
            return False
        ctx.output(st, e, store_join(ctx, st, ctx.rows_in(st, e), home.store, home.progress))
        return True
    if st.loc != ctx.site:
        return []
    home = ctx.home(st.stream)
    gates = (next_gate(home, ctx.start), ctx.ready_gate(st))
    return [Placed(st.loc, own_lane(st, "probe"), Phase((0,), "probe", probe, gates=gates), ("home", st.stream))]


def sps_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    def probe(e: int) -> bool:
        if e < ctx.start:
            return True
        if rep.next <= e or not ctx.ready(st, e):
            return False
        ctx.output(st, e, store_join(ctx, st, ctx.rows_in(st, e), rep.store, rep.progress))
        return True
    if st.loc != ctx.site:
        return []
    rep: FullReplica = ctx.replica(st.replica or "")
    gates = (next_gate(rep, ctx.start), ctx.ready_gate(st))
    return [Placed(st.loc, own_lane(st, "probe"), Phase((0,), "probe", probe, gates=gates),
                   ("replica", st.replica or ""))]


def spd_phases(ctx: StepContext, st: StepOp) -> list[Placed]:
    flow = st.flow("data")

    def ship(e: int) -> bool:
        if e < ctx.start:
            return True
        if not ctx.ready(st, e):
            return False
        ctx.send(st.home, flow, e, TupleBatch([tuple(filter(None, r)) for r in ctx.rows_in(st, e)]))
        return True
    return [Placed(st.loc, own_lane(st, "ship"), Phase((0,), "ship", ship, gates=(ctx.ready_gate(st),))),
            probe_shipped(ctx, st, flow)]


def probe_shipped(ctx: StepContext, st: StepOp, flow: str) -> Placed:
    """At the home node (SP-D, SM-D1): the rows shipped in probe the home window."""
    row_of = row_maker(ctx.m, st, ctx.q)

    def probe(e: int) -> bool:
        if e < ctx.start:
            return True
        home = ctx.home(st.stream)
        if home.next <= e:
            return False
        body = ctx.take(flow, e)
        if body is None:
            return False
        assert isinstance(body, TupleBatch)
        rows = list(map(row_of, body.rows))
        ctx.output(st, e, store_join(ctx, st, rows, home.store, home.progress))
        return True
    gates = (next_gate(ctx.home(st.stream), ctx.start),) if st.home == ctx.site else ()   # (placed at st.home)
    return Placed(st.home, own_lane(st, "probe"), Phase((0,), "probe", probe, ctx.waits(flow), gates),
                  ("home", st.stream))
