"""One plan run by a node service (:class:`PlanRun`), start to ``done`` or ``stop``: the embedded mode's
:class:`~joinlib.runtime.host.Host` on Kafka, with its consumer, producer, windows, checkpoints and
metrics (:mod:`.node_service` says how the node finds plans and runs them).
"""
from __future__ import annotations

import math
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from joinlib.adapters.kafka import (
    CONTROL_TOPIC,
    KafkaResultSink,
    KafkaTransport,
    Producing,
    consume,
    ensure_partitions,
    ensure_topics,
    links_to_list,
    make_producer,
    node_topic,
    now_ms,
    out_topic,
    publish_control,
    source_topic,
    warm_up,
)
from joinlib.adapters.redis_outage import no_retry
from joinlib.adaptive.service import config_of, initial_jep
from joinlib.control.check import BAD_HEADER, INVALID, UNDECODABLE, InboundFlows, plan_payload
from joinlib.errors import ClusterError, PlanError
from joinlib.model import Query
from joinlib.node.adaptive_service import ADAPTIVE_HEADER, AdaptivePart, OrderLog
from joinlib.node.backpressure import InboundGate, SourceGate, apply
from joinlib.node.control import ControlLog, ControlRecord, decode_control_message
from joinlib.node.recovery import NodeCheckpoints
from joinlib.node.sources import LiveInputs, dlq_topic, live_streams, marks_topic
from joinlib.plan.partitioned import Partitioned
from joinlib.pmjoin.value_monitor import VALUES_EVERY_S, ValueMonitor
from joinlib.protocol import records, wire
from joinlib.query import parse_query
from joinlib.runtime.deploy import generations
from joinlib.runtime.host import Host
from joinlib.runtime.instance import InstanceSpec
from joinlib.runtime.report import LinkStats
from joinlib.runtime.sensor import Sensor, TotalsSensor
from joinlib.runtime.sink import Group, Sink

STATUS_EVERY_S = 2.0
LATENCY_SAMPLES = 4096
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


class QuerySensor(TeeSensor):
    """The service's Prometheus sensor for one run: results are labelled with its query."""

    def __init__(self, prom: Any, query: str, *others: Sensor) -> None:
        super().__init__(prom, *others)
        self.prom, self.query = prom, query

    def on_emit(self, site: str, n: int) -> None:
        self.prom.on_results(site, self.query, n)
        for s in self.sensors[1:]:
            s.on_emit(site, n)


class LatencyTap(Sink):
    """Forwards results to ``sink`` and samples their event-to-result latency (wall-clock emit time
    minus the head's event time, ``origin_ms`` + ts) for the status messages."""

    def __init__(self, sink: Any, origin_ms: int) -> None:
        self.sink, self.origin = sink, origin_ms
        self.samples: list[tuple[float, int]] = []
        self.seen = 0

    def emit(self, inst: Any, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.sink.emit(inst, head_pos, pos, groups, now)
        base = now - self.origin
        for row, tups in groups:
            self.seen += 1
            if len(self.samples) < LATENCY_SAMPLES:
                self.samples.append((base - row[head_pos].ts, len(tups)))

    def take(self) -> Optional[dict[str, float]]:
        """p50 / p99 (ms, weighted by results) of the results since the last call; None if none."""
        xs, self.samples, n, self.seen = sorted(self.samples), [], self.seen, 0
        total = sum(w for _, w in xs)
        if not total:
            return None

        def q(f: float) -> float:
            acc = 0
            for v, w in xs:
                acc += w
                if acc >= f * total:
                    return round(v, 1)
            return round(xs[-1][0], 1)
        return {"p50": q(0.5), "p99": q(0.99), "groups": n}


def info_line(prefix: str, msg: str) -> None:
    print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)


