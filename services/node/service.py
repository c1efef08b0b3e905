"""The node service: the embedded mode's :class:`~joinlib.runtime.node.Node`, unchanged, on Kafka.

One process (or thread) per site.  It

1. reads ``control`` from the beginning and takes the latest ``plan`` of its query (any
   query with a stream at its site if none is named) that it has not finished yet,
   waiting for one if there is none;
2. compiles the plan and builds the Node with a :class:`KafkaTransport` (node-to-node
   messages on ``node.<query>.<dst>``), a :class:`KafkaResultSink` (``out.<query>``), a
   window store factory (Redis when ``REDIS_URL`` is set, else memory) and a
   :class:`PrometheusSensor`;
3. consumes ``src.<query>.<stream>`` of its home streams (``SourceBatch``: tuples +
   watermark -> ``Node.feed``), ``node.<query>.<site>`` (-> ``Node.on_message`` with the
   wall-clock receive time and the ``sent_ms`` header) and ``control`` (``end`` ->
   ``Node.last_epoch``), calling ``Node.run(now)`` after each batch;
4. when the node is ``finished``: flushes, publishes ``done`` (per link and kind message and
   byte counts, results, ...) and exits -- or, with ``serve``, waits for the next plan.

``now`` is wall-clock ms (``time.time()``): lateness (delay > max_delay) is real network
delay, and a result's ``emit_ms`` is the wall-clock time it was produced.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from typing import Callable, Optional

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from joinlib import wire
from joinlib.adapters.kafka import (CONTROL_TOPIC, KafkaResultSink, KafkaTransport, LinkStats, Producing,
                                    check_reachable, consume, ensure_topics, links_to_list, make_admin,
                                    make_consumer, make_producer, node_topic, now_ms, publish_control,
                                    src_topic, out_topic, warm_up)
from joinlib.errors import ClusterError, PlanError, QueryError
from joinlib.physical import compile_plan
from joinlib.plan import from_json
from joinlib.query import parse_query
from joinlib.runtime.messages import Envelope, TupleBatch
from joinlib.runtime.node import Node
from joinlib.runtime.sensor import Sensor, TotalsSensor

from ..common import ControlLog, ControlRecord, decode_control_message, info_line, read_control_to_end

STATUS_EVERY_S = 2.0
GAUGES_EVERY_S = 1.0
CHECKPOINT_EVERY_S = 1.0


class TeeSensor(Sensor):
    """Forwards every hook to several sensors (Prometheus + in-memory totals for ``done``)."""

    def __init__(self, *sensors: Sensor) -> None:
        self.sensors = sensors

    def on_input(self, site, stream, n):
        for s in self.sensors:
            s.on_input(site, stream, n)

    def on_phase(self, site, operator, seconds):
        for s in self.sensors:
            s.on_phase(site, operator, seconds)

    def on_emit(self, site, n):
        for s in self.sensors:
            s.on_emit(site, n)

    def on_late(self, site, kind):
        for s in self.sensors:
            s.on_late(site, kind)

    def on_window(self, site, stream, store, size):
        for s in self.sensors:
            s.on_window(site, stream, store, size)


def default_store_factory(redis_url: Optional[str], namespace: str, log: Callable[[str], None]):
    """Window stores in Redis (``joinlib.adapters.redis_store``) if ``redis_url``, else in memory."""
    if not redis_url:
        return None
    try:
        from joinlib.adapters.redis_store import redis_store_factory
    except ImportError:
        log(f"REDIS_URL={redis_url} is set but joinlib.adapters.redis_store is not available; "
            "keeping windows in memory")
        return None
    return redis_store_factory(redis_url, namespace)


class NodeService:
    """One site's node on Kafka; :meth:`run` returns an exit status (0 = finished cleanly).

    ``registry``: a prometheus CollectorRegistry (one per node when several share a process);
    ``metrics_port``: serve it over HTTP (None: don't); ``stop``: an Event that ends the service;
    ``store_factory``: overrides the Redis/memory choice (a ``name -> WindowStore`` callable).
    """

    def __init__(self, site: str, bootstrap: str, *, query: Optional[str] = None, run: Optional[str] = None,
                 redis_url: Optional[str] = None, metrics_port: Optional[int] = None, serve: bool = False,
                 registry=None, stop: Optional[threading.Event] = None, plan_timeout_s: Optional[float] = None,
                 connect_timeout_s: float = 15.0, store_factory=None, quiet: bool = False,
                 checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> None:
        self.site, self.bootstrap, self.query_name, self.run_id = site, bootstrap, query, run
        self.redis_url, self.metrics_port, self.serve = redis_url, metrics_port, serve
        self.registry = registry
        self.stop = stop or threading.Event()
        self.plan_timeout_s, self.connect_timeout_s = plan_timeout_s, connect_timeout_s
        self.store_factory = store_factory
        self.quiet = quiet
        self.checkpoint_every_s = checkpoint_every_s
        self.resumed_from: Optional[int] = None  # epoch of the checkpoint the last run resumed from
        self.sensor = None
        self.finished_runs: list[dict] = []   # the done payloads published

    # ------------------------------------------------------------------ logging
    def log(self, msg: str) -> None:
        if not self.quiet:
            info_line(f"node {self.site}", msg)

    # ------------------------------------------------------------------ main loop
    def run(self) -> int:
        check_reachable(self.bootstrap, self.connect_timeout_s)
        from joinlib.adapters.prometheus import PrometheusSensor
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
                # a fresh consumer per plan: re-assigning a consumer that already fetched
                # stalls its first fetches of the new partitions for ~0.6 s (librdkafka 2.x)
                try:
                    compiled = self._compile(rec)
                except (QueryError, PlanError) as e:
                    if not self.serve:
                        raise
                    self.log(f"error: skipping the plan at control offset {rec.offset}: {e}")
                    ctl.done.add(((rec.payload or {}).get("run"), self.site))
                    continue
                runner = make_consumer(self.bootstrap, f"joinlib-node-{self.site}-{uuid.uuid4().hex[:8]}")
                try:
                    self._execute(rec, compiled, runner, admin, ctl)
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
            streams = (p.get("query") or {}).get("streams") or {}
            return any(isinstance(s, dict) and str(s.get("site")) == self.site for s in streams.values())
        return accept

    def _wait_for_plan(self, consumer, ctl: ControlLog) -> Optional[ControlRecord]:
        accept = self._accept(ctl)
        rec = ctl.latest_plan(accept)
        if rec is not None:
            return rec
        what = f"query {self.query_name}" if self.query_name else f"a query with a stream at site {self.site}"
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

    # ------------------------------------------------------------------ one plan
    @staticmethod
    def _compile(rec: ControlRecord):
        p = rec.payload if isinstance(rec.payload, dict) else {}
        if not isinstance(p.get("query"), dict) or p.get("plan") is None:
            raise PlanError(f"control@{rec.offset}: a plan message needs 'query' and 'plan'")
        q = parse_query(p["query"], f"control@{rec.offset}")
        plan = from_json(q, p["plan"])
        return q, plan, compile_plan(q, plan)

    def _execute(self, rec: ControlRecord, compiled, consumer, admin, ctl: ControlLog) -> None:
        site, p = self.site, rec.payload
        q, plan, pp = compiled
        run = p.get("run")
        offsets: dict = p.get("offsets") or {}
        self.sensor.query = q.name
        self.sensor.set_plan(q.name, plan)
        totals = TotalsSensor()
        sensor = TeeSensor(self.sensor, totals)
        out = Producing(make_producer(self.bootstrap, **{"delivery.report.only.error": True}))
        transport = KafkaTransport(out, q.name, sensor=self.sensor, run=run)
        sink = KafkaResultSink(out, q, site, headers=[("run", run.encode())] if run else None)
        factory = self.store_factory
        if factory is None:
            factory = default_store_factory(self.redis_url, f"joinlib:{q.name}:{run or 'norun'}", self.log)
        made: list = []  # the stores of this run, cleared when it is done

        def store_factory(name: str, _factory=factory):
            store = _factory(name)
            made.append(store)
            return store

        ckpt = self._checkpoints(factory, site)
        saved = ckpt.load() if ckpt else None  # before the node adds its indexes to the stores
        node = Node(pp, site, transport, sink, store_factory=store_factory if factory else None, sensor=sensor)
        if p.get("last_epoch") is not None:
            node.last_epoch = int(p["last_epoch"])
        received: dict = defaultdict(LinkStats)
        naive: dict = defaultdict(int)
        resumed = ckpt.resume(saved, node, sink, transport, totals, received, naive) if saved else None
        if resumed is not None:
            offsets = resumed
        homes = {s.name for s in q.streams if s.site == site}
        others = [x for x in q.sites if x != site]
        my_topic = node_topic(q.name, site)
        src_topics = {src_topic(q.name, s): s for s in homes}
        ensure_topics(admin, [my_topic, out_topic(q.name), *src_topics])

        def start(topic: str) -> int:
            off = offsets.get(topic)
            return OFFSET_BEGINNING if off is None else int(off)

        # ends already read (after the plan) apply too
        for e in ctl.ends:
            if e.offset > rec.offset and e.query == q.name and self._end_applies(e, run):
                node.last_epoch = int(e.payload["last_epoch"])
        tps = ([TopicPartition(CONTROL_TOPIC, 0, max(rec.offset + 1, ctl.position))]
               + [TopicPartition(t, 0, start(t)) for t in src_topics]
               + [TopicPartition(my_topic, 0, start(my_topic))])
        consumer.assign(tps)
        warm_up(out.producer, [node_topic(q.name, x) for x in q.sites] + [out_topic(q.name), CONTROL_TOPIC])
        self.resumed_from = node.epoch if resumed is not None else None
        if resumed is not None:
            self.sensor.on_resume(site, q.name)
        if ckpt:
            if resumed is None:  # from the start; a predecessor may still have delivered results
                ckpt.out_offset = offsets.get(out_topic(q.name))
            sink.skip = ckpt.delivered(self.bootstrap, q, run)
            if resumed is not None or any(sink.skip):
                self.log(f"resumed from {'the checkpoint of epoch %d' % node.epoch if resumed else 'the start'}; "
                         f"result batches already delivered per head: {sink.skip}")
        self.log(f"running query {q.name} (run {run}): {len(homes)} home stream(s), "
                 f"{len(pp.replicas)} replica(s) in plan, {len(node.lanes)} lane(s) here")
        t_start, cpu_start = time.perf_counter(), time.process_time()
        next_status = next_gauges = time.monotonic()
        next_ckpt = next_status + self.checkpoint_every_s if ckpt and self.checkpoint_every_s > 0 else float("inf")
        clock = now_ms
        run_b = run.encode() if run else None
        on_message, feed, run_node = node.on_message, node.feed, node.run
        sens = self.sensor
        while not node.finished:
            if self.stop.is_set():
                if ckpt:
                    self._checkpoint(ckpt, out, node, sink, transport, totals, received, naive, consumer, tps)
                self.log("stopped before finishing" + (" (checkpoint saved)" if ckpt else ""))
                out.flush(5)
                return
            msgs = consume(consumer, 2000, 0.05)
            now = clock()
            for m in msgs:
                topic = m.topic()
                sent = None
                if topic != CONTROL_TOPIC:
                    other_run = False
                    for k, v in m.headers() or ():
                        if k == "sent_ms":
                            sent = float(v)
                        elif k == "run" and run_b is not None and v != run_b:
                            other_run = True
                    if other_run:
                        continue  # a message of another run of this query
                if topic == my_topic:
                    if sent is None:
                        sent = float(m.timestamp()[1])
                    env = wire.decode_envelope(m.value())
                    if not on_message(env, now, sent):
                        continue  # a copy sent again by a restarted node
                    kind = env.kind
                    st = received[(env.src, env.dst, kind)]
                    st.messages += 1
                    st.bytes += len(m.value())
                    st.transfer_ms += max(0.0, now - sent)
                    sens.on_transmission(env.src, env.dst, kind, (now - sent) / 1000.0)
                elif topic in src_topics:
                    b = wire.decode_source_batch(m.value())
                    stream = src_topics[topic]
                    if others and b.tuples:
                        body = TupleBatch([(t,) for t in b.tuples])
                        epoch = b.tuples[0].ts // q.execution.interval_ms
                        for dst in others:
                            n = len(wire.encode_envelope(Envelope(site, dst, 0, epoch, body)))
                            naive[(site, dst)] += n
                            sens.on_naive(site, dst, n)
                    feed(stream, b.tuples, b.watermark)
                elif topic == CONTROL_TOPIC:
                    r = decode_control_message(m)
                    if r is None:
                        continue
                    ctl.add(r)
                    if r.kind == "end" and r.query == q.name and self._end_applies(r, run):
                        node.last_epoch = int(r.payload["last_epoch"])
            run_node(now)
            out.poll()
            t = time.monotonic()
            if t >= next_ckpt:
                next_ckpt = t + self.checkpoint_every_s
                self._checkpoint(ckpt, out, node, sink, transport, totals, received, naive, consumer, tps)
            if t >= next_gauges:
                next_gauges = t + GAUGES_EVERY_S
                self._gauges(node, pp, consumer, tps)
            if t >= next_status:
                next_status = t + STATUS_EVERY_S
                publish_control(out, q.name, "status", {"site": site, "run": run, "epoch": node.epoch,
                                                        "last_epoch": node.last_epoch}, flush=False)
        out.flush()
        wall = time.perf_counter() - t_start
        self._gauges(node, pp, consumer, tps)
        processing: dict = defaultdict(float)
        for (_, op), secs in totals.processing.items():
            processing[op] += secs
        done = {
            "site": site, "run": run, "results": sink.count,
            "links": transport.links(),
            "received": links_to_list(received),
            "naive": [{"src": s, "dst": d, "bytes": n} for (s, d), n in sorted(naive.items())],
            "input_tuples": sum(totals.inputs.values()),
            "processing_s": {op: round(v, 6) for op, v in processing.items()},
            "late_messages": sum(totals.late.values()),
            "last_epoch": node.last_epoch,
            "wall_s": round(wall, 4),
            # CPU of the whole process (librdkafka's threads included); a thread node shares it
            "cpu_s": round(time.process_time() - cpu_start, 4),
            "resumed_from_epoch": self.resumed_from,
            "checkpoints": ckpt.saved if ckpt else 0,
        }
        publish_control(out, q.name, "done", done)
        if ckpt:
            ckpt.clear()
        for store in made:
            clear = getattr(store, "clear", None)
            if clear is not None:
                try:
                    clear()
                except Exception as e:  # the run's result stands; stale keys are only a leak
                    self.log(f"could not clear window store: {e}")
        if factory is not None and hasattr(factory, "close"):
            factory.close()
        ctl.done.add((run, site))
        self.finished_runs.append(done)
        self.log(f"done: {sink.count} results, {sum(l['bytes'] for l in done['links'])} bytes sent "
                 f"in {wall:.2f}s")

    def _checkpoint(self, ckpt, out, node, *state) -> None:
        t0 = time.perf_counter()
        out.flush()  # what the checkpoint says was sent must be in Kafka: a replay from it won't resend it
        ckpt.save(node, *state)
        self.sensor.on_checkpoint(self.site, time.perf_counter() - t0)

    def _checkpoints(self, factory, site: str):
        """Checkpoints of this run, when its windows are in Redis (else None: nothing to resume from)."""
        client, namespace = getattr(factory, "client", None), getattr(factory, "namespace", None)
        if client is None or namespace is None:
            return None
        from .recovery import NodeCheckpoints
        return NodeCheckpoints(client, namespace, site, self.log)

    @staticmethod
    def _end_applies(rec: ControlRecord, run) -> bool:
        p = rec.payload if isinstance(rec.payload, dict) else {}
        return "last_epoch" in p and (p.get("run") is None or p.get("run") == run)

    def _gauges(self, node: Node, pp, consumer, tps) -> None:
        sens, site = self.sensor, self.site
        try:
            for name, home in node.homes.items():
                sens.on_window(site, name, "home", len(home.store))
            for spec in pp.replicas:
                if spec.loc == site:
                    store = getattr(node.replicas.get(spec.id), "store", None)
                    if store is not None:
                        sens.on_window(site, spec.stream, spec.kind, len(store))
            positions = consumer.position([TopicPartition(tp.topic, 0) for tp in tps])
            for tp in positions:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(tp.topic, 0), cached=True)
                if hi >= 0:
                    pos = tp.offset if tp.offset >= 0 else lo
                    sens.set_lag(site, tp.topic, max(0, hi - pos))
        except Exception:  # metrics must never take the node down
            pass
