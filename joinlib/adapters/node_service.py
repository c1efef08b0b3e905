"""The node service (``python -m services.node``): the embedded mode's
:class:`~joinlib.runtime.host.Host`, unchanged, on Kafka.

One process (or thread) per site.  It

1. reads ``control`` from the beginning and takes the latest ``plan`` of its query (any query
   with a stream or an operator at its site if none is named) that it has not finished yet,
   waiting for one if there is none;
2. lowers the plan and its generations (``switches``: later plans taking over at given epochs)
   and installs every generation that places anything here in a Host, with a
   :class:`KafkaTransport` (node-to-node messages on ``node.<query>.<dst>``), a
   :class:`KafkaResultSink` (``out.<query>``), a window store factory (Redis when ``REDIS_URL``
   is set, else memory) and a :class:`PrometheusSensor`;
3. consumes ``src.<query>.<stream>`` of its home streams (``SourceBatch``: tuples + watermark ->
   ``Host.feed``), ``node.<query>.<site>`` (-> ``Host.on_message`` with the wall-clock receive
   time and the ``sent_ms`` header) and ``control`` (``end`` -> ``Host.set_last``), calling
   ``Host.run(now)`` after each batch of messages;
4. when the host is ``finished``: flushes, publishes ``done`` (per link and kind message and byte
   counts, results, ...) and exits -- or, with ``serve``, waits for the next plan.

``now`` is wall-clock ms (``time.time()``): lateness (delay > max_delay) is real network delay,
and a result's ``emit_ms`` is the wall-clock time it was produced.
"""
from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from .. import wire
from ..engine import generations
from ..errors import ClusterError, PlanError, QueryError
from ..model import Query
from ..plan import from_json
from ..query import parse_query
from ..runtime.host import Host
from ..runtime.instance import InstanceSpec
from ..runtime.sensor import Sensor, TotalsSensor
from .control import ControlLog, ControlRecord, decode_control_message, read_control_to_end
from .kafka import (
    CONTROL_TOPIC,
    KafkaResultSink,
    KafkaTransport,
    LinkStats,
    Producing,
    check_reachable,
    consume,
    ensure_topics,
    links_to_list,
    make_admin,
    make_consumer,
    make_producer,
    node_topic,
    now_ms,
    out_topic,
    publish_control,
    src_topic,
    warm_up,
)
from .recovery import NodeCheckpoints

STATUS_EVERY_S = 2.0
GAUGES_EVERY_S = 1.0
CHECKPOINT_EVERY_S = 1.0


class TeeSensor(Sensor):
    """Forwards every hook to several sensors (Prometheus + in-memory totals for ``done``)."""

    def __init__(self, *sensors: Sensor) -> None:
        self.sensors = sensors

    def on_input(self, site: str, stream: str, n: int) -> None:
        for s in self.sensors:
            s.on_input(site, stream, n)

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        for s in self.sensors:
            s.on_phase(site, operator, seconds)

    def on_emit(self, site: str, n: int) -> None:
        for s in self.sensors:
            s.on_emit(site, n)

    def on_late(self, site: str, kind: str) -> None:
        for s in self.sensors:
            s.on_late(site, kind)

    def on_window(self, site: str, stream: str, store: str, size: int) -> None:
        for s in self.sensors:
            s.on_window(site, stream, store, size)


def info_line(prefix: str, msg: str) -> None:
    print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)


def default_store_factory(redis_url: Optional[str], namespace: str, log: Callable[[str], None]) -> Any:
    """Window stores in Redis (``joinlib.adapters.redis_store``) if ``redis_url``, else in memory."""
    if not redis_url:
        return None
    try:
        from .redis_store import redis_store_factory
    except ImportError:
        log(f"REDIS_URL={redis_url} is set but joinlib.adapters.redis_store is not available; "
            "keeping windows in memory")
        return None
    return redis_store_factory(redis_url, namespace)


def compile_plan_message(rec: ControlRecord) -> tuple[Query, list[InstanceSpec]]:
    """The query and the plan generations of a ``plan`` control message."""
    p = rec.payload if isinstance(rec.payload, dict) else {}
    if not isinstance(p.get("query"), dict) or p.get("plan") is None:
        raise PlanError(f"control@{rec.offset}: a plan message needs 'query' and 'plan'")
    q = parse_query(p["query"], f"control@{rec.offset}")
    gens = [(0, from_json(q, p["plan"]))]
    for sw in p.get("switches") or []:
        if not isinstance(sw, dict) or not isinstance(sw.get("from_epoch"), int) or sw["from_epoch"] < 1:
            raise PlanError(f"control@{rec.offset}: a switch is {{'from_epoch': E >= 1, 'plan': ...}}, not {sw!r}")
        gens.append((sw["from_epoch"], from_json(q, sw["plan"])))
    return q, generations(q, gens)


