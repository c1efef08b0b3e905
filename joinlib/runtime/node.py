"""The node runtime: one per site, driven by source tuples, messages and time.

Each node owns the windows of the streams born at its site, the replicas it keeps
of remote windows, and its part of every join step.  All of its work for batch
epoch e is a fixed list of *phases* in a canonical order — home ticks (insert B_i,
semi-delayed removal, window update messages), applying replica updates, starting
head batches, then the steps of each join sequence in order — and the node runs them
strictly in that order, epoch after epoch, each phase waiting for the one message
(flow, epoch) it needs.  Consequences:

- exactness does not depend on a latency bound: a phase waits for its input instead
  of assuming it arrived within δ (δ is only used to count *late* messages);
- the node's state is a deterministic function of the plan and the data, so the
  simulator and Kafka ship exactly the same bytes, and a message can arrive in any
  order or twice (it is keyed by (flow, epoch));
- the global order (epoch, group, sequence, step, phase) is well founded — every
  phase depends only on phases ranked below it — so there is no deadlock.

One exception to the order: a *free* home (a home stream that only SP-S replicas read, see
``Node._free_homes``) ticks as soon as its watermark passes, epochs ahead of the rest, since
nothing at its node reads its window; that keeps a cluster's epochs pipelined instead of
one network round trip each.

The node never touches I/O: it sends through ``transport.send(envelope)`` and keeps
tuples in stores made by ``store_factory(name)``.
"""
from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from functools import partial
from typing import Callable, Iterable, Optional

from ..model import Tup
from ..physical import PhysicalPlan, StepSpec
from ..state.base import WindowStore
from ..state.memory import MemoryWindowStore
from .messages import Envelope, KeyBatch, TupleBatch
from .sensor import Sensor
from .sink import Group, Sink
from .sync import (DjaReplica, DjaSender, FifoReplica, FifoSender, FullReplica, FullSender,
                   MixedReplica, MixedSender)
from .windowing import Progress, purge_bound, valid_range

Phase = Callable[[int], bool]


class _Home:
    __slots__ = ("stream", "store", "progress", "senders", "keep_batches", "epoch")

    def __init__(self, stream, store: WindowStore) -> None:
        self.stream = stream
        self.store = store
        self.progress = Progress() if not stream.window.is_time else None
        self.senders: list = []  # (ReplicaSpec, sender)
        self.keep_batches = False
        self.epoch = 0  # the next epoch to tick, for a free home (see Node._free_homes)


