"""The node runtime of one site: a host of versioned plan instances, driven by inputs,
messages and time.

A host keeps

* the windows of the streams born at its site (:class:`~.window.HomeWindow`), one per (query,
  partition, stream), shared by every instance of that query and partition;
* the plan instances placed here (:class:`~.instance.Instance`), keyed by (query, partition,
  generation); each serves the head epochs of its range, so a later generation takes over from an
  earlier one at an epoch boundary (:meth:`install`, :meth:`Instance.close_at`);
* the inbox of messages by (query, partition, generation, flow, epoch), and per flow the last
  epoch a phase took, so a message sent twice (a restarted sender replaying) is dropped.

:meth:`run` runs every lane as far as it can.  After a run every lane waits for something, and what a lane
waits for changes only by the host's methods (:meth:`feed`, :meth:`advance`, :meth:`install`, ...) or by the
lanes of its own query partition (the instances of every generation of it and its windows' readers); so a run
after nothing but messages runs only the lanes of the (query, partition) they reached (*woken*): one message
of a partitioned plan no longer polls every partition's lanes.  Lanes wait for their inputs rather than trusting a
latency bound, so results are exact under any delay, and every message's content is a function
of the plan and the data: the simulator and Kafka carry byte-identical messages, and a node
restored from a checkpoint resends exactly what it sent before.  δ only counts *late* messages.

The host never touches I/O: it sends through ``transport.send(envelope)``, keeps tuples in stores
made by ``store_factory(name)`` and hands results to ``sink.emit``.
"""
from __future__ import annotations

from typing import Any, Callable, Container, Iterable, Optional, Protocol

from joinlib.errors import CheckpointError
from joinlib.model import Tup
from joinlib.protocol import avro, wire
from joinlib.protocol.messages import Body, Envelope, InstanceKey
from joinlib.runtime.algorithms.simple import FullReplica
from joinlib.runtime.instance import InboxKey, Instance, InstanceSpec
from joinlib.runtime.lanes import Lane, run_lanes
from joinlib.runtime.sensor import Sensor
from joinlib.runtime.sink import Sink
from joinlib.runtime.window import HomeWindow
from joinlib.state.base import WindowStore
from joinlib.state.memory import MemoryWindowStore


class Transport(Protocol):
    """Where a host's messages go (the simulated network, Kafka, a test's queues)."""

    def send(self, env: Envelope) -> None: ...


