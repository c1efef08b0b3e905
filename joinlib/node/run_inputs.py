"""A run's inputs (:class:`RunInputs`): the topics a :class:`~.node_run.PlanRun` reads and what it does with
each message -- source batches to the host, envelopes checked against the plan's flows, control messages to
the run -- with back-pressure on the inbound and source topics (:mod:`.backpressure`).
"""
from __future__ import annotations

import math
from typing import Any, Optional

from joinlib.adapters.kafka import (
    OFFSET_BEGINNING,
    TopicPartition,
    ensure_partitions,
    ensure_topics,
    inbound_topics,
    is_control_topic,
    node_topic,
    out_topic,
    report_topics,
    sink_topics,
    source_topic,
    status_topic,
    warm_up,
)
from joinlib.control.check import BAD_HEADER, INVALID, UNDECODABLE, InboundFlows
from joinlib.model import Tup
from joinlib.node.adaptive_service import ADAPTIVE_HEADER
from joinlib.node.backpressure import InboundGate, SourceGate, apply
from joinlib.node.sources import dlq_topic, live_streams, marks_topic
from joinlib.protocol import records, wire

#: what a topic's messages are, decided at its first message (RunInputs.handle): control and reports, a live
#: source's records, or anything else (flows, replayed sources)
_CONTROL, _LIVE, _OTHER = object(), object(), object()