def default_store_factory(redis_url: Optional[str], namespace: str, log: Callable[[str], None]) -> Any:
    """Window stores in Redis (``joinlib.adapters.redis_store``) if ``redis_url``, else in memory."""
    if not redis_url:
        return None
    try:
        from joinlib.adapters.redis_store import redis_store_factory
    except ImportError:
        from joinlib.settings import redact_url
        log(f"REDIS_URL={redact_url(redis_url)} is set but joinlib.adapters.redis_store is not available; "
            "keeping windows in memory")
        return None
    # no retries: a retried window script may run twice; a Redis outage restarts the run from its
    # checkpoint instead (joinlib.adapters.redis_outage, NodeService._execute)
    return redis_store_factory(redis_url, namespace, retry=no_retry())


#: a plan message compiled: its query, plan generations and partitioned plan (None unless PMJoin)
Compiled = tuple[Query, list[InstanceSpec], Optional[Partitioned]]


def compile_plan_message(rec: ControlRecord) -> Compiled:
    """The query, the plan generations and the partitioned plan (if any) of a ``plan`` control message."""
    p = rec.payload if isinstance(rec.payload, dict) else {}
    if not isinstance(p.get("query"), dict) or p.get("plan") is None:
        raise PlanError(f"control@{rec.offset}: a plan message needs 'query' and 'plan'")
    q = parse_query(p["query"], f"control@{rec.offset}")
    try:
        plans = plan_payload(q, p)
        specs = generations(q, plans)
    except PlanError as e:
        raise PlanError(f"control@{rec.offset}: {e}") from None
    return q, specs, plans if isinstance(plans, Partitioned) else None


@dataclass
class Counters:
    """What a run counts besides the host's state (kept in checkpoints too)."""

    totals: TotalsSensor = field(default_factory=TotalsSensor)
    received: defaultdict[tuple[str, str, str], LinkStats] = field(default_factory=lambda: defaultdict(LinkStats))
    naive: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))