def plan_nodes(payload: dict[str, Any]) -> set[str]:
    """The nodes a plan message involves: ``nodes`` if given, else the sites of its streams."""
    nodes = payload.get("nodes")
    if isinstance(nodes, list):
        return {str(n) for n in nodes}
    streams = (payload.get("query") or {}).get("streams") or {}
    return {str(s.get("site")) for s in streams.values() if isinstance(s, dict)}


class NodeService:
    """One site's node on Kafka; :meth:`run` returns an exit status (0 = finished cleanly).

    ``registry``: a prometheus CollectorRegistry (one per node when several share a process);
    ``metrics_port``: serve it over HTTP (None: don't); ``stop``: an Event that ends the service;
    ``store_factory``: overrides the Redis/memory choice (a ``name -> WindowStore`` callable).
    """

    def __init__(self, site: str, bootstrap: str, *, query: Optional[str] = None, run: Optional[str] = None,
                 redis_url: Optional[str] = None, metrics_port: Optional[int] = None, serve: bool = False,
                 registry: Any = None, stop: Optional[threading.Event] = None, plan_timeout_s: Optional[float] = None,
                 connect_timeout_s: float = 15.0, store_factory: Any = None, quiet: bool = False,
                 checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> None:
        self.site, self.bootstrap, self.query_name, self.run_id = site, bootstrap, query, run
        self.redis_url, self.metrics_port, self.serve = redis_url, metrics_port, serve
        self.registry = registry
        self.stop = stop or threading.Event()
        self.plan_timeout_s, self.connect_timeout_s = plan_timeout_s, connect_timeout_s
        self.store_factory = store_factory
        self.quiet = quiet
        self.checkpoint_every_s = checkpoint_every_s
        self.resumed_from: Optional[dict[str, Any]] = None  # where the last run resumed (epochs per lane)
        self.sensor: Any = None
        self.finished_runs: list[dict[str, Any]] = []   # the done payloads published

    def log(self, msg: str) -> None:
        if not self.quiet:
            info_line(f"node {self.site}", msg)

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        check_reachable(self.bootstrap, self.connect_timeout_s)
        from .prometheus import PrometheusSensor
        self.sensor = PrometheusSensor(self.registry)
        if self.metrics_port is not None:
            from prometheus_client import REGISTRY, start_http_server
            start_http_server(self.metrics_port, registry=self.registry or REGISTRY)
            self.log(f"metrics on :{self.metrics_port}/metrics")
        admin = make_admin(self.bootstrap)
        ensure_topics(admin, [CONTROL_TOPIC])
        consumer = make_consumer(self.bootstrap, f"joinlib-node-{self.site}-{uuid.uuid4().hex[:8]}")
        try:
            ctl = read_control_to_end(consumer, ControlLog())
            while not self.stop.is_set():
                rec = self._wait_for_plan(consumer, ctl)
                if rec is None:
                    return 0 if self.stop.is_set() else 3
                try:
                    compiled = compile_plan_message(rec)
                except (QueryError, PlanError) as e:
                    if not self.serve:
                        raise
                    self.log(f"error: skipping the plan at control offset {rec.offset}: {e}")
                    p = rec.payload if isinstance(rec.payload, dict) else {}
                    ctl.done.add((p.get("run"), self.site))
                    continue
                # a fresh consumer per plan: re-assigning a consumer that already fetched
                # stalls its first fetches of the new partitions for ~0.6 s (librdkafka 2.x)
                runner = make_consumer(self.bootstrap, f"joinlib-node-{self.site}-{uuid.uuid4().hex[:8]}")
                try:
                    _Run(self, rec, compiled, runner, admin, ctl).execute()
                finally:
                    runner.close()
                if not self.serve or self.run_id is not None:
                    return 0
            return 0
        finally:
            consumer.close()

    def _accept(self, ctl: ControlLog) -> Callable[[ControlRecord], bool]:
        def accept(rec: ControlRecord) -> bool:
            p = rec.payload if isinstance(rec.payload, dict) else {}
            if self.query_name is not None and rec.query != self.query_name:
                return False
            if self.run_id is not None and p.get("run") != self.run_id:
                return False
            if (p.get("run"), self.site) in ctl.done:
                return False
            return self.site in plan_nodes(p)
        return accept

    def _wait_for_plan(self, consumer: Any, ctl: ControlLog) -> Optional[ControlRecord]:
        accept = self._accept(ctl)
        rec = ctl.latest_plan(accept)
        if rec is not None:
            return rec
        what = f"query {self.query_name}" if self.query_name else f"a query with a stream or operator at {self.site}"
        self.log(f"waiting for a plan of {what} on '{CONTROL_TOPIC}'")
        consumer.assign([TopicPartition(CONTROL_TOPIC, 0, ctl.position or OFFSET_BEGINNING)])
        deadline = None if self.plan_timeout_s is None else time.monotonic() + self.plan_timeout_s
        while not self.stop.is_set():
            for m in consume(consumer, 1000, 0.2):
                r = decode_control_message(m)
                if r is None:
                    continue
                ctl.add(r)
                if r.kind == "plan" and accept(r):
                    return r
            if deadline is not None and time.monotonic() > deadline:
                raise ClusterError(f"node {self.site}: no plan of {what} on '{CONTROL_TOPIC}' "
                                   f"after {self.plan_timeout_s:.0f}s")
        return None

    @staticmethod
    def end_applies(rec: ControlRecord, run: Optional[str]) -> bool:
        p = rec.payload if isinstance(rec.payload, dict) else {}
        return "last_epoch" in p and (p.get("run") is None or p.get("run") == run)


@dataclass
class Counters:
    """What a run counts besides the host's state (kept in checkpoints too)."""

    totals: TotalsSensor = field(default_factory=TotalsSensor)
    received: defaultdict[tuple[str, str, str], LinkStats] = field(default_factory=lambda: defaultdict(LinkStats))
    naive: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


class _Run:
    """One plan (all its generations) executed by a node service, start to ``done``."""

    def __init__(self, svc: NodeService, rec: ControlRecord, compiled: tuple[Query, list[InstanceSpec]],
                 consumer: Any, admin: Any, ctl: ControlLog) -> None:
        self.svc, self.rec, self.consumer, self.admin, self.ctl = svc, rec, consumer, admin, ctl
        self.site = svc.site
        self.q, self.specs = compiled
        self.p: dict[str, Any] = rec.payload if isinstance(rec.payload, dict) else {}
        self.run_id: Optional[str] = self.p.get("run")
        self.counters = Counters()
        self.made: list[Any] = []
        self.tps: list[TopicPartition] = []

    # ------------------------------------------------------------------ setup
    def execute(self) -> None:
        svc, q, site = self.svc, self.q, self.site
        svc.sensor.query = q.name
        svc.sensor.set_plan(q.name, self.specs[-1].ir.plan)
        self.out = Producing(make_producer(svc.bootstrap, **{"delivery.report.only.error": True}))
        self.transport = KafkaTransport(self.out, q.name, sensor=svc.sensor, run=self.run_id)
        self.sink = KafkaResultSink(self.out, q, site,
                                    headers=[("run", self.run_id.encode())] if self.run_id else None)
        factory = svc.store_factory or default_store_factory(
            svc.redis_url, f"joinlib:{q.name}:{self.run_id or 'norun'}", svc.log)
        self.factory = factory
        self.ckpt = self._checkpoints(factory)
        saved = self.ckpt.load() if self.ckpt else None  # before the host adds its indexes to the stores
        self.host = self._host(factory)
        offsets: dict[str, Any] = self.p.get("offsets") or {}
        resumed = self.ckpt.resume(saved, self) if self.ckpt and saved else None
        if resumed is not None:
            offsets = resumed
        self._assign(offsets, resumed is not None)
        self._loop()

    def _host(self, factory: Any) -> Host:
        sensor = TeeSensor(self.svc.sensor, self.counters.totals)

        def store_factory(name: str) -> Any:
            store = factory(name)
            self.made.append(store)
            return store
        host = Host(self.site, self.transport, self.sink, store_factory=store_factory if factory else None,
                    sensor=sensor)
        for spec in self.specs:
            if self.site in spec.ir.nodes:
                host.install(spec)
        if self.p.get("last_epoch") is not None:
            host.set_last(self.q.name, int(self.p["last_epoch"]))
        # ends already read (after the plan) apply too
        for e in self.ctl.ends:
            if e.offset > self.rec.offset and e.query == self.q.name and NodeService.end_applies(e, self.run_id):
                host.set_last(self.q.name, int(e.payload["last_epoch"]))  # type: ignore[index]
        return host

    def _assign(self, offsets: dict[str, Any], resumed: bool) -> None:
        svc, q, site = self.svc, self.q, self.site
        self.homes = {s.name for s in q.streams if s.site == site}
        self.others = [x for x in q.sites if x != site]  # the naive baseline: every stream to every site
        self.my_topic = node_topic(q.name, site)
        self.src_topics = {src_topic(q.name, s): s for s in self.homes}
        ensure_topics(self.admin, [self.my_topic, out_topic(q.name), *self.src_topics])

        def start(topic: str) -> int:
            off = offsets.get(topic)
            return OFFSET_BEGINNING if off is None else int(off)
        self.tps = ([TopicPartition(CONTROL_TOPIC, 0, max(self.rec.offset + 1, self.ctl.position))]
                    + [TopicPartition(t, 0, start(t)) for t in self.src_topics]
                    + [TopicPartition(self.my_topic, 0, start(self.my_topic))])
        self.consumer.assign(self.tps)
        warm_up(self.out.producer, [node_topic(q.name, x) for x in q.nodes] + [out_topic(q.name), CONTROL_TOPIC])
        svc.resumed_from = self._epochs() if resumed else None
        if resumed:
            svc.sensor.on_resume(site, q.name)
        if self.ckpt:
            if not resumed:  # from the start; a predecessor may still have delivered results
                self.ckpt.out_offset = offsets.get(out_topic(q.name))
            self.sink.skip = self.ckpt.delivered(svc.bootstrap, q, self.run_id)
            if resumed or any(self.sink.skip.values()):
                svc.log(f"resumed from {'the checkpoint at epochs %s' % self._epochs() if resumed else 'the start'}; "
                        f"result batches already delivered: {self.sink.skip}")
        lanes = sum(len(i.lanes) for i in self.host.instances.values())
        svc.log(f"running query {q.name} (run {self.run_id}): {len(self.homes)} home stream(s), "
                f"{len(self.host.instances)} plan generation(s), {lanes} lane(s) here")

    def _epochs(self) -> dict[str, int]:
        """The first epoch each generation here has not finished (for logs and ``done``)."""
        return {f"g{k[2]}": min((lane.epoch for lane in inst.lanes), default=0)
                for k, inst in self.host.instances.items()}

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        svc, host = self.svc, self.host
        t_start, cpu_start = time.perf_counter(), time.process_time()
        next_status = next_gauges = time.monotonic()
        every = svc.checkpoint_every_s
        next_ckpt = next_status + every if self.ckpt and every > 0 else float("inf")
        while not host.finished:
            if svc.stop.is_set():
                if self.ckpt:
                    self._checkpoint()
                svc.log("stopped before finishing" + (" (checkpoint saved)" if self.ckpt else ""))
                self.out.flush(5)
                return
            now = now_ms()
            for m in consume(self.consumer, 2000, 0.05):
                self._handle(m, now)
            host.run(now)
            self.out.poll()
            t = time.monotonic()
            if t >= next_ckpt:
                next_ckpt = t + every
                self._checkpoint()
            if t >= next_gauges:
                next_gauges = t + GAUGES_EVERY_S
                self._gauges()
            if t >= next_status:
                next_status = t + STATUS_EVERY_S
                epochs = self._epochs()
                publish_control(self.out, self.q.name, "status",
                                {"site": self.site, "run": self.run_id, "epoch": min(epochs.values(), default=0),
                                 "epochs": epochs, "last_epoch": host.last.get(self.q.name)}, flush=False)
        self._finish(time.perf_counter() - t_start, time.process_time() - cpu_start)

    def _handle(self, m: Any, now: float) -> None:
        topic = m.topic()
        if topic == CONTROL_TOPIC:
            self._control(m)
            return
        sent = None
        for k, v in m.headers() or ():
            if k == "sent_ms":
                sent = float(v)
            elif k == "run" and self.run_id is not None and v != self.run_id.encode():
                return  # a message of another run of this query
        if topic == self.my_topic:
            self._message(m, now, sent if sent is not None else float(m.timestamp()[1]))
        elif topic in self.src_topics:
            self._source(m)

    def _message(self, m: Any, now: float, sent: float) -> None:
        env = wire.decode_envelope(m.value())
        env.query = self.q.name
        if not self.host.on_message(env, now, sent):
            return  # a copy sent again by a restarted node
        kind = env.kind
        st = self.counters.received[(env.src, env.dst, kind)]
        st.messages += 1
        st.bytes += len(m.value())
        st.transfer_ms += max(0.0, now - sent)
        self.svc.sensor.on_transmission(env.src, env.dst, kind, (now - sent) / 1000.0)

    def _source(self, m: Any) -> None:
        b = wire.decode_source_batch(m.value())
        if self.others and b.tuples:
            epoch = b.tuples[0].ts // self.q.execution.interval_ms
            for dst in self.others:
                n = wire.naive_batch_size(self.site, dst, epoch, b.tuples)
                self.counters.naive[(self.site, dst)] += n
                self.svc.sensor.on_naive(self.site, dst, n)
        self.host.feed(self.q.name, self.src_topics[m.topic()], b.tuples, b.watermark)

    def _control(self, m: Any) -> None:
        r = decode_control_message(m)
        if r is None:
            return
        self.ctl.add(r)
        if r.kind == "end" and r.query == self.q.name and NodeService.end_applies(r, self.run_id):
            self.host.set_last(self.q.name, int(r.payload["last_epoch"]))  # type: ignore[index]

    # ------------------------------------------------------------------ the end
    def _finish(self, wall: float, cpu: float) -> None:
        svc, q, site, c = self.svc, self.q, self.site, self.counters
        self.out.flush()
        self._gauges()
        processing: dict[str, float] = defaultdict(float)
        for (_, op), secs in c.totals.processing.items():
            processing[op] += secs
        done = {
            "site": site, "run": self.run_id, "results": self.sink.count,
            "links": self.transport.links(),
            "received": links_to_list(c.received),
            "naive": [{"src": s, "dst": d, "bytes": n} for (s, d), n in sorted(c.naive.items())],
            "input_tuples": sum(c.totals.inputs.values()),
            "processing_s": {op: round(v, 6) for op, v in processing.items()},
            "late_messages": sum(c.totals.late.values()),
            "last_epoch": self.host.last.get(q.name),
            "wall_s": round(wall, 4),
            # CPU of the whole process (librdkafka's threads included); a thread node shares it
            "cpu_s": round(cpu, 4),
            "resumed_from": svc.resumed_from,
            "resumed_from_epoch": min(svc.resumed_from.values()) if svc.resumed_from else None,
            "checkpoints": self.ckpt.saved if self.ckpt else 0,
            "generations": sorted(k[2] for k in self.host.instances),
        }
        publish_control(self.out, q.name, "done", done)
        self._cleanup()
        self.ctl.done.add((self.run_id, site))
        svc.finished_runs.append(done)
        sent = sum(ln["bytes"] for ln in self.transport.links())
        svc.log(f"done: {self.sink.count} results, {sent} bytes sent in {wall:.2f}s")

    def _cleanup(self) -> None:
        if self.ckpt:
            self.ckpt.clear()
        for store in self.made:
            try:
                store.clear()
            except Exception as e:  # the run's result stands; stale keys are only a leak
                self.svc.log(f"could not clear window store: {e}")
        if self.factory is not None and hasattr(self.factory, "close"):
            self.factory.close()

    # ------------------------------------------------------------------ checkpoints, gauges
    def _checkpoint(self) -> None:
        assert self.ckpt is not None
        t0 = time.perf_counter()
        self.out.flush()  # what the checkpoint says was sent must be in Kafka: a replay from it won't resend it
        self.ckpt.save(self)
        self.svc.sensor.on_checkpoint(self.site, time.perf_counter() - t0)

    def _checkpoints(self, factory: Any) -> Optional[NodeCheckpoints]:
        """Checkpoints of this run, when its windows are in Redis (else None: nothing to resume from)."""
        client, namespace = getattr(factory, "client", None), getattr(factory, "namespace", None)
        if client is None or namespace is None:
            return None
        return NodeCheckpoints(client, namespace, self.site, self.svc.log)

    def _gauges(self) -> None:
        sens, site = self.svc.sensor, self.site
        try:
            for (_, _, name), w in self.host.windows.items():
                sens.on_window(site, name, "home", len(w.store))
            for inst in self.host.instances.values():
                for sig, store in inst.stores.items():
                    op = inst.ir.replica(sig)
                    sens.on_window(site, op.stream, op.kind, len(store))
            positions = self.consumer.position([TopicPartition(tp.topic, 0) for tp in self.tps])
            for tp in positions:
                lo, hi = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, 0), cached=True)
                if hi >= 0:
                    pos = tp.offset if tp.offset >= 0 else lo
                    sens.set_lag(site, tp.topic, max(0, hi - pos))
        except Exception:  # metrics must never take the node down
            pass