class Host:
    def __init__(self, site: str, transport: Transport, sink: Sink, *,
                 store_factory: Optional[Callable[[str], WindowStore]] = None,
                 sensor: Optional[Sensor] = None) -> None:
        self.site = site
        self.transport, self.sink = transport, sink
        self.sensor = sensor or Sensor()
        self.store_factory = store_factory or (lambda name: MemoryWindowStore())
        self.now = 0.0
        self.instances: dict[InstanceKey, Instance] = {}
        self.windows: dict[tuple[str, int, str], HomeWindow] = {}
        self.inbox: dict[InboxKey, Body] = {}
        self.taken: dict[tuple[str, int, int, int], int] = {}
        self.last: dict[str, Optional[int]] = {}
        # a partitioned query's routing of source tuples: query -> (partitions, stream -> tuple -> partition,
        # None for a stream broadcast to every partition)
        self.routes: dict[str, tuple[int, dict[str, Optional[Callable[[Tup], int]]]]] = {}
        self._lanes: list[Lane] = []
        self._full: list[FullReplica] = []
        # per (query, partition): its instances' lanes; what messages reached since the last run (None: run all)
        self._groups: dict[tuple[str, int], list[Lane]] = {}
        self._woken: Optional[set[tuple[str, int]]] = None

    # ------------------------------------------------------------------ instances
    def install(self, spec: InstanceSpec) -> Instance:
        """Place generation ``spec`` of a query here (before the epochs it serves are reached)."""
        if spec.key in self.instances:
            raise ValueError(f"instance {spec.key} is already installed at {self.site}")
        inst = Instance(self, spec)
        self.instances[spec.key] = inst
        inst.close_at(self.last.get(spec.key[0]))
        self._relink()
        return inst

    def stop_instance(self, key: InstanceKey, stop: int) -> None:
        """End generation ``key`` with head epoch ``stop`` (a switch decided while running)."""
        self.instances[key].set_stop(stop, self.last.get(key[0]))
        self._woken = None

    def retire(self, key: InstanceKey) -> None:
        """Remove a finished instance (its lanes are done): its windows' purges are no longer held."""
        inst = self.instances.pop(key)
        inst.release_windows()
        self._relink()

    def window(self, spec: InstanceSpec, stream: str) -> HomeWindow:
        q, part, _ = spec.key
        w = self.windows.get((q, part, stream))
        if w is None:
            s = spec.ir.query.stream(stream)
            name = f"{self.site}/{part}/home/{stream}"
            w = self.windows[(q, part, stream)] = HomeWindow(
                s, self.store_factory(name), spec.ir.query.execution.interval_ms, self.site, self.sensor)
            w.lane.hi = self.last.get(q)
            self._woken = None
        return w

    def make_store(self, name: str) -> WindowStore:
        return self.store_factory(name)

    def _relink(self) -> None:
        self._lanes = [w.lane for w in self.windows.values()]
        self._full = []
        self._groups = {}
        for (q, part, _), inst in self.instances.items():
            self._lanes.extend(inst.lanes)
            self._groups.setdefault((q, part), []).extend(inst.lanes)
            self._full.extend(r for r in inst.replicas.values() if isinstance(r, FullReplica))
        self._woken = None

    # ------------------------------------------------------------------ inputs
    def set_routes(self, query: str, parts: int, routes: dict[str, Optional[Callable[[Tup], int]]]) -> None:
        """Route the source tuples :meth:`feed` gets for ``query`` to its ``parts`` partitions (a partitioned
        plan, :class:`joinlib.plan.partitioned.Partitioned`): per stream tuple -> partition, or None: to every one."""
        self.routes[query] = (parts, routes)
        self._woken = None

    def feed(self, query: str, stream: str, tups: Iterable[Tup], watermark: Optional[int] = None,
             part: Optional[int] = None) -> None:
        """Source tuples of a stream born here (ts order); ``watermark``: no later tuple has ts below it.
        ``part``: the partition they belong to; None: partition 0, or each tuple's partition if the query's
        tuples are routed (:meth:`set_routes`; the watermark then holds for every partition)."""
        self._woken = None
        routed = self.routes.get(query) if part is None else None
        if routed is None:
            self._home(query, part or 0, stream).feed(tups, watermark)
            return
        parts, routes = routed
        route, tups = routes.get(stream), list(tups)
        split: list[list[Tup]] = [tups] * parts   # a broadcast stream: every tuple to every partition
        if route is not None:
            split = [[] for _ in range(parts)]
            for t in tups:
                split[route(t)].append(t)
        for p in range(parts):
            self._home(query, p, stream).feed(split[p], watermark)

    def _home(self, query: str, part: int, stream: str) -> HomeWindow:
        w = self.windows.get((query, part, stream))
        if w is None:
            raise KeyError(f"no window of {query}.{stream} (partition {part}) at {self.site}: install its plan first")
        return w

    def advance(self, query: str, watermark: int, streams: Optional[Container[str]] = None) -> None:
        """Every stream of ``query`` born here (or of ``streams``) has seen everything before ``watermark``."""
        self._woken = None
        for (q, _, s), w in self.windows.items():
            if q == query and watermark > w.watermark and (streams is None or s in streams):
                w.watermark = watermark

    def set_last(self, query: str, last: Optional[int]) -> None:
        """``query`` ends with epoch ``last`` (a finite replay); every lane of it stops there."""
        self.last[query] = last
        self._woken = None
        for (q, _, _), w in self.windows.items():
            if q == query:
                w.lane.hi = last
        for key, inst in self.instances.items():
            if key[0] == query:
                inst.close_at(last)

    def on_message(self, env: Envelope, now: Optional[float] = None, sent: Optional[float] = None) -> bool:
        """Keep a message until its phase runs; False if it is a copy of one already here or
        used (a restarted sender replays its epochs).  A message whose network delay exceeded δ
        is counted as *late*: the paper's time-based model would have missed it; we wait."""
        if now is not None:
            self.now = now
        flow = (env.query, env.part, env.gen, env.flow)
        key = flow + (env.epoch,)
        if env.epoch <= self.taken.get(flow, -1) or key in self.inbox:
            return False
        inst = self.instances.get((env.query, env.part, env.gen))
        if inst is not None and sent is not None and self.now - sent > inst.q.execution.max_delay_ms:
            self.sensor.on_late(self.site, env.kind)
        self.inbox[key] = env.body
        if self._woken is not None:
            self._woken.add((env.query, env.part))
        return True

    # ------------------------------------------------------------------ used by instances
    def send(self, env: Envelope) -> None:
        self.transport.send(env)

    def take(self, key: InboxKey) -> Optional[Body]:
        body = self.inbox.pop(key, None)
        if body is not None:
            self.taken[key[:4]] = key[4]
        return body

    # ------------------------------------------------------------------ running
    def run(self, now: Optional[float] = None) -> bool:
        """Run every lane as far as it can; True if anything ran."""
        if now is not None:
            self.now = now
        # windows purge at their next insert, behind their slowest reader
        woken = self._woken   # (a phase that changes the lanes sets None: all, next run)
        if woken is None:
            self._woken = set()
            lanes = self._lanes
        elif not woken:   # no message since the last run: nothing new can run (the common case of a tick's runs)
            return False
        else:
            self._woken = set()
            if len(woken) == 1:
                lanes = self._groups.get(next(iter(woken)), [])
            else:
                lanes = [lane for g, group in self._groups.items() if g in woken for lane in group]
            if not lanes:
                return False
        return run_lanes(lanes, self.site, self.sensor)

    # ------------------------------------------------------------------ checkpoints
    def state(self, with_stores: bool = False) -> dict[str, Any]:
        """Everything the host knows, as plain data (:mod:`joinlib.runtime.checkpoint`); the window
        stores' contents only ``with_stores``."""
        enc = avro.encode_tuple
        return {
            "site": self.site, "now": self.now, "last": dict(self.last),
            "windows": [((q, part, s), w.snapshot(enc, with_stores)) for (q, part, s), w in self.windows.items()],
            "instances": [(list(key), inst.snapshot(enc, with_stores)) for key, inst in self.instances.items()],
            "inbox": [(list(key), wire.encode_body(body)) for key, body in self.inbox.items()],
            "taken": [(list(k), e) for k, e in self.taken.items()],
        }

    def load_state(self, st: dict[str, Any]) -> None:
        """Take :meth:`state` of a host of this site with the same instances installed."""
        if st["site"] != self.site:
            raise CheckpointError(f"checkpoint of site {st['site']}, not {self.site}")
        keys = {tuple(k) for k, _ in st["instances"]}
        if keys != set(self.instances):
            raise CheckpointError(f"checkpoint holds instances {sorted(keys)}, the host {sorted(self.instances)}")
        wins = {tuple(k) for k, _ in st["windows"]}
        if wins != set(self.windows):
            raise CheckpointError(f"checkpoint holds windows {sorted(wins)}, the host {sorted(self.windows)}")
        dec = avro.decode_tuple
        self._woken = None
        self.now = st["now"]
        for q, last in st["last"].items():
            self.set_last(q, last)
        for (q, part, s), w in st["windows"]:
            self.windows[(q, part, s)].restore(w, dec)
        for (q, part, gen), inst in st["instances"]:
            self.instances[(q, part, gen)].restore(inst, dec)
        self.inbox = {(q, part, gen, flow, e): wire.decode_body(b) for (q, part, gen, flow, e), b in st["inbox"]}
        self.taken = {(q, part, gen, flow): e for (q, part, gen, flow), e in st["taken"]}

    @property
    def finished(self) -> bool:
        return all(w.lane.done for w in self.windows.values()) and all(
            i.finished for i in self.instances.values())

    def stuck(self) -> str:
        """Where the host waits (for error messages)."""
        waiting = [lane for lane in self._lanes if not lane.done]
        return (f"host {self.site}: " + ", ".join(repr(lane) for lane in waiting[:6])
                + f"; inbox {sorted(self.inbox)[:6]}")