class PlanRun:
    """One plan (all its generations) executed by a node service (``svc``, a
    :class:`~.node_service.NodeService`), start to ``done`` (a finite replay) or to ``stop`` (a live query)."""

    def __init__(self, svc: Any, rec: ControlRecord, compiled: Compiled,
                 consumer: Any, admin: Any, ctl: ControlLog) -> None:
        self.svc, self.rec, self.consumer, self.admin, self.ctl = svc, rec, consumer, admin, ctl
        self.site = svc.site
        self.q, self.specs, self.partitioned = compiled
        self.p: dict[str, Any] = rec.payload if isinstance(rec.payload, dict) else {}
        self.run_id: Optional[str] = self.p.get("run")
        self.headers = [("run", self.run_id.encode())] if self.run_id else None
        self.ctl_query = self.q.name   # the query whose end and stop messages apply
        self.live_name = self.q.name   # the query whose dead letters and idle advances its live ingest writes
        self.topic_runs: dict[str, str] = {}   # input topics written by another run (a shared operator's)
        self.out_query = self.q        # the query whose out topic the results go to
        self.ready = threading.Event()   # set once its inputs are assigned
        self.finished: Optional[dict[str, Any]] = None   # the done payload, once published
        live = self.p.get("live")
        self.origin = int(live.get("origin_ms") or 0) if isinstance(live, dict) else 0
        self.counters = Counters()
        self.made: list[Any] = []
        self.tps: list[TopicPartition] = []
        self.live: Optional[LiveInputs] = None
        self.stopped = False
        self.resumed_from: Optional[dict[str, int]] = None
        self.startup_s: Optional[float] = None   # execute() to inputs assigned (a resume: restoring the checkpoint)
        self.sensor = QuerySensor(svc.sensor, self.q.name)
        # a scaled-out plan's run of one partition (joinlib.node.scale_out) sets these four
        self.part: Optional[int] = None     # the plan partition run here (None: every partition)
        self.topic_parts = 1                # partitions of the source and node topics
        self.halt = svc.stop                # set: checkpoint (if save_on_halt) and return
        self.save_on_halt = True
        self.labels: dict[str, Any] = {}    # added to status and done
        self._flows: dict[int, InboundFlows] = {}   # per plan instance: its flows to this site
        # a live query's per-value rates, reported for re-partitioning (docs/pmjoin.md "Live statistics")
        self.values = ValueMonitor.of(self.q, self.site) if isinstance(live, dict) else None
        self._values_due = 0.0
        ad = self.p.get("adaptive")  # re-planned while running (docs/adaptive.md): the node around the host
        self.adaptive = None if ad is None else AdaptivePart(self, config_of(ad, self.q),
                                                             initial_jep(self.q, self.p["plan"]))
        self._t0, self._cpu0 = time.perf_counter(), time.process_time()

    # ------------------------------------------------------------------ setup
    def execute(self) -> None:
        svc, q = self.svc, self.q
        self._t_exec = time.monotonic()
        svc.sensor.set_plan(q.name, self.partitioned or self.specs[-1].ir.plan)
        # idempotent: a send retried across a broker restart is neither duplicated nor reordered (result
        # batches are skipped by number after a restart, which needs the producer's order in out.<query>)
        self.out = Producing(make_producer(svc.bootstrap, **{"delivery.report.only.error": True,
                                                              "enable.idempotence": True, "acks": "all"}))
        self.transport = KafkaTransport(self.out, q.name, sensor=svc.sensor, run=self.run_id,
                                        by_part=self.part is not None)
        self.sink = self._result_sink()
        self.tap = LatencyTap(self.sink, self.origin)
        factory = svc.store_factory or default_store_factory(svc.redis_url, self._namespace(), svc.log)
        self.factory = factory
        self.ckpt = self._checkpoints(factory)
        saved = self.ckpt.load() if self.ckpt else None  # before the host adds its indexes to the stores
        self.host = self._host(factory)
        self.live = self._live()
        offsets = _positions(self.p.get("offsets") or {}, self.p.get("part_offsets"))
        resumed = self.ckpt.resume(saved, self) if self.ckpt and saved else None
        if resumed is not None:
            offsets = resumed
            if self.adaptive is not None:   # a fresh host from the checkpoint: the ends read apply to it too
                self._ends(self.host)
        elif self.adaptive is not None:
            self.adaptive.resume_log("start")   # a predecessor that crashed before its first checkpoint
        try:
            self._assign(offsets, resumed is not None)
            self._loop()
        finally:
            if self.live is not None:
                self.live.close()

    def _namespace(self) -> str:
        """The Redis namespace of this run's windows and checkpoints."""
        part = "" if self.part is None else f":p{self.part}"
        return f"joinlib:{self.q.name}:{self.run_id or 'norun'}{part}"

    def _result_sink(self) -> Any:
        """Where results go: ``out.<query>`` (a tree's operator: see :mod:`.tree_service`)."""
        return KafkaResultSink(self.out, self.q, self.site, headers=self.headers)

    def _host(self, factory: Any) -> Host:
        sensor = TeeSensor(self.sensor, self.counters.totals)

        def store_factory(name: str) -> Any:
            store = factory(name)
            self.made.append(store)
            return store
        if self.adaptive is not None:  # the adaptive node installs generation 0 and every later one
            host = self.adaptive.host(sensor, self.tap, store_factory if factory else None)
        else:
            host = Host(self.site, self.transport, self.tap, store_factory=store_factory if factory else None,
                        sensor=sensor)
            for spec in self.specs:
                if self.part is not None and spec.part != self.part:
                    continue
                if self.site in spec.ir.nodes or any(s.site == self.site for s in spec.ir.query.streams):
                    host.install(spec)
            if self.partitioned is not None and self.part is None:  # source tuples to their partitions' windows
                self.partitioned.route(self.q, host)
        self._ends(host)
        return host

    def _ends(self, host: Host) -> None:
        """The plan's last epoch, and ends already read (after the plan), apply to ``host``."""
        if self.p.get("last_epoch") is not None:
            host.set_last(self.q.name, int(self.p["last_epoch"]))
        for e in self.ctl.ends:
            if e.offset > self.rec.offset and e.query == self.ctl_query and end_applies(e, self.run_id):
                host.set_last(self.q.name, int(e.payload["last_epoch"]))  # type: ignore[index]

    def _live(self) -> Optional[LiveInputs]:
        """The live sources of the home streams (None if they are all replayed SourceBatch topics)."""
        if not live_streams(self.q, self.site):
            return None
        starts = (self.p.get("live") or {}).get("sources") or {}
        parts = {name: {int(k): int(v) for k, v in (d or {}).items()} for name, d in starts.items()}
        return LiveInputs(self.q, self.site, self.origin, parts, name=self.live_name, bootstrap=self.svc.bootstrap,
                          out=self.out,
                          run_id=self.run_id, sensor=self.svc.sensor, log=self.svc.log, on_naive=self._naive,
                          now=now_ms())

    def _assign(self, offsets: dict[tuple[str, int], int], resumed: bool) -> None:
        svc, q, site = self.svc, self.q, self.site
        self.homes = {s.name for s in q.streams if s.site == site}
        self.others = [x for x in q.sites if x != site]  # the naive baseline: every stream to every site
        self.my_topic = node_topic(q.name, site)
        live = {s.name for s in live_streams(q, site)}
        self.src_topics = {source_topic(q, s.name): s.name for s in q.streams if s.site == site and s.name not in live}
        extra = [dlq_topic(self.live_name), marks_topic(self.live_name)] if self.live is not None else []
        ensure_topics(self.admin, [out_topic(q.name), *extra])
        ensure_partitions(self.admin, [self.my_topic, *self.src_topics], self.topic_parts)
        part = self.part or 0   # the partition of the source and node topics read here

        def start(topic: str) -> int:
            off = offsets.get((topic, part))
            return OFFSET_BEGINNING if off is None else int(off)
        self.tps = ([TopicPartition(CONTROL_TOPIC, 0, max(self.rec.offset + 1, self.ctl.position))]
                    + [TopicPartition(t, part, start(t)) for t in self.src_topics]
                    + [TopicPartition(self.my_topic, part, start(self.my_topic))]
                    + (self.live.topic_partitions() if self.live is not None else []))
        self.consumer.assign(self.tps)
        self.gate = InboundGate(site, q.execution.interval_ms)
        self.src_gate = SourceGate(q.execution.interval_ms)
        warm_up(self.out.producer, [node_topic(q.name, x) for x in q.nodes] + [out_topic(q.name), CONTROL_TOPIC]
                + extra)
        self.resumed_from = svc.resumed_from = self._epochs() if resumed else None
        if resumed:
            svc.sensor.on_resume(site, q.name)
        if self.ckpt:
            if not resumed:  # from the start; a predecessor may still have delivered results
                self.ckpt.out_offset = offsets.get((out_topic(self.out_query.name), 0))
                self.ckpt.dlq_offset = offsets.get((dlq_topic(self.live_name), 0))
                self.ckpt.marks_offset = offsets.get((marks_topic(self.live_name), 0))
            self.sink.skip = self.ckpt.delivered(svc.bootstrap, self.out_query, self.run_id)
            if self.live is not None:
                n_adv = self.live.replay_marks(self.ckpt.marks_offset)
                n_dead = self.live.scan_dead(self.ckpt.dlq_offset)
                if n_adv or n_dead:
                    svc.log(f"{q.name}: {n_adv} idle advance(s) to replay, {n_dead} dead letter(s) already written")
            if resumed or any(self.sink.skip.values()):
                svc.log(f"resumed from {'the checkpoint at epochs %s' % self._epochs() if resumed else 'the start'}; "
                        f"result batches already delivered: {self.sink.skip}")
        lanes = sum(len(i.lanes) for i in self.host.instances.values())
        kind = "live" if self.live is not None else "replayed"
        self.startup_s = round(time.monotonic() - self._t_exec, 3)
        svc.log(f"running query {q.name}{self._label()} (run {self.run_id}, {kind}): {len(self.homes)} home stream(s), "
                f"{len(self.host.instances)} plan generation(s), {lanes} lane(s) here")
        self.ready.set()

    def _label(self) -> str:
        return "" if self.part is None else f" partition {self.part}"

    def _epochs(self) -> dict[str, int]:
        """The first epoch each generation here has not finished (for logs and ``done``)."""
        return {f"g{k[2]}": min((lane.epoch for lane in inst.lanes), default=0)
                for k, inst in self.host.instances.items()}

    # ------------------------------------------------------------------ the loop
    def _ended(self) -> bool:
        """The host has run its last epoch (an adaptive node: and every node is idle, nothing in flight)."""
        if self.adaptive is not None:
            return self.adaptive.over(self._publish_done)
        return self.host.finished

    def _inputs(self) -> list[Any]:
        """The next messages to handle (an adaptive node with checkpoints logs their order, and a restarted
        one hands the logged ones over in that order first)."""
        if self.adaptive is not None:
            return self.adaptive.inputs(lambda: consume(self.consumer, 2000, 0.05))
        return consume(self.consumer, 2000, 0.05)

    def _step(self, now: float) -> None:
        if self.adaptive is not None:
            self.adaptive.step(now)
        else:
            self.host.run(now)
            apply(self.gate.decide(self.host), self.consumer, TopicPartition(self.my_topic, self.part or 0))
            changes = self.src_gate.decide(self.host, self.q.name)
            if changes:
                self._pause_sources(changes)

    def _pause_sources(self, changes: dict[str, bool]) -> None:
        """Pause or resume the source topics of the streams :class:`SourceGate` named."""
        topics = {name: topic for topic, name in self.src_topics.items()}
        if self.live is not None:
            topics.update({name: src.topic for name, src in self.live.sources.items()})
        for topic, pause in self.src_gate.topics_to_change(changes, topics).items():
            tps = [TopicPartition(tp.topic, tp.partition) for tp in self.tps if tp.topic == topic]
            if tps:
                (self.consumer.pause if pause else self.consumer.resume)(tps)

    def _loop(self) -> None:
        svc, host, live = self.svc, self.host, self.live
        t_start, cpu_start = time.perf_counter(), time.process_time()
        self._t0, self._cpu0 = t_start, cpu_start
        next_status = next_gauges = time.monotonic()
        every = svc.checkpoint_every_s
        next_ckpt = next_status + every if self.ckpt and every > 0 else float("inf")
        while not self.stopped and not self._ended():
            if self.halt.is_set():
                if self.ckpt and self.save_on_halt:
                    self._checkpoint()
                saved = " (checkpoint saved)" if self.ckpt and self.save_on_halt else ""
                svc.log(f"{self.q.name}{self._label()}: stopped before finishing{saved}")
                self.out.flush(5)
                return
            now = now_ms()
            for m in self._inputs():
                self._handle(m, now)
            if live is not None:
                live.tick(now, self.consumer)
                live.drain(self.adaptive if self.adaptive is not None else host,  # adaptive: held at the fence
                           self.values.add if self.values is not None else None)
            self._step(now)
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
                self._status()
        self._finish(time.perf_counter() - t_start, time.process_time() - cpu_start)

    def _status(self) -> None:
        epochs = self._epochs()
        payload: dict[str, Any] = {
            "site": self.site, "run": self.run_id, "epoch": min(epochs.values(), default=0),
            "epochs": epochs, "last_epoch": self.host.last.get(self.q.name), "t_ms": round(now_ms()),
            "results": self.sink.count, "sent_bytes": sum(st.bytes for st in self.transport.stats.values()),
            "inputs": {s: n for (_, s), n in self.counters.totals.inputs.items()},
            "naive": [[src, dst, n] for (src, dst), n in sorted(self.counters.naive.items())],
            **self.labels,
        }
        if self.live is not None:
            payload["live"] = True
            payload["dead_letters"] = self.live.stats()["dead_letters"]
            payload["watermarks_ms"] = self.live.watermarks_ms()
            payload["latency_ms"] = self.tap.take()
            if self.values is not None and time.monotonic() >= self._values_due:
                report = self.values.report()
                if report is not None:
                    payload["values"] = report
                    self._values_due = time.monotonic() + VALUES_EVERY_S
        if self.adaptive is not None:
            payload["adaptive"] = self.adaptive.status()
        publish_control(self.out, self.q.name, "status", payload, flush=False)

    def _handle(self, m: Any, now: float) -> None:
        topic = m.topic()
        if topic == CONTROL_TOPIC:
            self._control(m)
            return
        if self.live is not None and topic in self.live.by_topic:
            self.live.handle(m, now)
            return
        sent = None
        proto = any(k == ADAPTIVE_HEADER for k, _ in m.headers() or ())
        for k, v in m.headers() or ():
            if k == "sent_ms":
                try:
                    sent = float(v)
                except (TypeError, ValueError):
                    self._reject(m, BAD_HEADER, f"sent_ms header {bytes(v or b'')[:40]!r} is not a number")
                    return
                if not math.isfinite(sent):
                    self._reject(m, BAD_HEADER, f"sent_ms header {sent} is not finite")
                    return
            elif k == "run" and self.run_id is not None and v != self.topic_runs.get(topic, self.run_id).encode():
                return  # a message of another run of this query
        if topic == self.my_topic:
            self._inbound(m, now, sent if sent is not None else float(m.timestamp()[1]), proto)
        elif topic in self.src_topics:
            self._source(m)

    def _inbound(self, m: Any, now: float, sent: float, proto: bool) -> None:
        """A message of ``node.<query>.<site>``: an envelope, or (header ``adaptive``) a protocol message."""
        if not proto:
            self._message(m, now, sent)
        elif self.adaptive is not None:
            self.adaptive.on_kafka(m, now, sent)
        else:
            self._reject(m, INVALID, "an adaptive protocol message in a run of a plan that is not adaptive")

    def _reject(self, m: Any, reason: str, detail: str) -> None:
        self.svc.rejections.reject(m.topic(), reason, detail, m.partition() or 0, m.offset())

    def _envelope(self, m: Any) -> Optional[Any]:
        """The envelope of a message of ``node.<query>.<site>``, or None (rejected) if it does not decode or
        names no flow of a plan instance here that ends at this site and starts at the sending site."""
        try:
            env = wire.decode_envelope(m.value(), (m.key() or b"").decode(), self.site)
        except Exception as e:  # garbage may trip the decoder in several ways
            self._reject(m, UNDECODABLE, f"not an Envelope: {type(e).__name__}: {str(e)[:200]}")
            return None
        env.query = self.q.name
        inst = self.host.instances.get((env.query, env.part, env.gen))
        why = None
        if inst is None:
            # adaptive: a node that switched first sends the new generation's envelopes before this one switched
            ahead = self.adaptive.flows_for(env.gen) if self.adaptive is not None and env.part == 0 else None
            why = (f"no plan instance (part {env.part}, generation {env.gen}) of {env.query} here" if ahead is None
                   else ahead.check(env.src, env.flow, env.epoch, env.body))
        else:
            flows = self._flows.get(id(inst))
            if flows is None:
                flows = self._flows[id(inst)] = InboundFlows(inst.ir, self.site)
            why = flows.check(env.src, env.flow, env.epoch, env.body)
        if why is not None:
            self._reject(m, INVALID, why)
            return None
        return env

    def _message(self, m: Any, now: float, sent: float) -> None:
        env = self._envelope(m)
        if env is None:
            return
        if not self.host.on_message(env, now, sent):
            return  # a copy sent again by a restarted node
        self.gate.received(env.part, env.gen, env.flow, env.epoch)
        kind = env.kind
        st = self.counters.received[(env.src, env.dst, kind)]
        st.messages += 1
        st.bytes += len(m.value())
        st.transfer_ms += max(0.0, now - sent)
        self.svc.sensor.on_transmission(env.src, env.dst, kind, (now - sent) / 1000.0)

    def _source(self, m: Any) -> None:
        try:
            b = records.decode_source_batch(m.value())
        except Exception as e:
            self._reject(m, UNDECODABLE, f"not a SourceBatch: {type(e).__name__}: {str(e)[:200]}")
            return
        stream = self.q.stream(self.src_topics[m.topic()])
        tuples = self._tuples(b, stream)
        if tuples is None:
            self._reject(m, INVALID, f"a SourceBatch of stream {b.stream[:40]!r} on the topic of {stream.name}")
            return
        if self.others and tuples:
            self._naive_all(tuples[0].ts // self.q.execution.interval_ms, tuples)
        wm = self._watermark(b, stream)
        if self.adaptive is not None:  # the node holds the watermark at its fence during a migration
            self.adaptive.on_source(stream.name, tuples, wm)
        else:
            self.host.feed(self.q.name, stream.name, tuples, wm, self.part)

    def _tuples(self, b: Any, stream: Any) -> Optional[list[Any]]:
        """A SourceBatch's tuples as tuples of ``stream``, or None if it is not a batch of that stream."""
        if b.stream != stream.name or any(t.pos != stream.pos for t in b.tuples):
            return None
        return list(b.tuples)

    def _watermark(self, b: Any, stream: Any) -> int:
        """A SourceBatch's watermark in this run's event time (a shared operator's reader moves it)."""
        return int(b.watermark)

    def _naive_all(self, epoch: int, tups: list[Any]) -> None:
        for dst in self.others:
            self._naive(dst, epoch, tups)

    def _naive(self, dst: str, epoch: int, tups: list[Any]) -> None:
        n = wire.naive_batch_size(epoch, tups)
        self.counters.naive[(self.site, dst)] += n
        self.svc.sensor.on_naive(self.site, dst, n)

    def _control(self, m: Any) -> None:
        r = decode_control_message(m, self.svc.reject_control)
        if r is None:
            return
        self.ctl.add(r)
        if r.query != self.ctl_query:
            return
        if r.kind == "end" and end_applies(r, self.run_id):
            self.host.set_last(self.q.name, int(r.payload["last_epoch"]))  # type: ignore[index]
        elif r.kind == "stop" and self.ctl.is_stopped(self.rec):
            self.stopped = True
        elif r.kind == "done" and self.adaptive is not None and isinstance(r.payload, dict) \
                and r.payload.get("run") == self.run_id:
            self.adaptive.on_done(r.payload)

    # ------------------------------------------------------------------ the end
    def _publish_done(self) -> dict[str, Any]:
        """An adaptive node's ``done`` while it serves the protocol on (see :meth:`_ended`)."""
        done = self._done(time.perf_counter() - self._t0, time.process_time() - self._cpu0)
        publish_control(self.out, self.q.name, "done", done)
        return done

    def _finish(self, wall: float, cpu: float) -> None:
        svc, q, site = self.svc, self.q, self.site
        self.out.flush()
        self._gauges()
        done = self.finished = self._done(wall, cpu)
        publish_control(self.out, q.name, "done", done)
        self._cleanup()
        self.ctl.done.add((self.run_id, site))
        svc.finished_runs.append(done)
        sent = sum(ln["bytes"] for ln in self.transport.links())
        svc.log(f"{q.name}{self._label()}: {'stopped' if self.stopped else 'done'}: {self.sink.count} results, "
                f"{sent} bytes sent in {wall:.2f}s")

    def _done(self, wall: float, cpu: float) -> dict[str, Any]:
        """The ``done`` payload: what the node did, for the cluster report."""
        q, site, c = self.q, self.site, self.counters
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
            "resumed_from": self.resumed_from,
            "resumed_from_epoch": min(self.resumed_from.values()) if self.resumed_from else None,
            "startup_s": self.startup_s,
            "checkpoints": self.ckpt.saved if self.ckpt else 0,
            "generations": sorted(k[2] for k in self.host.instances),
            **self.labels,
        }
        if self.live is not None:
            done.update(stopped=self.stopped, **self.live.stats())
        elif self.stopped:
            done["stopped"] = True
        if self.adaptive is not None:
            done["adaptive"] = self.adaptive.done_extra()
        return done

    def _cleanup(self) -> None:
        if self.ckpt:
            self.ckpt.clear()
        if self.adaptive is not None and self.adaptive.order is not None:
            self.adaptive.order.clear()
        for store in self.made:
            try:
                store.clear()
            except Exception as e:  # the run's result stands; stale keys are only a leak
                self.svc.log(f"could not clear window store: {e}")
        if self.factory is not None and hasattr(self.factory, "close"):
            self.factory.close()

    # ------------------------------------------------------------------ checkpoints, gauges
    def extra_state(self) -> Any:
        """What a checkpoint keeps of this run besides the host, sources and counters (plain data; a tree
        operator's: its results not handed over yet)."""
        return None

    def restore_extra(self, st: Any) -> None:
        """The inverse of :meth:`extra_state`, on resuming."""

    def _checkpoint(self) -> None:
        assert self.ckpt is not None
        t0 = time.perf_counter()
        # what the checkpoint says was sent must be in Kafka: a replay from it won't resend it; a broker outage
        # is waited out (up to message.timeout.ms), not a reason to fail the run
        self.out.drain(self.svc.log)
        self.ckpt.save(self)
        self.svc.sensor.on_checkpoint(self.site, time.perf_counter() - t0)

    def _checkpoints(self, factory: Any) -> Optional[NodeCheckpoints]:
        """Checkpoints of this run, when its windows are in Redis (else None: nothing to resume from).
        An adaptive run's also log the order of its inputs, and a live adaptive run takes none (its live
        sources are not in that log; docs/adaptive.md)."""
        client, namespace = getattr(factory, "client", None), getattr(factory, "namespace", None)
        ckpt = None
        if client is not None and namespace is not None and not (self.adaptive and live_streams(self.q, self.site)):
            ckpt = NodeCheckpoints(client, namespace, self.site, self.svc.log)
        if self.adaptive is not None:
            self._adaptive_checkpoints(ckpt)
        return ckpt

    def _adaptive_checkpoints(self, ckpt: Optional[NodeCheckpoints]) -> None:
        assert self.adaptive is not None
        if ckpt is not None:
            self.adaptive.order = OrderLog(ckpt.store.client, ckpt.store.tag)
        elif self.run_id is not None and (self.run_id, self.site) in self.ctl.started:
            # a predecessor ran it (its status is on control) and there is nothing to resume from
            raise ClusterError(f"node {self.site}: the adaptive run {self.run_id} of {self.q.name} already ran here "
                               "and did not finish; without checkpoints (Redis windows, replayed sources) an "
                               "adaptive run cannot be resumed after a crash (docs/adaptive.md): start the run "
                               "again")

    def _gauges(self) -> None:
        sens, site = self.svc.sensor, self.site
        try:
            for (_, _, name), w in self.host.windows.items():
                sens.on_window(site, name, "home", len(w.store))
            for inst in self.host.instances.values():
                for sig, store in inst.stores.items():
                    op = inst.ir.replica(sig)
                    sens.on_window(site, op.stream, op.kind, len(store))
            positions = self.consumer.position([TopicPartition(tp.topic, tp.partition) for tp in self.tps])
            for tp in positions:
                lo, hi = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
                if hi >= 0:
                    pos = tp.offset if tp.offset >= 0 else lo
                    sens.set_lag(site, tp.topic, max(0, hi - pos))
            if self.live is not None:
                now = now_ms()
                for name, wm in self.live.watermarks_ms().items():
                    sens.set_watermark_lag(site, self.q.name, name, (now - wm) / 1000.0)
        except Exception:  # metrics must never take the node down
            pass


def end_applies(rec: ControlRecord, run: Optional[str]) -> bool:
    """Does the ``end`` message ``rec`` apply to a run with id ``run``?"""
    p = rec.payload if isinstance(rec.payload, dict) else {}
    return "last_epoch" in p and (p.get("run") is None or p.get("run") == run)


def _positions(offsets: dict[str, Any], parts: Optional[dict[str, Any]] = None) -> dict[tuple[str, int], int]:
    """A plan message's ``offsets`` (topic -> offset of partition 0) and ``part_offsets`` (topic -> the
    offset of each partition: a scaled-out plan's topics) as (topic, partition) -> offset."""
    out = {(t, 0): int(o) for t, o in offsets.items() if o is not None}
    for t, offs in (parts or {}).items():
        out.update({(t, i): int(o) for i, o in enumerate(offs) if o is not None})
    return out