class Node:
    def __init__(self, pp: PhysicalPlan, site: str, transport, sink: Sink, *,
                 store_factory: Optional[Callable[[str], WindowStore]] = None,
                 sensor: Optional[Sensor] = None) -> None:
        q = pp.query
        self.pp, self.q, self.site = pp, q, site
        self.tau, self.delta = q.execution.interval_ms, q.execution.max_delay_ms
        self.m = len(q.streams)
        self.transport, self.sink = transport, sink
        self.sensor = sensor or Sensor()
        self.store_factory = store_factory or (lambda name: MemoryWindowStore())
        self.now = 0.0
        self.epoch, self.cursor = 0, 0
        self.last_epoch: Optional[int] = None
        self.inbox: dict[tuple[int, int], object] = {}
        self.taken: dict[int, int] = {}  # flow -> last epoch whose message a phase took
        self.source: dict[str, deque] = {}
        self.watermark: dict[str, int] = {}
        self.homes: dict[str, _Home] = {}
        self.senders: dict[int, object] = {}
        self.replicas: dict[int, object] = {}
        self.batches: dict[tuple[str, int], list[Tup]] = {}
        self.pending: dict[tuple[int, int, int], list] = defaultdict(list)
        self.temp: dict[tuple, object] = {}
        self.step_done: dict[tuple[int, int], int] = {}
        self.lanes: list[_Lane] = []
        self.schedule: list[tuple[tuple, str, Phase]] = []
        self.free: list[tuple[_Home, Phase]] = []  # free homes and their tick phases
        self._build()

    # ------------------------------------------------------------------ inputs
    def feed(self, stream: str, tups: Iterable[Tup], watermark: Optional[int] = None) -> None:
        """Source tuples of a home stream (ts order); ``watermark``: no later tuple has ts below it."""
        self.source.setdefault(stream, deque()).extend(tups)
        if watermark is not None:
            self.watermark[stream] = max(self.watermark.get(stream, 0), watermark)

    def on_message(self, env: Envelope, now: Optional[float] = None, sent: Optional[float] = None) -> bool:
        """Keep a message until its phase runs; False if it is a copy of one already here or
        used (a restarted sender replays its epochs).  A message whose network delay exceeded δ
        is counted as *late*: the paper's time-based model would have missed it; we wait."""
        if now is not None:
            self.now = now
        key = (env.flow, env.epoch)
        if env.epoch <= self.taken.get(env.flow, -1) or key in self.inbox:
            return False
        if sent is not None and self.now - sent > self.delta:
            self.sensor.on_late(self.site, env.kind)
        self.inbox[key] = env.body
        return True

    @property
    def finished(self) -> bool:
        last = self.last_epoch
        return (last is not None and self.epoch > last and all(l.epoch > last for l in self.lanes)
                and all(h.epoch > last for h, _ in self.free))

    def run(self, now: Optional[float] = None) -> bool:
        """Run every phase that can run now; True if any did.

        The tick group of epoch e (home ticks, replica updates, starts) runs once every
        lane has finished epoch e-1 (it purges what those phases read); a lane runs its
        phases of epoch e once the tick group of e has run.
        """
        if now is not None:
            self.now = now
        ran, moved = False, True
        while moved:
            moved = self._run_free() if self.free else False
            moved |= self._run_ticks()
            for lane in self.lanes:
                moved |= self._run_lane(lane)
            ran |= moved
        return ran

    def _run_free(self) -> bool:
        """Tick the free homes as far as their watermarks allow, ahead of the tick group."""
        moved, last = False, self.last_epoch
        for home, tick in self.free:
            while (last is None or home.epoch <= last) and self._timed("tick", tick, home.epoch):
                home.epoch += 1
                moved = True
        return moved

    def _run_ticks(self) -> bool:
        moved, last, sched = False, self.last_epoch, self.schedule
        if not sched:  # only free homes here: the node's epoch is theirs
            e = min(h.epoch for h, _ in self.free)
            moved, self.epoch = e > self.epoch, e
            return moved
        while (last is None or self.epoch <= last) and all(l.epoch >= self.epoch for l in self.lanes):
            _, op, fn = sched[self.cursor]
            if not self._timed(op, fn, self.epoch):
                break
            moved = True
            self.cursor += 1
            if self.cursor == len(sched):
                self.cursor = 0
                self.epoch += 1
        return moved

    def _run_lane(self, lane: "_Lane") -> bool:
        moved, last = False, self.last_epoch
        while lane.epoch < self.epoch and (last is None or lane.epoch <= last):
            _, op, fn = lane.phases[lane.cursor]
            if not self._timed(op, fn, lane.epoch):
                break
            moved = True
            lane.cursor += 1
            if lane.cursor == len(lane.phases):
                lane.cursor = 0
                lane.epoch += 1
        return moved

    def _timed(self, op: str, fn: Phase, epoch: int) -> bool:
        t0 = time.perf_counter()
        if not fn(epoch):
            return False
        self.sensor.on_phase(self.site, op, time.perf_counter() - t0)
        return True

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        pp, site, sched = self.pp, self.site, self.schedule
        free = self._free_homes()
        for s in self.q.streams:
            if s.site == site:
                home = self.homes[s.name] = _Home(s, self.store_factory(f"{site}/home/{s.name}"))
                home.keep_batches = pp.starts[s.name] == site
                if s.name in free:
                    self.free.append((home, partial(self._tick, home)))
                else:
                    sched.append(((0, s.pos, 0), "tick", partial(self._tick, home)))
        for r in pp.replicas:
            stream = self.q.stream(r.stream)
            if r.home == site:
                if r.kind == "SP-S":
                    sender = FullSender()
                elif r.kind == "SM-S1":
                    sender = FifoSender(stream)
                else:
                    sender = (MixedSender if r.kind == "SM-S2" else DjaSender)(stream, r.index)
                self.senders[r.id] = sender
                self.homes[r.stream].senders.append((r, sender))
                if r.index:
                    self.homes[r.stream].store.add_index(r.index)
            if r.loc == site:
                name = f"{site}/{r.kind}/{r.stream}/{r.id}"
                if r.kind == "SP-S":
                    rep = FullReplica(stream, self.store_factory(name), self.tau)
                elif r.kind == "SM-S1":
                    rep = FifoReplica(stream, self.store_factory(name))
                elif r.kind == "SM-S2":
                    rep = MixedReplica(stream, r.index, self.store_factory(name))
                    rep.store.add_index(r.index)
                else:
                    rep = DjaReplica(stream, r.index)
                self.replicas[r.id] = rep
                sched.append(((1, r.id, 0), "sync", partial(self._apply, r)))
        for si, seq in enumerate(pp.plan.sequences):
            if pp.starts[seq.head] == site:
                sched.append(((2, si, 0), "tick", partial(self._start, seq.head, si)))
                if self.q.stream(seq.head).site != site:
                    self._head_replica(seq.head).keep_batches = True
        lanes: dict[tuple, _Lane] = {}
        for st in pp.steps:
            self._add_indexes(st)
            for p, (where, op, fn) in enumerate(self._phases(st)):
                if where == site:
                    lane = lanes.setdefault(_lane_key(st), _Lane())
                    lane.phases.append(((st.seq_index, st.j, p), op, partial(fn, st)))
        for lane in lanes.values():
            lane.phases.sort(key=lambda x: x[0])
        self.lanes = list(lanes.values())
        sched.sort(key=lambda x: x[0])
        if not sched and not self.free:
            raise RuntimeError(f"site {site} has no stream and no replica in this plan")

    def _free_homes(self) -> set[str]:
        """Home streams of this site that no phase here reads: only SP-S replicas elsewhere
        (a full copy of every batch) and no step probing the home window.  Their ticks depend on
        nothing but the source, so they run as soon as the watermark passes, epochs ahead of the
        tick group: the update messages of epoch e+1 leave before the replies of epoch e arrive,
        and a round trip per epoch no longer caps the rate (pipelining)."""
        pp, site = self.pp, self.site
        busy = {r.stream for r in pp.replicas if r.kind != "SP-S"}
        busy |= {st.stream for st in pp.steps if st.home == site and (st.local or st.algorithm != "SP-S")}
        return {s.name for s in self.q.streams if s.site == site and s.name not in busy}

    def _add_indexes(self, st: StepSpec) -> None:
        if st.home == self.site:
            self.homes[st.stream].store.add_index(st.key.index)
        if st.replica is not None and st.loc == self.site:
            rep = self.replicas[st.replica]
            if hasattr(rep, "store"):
                rep.store.add_index(st.key.index)

    def _phases(self, st: StepSpec) -> list[tuple[str, str, Callable]]:
        """(site, operator, function) for each phase of a step, in order."""
        L, D = st.loc, st.home
        if st.local:
            return [(L, "probe", self._probe_home)]
        return {
            "SP-S": [(L, "probe", self._probe_replica)],
            "SP-D": [(L, "ship", self._ship_rows), (D, "probe", self._probe_shipped)],
            "SM-S1": [(L, "ship", self._ship_keys), (D, "semijoin", self._semijoin),
                      (L, "probe", self._semijoin_finish)],
            "SM-S2": [(L, "probe", self._s2_probe), (D, "semijoin", self._semijoin),
                      (L, "probe", self._semijoin_finish)],
            "SM-D1": [(L, "ship", self._d1_ship), (D, "probe", self._probe_shipped)],
            "SM-D2": [(L, "ship", self._ship_keys), (D, "semijoin", self._d2_match),
                      (L, "ship", self._d2_ship), (D, "probe", self._d2_finish)],
        }[st.algorithm]

    # ------------------------------------------------------------------ helpers
    def _send(self, dst: str, flow: int, epoch: int, body) -> None:
        self.transport.send(Envelope(self.site, dst, flow, epoch, body))

    def _take(self, flow: int, epoch: int):
        body = self.inbox.pop((flow, epoch), None)
        if body is not None:
            self.taken[flow] = epoch
        return body

    def _ready(self, st: StepSpec, e: int) -> bool:
        """Has the previous step of the sequence delivered all of epoch e's input here?"""
        return st.j == 0 or self.step_done.get((st.seq_index, st.j - 1), -1) >= e

    def _rows_in(self, st: StepSpec, e: int) -> list:
        return self.pending.pop((st.seq_index, st.j, e), [])

    def _row(self, parts: tuple) -> tuple:
        row = [None] * self.m
        for t in parts:
            row[t.pos] = t
        return tuple(row)

    def _by_key(self, st: StepSpec, rows: list) -> dict[tuple, list]:
        out: dict[tuple, list] = {}
        pk = st.key.probe_key
        for row in rows:
            k = pk(row)
            if k is not None:
                out.setdefault(k, []).append(row)
        return out

    def _join(self, st: StepSpec, rows: list, lookup: Callable[[list], dict], progress) -> list[Group]:
        """The T-limit join of ``rows`` with the probed stream's tuples found by ``lookup``."""
        bykey = self._by_key(st, rows)
        if not bykey:
            return []
        stream, hp, tau = self.q.streams[st.pos], st.head_pos, self.tau
        groups = []
        found = lookup(list(bykey))
        if not stream.window.is_time:
            for k, kl in found.items():
                for row in bykey[k]:
                    lo, hi = valid_range(kl, stream, row[hp], progress, tau)
                    if lo < hi:
                        groups.append((row, kl.tups[lo:hi]))
            return groups
        # time window, inlined (the hot path): the same two bisections as valid_range
        size = stream.window.size
        upper = bisect_right if stream.pos < st.head_pos else bisect_left
        for k, kl in found.items():
            ts, tups, first = kl.ts, kl.tups, kl.lo
            for row in bykey[k]:
                h = row[hp].ts
                hi = upper(ts, h, first)
                lo = bisect_left(ts, h - size, first, hi)
                if lo < hi:
                    groups.append((row, tups[lo:hi]))
        return groups

    def _store_join(self, st: StepSpec, rows: list, store: WindowStore, progress) -> list[Group]:
        index = st.key.index
        return self._join(st, rows, lambda keys: store.lookup_many(index, keys), progress)

    def _output(self, st: StepSpec, e: int, groups: list[Group], final: bool = True) -> None:
        """Hand results on; ``final``: the step has produced all its output for epoch e."""
        if final:
            self.step_done[(st.seq_index, st.j)] = e
        if not groups:
            return
        if st.last:
            self.sink.emit(st.head_pos, st.pos, groups, self.now)
            self.sensor.on_emit(self.site, sum(len(t) for _, t in groups))
            return
        nxt, pos = self.pending[(st.seq_index, st.j + 1, e)], st.pos
        for row, tups in groups:
            a, b = row[:pos], row[pos + 1:]
            nxt.extend(a + (t,) + b for t in tups)

    # ------------------------------------------------------------------ ticks, updates, starts
    def _tick(self, home: _Home, e: int) -> bool:
        s, end = home.stream, (e + 1) * self.tau
        if self.watermark.get(s.name, -1) < end:
            return False
        src, batch = self.source.get(s.name, deque()), []
        while src and src[0].ts < end:
            t = src.popleft()
            if t.ts < e * self.tau:
                self.sensor.on_late(self.site, "input")  # arrived after its epoch closed
                continue
            batch.append(t)
        home.store.insert(batch)
        if home.progress is not None:
            home.progress.add_epoch(e, [t.ts for t in batch])
        dying = home.store.purge_below(**purge_bound(s, e, self.tau, home.progress))
        if home.progress is not None:
            home.progress.prune(e)
        for spec, sender in home.senders:
            self._send(spec.loc, spec.flow, e, sender.tick(e, batch, dying))
        if home.keep_batches:
            self.batches[(s.name, e)] = batch
        if batch:
            self.sensor.on_input(self.site, s.name, len(batch))
        return True

    def _apply(self, spec, e: int) -> bool:
        body = self._take(spec.flow, e)
        if body is None:
            return False
        self.replicas[spec.id].apply(e, body)
        return True

    def _start(self, head: str, si: int, e: int) -> bool:
        if self.q.stream(head).site == self.site:
            batch = self.batches.pop((head, e), None)
            if batch is None:  # a free home that has not ticked epoch e yet
                return False
        else:
            batch = self._head_replica(head).batches.pop(e)
        if batch:
            self.pending[(si, 0, e)] = [self._row((t,)) for t in batch]
        return True

    def _head_replica(self, head: str):
        """The SP-S replica whose batches start the sequence of a remote ``head`` here."""
        return next(self.replicas[r.id] for r in self.pp.replicas
                    if r.kind == "SP-S" and r.stream == head and r.loc == self.site)

    # ------------------------------------------------------------------ simple joins, local probes
    def _probe_home(self, st: StepSpec, e: int) -> bool:
        if not self._ready(st, e):
            return False
        home = self.homes[st.stream]
        self._output(st, e, self._store_join(st, self._rows_in(st, e), home.store, home.progress))
        return True

    def _probe_replica(self, st: StepSpec, e: int) -> bool:
        if not self._ready(st, e):
            return False
        rep = self.replicas[st.replica]
        self._output(st, e, self._store_join(st, self._rows_in(st, e), rep.store, rep.progress))
        return True

    def _ship_rows(self, st: StepSpec, e: int) -> bool:
        if not self._ready(st, e):
            return False
        rows = self._rows_in(st, e)
        self._send(st.home, st.flow("data"), e, TupleBatch([_parts(r) for r in rows]))
        return True

    def _probe_shipped(self, st: StepSpec, e: int) -> bool:
        body = self._take(st.flow("data"), e)
        if body is None:
            return False
        rows = [self._row(p) for p in body.rows]
        home = self.homes[st.stream]
        self._output(st, e, self._store_join(st, rows, home.store, home.progress))
        return True

    # ------------------------------------------------------------------ SM-S1 (and SM-D2's first leg)
    def _ship_keys(self, st: StepSpec, e: int) -> bool:
        if not self._ready(st, e):
            return False
        rows = self._rows_in(st, e)
        bykey = self._by_key(st, rows)
        self.temp[(st.seq_index, st.j, e)] = rows
        flow = st.flow("req") if st.algorithm == "SM-S1" else st.flow("keys")
        self._send(st.home, flow, e, KeyBatch(list(bykey)))
        return True

    def _semijoin(self, st: StepSpec, e: int) -> bool:
        """At the home node (SM-S1, SM-S2): answer the request with ΔW'_2 (non-redundant)."""
        body = self._take(st.flow("req"), e)
        if body is None:
            return False
        store = self.homes[st.stream].store
        self._send(st.loc, st.flow("resp"), e, self.senders[st.replica].semijoin(store, st.key.index, body.keys))
        return True

    def _semijoin_finish(self, st: StepSpec, e: int) -> bool:
        """Back at the source (SM-S1, SM-S2): store ΔW'_2 in the replica, probe with the waiting rows."""
        body = self._take(st.flow("resp"), e)
        if body is None:
            return False
        rep = self.replicas[st.replica]
        rep.receive(body)
        rows = self.temp.pop((st.seq_index, st.j, e))
        self._output(st, e, self._store_join(st, rows, rep.store, rep.progress))
        return True

    # ------------------------------------------------------------------ SM-S2
    def _s2_probe(self, st: StepSpec, e: int) -> bool:
        if not self._ready(st, e):
            return False
        rep = self.replicas[st.replica]
        rows = self._rows_in(st, e)
        bykey = self._by_key(st, rows)
        partial_keys = rep.partial_keys(bykey)
        now_rows, later = [], []
        for k, rs in bykey.items():
            (later if k in partial_keys else now_rows).extend(rs)
        self._output(st, e, self._store_join(st, now_rows, rep.store, rep.progress), final=False)
        self.temp[(st.seq_index, st.j, e)] = later
        self._send(st.home, st.flow("req"), e, KeyBatch([k for k in bykey if k in partial_keys]))
        return True

    # ------------------------------------------------------------------ SM-D1
    def _d1_ship(self, st: StepSpec, e: int) -> bool:
        if not self._ready(st, e):
            return False
        rep = self.replicas[st.replica]
        rows = [r for k, rs in self._by_key(st, self._rows_in(st, e)).items() if k in rep for r in rs]
        self._send(st.home, st.flow("data"), e, TupleBatch([_parts(r) for r in rows]))
        return True

    # ------------------------------------------------------------------ SM-D2
    def _d2_match(self, st: StepSpec, e: int) -> bool:
        body = self._take(st.flow("keys"), e)
        if body is None:
            return False
        found = self.homes[st.stream].store.lookup_many(st.key.index, body.keys)
        self.temp[("home", st.seq_index, st.j, e)] = found
        self._send(st.loc, st.flow("match"), e, KeyBatch(list(found)))
        return True

    def _d2_ship(self, st: StepSpec, e: int) -> bool:
        body = self._take(st.flow("match"), e)
        if body is None:
            return False
        keys = set(body.keys)
        rows = self.temp.pop((st.seq_index, st.j, e))
        pk = st.key.probe_key
        self._send(st.home, st.flow("data"), e, TupleBatch([_parts(r) for r in rows if pk(r) in keys]))
        return True

    def _d2_finish(self, st: StepSpec, e: int) -> bool:
        body = self._take(st.flow("data"), e)
        if body is None:
            return False
        found = self.temp.pop(("home", st.seq_index, st.j, e))
        rows = [self._row(p) for p in body.rows]
        home = self.homes[st.stream]
        self._output(st, e, self._join(st, rows, lambda keys: {k: found[k] for k in keys if k in found},
                                       home.progress))
        return True


class _Lane:
    """Phases that share mutable state (an SM-S1 / SM-S2 replica and its sender), or one step."""

    __slots__ = ("phases", "epoch", "cursor")

    def __init__(self) -> None:
        self.phases: list = []
        self.epoch = 0
        self.cursor = 0


def _lane_key(st: StepSpec) -> tuple:
    if st.replica is not None and st.algorithm in ("SM-S1", "SM-S2"):
        return ("replica", st.replica)
    return ("step", st.seq_index, st.j)


def _parts(row: tuple) -> tuple:
    return tuple(t for t in row if t is not None)