class RunInputs:
    """What ``run`` reads: ``control`` (from after its plan) and the report topics (an adaptive run: its peers'
    too, for their dones), its home streams' source topics (or
    their live sources), and its inbound flow topics ``node.<query>.<site>.from.<peer>``; :meth:`handle` takes one
    message."""

    def __init__(self, run: Any) -> None:
        self.run = run
        q, site = run.q, run.site
        self.homes = {s.name for s in q.streams if s.site == site}
        self.others = [x for x in q.sites if x != site]  # the naive baseline: every stream to every site
        self.inbound = inbound_topics(q.name, site, q.nodes)   # topic -> the sending site
        self.outbound = [node_topic(q.name, dst, site) for dst in q.nodes if dst != site]
        live = set() if run.scope.rekeyed else {s.name for s in live_streams(q, site)}
        self.src_topics = {source_topic(q, s.name): s.name for s in q.streams if s.site == site and s.name not in live}
        self.tps: list[TopicPartition] = []
        self.gate = InboundGate(site, q.execution.interval_ms)
        self.src_gate = SourceGate(q.execution.interval_ms)
        self.flows: dict[int, InboundFlows] = {}   # per plan instance: its flows to this site
        self._kinds: dict[str, object] = {}          # topic -> what its messages are (_CONTROL, _LIVE, _OTHER)

    def assign(self, offsets: dict[tuple[str, int], int]) -> None:
        """Make the run's topics and assign its consumer every partition it reads, each from ``offsets``
        (absent: the beginning)."""
        run, q = self.run, self.run.q
        extra = [dlq_topic(run.live_name), marks_topic(run.live_name)] if run.live is not None else []
        peers = report_topics(run.adaptive.participants) if run.adaptive is not None else []
        ensure_topics(run.admin, [out_topic(q.name), *sink_topics(q), *extra, *peers])
        run.ctl.watch(peers)   # an adaptive run ends when every participant's done is read (AdaptivePart.on_done)
        ensure_partitions(run.admin, [*self.inbound, *self.src_topics], run.scope.topic_parts)
        part = run.scope.part or 0   # the partition of the source and node topics read here

        def start(topic: str) -> int:
            off = offsets.get((topic, part))
            return OFFSET_BEGINNING if off is None else int(off)
        self.tps = (run.ctl.assignment(run.rec.offset)
                    + [TopicPartition(t, part, start(t)) for t in self.src_topics]
                    + [TopicPartition(t, part, start(t)) for t in self.inbound]
                    + (run.live.topic_partitions() if run.live is not None else []))
        run.consumer.assign(self.tps)
        warm_up(run.out.producer, self.outbound + [out_topic(q.name), status_topic(run.site)]
                + sink_topics(q) + extra)

    # ------------------------------------------------------------------ one message
    def _kind(self, topic: str) -> object:
        live = self.run.live
        kind = self._kinds[topic] = (_CONTROL if is_control_topic(topic) else
                                     _LIVE if live is not None and topic in live.by_topic else _OTHER)
        return kind

    def handle_all(self, msgs: list[Any], now: float) -> None:
        """:meth:`handle` of each of ``msgs`` in order; a run of consecutive records of one live source's topic
        goes to its sources at once (:meth:`~.sources.LiveSources.handle_run`): most messages of a draining node."""
        kinds, i, n = self._kinds, 0, len(msgs)
        while i < n:
            topic = msgs[i].topic()
            if (kinds.get(topic) or self._kind(topic)) is not _LIVE:
                self.handle(msgs[i], now)
                i += 1
                continue
            j = i + 1
            while j < n and msgs[j].topic() == topic:
                j += 1
            self.run.live.handle_run(topic, msgs[i:j], now)
            i = j

    def handle(self, m: Any, now: float) -> None:
        run = self.run
        topic = m.topic()
        kind = self._kinds.get(topic) or self._kind(topic)
        if kind is _LIVE:   # most messages: a live source's records
            run.live.handle(m, now)
            return
        if kind is _CONTROL:
            run.on_control(m)
            return
        sent = None
        proto = any(k == ADAPTIVE_HEADER for k, _ in m.headers() or ())
        for k, v in m.headers() or ():
            if k == "sent_ms":
                try:
                    sent = float(v)
                except (TypeError, ValueError):
                    self.reject(m, BAD_HEADER, f"sent_ms header {bytes(v or b'')[:40]!r} is not a number")
                    return
                if not math.isfinite(sent):
                    self.reject(m, BAD_HEADER, f"sent_ms header {sent} is not finite")
                    return
            elif k == "run" and run.run_id is not None and v != run.scope.topic_runs.get(topic, run.run_id).encode():
                return  # a message of another run of this query
        if topic in self.inbound:
            self._inbound(m, now, sent if sent is not None else float(m.timestamp()[1]), proto)
        elif topic in self.src_topics:
            self._source(m)

    def sender(self, m: Any) -> Optional[str]:
        """The site that sent ``m``, as its topic names it; None (rejected) if its key names another."""
        src = self.inbound[m.topic()]
        key = m.key()
        if key is not None and key != src.encode():
            self.reject(m, INVALID, f"keyed {bytes(key)[:40]!r} on the flow topic of {src[:40]!r}")
            return None
        return src

    def reject(self, m: Any, reason: str, detail: str) -> None:
        self.run.svc.rejections.reject(m.topic(), reason, detail, m.partition() or 0, m.offset())

    def _inbound(self, m: Any, now: float, sent: float, proto: bool) -> None:
        """A message of an inbound flow topic: an envelope, or (header ``adaptive``) a protocol message."""
        if not proto:
            self._message(m, now, sent)
        elif self.run.adaptive is not None:
            self.run.adaptive.on_kafka(m, now, sent)
        else:
            self.reject(m, INVALID, "an adaptive protocol message in a run of a plan that is not adaptive")

    def _envelope(self, m: Any) -> Optional[Any]:
        """The envelope of a message of an inbound flow topic, or None (rejected) if it does not decode or
        names no flow of a plan instance here that ends at this site and starts at the sending site -- the
        site the topic names (only its principal may write the topic), whatever the message's key says."""
        run = self.run
        src = self.sender(m)
        if src is None:
            return None
        try:
            env = wire.decode_envelope(m.value(), src, run.site)
        except Exception as e:  # garbage may trip the decoder in several ways
            self.reject(m, UNDECODABLE, f"not an Envelope: {type(e).__name__}: {str(e)[:200]}")
            return None
        env.query = run.q.name
        inst = run.host.instances.get((env.query, env.part, env.gen))
        if inst is None:
            # adaptive: a node that switched first sends the new generation's envelopes before this one switched
            ahead = run.adaptive.flows_for(env.gen) if run.adaptive is not None and env.part == 0 else None
            why = (f"no plan instance (part {env.part}, generation {env.gen}) of {env.query} here" if ahead is None
                   else ahead.check(env.src, env.flow, env.epoch, env.body))
        else:
            flows = self.flows.get(id(inst))
            if flows is None:
                flows = self.flows[id(inst)] = InboundFlows(inst.ir, run.site)
            why = flows.check(env.src, env.flow, env.epoch, env.body)
        if why is not None:
            self.reject(m, INVALID, why)
            return None
        return env

    def _message(self, m: Any, now: float, sent: float) -> None:
        env = self._envelope(m)
        run = self.run
        if env is None or not run.host.on_message(env, now, sent):
            return  # rejected, or a copy sent again by a restarted node
        self.gate.received(env.part, env.gen, env.flow, env.epoch)
        kind = env.kind
        st = run.counters.received[(env.src, env.dst, kind)]
        st.messages += 1
        st.bytes += len(m.value())
        st.transfer_ms += max(0.0, now - sent)
        run.svc.sensor.on_transmission(env.src, env.dst, kind, (now - sent) / 1000.0)

    def _source(self, m: Any) -> None:
        run = self.run
        try:
            b = records.decode_source_batch(m.value())
        except Exception as e:
            self.reject(m, UNDECODABLE, f"not a SourceBatch: {type(e).__name__}: {str(e)[:200]}")
            return
        stream = run.q.stream(self.src_topics[m.topic()])
        tuples = run.reader.tuples(run, b, stream)
        if tuples is None:
            self.reject(m, INVALID, f"a SourceBatch of stream {b.stream[:40]!r} on the topic of {stream.name}")
            return
        if run.reader.naive and self.others and tuples:
            self.naive(self.others, tuples[0].ts // run.q.execution.interval_ms, tuples)
        wm = run.reader.watermark(run, b, stream)
        if run.adaptive is not None:  # the node holds the watermark at its fence during a migration
            run.adaptive.on_source(stream.name, tuples, wm)
        else:
            run.host.feed(run.q.name, stream.name, tuples, wm, run.scope.part)

    def naive(self, dsts: list[str], epoch: int, tups: list[Tup]) -> None:
        """What shipping ``tups`` (a batch of epoch ``epoch``) to each of ``dsts`` would cost: the naive baseline.
        The batch is the same whatever the site it would go to: sized once, counted for each."""
        run = self.run
        n = wire.naive_batch_size(epoch, tups)
        for dst in dsts:
            run.counters.naive[(run.site, dst)] += n
            run.svc.sensor.on_naive(run.site, dst, n)

    # ------------------------------------------------------------------ back-pressure
    def pace(self) -> None:
        """After a step of the host: pause or resume the inbound partitions and the source topics."""
        run = self.run
        part = run.scope.part or 0
        apply(self.gate.decide(run.host), run.consumer, [TopicPartition(t, part) for t in self.inbound])
        changes = self.src_gate.decide(run.host, run.q.name)
        if changes:
            self._pause_sources(changes)

    def _pause_sources(self, changes: dict[str, bool]) -> None:
        """Pause or resume the source topics of the streams :class:`SourceGate` named."""
        run = self.run
        topics = {name: topic for topic, name in self.src_topics.items()}
        if run.live is not None:
            topics.update({name: src.topic for name, src in run.live.sources.items()})
        for topic, pause in self.src_gate.topics_to_change(changes, topics).items():
            tps = [TopicPartition(tp.topic, tp.partition) for tp in self.tps if tp.topic == topic]
            if tps:
                (run.consumer.pause if pause else run.consumer.resume)(tps)
