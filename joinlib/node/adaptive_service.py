"""A node service's run of an adaptive plan (``--plan adaptive[:cnu|:dnu] --cluster``, docs/adaptive.md).

A node's run (:class:`~.node_run.PlanRun`) of a plan message with an ``adaptive`` object has an
:class:`AdaptivePart`, which

* builds the host on :class:`~joinlib.adaptive.node.SnapshotFilter` (a new generation's replicas are
  started by the node, not by the home's snapshot) and wraps it in an
  :class:`~joinlib.adaptive.node.AdaptiveNode`, which installs generation 0 (Algorithm 1's plan, the
  plan message's ``plan``);
* sends the protocol's messages on the same topics as the envelopes (``node.<query>.<dst>.from.<src>``, key the
  sending site, headers ``run``, ``sent_ms``, ``kind`` and ``adaptive: 1``): one consumer and one
  producer per node, so every link keeps its order;
* feeds the home streams' tuples *without* their watermark and advances the node with the least
  watermark of its home streams: the node holds its inserts at its fence during a migration;
* accepts envelopes of the generation a round is installing once the node knows the round's plan
  (a node that switched first may send them before this one switched), checked against that plan;
* decides when the node may stop (:func:`joinlib.adaptive.service.quiescent`): it publishes ``done``
  when its host has finished and it is idle, and serves the protocol on until every node is idle
  with no message in flight.

**Restarts** (windows in Redis; replayed or live sources): the node's checkpoint holds
:meth:`~joinlib.adaptive.node.AdaptiveNode.state` (its stores copied in Redis as for any node), and between
checkpoints the node logs the *order* in which it took its inputs (:class:`OrderLog`: per loop iteration the
(topic, partition, offset) of every message, in Redis, before it handles them, and the watermarks its live
sources handed it when they changed).  A successor consumes from the checkpoint's
positions but hands the logged messages over in the logged order, a step after each iteration as before: the
node is deterministic in the order of its inputs, so it makes the same decisions (the fence its GLOBAL_READY
announced, the relays it sent) and sends the same messages again, which the receivers drop as copies.  With
live sources the successor also applies the idle advances logged in ``wm.<query>`` at their positions, decides no
new one while it replays, and hands the node the logged watermarks in the logged iterations
(:meth:`AdaptivePart.drain_caps`).
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Optional

from joinlib.adapters.kafka import is_control_topic, node_topic, now_ms
from joinlib.adaptive import protocol
from joinlib.adaptive.config import AdaptiveConfig, AdaptiveSensor, LogSensor, adaptive_sensor
from joinlib.adaptive.embedded import AdaptiveTotals
from joinlib.adaptive.jep import JEP
from joinlib.adaptive.migration import Generation
from joinlib.adaptive.node import AdaptiveNode, SnapshotFilter
from joinlib.adaptive.protocol import Message, Relay, StatsReport
from joinlib.adaptive.service import Tally, quiescent
from joinlib.adaptive.stats import StreamStatistics
from joinlib.control.check import INVALID, UNDECODABLE, InboundFlows
from joinlib.control.messages import DoneMessage
from joinlib.errors import ClusterError
from joinlib.model import Query, Tup
from joinlib.plan.ir import lower
from joinlib.runtime.host import Host
from joinlib.runtime.sensor import Sensor

ADAPTIVE_HEADER = "adaptive"
REPLAY_WAIT_S = 60.0


#: one logged iteration of a node's loop: the messages it took, as (topic, partition, offset) in the order taken, and
#: the watermarks its live sources handed the node in it (stream -> ms from the origin; None: unchanged)
Iteration = tuple[list[tuple[str, int, int]], Optional[dict[str, int]]]


class OrderLog:
    """The order in which a node took its inputs since its last checkpoint, in a Redis list next to the
    checkpoint (``{<ns>/<site>}#order``), tagged with the checkpoint it follows (a crash between a checkpoint and
    the trimming of the list leaves entries of the old tag: ignored).  Per loop iteration (numbered from the
    checkpoint) up to two entries: the messages it consumed, written before the node handles them, and -- a run
    with live sources -- the watermarks the sources then handed the node, when they changed.  Why the watermarks:
    a live source's watermark also moves with processing time (idle advances, applied when the broker confirmed
    them), so the records alone do not say when the node saw it move; the adaptive node's decisions (the fence
    its GLOBAL_READY announces) depend on when.  Messages are kept as runs ``[topic, partition, first, count]``
    of consecutive offsets: a draining node takes thousands of source records an iteration."""

    def __init__(self, client: Any, tag: str) -> None:
        self.client, self.key = client, tag + "#order"
        self.tag = "start"   # before the first checkpoint
        self.iteration = 0   # of the loop, since the checkpoint

    def append(self, msgs: list[Any]) -> None:
        """Start a new iteration and log its messages, but those of ``control`` and the report topics: a
        restarted node reads them from their ends (it knows the run's ``end`` from the start), and their other
        messages (``done``, ``stop``) only end the run."""
        self.iteration += 1
        runs: list[list[Any]] = []
        for m in msgs:
            topic = m.topic()
            if is_control_topic(topic):
                continue
            part, off = m.partition(), m.offset()
            last = runs[-1] if runs else None
            if last is not None and last[0] == topic and last[1] == part and last[2] + last[3] == off:
                last[3] += 1
            else:
                runs.append([topic, part, off, 1])
        if runs:
            self.client.rpush(self.key, json.dumps([self.tag, self.iteration, runs]))

    def append_marks(self, marks: dict[str, int]) -> None:
        """The watermarks the live sources handed the node in the current iteration (they changed)."""
        self.client.rpush(self.key, json.dumps([self.tag, self.iteration, None, marks]))

    def resume(self, tag: str) -> list[Iteration]:
        """The iterations logged after checkpoint ``tag``, in order (one with neither messages nor watermarks is
        left out: it changed nothing); the log goes on after them, numbered from the last (a crash during the
        replay must find them again, and the new ones after them)."""
        its: dict[int, tuple[list[tuple[str, int, int]], Optional[dict[str, int]]]] = {}
        for raw in self.client.lrange(self.key, 0, -1):
            t, i, runs, *marks = json.loads(raw)
            if t != tag:
                continue
            msgs, got = its.get(i, ([], None))
            if runs:
                msgs = [(str(topic), int(part), int(first) + k) for topic, part, first, n in runs for k in range(n)]
            if marks:
                got = {str(s): int(w) for s, w in marks[0].items()}
            its[i] = (msgs, got)
        self.tag, self.iteration = tag, max(its, default=0)
        return [its[i] for i in sorted(its)]

    def checkpointed(self, tag: str) -> None:
        """A checkpoint with ``tag`` is saved: later entries follow it, earlier ones are done with."""
        self.tag = tag
        self.iteration = 0
        self.client.delete(self.key)

    def clear(self) -> None:
        self.client.delete(self.key)


class AdaptiveHostSensor(AdaptiveSensor):
    """The host's sensor in an adaptive run: the runtime's hooks go to the run's sensor (Prometheus and
    the totals of ``done``), the adaptive hooks to the service's Prometheus sensor, the service log and
    ``record`` (the triggers and plan changes ``done`` carries)."""

    def __init__(self, base: Sensor, prom: Any, log: Callable[[str], None]) -> None:
        self.base = base
        self.record = AdaptiveTotals()
        self.others: list[AdaptiveSensor] = [adaptive_sensor(prom), LogSensor(log), self.record]

    def on_input(self, site: str, stream: str, n: int) -> None:
        self.base.on_input(site, stream, n)

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        self.base.on_phase(site, operator, seconds)

    def on_emit(self, site: str, n: int) -> None:
        self.base.on_emit(site, n)

    def on_late(self, site: str, kind: str) -> None:
        self.base.on_late(site, kind)

    def on_window(self, site: str, stream: str, store: str, size: int) -> None:
        self.base.on_window(site, stream, store, size)

    def on_stream_stats(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        for s in self.others:
            s.on_stream_stats(site, query, epoch, stats)

    def on_trigger(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        for s in self.others:
            s.on_trigger(site, query, epoch, stats)

    def on_plan_change(self, site: str, query: str, gen: int, epoch: int, jep: JEP,
                       triggers: tuple[int, ...]) -> None:
        for s in self.others:
            s.on_plan_change(site, query, gen, epoch, jep, triggers)

    def on_protocol(self, site: str, kind: str, category: str) -> None:
        for s in self.others:
            s.on_protocol(site, kind, category)


class AdaptivePart:
    """The adaptive side of one node service run (``run``: a :class:`~.node_run.PlanRun`; see the module
    docstring)."""

    def __init__(self, run: Any, config: AdaptiveConfig, initial: JEP, gen: int = 0, start: int = 0) -> None:
        """``gen``, ``start``: the number and first head epoch of the generation the run starts with, whose plan is
        ``initial`` (a replanned run's: after the run it replaces, docs/live.md "Replan")."""
        self.run, self.cfg, self.initial = run, config, initial
        self.first = Generation(gen, initial, start)
        self.q: Query = run.q
        self.site: str = run.site
        self.participants = self.q.sites
        self.homes = tuple(s.name for s in self.q.streams if s.site == self.site)
        self.tally = Tally(self.q, config.monitor.interval_ms)
        self.marks: dict[str, int] = {}
        self.flows: dict[int, InboundFlows] = {}      # per generation a round is installing
        self.dones: dict[str, dict[str, Any]] = {}    # every participant's latest done of this run
        self.published: Optional[tuple[Any, ...]] = None
        self.node: Optional[AdaptiveNode] = None
        self.sensor: Optional[AdaptiveHostSensor] = None
        self.parts: tuple[Any, ...] = ()
        self.order: Optional[OrderLog] = None           # with checkpoints (Redis)
        self.replay: list[Iteration] = []               # logged iterations still to hand over again
        self.buffer: dict[tuple[str, int, int], Any] = {}   # messages consumed during the replay
        self.leftover: list[Any] = []                   # consumed during the replay, in no logged iteration
        # the current iteration's logged watermarks while it is a logged one handed over again, else None
        self.caps: Optional[dict[str, int]] = None
        self.fed_marks: Optional[dict[str, int]] = None   # what the live sources handed the node last

    # ------------------------------------------------------------------ setup
    def host(self, base: Sensor, sink: Any, store_factory: Any) -> Host:
        """The run's host, with the adaptive node around it (generation 0 installed)."""
        svc = self.run.svc
        self.sensor = AdaptiveHostSensor(base, svc.sensor, svc.log)
        self.parts = (sink, store_factory)
        host = self._new_host()
        self.node = AdaptiveNode(self.site, self.q, self.cfg, host, self.send, self.initial, [self.first])
        return host

    def _new_host(self) -> Host:
        sink, store_factory = self.parts
        return Host(self.site, SnapshotFilter(self.run.transport, self.first.gen), sink, store_factory=store_factory,
                    sensor=self.sensor)

    # ------------------------------------------------------------------ checkpoints
    def snapshot(self, tag: str) -> dict[str, Any]:
        """What a checkpoint (``tag``) keeps besides the host's: the node (without the stores' contents), the
        protocol counts, the watermarks, the dones seen, the triggers and changes for ``done``."""
        assert self.node is not None and self.sensor is not None
        rec = self.sensor.record
        return {"tag": tag, "node": self.node.state(with_stores=False), "tally": self.tally.state(),
                "marks": dict(self.marks), "dones": dict(self.dones), "triggers": list(rec.triggers),
                "changes": [[g, c] for g, c in rec.changes.items()]}

    def restore(self, data: dict[str, Any]) -> Host:
        """A fresh host and node from :meth:`snapshot` (the stores rolled back in Redis already); the
        iterations logged after that checkpoint are handed over again first."""
        assert self.sensor is not None
        host = self._new_host()
        self.node = AdaptiveNode.restored(self.site, self.q, self.cfg, host, self.send, self.initial, data["node"])
        self.tally = Tally.restored(self.q, self.cfg.monitor.interval_ms, data["tally"])
        self.marks, self.dones = dict(data["marks"]), dict(data["dones"])
        self.sensor.record.triggers = list(data["triggers"])
        self.sensor.record.changes = {int(g): c for g, c in data["changes"]}
        self.flows = {}
        self.resume_log(data["tag"])
        return host

    def resume_log(self, tag: str) -> None:
        """Hand the iterations logged after checkpoint ``tag`` (``start``: none yet) over again first."""
        if self.order is not None:
            self.replay = self.order.resume(tag)
            if self.replay:
                self.run.svc.log(f"{self.q.name}: handing {len(self.replay)} logged iteration(s) over again")

    @property
    def replaying(self) -> bool:
        """The current iteration is a logged one handed over again: the live sources' idle advances are those
        logged (no new one is decided), and the watermarks they hand the node those logged (:meth:`drain_caps`)."""
        return self.caps is not None

    @property
    def may_checkpoint(self) -> bool:
        """Not while a replay is under way: the consumer's positions are past messages not handed over yet."""
        return not (self.replay or self.buffer or self.leftover or self.caps is not None)

    def inputs(self, more: Callable[[], list[Any]]) -> list[Any]:
        """The next iteration's messages: a logged one while replaying, else what ``more`` consumes (logged
        before the node sees it)."""
        if self.replay:
            return self._replayed(more)
        self.caps = None
        got = self.leftover + more()
        self.leftover = []
        if self.order is not None:
            self.order.append(got)
        return got

    def drain_caps(self) -> Optional[dict[str, int]]:
        """While replaying, the watermark each live stream may hand the node in this iteration: the logged one, or
        the last one handed (the iteration did not move it); None otherwise.  A restarted node's live sources reach
        at least those (the same records, and the idle advances logged in ``wm.<query>`` applied at their
        positions), and may reach more (an advance applied later in the first run, or not at all before the
        crash): capped, the node sees its watermarks move in the same iterations as before."""
        if self.caps is None:
            return None
        return {**self.marks, **self.caps}

    def fed(self, marks: dict[str, int]) -> None:
        """What the live sources handed the node in this iteration (:meth:`~.sources.LiveInputs.drain`): logged
        when it changed (not while replaying: the log holds it already)."""
        if marks != self.fed_marks:
            self.fed_marks = marks
            if self.order is not None and self.caps is None:
                self.order.append_marks(marks)

    def _replayed(self, more: Callable[[], list[Any]]) -> list[Any]:
        """The next logged iteration's messages, in the logged order, after those handed over as they come:
        ``control``'s (not logged) and a live source's records from before the checkpoint's positions (the pending
        records it named, read again).  Those come in an iteration of their own while a stream whose watermark the
        logged iteration moves still waits for them (its sources cannot move it before)."""
        msgs, marks = self.replay[0]
        live = self.run.live
        deadline = time.monotonic() + REPLAY_WAIT_S
        first: list[Any] = []
        while True:
            held = bool(marks and live is not None and live.missing_streams() & marks.keys())
            if held and first:
                self.caps = {}
                return first
            if not held and all(k in self.buffer for k in msgs):
                break
            for m in more():
                if is_control_topic(m.topic()) or (live is not None and live.read_before(m)):
                    first.append(m)
                else:
                    self.buffer[(m.topic(), m.partition(), m.offset())] = m
            if time.monotonic() > deadline:
                lost = [k for k in msgs if k not in self.buffer][:3] or sorted(live.missing_streams() if live else ())
                raise ClusterError(f"node {self.site}: the logged inputs {lost} of run {self.run.run_id} did not "
                                   f"come back within {REPLAY_WAIT_S:.0f} s; start the run again")
        self.replay.pop(0)
        self.caps = dict(marks or {})
        out = first + [self.buffer.pop(k) for k in msgs]
        if not self.replay:
            self.leftover, self.buffer = list(self.buffer.values()), {}
        return out

    @staticmethod
    def new_tag() -> str:
        return uuid.uuid4().hex

    # ------------------------------------------------------------------ protocol messages
    def send(self, msg: Message) -> None:
        run = self.run
        value = protocol.encode(msg)
        kind = msg.kind
        st = run.transport.stats[(msg.src, msg.dst, kind)]
        st.messages += 1
        st.bytes += len(value)
        headers = [("sent_ms", repr(now_ms()).encode()), ("kind", kind.encode()), (ADAPTIVE_HEADER, b"1")]
        if run.run_id:
            headers.append(("run", run.run_id.encode()))
        run.out.produce(node_topic(self.q.name, msg.dst, self.site), value, self.site.encode(), headers)
        run.svc.sensor.on_ship(msg.src, msg.dst, kind, len(value))
        self.tally.on_send(msg, len(value))

    def on_kafka(self, m: Any, now: float, sent: float) -> None:
        """A protocol message from an inbound flow topic: checked, counted, handed to the node."""
        run = self.run
        try:
            msg = protocol.decode(m.value())
        except Exception as e:  # garbage may trip the decoder in several ways
            run.inputs.reject(m, UNDECODABLE, f"not an AdaptiveMessage: {type(e).__name__}: {str(e)[:200]}")
            return
        src = run.inputs.sender(m)   # the site the topic names
        if src is None:
            return
        why = self._invalid(msg, src)
        if why is not None:
            run.inputs.reject(m, INVALID, why)
            return
        assert self.node is not None
        if msg.dedup() in self.node.seen:
            self.node.on_message(msg)   # a copy (a restarted sender's): dropped, not counted
            return
        st = run.counters.received[(msg.src, msg.dst, msg.kind)]
        st.messages += 1
        st.bytes += len(m.value())
        st.transfer_ms += max(0.0, now - sent)
        run.svc.sensor.on_transmission(msg.src, msg.dst, msg.kind, (now - sent) / 1000.0)
        self.tally.on_receive(msg.src)
        self.node.on_message(msg)

    def _invalid(self, msg: Message, sender: str) -> Optional[str]:
        """Why the node must not take ``msg`` (it would fail on it), or None."""
        if msg.query != self.q.name or msg.dst != self.site:
            return f"a protocol message for {msg.query[:40]}/{msg.dst[:40]} on the topic of {self.q.name}/{self.site}"
        if msg.src not in self.participants or msg.src != sender:
            return f"a protocol message from {msg.src[:40]!r} on the flow topic of {sender[:40]!r}: not a node of " \
                   f"{self.q.name} or not its sender"
        node = self.node
        assert node is not None
        if isinstance(msg.body, StatsReport) and node.cnu is None:
            return "a statistics report at a node that does not re-plan"
        if isinstance(msg.body, Relay) and node.dnu is None:
            return "a DNU relay in a CNU run"
        return None

    # ------------------------------------------------------------------ inputs
    def flows_for(self, gen: int) -> Optional[InboundFlows]:
        """The inbound flows of generation ``gen`` when a round here is installing it, else None."""
        got = self.flows.get(gen)
        if got is not None:
            return got
        assert self.node is not None
        for mig in self.node.migs.values():
            if mig.gen == gen and mig.jep is not None:
                got = self.flows[gen] = InboundFlows(lower(self.q, mig.jep.to_plan(self.q)), self.site)
                return got
        return None

    def on_source(self, stream: str, tups: list[Tup], watermark: Optional[int]) -> None:
        """A home stream's batch: its tuples to the home window, its watermark to the node's fence."""
        assert self.node is not None
        self.node.host.feed(self.q.name, stream, tups)
        if watermark is None:
            return
        self.marks[stream] = max(watermark, self.marks.get(stream, watermark))
        if len(self.marks) == len(self.homes):
            self.node.advance(min(self.marks.values()))

    def feed(self, query: str, stream: str, tups: Any, watermark: Optional[int] = None) -> None:
        """``Host.feed`` for the live sources (:meth:`joinlib.node.sources.LiveInputs.drain`)."""
        self.on_source(stream, list(tups), watermark)

    def step(self, now: float) -> None:
        assert self.node is not None
        self.node.step(now)

    # ------------------------------------------------------------------ the end
    @property
    def idle(self) -> bool:
        node = self.node
        return node is not None and node.host.finished and node.settled

    def on_done(self, done: DoneMessage) -> None:
        """A ``done`` of this run (any node's, this one's too) read from ``control``."""
        if done.site in self.participants:
            self.dones[done.site] = done.to_json()

    def over(self, publish: Callable[[], DoneMessage]) -> bool:
        """True when the node may stop; publishes ``done`` (``publish``) each time it becomes idle
        with protocol counts it has not published yet."""
        if not self.idle:
            return False
        counts = self.tally.counts()
        if counts != self.published:
            self.published = counts
            self.dones[self.site] = publish().to_json()
        return quiescent(self.dones, self.participants)

    def status(self) -> dict[str, Any]:
        """What a ``status`` message says about adaptation (``joinlib queries`` shows it)."""
        node = self.node
        rec = self.sensor.record if self.sensor is not None else AdaptiveTotals()
        return {"generation": node.gen if node is not None else 0, "plan_changes": len(rec.changes),
                "triggers": len(rec.triggers), "mode": self.cfg.mode,
                "plan": (node.jep if node is not None else self.initial).to_json()}

    def done_extra(self) -> dict[str, Any]:
        """What ``done`` carries about adaptation (:func:`joinlib.adaptive.service.merge` merges them)."""
        sent, received = self.tally.counts()
        rec = self.sensor.record if self.sensor is not None else AdaptiveTotals()
        node = self.node
        return {"idle": self.idle, "sent": sent, "received": received, "mode": self.cfg.mode,
                "interval_ms": self.cfg.monitor.interval_ms, "triggers": rec.triggers,
                "changes": [rec.changes[g] for g in sorted(rec.changes)], "tally": self.tally.data(),
                "generation": node.gen if node is not None else 0}
