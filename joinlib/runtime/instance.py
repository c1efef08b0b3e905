"""One plan instance at one site: the operators of (query, partition, generation) placed here.

An instance runs the head epochs ``[start, stop]`` of its query with its plan; the generation
before it ran the epochs before ``start``, the one after it runs those after ``stop``.  So a
switch of plan at epoch E is exact by construction: every head tuple is served by exactly one
generation, and each generation's windows hold what its heads need:

* the base windows of this site are shared by every generation (:class:`HomeWindow`);
* the replicas a generation keeps elsewhere are jump-started at epoch ``start - 1`` with the
  state they would have had (a :class:`~.messages.WindowSnapshot` from the home, built from the
  window as it is at the boundary), then kept in step epoch by epoch as usual.

The instance is the :class:`~.algorithms.StepContext` its phases run in: rows waiting between
steps, values held between the phases of one step, the steps' progress, sending and taking
messages on its flows.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_not, itemgetter
from typing import Any, Callable, Iterable, Optional, Protocol

from joinlib.algorithms import REGISTRY
from joinlib.errors import CheckpointError
from joinlib.kernels import kernel
from joinlib.model import Tup
from joinlib.plan.ir import PlanIR, ReducerOp, ReplicaOp, StepOp
from joinlib.protocol.messages import Body, Envelope, InstanceKey, Row
from joinlib.runtime.ahead import AHEAD, CheckedSends, LookAhead, ahead_phases, ahead_targets
from joinlib.runtime.algorithms import (
    AnyReplica,
    AnySender,
    Reducer,
    has_sender,
    make_reducer,
    make_replica,
    make_sender,
    reducer_phases,
    step_phases,
)
from joinlib.runtime.algorithms.base import Decode, Encode, Placed, stale_key_bytes, window_bytes
from joinlib.runtime.algorithms.simple import FullReplica
from joinlib.runtime.lanes import Gate, Lane, Phase, next_gate
from joinlib.runtime.sensor import Sensor
from joinlib.runtime.sink import Group, Sink
from joinlib.runtime.window import HomeWindow
from joinlib.state.base import KeyList, WindowStore

InboxKey = tuple[str, int, int, int, int]  # (query, part, gen, flow, epoch)
_second = itemgetter(1)


#: The row expansion in C (``_rowsc.c``, built by setup.py: it says why), or None: the Python form below.
_c: Any = kernel("joinlib.runtime._rowsc")


def expand_rows(out: list[Row], groups: list[Group], pos: int) -> None:
    """``out`` += one row per result of ``groups`` (a step's factorised output): the group's row with the tuple at
    ``pos``, what the next step probes with."""
    if _c is not None and type(out) is list and type(groups) is list:
        try:
            _c.expand(out, groups, pos)
            return
        except TypeError:   # not the shapes the kernel reads (it appends nothing then)
            pass
    for row, tups in groups:
        a, b = row[:pos], row[pos + 1:]
        out.extend(a + (t,) + b for t in tups)


@dataclass(frozen=True)
class InstanceSpec:
    """A generation of a query's plan: ``ir`` serves the head epochs ``[start, stop]`` (``stop``
    None: until the end) of partition ``part``."""

    ir: PlanIR
    gen: int = 0
    start: int = 0
    stop: Optional[int] = None
    part: int = 0

    def __post_init__(self) -> None:
        if self.start < 0 or (self.stop is not None and self.stop < self.start - 1):
            raise ValueError(f"bad epoch range [{self.start}, {self.stop}] for generation {self.gen}")

    @property
    def key(self) -> InstanceKey:
        return (self.ir.query.name, self.part, self.gen)


class HostPort(Protocol):
    """What an instance uses of the host it runs in."""

    site: str
    sensor: Sensor
    sink: Sink
    now: float

    def send(self, env: Envelope) -> None: ...
    def on_message(self, env: Envelope, now: Optional[float] = None, sent: Optional[float] = None) -> bool: ...
    def take(self, key: InboxKey) -> Optional[Body]: ...
    def window(self, spec: InstanceSpec, stream: str) -> HomeWindow: ...
    def make_store(self, name: str) -> WindowStore: ...


class Instance:
    """The lanes of one :class:`InstanceSpec` at ``host.site`` (see the module docstring)."""

    def __init__(self, host: HostPort, spec: InstanceSpec) -> None:
        ir = spec.ir
        self.host, self.spec, self.ir, self.q = host, spec, ir, ir.query
        self.key = spec.key
        self.site = host.site
        self.tau = self.q.execution.interval_ms
        self.m = len(self.q.streams)
        self.start, self.stop = spec.start, spec.stop
        self.lo = spec.start - 1 if spec.start > 0 else 0   # replicas are jump-started one epoch early
        self.senders: dict[str, AnySender] = {}
        # stream -> its reducer (a reduction plan); <stream>><neighbour> -> a look-ahead (joinlib.runtime.ahead)
        self.reducers: dict[str, Reducer | LookAhead] = {}
        self.replicas: dict[str, AnyReplica] = {}
        self.stores: dict[str, WindowStore] = {}           # replica sig -> its store
        self.homes: dict[str, HomeWindow] = {}
        self.pending: defaultdict[tuple[int, int, int], list[Row]] = defaultdict(list)
        self.held: dict[tuple[Any, ...], Any] = {}
        self.step_done: dict[tuple[int, int], int] = {}
        self.started: dict[int, int] = {}
        self.lanes: list[Lane] = []
        self._flow_ids = ir.flow_ids
        self._inbox_keys: dict[str, tuple[str, int, int, int]] = {}   # flow -> its inbox keys' first four
        self._build()

    # ------------------------------------------------------------------ StepContext
    def send(self, dst: str, flow: str, epoch: int, body: Body) -> None:
        q, part, gen = self.key
        env = Envelope(self.site, dst, self._flow_ids[flow], epoch, body, part, gen, q)
        if dst == self.site:  # a reduction's key set between two streams born at one site
            self.host.on_message(env)
        else:
            self.host.send(env)

    def _inbox_prefix(self, flow: str) -> tuple[str, int, int, int]:
        """The first four of ``flow``'s inbox keys (the epoch is the fifth), made once per flow."""
        pre = self._inbox_keys.get(flow)
        if pre is None:
            pre = self._inbox_keys[flow] = self.key + (self._flow_ids[flow],)
        return pre

    def take(self, flow: str, epoch: int) -> Optional[Body]:
        key = (self._inbox_keys.get(flow) or self._inbox_prefix(flow)) + (epoch,)   # (the cache read inline: a poll)
        # most polls: the message is not here yet; a host that keeps an inbox (a Host) says so without the call
        inbox = getattr(self.host, "inbox", None)
        if inbox is not None and key not in inbox:
            return None
        return self.host.take(key)

    def waits(self, flow: str) -> Optional[tuple[Any, tuple[Any, ...], int]]:
        """What a phase that takes ``flow``'s message of its epoch, first thing from this instance's start on,
        waits for (:attr:`joinlib.runtime.lanes.Phase.wait`): the scheduler skips its call until the message is in
        the host's inbox.  None when the host keeps no inbox."""
        if not hasattr(self.host, "inbox"):
            return None
        return (self.host, self._inbox_prefix(flow), self.start)

    def ready(self, st: StepOp, e: int) -> bool:
        """Has the previous step (or the start) delivered all of epoch e's input here?"""
        if st.j == 0:
            return self.started.get(st.seq_index, -1) >= e
        return self.step_done.get((st.seq_index, st.j - 1), -1) >= e

    def ready_gate(self, st: StepOp) -> Gate:
        """:meth:`ready` as a gate (:attr:`joinlib.runtime.lanes.Phase.gates`), from the instance's start on: the
        scheduler reads the dictionary itself (so :meth:`restore` refills these dictionaries, never replaces them)."""
        if st.j == 0:
            return (self.started, st.seq_index, 1, 0, self.start)
        return (self.step_done, (st.seq_index, st.j - 1), 1, 0, self.start)

    def rows_in(self, st: StepOp, e: int) -> list[Row]:
        return self.pending.pop((st.seq_index, st.j, e), [])

    def output(self, st: StepOp, e: int, groups: list[Group], final: bool = True) -> None:
        """Hand results on; ``final``: the step has produced all its output for epoch e."""
        if final:
            self.step_done[(st.seq_index, st.j)] = e
        if not groups:
            return
        if st.last:
            host = self.host
            host.sink.emit(self.key, st.head_pos, st.pos, groups, host.now)
            host.sensor.on_emit(self.site, sum(map(len, map(_second, groups))))
            return
        nxt, pos = self.pending[(st.seq_index, st.j + 1, e)], st.pos
        expand_rows(nxt, groups, pos)

    def results_through(self) -> dict[int, int]:
        """Per sequence, the last head epoch whose results its last step has all handed on here
        (-1: none, or the step runs elsewhere): a derived stream's producer (:mod:`joinlib.sim.tree_engine`)."""
        done = self.step_done
        return {st.seq_index: done.get((st.seq_index, st.j), -1) for st in self.ir.steps if st.last}

    def home(self, stream: str) -> HomeWindow:
        return self.homes[stream]

    def sender(self, sig: str) -> Any:
        return self.senders[sig]

    def replica(self, sig: str) -> Any:
        return self.replicas[sig]

    def hold(self, key: tuple[Any, ...], value: Any) -> None:
        self.held[key] = value

    def holds(self, key: tuple[Any, ...]) -> bool:
        return key in self.held

    def release(self, key: tuple[Any, ...]) -> Any:
        return self.held.pop(key)

    # ------------------------------------------------------------------ construction
    def _build(self) -> None:
        site, ir = self.site, self.ir
        for s in self.q.streams:
            if s.site == site:
                self.homes[s.name] = self.host.window(self.spec, s.name)
        placed = self._state_phases()
        for si, (head, at) in enumerate(ir.starts):
            if at == site:
                placed.append(self._start(si, head))
        for st in ir.steps:
            placed.extend(p for p in step_phases(self, st) if p.site == site)
            self._add_indexes(st)
        self._make_lanes(placed)

    def _state_phases(self) -> list[Placed]:
        """The phases of the stateful protocols here: replicas' senders and holders, reducers."""
        site, placed = self.site, []
        for op in self.ir.replicas:
            if op.home == site and has_sender(op):  # a reduction's reducer serves its RF replica
                placed.append(self._sender(op))
            if op.loc == site:
                placed.append(self._replica(op))
        for red in self.ir.reducers:
            if red.home == site:
                placed.extend(self._reducer(red))
        return placed

    def _make_lanes(self, placed: list[Placed]) -> None:
        groups: dict[tuple[Any, ...], list[Placed]] = {}
        for p in placed:
            groups.setdefault(p.lane, []).append(p)
        hi = self.stop
        for key, ps in groups.items():
            early = key[0] in ("serve", "hold", "reduce", AHEAD)  # replica, reduction protocols: jump start first
            lane = Lane(":".join(map(str, key)), [p.phase for p in ps], self.lo if early else self.start, hi)
            self.lanes.append(lane)
            for use in {p.uses for p in ps if p.uses is not None}:
                kind, name = use
                if kind == "home":
                    self.homes[name].use(lane)
                else:
                    rep = self.replicas[name]
                    if isinstance(rep, FullReplica):
                        rep.users.append(lane)

    def _sender(self, op: ReplicaOp) -> Placed:
        sender = self.senders[op.sig] = make_sender(op, self.q.stream(op.stream))
        flow = self.ir.update_flow(op).sig
        home = self.homes[op.stream]
        start = self.start

        def tick(e: int) -> bool:
            if home.next <= e:   # not inserted yet (home.inserted, inlined: a poll)
                return False
            if e < start:
                msg: Body = sender.jump(home, start)
            else:
                msg = sender.tick(e, home.batches[e], home.lower(e))
            self.send(op.loc, flow, e, msg)
            return True
        return Placed(self.site, ("serve", op.sig), Phase((0,), "tick", tick, gates=(next_gate(home),)),
                      ("home", op.stream))

    def _reducer(self, op: ReducerOp) -> list[Placed]:
        r = self.reducers[op.stream] = make_reducer(
            op, self.q.stream(op.stream), self.tau, self.q.execution.bloom_fpr or None,
            {e.stream: window_bytes(self.q.stream(e.stream)) for e in op.edges},
            {e.stream: stale_key_bytes(self.q, self.ir.reducer(e.stream), op.stream, self.tau) for e in op.sends})
        ship = self.ir.update_flow(self.ir.replica(op.replica)).sig if op.replica else None
        lane = ("serve", op.replica) if op.replica else ("reduce", op.stream)
        home = self.homes[op.stream]
        targets = ahead_targets(op)
        if not targets:
            return reducer_phases(self, r, home, ship, lane)
        # sets that no round can change leave as soon as their epoch is in (joinlib.runtime.ahead)
        checked = CheckedSends(self, {f for f in (op.edge(n).out_flow for n in targets) if f is not None})
        placed = [p for n in targets
                  for p in ahead_phases(self, checked, op, n, r.fp_cost.get(n), r.stale.get(n), home,
                                         self.reducers)]
        return placed + reducer_phases(self, r, home, ship, lane, ahead=checked)

    def _replica(self, op: ReplicaOp) -> Placed:
        name = f"{self.site}/{self.key[1]}/g{self.key[2]}/{op.kind}/{op.stream}" + (
            "/" + ",".join(map(str, op.index)) if op.index else "")

        def store() -> WindowStore:
            s = self.stores[op.sig] = self.host.make_store(name)
            return s
        rep = self.replicas[op.sig] = make_replica(op, self.q.stream(op.stream), store, self.tau)
        if isinstance(rep, FullReplica):
            rep.keep_batches = any(h == op.stream and at == self.site for h, at in self.ir.starts)
        flow = self.ir.update_flow(op).sig

        def apply(e: int) -> bool:
            body = self.take(flow, e)
            if body is None:
                return False
            rep.apply(e, body)
            return True
        return Placed(self.site, ("hold", op.sig), Phase((0,), "sync", apply, self.waits(flow)))

    def _start(self, si: int, head: str) -> Placed:
        m = self.m
        if head in self.homes:
            home = self.homes[head]

            def batch_of(e: int) -> Optional[list[Tup]]:
                return home.batches[e] if home.next > e else None
            uses: Optional[tuple[str, str]] = ("home", head)
            gates: tuple[Gate, ...] = (next_gate(home),)
        else:
            rep = next(r for sig, r in self.replicas.items()
                       if isinstance(r, FullReplica) and self.ir.replica(sig).stream == head)

            def batch_of(e: int) -> Optional[list[Tup]]:
                return rep.batches.pop(e) if e in rep.batches else None
            uses, gates = None, (next_gate(rep),)   # (a replica keeps epoch e's batch once applied through e)

        pos = self.q.stream(head).pos
        # a row per tuple, the tuple at pos and None elsewhere: zip of the batch with endless Nones, all in C
        nones: list[Iterable[Any]] = [repeat(None)] * m

        def start(e: int) -> bool:
            batch = batch_of(e)
            if batch is None:
                return False
            if batch:
                cols = nones.copy()
                cols[pos] = batch
                self.pending[(si, 0, e)] = list(zip(*cols, strict=False))   # the Nones never end
            self.started[si] = e
            return True
        return Placed(self.site, ("start", head), Phase((0,), "tick", start, gates=gates), uses)

    def _add_indexes(self, st: StepOp) -> None:
        """The hash indexes a step probes: its home window's when it has work there (probed in place, or the home
        answers its requests), the replica's at its probe site.  An index nobody probes costs every insert and
        purge: a step that only probes a copy (SP-S across sites, a reduction's) leaves the home's alone."""
        if st.home == self.site and (st.local or REGISTRY[st.algorithm].at_home):
            self.homes[st.stream].store.add_index(st.key.index)
        if st.replica is not None and st.loc == self.site and st.replica in self.stores:
            self.stores[st.replica].add_index(st.key.index)

    # ------------------------------------------------------------------ lifecycle
    def close_at(self, last: Optional[int]) -> None:
        """The query ends with epoch ``last`` (None: open-ended): no lane runs beyond it."""
        hi = self.stop if last is None else (last if self.stop is None else min(self.stop, last))
        for lane in self.lanes:
            lane.hi = hi

    def set_stop(self, stop: int, last: Optional[int]) -> None:
        """End this generation with head epoch ``stop``: a switch decided while running (seed 003's
        migration agrees on the epoch), not given at install.  The caller makes sure no lane has
        passed ``stop`` yet; ``last``: the query's last epoch, if known."""
        if any(lane.epoch > stop + 1 or (lane.epoch == stop + 1 and lane.cursor) for lane in self.lanes):
            raise ValueError(f"instance {self.key} has run past epoch {stop}: it cannot stop there")
        self.stop = stop
        self.close_at(last)

    @property
    def finished(self) -> bool:
        return all(lane.done for lane in self.lanes)

    def release_windows(self) -> None:
        """A finished instance stops holding the home windows back."""
        for home in self.homes.values():
            home.drop(self.lanes)

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self, encode: Encode, with_stores: bool) -> dict[str, Any]:
        """Plain data (``encode``: Tup -> bytes); the rows between steps as :meth:`_pending_columns` writes them."""
        pending, named = self._pending_columns(encode, with_stores)

        def row(r: Row) -> list[Optional[bytes]]:
            return [None if t is None else encode(t) for t in r]
        held = []
        for (kind, sig, e), v in self.held.items():
            if kind == "found":
                v = [(k, [encode(t) for t in kl.live()]) for k, kl in v.items()]
            else:
                v = [row(r) for r in v]
            held.append((kind, sig, e, v))
        out: dict[str, Any] = {
            "v": 3, "key": list(self.key), "digest": self.ir.digest(), "start": self.start, "stop": self.stop,
            "lanes": {lane.name: (lane.epoch, lane.cursor) for lane in self.lanes},
            "senders": {sig: s.snapshot(encode) for sig, s in self.senders.items()},
            "reducers": {name: r.snapshot(encode) for name, r in self.reducers.items()},
            "replicas": {sig: r.snapshot(encode) for sig, r in self.replicas.items()},
            "pending_cols": pending,
            "pending_refs": named,
            "held": held,
            "step_done": [(si, j, e) for (si, j), e in self.step_done.items()],
            "started": list(self.started.items()),
        }
        if with_stores:
            out["stores"] = {sig: [encode(t) for t in s.tuples()] for sig, s in self.stores.items()}
        return out

    def restore(self, data: dict[str, Any], decode: Decode) -> None:
        self._check(data)
        lanes = {lane.name: lane for lane in self.lanes}
        for name, (epoch, cursor) in data["lanes"].items():
            lanes[name].epoch, lanes[name].cursor = epoch, cursor
        for sig, st in data["senders"].items():
            self.senders[sig].restore(st, decode)
        for name, st in data["reducers"].items():
            self.reducers[name].restore(st, decode)
        for sig, st in data["replicas"].items():
            self.replicas[sig].restore(st, decode)
        for sig, tups in data.get("stores", {}).items():
            self.stores[sig].load([decode(b) for b in tups])
        m = self.m

        def row(r: list[Optional[bytes]]) -> Row:
            return tuple(None if b is None else decode(b) for b in r) if len(r) == m else tuple(r)
        self._restore_pending(data, decode, row)
        self.held = {(kind, sig, e): ({tuple(k): _keylist([decode(b) for b in bs]) for k, bs in v}
                                      if kind == "found" else [row(r) for r in v])
                     for kind, sig, e, v in data["held"]}
        self.step_done.clear()   # in place: the gates of the steps' phases read these dictionaries (ready_gate)
        self.step_done.update({(si, j): e for si, j, e in data["step_done"]})
        self.started.clear()
        self.started.update({int(si): e for si, e in data["started"]})

    def _pending_columns(self, encode: Encode, with_stores: bool) -> tuple[list[Any], list[Any]]:
        """The rows between steps, by column: per list, its length and per position the tuples, or None where every
        row has None.  In a backlog's drain the central node holds thousands of rows for epochs ahead of its slowest
        input at each checkpoint.  A column whose tuples are all in one window store here (the position's home
        window, or a replica of its stream) that the snapshot holds or that is durable (:meth:`_ref_stores`) -- the
        same tuples, by stream and id -- is named by the store and the tuples' seqs (version 3: such lists are the
        second list, ``pending_refs``; the first, ``pending_cols``, is version 2's): a restore finds the store as
        of this snapshot (loaded from it, or a durable store rolled back to it) before it reads the rows, so the
        tuples are not written again -- those of a JSON source were never encoded, and every checkpoint wrote each
        pending row's tuples again.  Any other column is the tuples' encodings (their cached wire bytes when they
        have them: one C loop)."""
        from joinlib.protocol.avro import encode_tuple
        wire = _WIRE if encode is encode_tuple else None   # encode_tuple(t) is t.wire once that is set
        stores = self._ref_stores(with_stores)

        def column(col: list[Optional[Tup]], pos: int) -> Any:
            tups = sum(map(is_not, col, repeat(None)))   # not col.count(None): that calls Tup.__eq__ per tuple
            if tups == 0:
                return None
            if tups == len(col):
                seqs = list(map(_SEQ, col))
                for name, store in stores.get(pos, ()):
                    if store.holds_all(col, seqs):
                        return {"store": name, "seqs": seqs}
                if wire is not None:
                    out = list(map(wire, col))
                    if None not in out:
                        return out
                return list(map(encode, col))   # type: ignore[arg-type]
            return [None if t is None else encode(t) for t in col]
        pending: list[Any] = []
        named: list[Any] = []
        for (si, j, e), rows in self.pending.items():
            if rows:
                cols = [column(list(map(itemgetter(p), rows)), p) for p in range(len(rows[0]))]
                (named if any(isinstance(c, dict) for c in cols) else pending).append((si, j, e, len(rows), cols))
        return pending, named

    def _ref_stores(self, with_stores: bool) -> dict[int, list[tuple[str, Any]]]:
        """Per stream position, the window stores here whose tuples a snapshot may name by seq (``h:<stream>``: the
        home window's, ``r:<sig>``: a replica's): those a restore finds as they are now -- in the snapshot
        (``with_stores``) or durable (a store in Redis, rolled back to the checkpoint's copy) -- and that can tell
        whether they hold a tuple (``holds_all``)."""
        out: dict[int, list[tuple[str, Any]]] = {}
        named = [(f"h:{name}", name, home.store) for name, home in self.homes.items()]
        named += [(f"r:{sig}", self.ir.replica(sig).stream, store) for sig, store in self.stores.items()]
        for name, stream, store in named:
            if hasattr(store, "holds_all") and (with_stores or getattr(store, "durable", False)):
                out.setdefault(self.q.stream(stream).pos, []).append((name, store))
        return out

    def _restore_pending(self, data: dict[str, Any], decode: Decode, row: Callable[[Any], Row]) -> None:
        """:meth:`restore`'s rows between steps: by column (version 2; version 3 names some by store and seq), or
        a list per row (version 1)."""
        by_seq: dict[str, dict[int, Tup]] = {}

        def stored(name: str) -> dict[int, Tup]:
            """The tuples of the store ``name`` (:meth:`_ref_stores`) by seq, made once per restore."""
            d = by_seq.get(name)
            if d is None:
                kind, _, what = name.partition(":")
                store = self.homes[what].store if kind == "h" else self.stores[what]
                d = by_seq[name] = {t.seq: t for t in store.tuples()}
            return d

        def column(n: int, c: Any) -> Iterable[Optional[Tup]]:
            if c is None:
                return repeat(None, n)
            if isinstance(c, dict):   # version 3: named by seq in a store here (KeyError: not there)
                return list(map(stored(c["store"]).__getitem__, c["seqs"]))
            return [None if b is None else decode(b) for b in c]
        self.pending.clear()
        for si, j, e, rows in data.get("pending", ()):   # version 1: a list per row
            self.pending[(si, j, e)] = [row(r) for r in rows]
        for si, j, e, n, cols in [*data.get("pending_cols", ()), *data.get("pending_refs", ())]:
            self.pending[(si, j, e)] = list(zip(*[column(n, c) for c in cols], strict=True))

    def _check(self, data: dict[str, Any]) -> None:
        """Refuse the snapshot of another plan generation, epoch range or operator set."""
        if data.get("v") not in (1, 2, 3) or data["digest"] != self.ir.digest() or \
                (data["start"], data["stop"]) != (self.start, self.stop):
            raise CheckpointError(f"checkpoint of instance {tuple(data.get('key', ()))} does not match this "
                                  f"plan generation (digest {data.get('digest')} vs {self.ir.digest()})")
        if {lane.name for lane in self.lanes} != set(data["lanes"]) or set(data["senders"]) != set(self.senders) \
                or set(data["replicas"]) != set(self.replicas):
            raise CheckpointError("checkpoint does not match the instance's lanes, senders and replicas")


_WIRE, _SEQ = attrgetter("wire"), attrgetter("seq")


def _keylist(tups: list[Tup]) -> KeyList:
    kl = KeyList()
    for t in tups:
        kl.append(t)
    return kl


Factory = Callable[[str], WindowStore]
