"""Adaptive runs in embedded mode: every node in one process, on the simulated network.

:func:`run_adaptive` is :func:`joinlib.sim.engine.run_embedded` with seed 003 around it: the nodes
measure their streams, re-plan (CNU or DNU) and migrate while the data flows; the protocol's
messages share the simulated links with the data (their encoded bytes, latency, bandwidth and
queueing).  The report adds what changed and what it cost:

* ``changes``: every plan generation, the head epoch it served from and the triggers it took in;
* ``rounds``: per migration round the messages by the paper's Table 3 categories (modification,
  migration, synchronisation) and by kind;
* ``timeline``: per measurement interval of virtual time, the bytes and the transmission time
  (latency + bytes / bandwidth, the paper's S(x)) of every message sent, data and protocol.

``restarts`` crash nodes and restart them from their last checkpoint (taken every
``checkpoint_ms`` of virtual time): the new node replays the inputs the old one got after the
checkpoint, as a node service re-reads its topics, and its results since the checkpoint are
dropped (a node's results are released at its checkpoints, as the cluster skips batches it had
delivered).  The output must stay exact.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union, cast

from joinlib.adaptive.config import AdaptiveConfig, AdaptiveSensor, adaptive_sensor
from joinlib.adaptive.jep import JEP
from joinlib.adaptive.node import AdaptiveNode, SnapshotFilter
from joinlib.adaptive.planner import algorithm1
from joinlib.adaptive.protocol import MIGRATION, MODIFICATION, SYNC, Message, PlanUpdate, Ready, Relay, StatsReport
from joinlib.adaptive.protocol import size as message_size
from joinlib.adaptive.stats import StreamStatistics, with_stats
from joinlib.model import Query, Tup
from joinlib.protocol import wire
from joinlib.protocol.messages import Envelope, InstanceKey
from joinlib.runtime.host import Host
from joinlib.runtime.report import Report
from joinlib.runtime.sensor import Sensor, TotalsSensor
from joinlib.runtime.sink import Group, LatencyTap, Sink
from joinlib.sim.engine import StuckError
from joinlib.sim.network import SimNetwork
from joinlib.state.base import WindowStore

Wire = Union[Envelope, Message]


@dataclass(frozen=True)
class Restart:
    """Crash the node of ``site`` at ``at_ms`` of virtual time and restart it from its last checkpoint."""

    site: str
    at_ms: float


class AdaptiveTotals(TotalsSensor, AdaptiveSensor):
    """The embedded report's sensor: the runtime's totals plus triggers and plan changes.  Every
    hook is passed on to ``also`` (the caller's sensor: a :class:`~.config.LogSensor`, the
    Prometheus adapter's) when there is one."""

    def __init__(self, also: Optional[Sensor] = None) -> None:
        super().__init__()
        self.also = also if also is not None else Sensor()
        self.adaptive_also = adaptive_sensor(also)
        self.triggers: list[dict[str, Any]] = []
        self.changes: dict[int, dict[str, Any]] = {}
        self.measured: list[tuple[str, int, StreamStatistics]] = []

    def on_input(self, site: str, stream: str, n: int) -> None:
        super().on_input(site, stream, n)
        self.also.on_input(site, stream, n)

    def on_phase(self, site: str, operator: str, seconds: float) -> None:
        super().on_phase(site, operator, seconds)
        self.also.on_phase(site, operator, seconds)

    def on_emit(self, site: str, n: int) -> None:
        super().on_emit(site, n)
        self.also.on_emit(site, n)

    def on_late(self, site: str, kind: str) -> None:
        super().on_late(site, kind)
        self.also.on_late(site, kind)

    def on_window(self, site: str, stream: str, store: str, size: int) -> None:
        self.also.on_window(site, stream, store, size)

    def on_stream_stats(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        self.measured.append((site, epoch, stats))
        self.adaptive_also.on_stream_stats(site, query, epoch, stats)

    def on_trigger(self, site: str, query: str, epoch: int, stats: StreamStatistics) -> None:
        if any(t["site"] == site and t["epoch"] == epoch and t["stream"] == stats.stream for t in self.triggers):
            return   # a restarted node replays its inputs and triggers again
        self.triggers.append({"site": site, "epoch": epoch, **stats.to_dict()})
        self.adaptive_also.on_trigger(site, query, epoch, stats)

    def on_plan_change(self, site: str, query: str, gen: int, epoch: int, jep: JEP,
                       triggers: tuple[int, ...]) -> None:
        self.changes.setdefault(gen, {"generation": gen, "from_epoch": epoch, "plan": jep.to_json(),
                                      "triggers": list(triggers)})
        self.adaptive_also.on_plan_change(site, query, gen, epoch, jep, triggers)

    def on_protocol(self, site: str, kind: str, category: str) -> None:
        self.adaptive_also.on_protocol(site, kind, category)


@dataclass
class Meter:
    """What every message cost, per round and per measurement interval of virtual time."""

    query: Query
    interval_ms: int
    rounds: dict[int, dict[str, Any]] = field(default_factory=dict)
    relays: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    round_triggers: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    relay_cost: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    timeline: dict[int, list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0, 0.0, 0.0]))

    def record(self, msg: Wire, size: int, now: float) -> None:
        lat, bw = self.query.network.link(msg.src, msg.dst)
        transfer = lat + size * 8.0 / bw
        slot = self.timeline[int(now // self.interval_ms)]
        slot[0] += size
        slot[1] += transfer
        if isinstance(msg, Envelope):
            return
        slot[2] += size
        slot[3] += 1
        b = msg.body
        if isinstance(b, (StatsReport, Relay)):     # per trigger
            self.relays[msg.mid][type(b).__name__ if isinstance(b, StatsReport) else b.op] += 1
            self.relay_cost[msg.mid] += transfer
            return
        if isinstance(b, (Ready, PlanUpdate)):
            self.round_triggers[msg.mid].update(b.triggers)
        r = self.rounds.setdefault(msg.mid, {MODIFICATION: 0, MIGRATION: 0, SYNC: 0, "bytes": 0, "by_kind": {},
                                             "transfer_ms": 0.0})
        r[b.category] += 1
        r["bytes"] += size
        r["transfer_ms"] += transfer
        kind = type(b).__name__ + ("/notify" if isinstance(b, PlanUpdate) and b.notify else "")
        r["by_kind"][kind] = r["by_kind"].get(kind, 0) + 1

    def by_round(self) -> list[dict[str, Any]]:
        """Per round: the paper's Table 3 counts (migration includes synchronisation, as there)."""
        out = []
        claimed: set[int] = set()
        for rnd in sorted(self.rounds):
            r = self.rounds[rnd]
            trig = sorted(self.round_triggers.get(rnd, ()))
            claimed.update(trig)
            mod = r[MODIFICATION] + sum(sum(self.relays[t].values()) for t in trig)
            cost = r["transfer_ms"] + sum(self.relay_cost[t] for t in trig)
            out.append({"round": rnd, "triggers": trig, "modification": mod,
                        "migration": r[MIGRATION] + r[SYNC], "synchronisation": r[SYNC], "bytes": r["bytes"],
                        "transfer_ms": round(cost, 3),
                        "by_kind": dict(sorted(r["by_kind"].items())),
                        "relays": {t: dict(self.relays[t]) for t in trig}})
        idle = {t: dict(v) for t, v in self.relays.items() if t not in claimed}
        if idle:
            mod = sum(sum(v.values()) for v in idle.values())
            out.append({"round": None, "triggers": sorted(idle), "modification": mod, "migration": 0,
                        "synchronisation": 0, "bytes": 0, "by_kind": {}, "relays": idle,
                        "note": "triggers after which the plan stayed the same"})
        return out

    def series(self) -> list[dict[str, Any]]:
        if not self.timeline:
            return []
        last = max(self.timeline)
        return [{"t_ms": i * self.interval_ms, "bytes": int(v[0]), "transfer_ms": round(v[1], 3),
                 "protocol_bytes": int(v[2]), "protocol_messages": int(v[3])}
                for i in range(last + 1) for v in [self.timeline.get(i, [0.0, 0.0, 0.0, 0.0])]]


@dataclass
class AdaptiveReport(Report):
    """A run's :class:`~joinlib.runtime.report.Report` plus what adaptation did and cost."""

    mode: str = "cnu"
    initial: Optional[JEP] = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    triggers: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["adaptive"] = {"mode": self.mode, "initial_plan": None if self.initial is None else self.initial.to_json(),
                           "changes": self.changes, "triggers": self.triggers, "rounds": self.rounds,
                           "timeline": self.timeline, "restarts": self.restarts}
        return out

    def describe(self) -> str:
        """What a user reads after the cost table: the triggers, the plan changes, the messages."""
        lines = [f"adaptive ({self.mode.upper()}): {len(self.triggers)} statistics changes past the threshold, "
                 f"{len(self.changes)} plan changes"]
        for c in self.changes:
            lines.append(f"  generation {c['generation']} from head epoch {c['from_epoch']}: "
                         + "; ".join(f"{h}: {' '.join(s + ('>' if p else '<') for s, p in steps)}"
                                     for h, steps in c["plan"].items()))
        for r in self.rounds:
            if r["round"] is not None:
                lines.append(f"  round {r['round']}: {r['modification']} modification, {r['migration']} migration "
                             f"messages ({r['synchronisation']} synchronisation), {r['bytes']:,} bytes")
        lines.append("  (S< joins at the source: the stream's window is kept there; S> ships to the stream's node)")
        return "\n".join(lines)


class _Buffered(Sink):
    """A node's results, released at its checkpoints (dropped when it crashes before one)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.held: list[tuple[InstanceKey, int, int, list[Group], float]] = []

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.held.append((inst, head_pos, pos, groups, now))

    def flush(self) -> None:
        for args in self.held:
            self.sink.emit(*args)
        self.held = []


class _Run:
    """The event loop of one adaptive run (see the module docstring)."""

    def __init__(self, query: Query, streams: dict[str, list[Tup]], config: AdaptiveConfig, sink: Sink,
                 restarts: Sequence[Restart], checkpoint_ms: float,
                 store_factory: Optional[Callable[[str], WindowStore]], sensor: Optional[Sensor] = None) -> None:
        self.q, self.cfg, self.streams = query, config, streams
        self.tau = query.execution.interval_ms
        self.meter = Meter(query, config.monitor.interval_ms)
        self.net = SimNetwork(query.network, self._size)
        self.sensor = AdaptiveTotals(sensor)
        self.tap = LatencyTap(sink)
        self.restarts = sorted(restarts, key=lambda r: r.at_ms)
        self.checkpoint_ms = checkpoint_ms
        self.store_factory = store_factory
        self.initial = algorithm1(with_stats(query, {}), config.model)
        self.buffers = {s: _Buffered(self.tap) for s in query.sites}
        self.nodes = {s: self._node(s) for s in query.sites}
        self.saved: dict[str, tuple[dict[str, Any], float]] = {}
        self.log: dict[str, list[tuple[Any, ...]]] = {s: [] for s in query.sites}
        self.done_restarts: list[dict[str, Any]] = []

    def _size(self, msg: Envelope) -> int:
        obj = cast(Wire, msg)
        size = message_size(obj) if isinstance(obj, Message) else wire.envelope_size(obj)
        self.meter.record(obj, size, self.net.now)
        return size

    def _send(self, msg: Message) -> None:
        self.net.send(cast(Envelope, msg))  # the simulator needs src, dst, kind and a size: both have them

    def _host(self, site: str) -> Host:
        sink: Sink = self.buffers[site] if self.restarts else self.tap
        return Host(site, SnapshotFilter(self.net), sink, sensor=self.sensor, store_factory=self.store_factory)

    def _node(self, site: str) -> AdaptiveNode:
        node = AdaptiveNode(site, self.q, self.cfg, self._host(site), self._send, self.initial)
        for s in self.q.streams:
            if s.site == site:
                node.host.feed(self.q.name, s.name, self.streams.get(s.name, []))
        return node

    def run(self, last: int) -> float:
        for n in self.nodes.values():
            n.host.set_last(self.q.name, last)
        t0 = time.perf_counter()
        self.net.schedule(self.tau, ("tick", 0))
        for r in self.restarts:
            self.net.schedule(r.at_ms, ("restart", r.site))
        while (ev := self.net.pop()) is not None:
            at, (kind, x) = ev
            if kind == "tick":
                for site in self.nodes:
                    self._deliver(site, ("tick", int(at), at))
                if x < last:
                    self.net.schedule(at + self.tau, ("tick", x + 1))
            elif kind == "restart":
                self._restart(x, at)
            else:
                obj, sent = x
                self._deliver(obj.dst, ("env", obj, at, sent) if isinstance(obj, Envelope) else ("msg", obj, at))
        for b in self.buffers.values():
            b.flush()
        return time.perf_counter() - t0

    def _deliver(self, site: str, item: tuple[Any, ...]) -> None:
        if self.restarts:
            self._checkpoint(site, item[2])
            self.log[site].append(item if item[0] != "env" else ("raw", wire.encode_envelope(item[1]),
                                                                  item[1].src, item[1].dst, item[2], item[3]))
        self._apply(self.nodes[site], item)

    def _apply(self, node: AdaptiveNode, item: tuple[Any, ...]) -> None:
        """One input: ("tick", watermark, now), ("env", envelope, now, sent), ("raw", encoded
        envelope, src, dst, now, sent) -- how the log keeps them -- or ("msg", message, now)."""
        kind = item[0]
        if kind == "tick":
            node.advance(item[1])
            now = item[2]
        elif kind == "env":
            node.on_envelope(item[1], item[2], item[3])
            now = item[2]
        elif kind == "raw":
            env = wire.decode_envelope(item[1], item[2], item[3])
            env.query = self.q.name
            node.on_envelope(env, item[4], item[5])
            now = item[4]
        else:
            node.on_message(item[1])
            now = item[2]
        node.step(now)

    def _checkpoint(self, site: str, now: float) -> None:
        saved = self.saved.get(site)
        if saved is None or now - saved[1] >= self.checkpoint_ms:
            self.saved[site] = (self.nodes[site].state(), now)
            self.log[site] = []
            self.buffers[site].flush()

    def _restart(self, site: str, at: float) -> None:
        state, when = self.saved.get(site, (None, 0.0))
        self.buffers[site].held = []
        if state is None:
            node = self._node(site)
            node.host.set_last(self.q.name, self.nodes[site].host.last.get(self.q.name))
        else:
            node = AdaptiveNode.restored(site, self.q, self.cfg, self._host(site), self._send, self.initial, state)
        self.nodes[site] = node
        for item in self.log[site]:
            self._apply(node, item)
        self.done_restarts.append({"site": site, "at_ms": at, "from_checkpoint_ms": when,
                                   "replayed_inputs": len(self.log[site])})

    def check_finished(self) -> None:
        stuck = [n for n in self.nodes.values() if not (n.host.finished and n.settled)]
        if stuck:
            n = stuck[0]
            raise StuckError(f"adaptive node {n.site}: round {n.round}, fence {n.fence}, settled {n.settled}; "
                             + n.host.stuck())


def run_adaptive(query: Query, streams: dict[str, list[Tup]], config: AdaptiveConfig, sink: Sink, *,
                 restarts: Sequence[Restart] = (), checkpoint_ms: float = 1000.0,
                 store_factory: Optional[Callable[[str], WindowStore]] = None,
                 sensor: Optional[Sensor] = None) -> AdaptiveReport:
    """Run ``query`` over ``streams`` with adaptive re-planning (``config``) on the simulated
    network; results go to ``sink``; ``sensor`` also gets every sensor hook of every node (the
    adaptive ones if it is an :class:`~.config.AdaptiveSensor`)."""
    tau = query.execution.interval_ms
    all_ts = [t.ts for tups in streams.values() for t in tups]
    last = max(all_ts) // tau if all_ts else 0
    run = _Run(query, streams, config, sink, restarts, checkpoint_ms, store_factory, sensor)
    wall = run.run(last)
    run.check_finished()
    return _report(run, wall, all_ts)


def _report(run: _Run, wall: float, all_ts: list[int]) -> AdaptiveReport:
    q, net, sensor = run.q, run.net, run.sensor
    links = [{"src": s, "dst": d, "kind": k, "messages": st.messages, "bytes": st.bytes,
              "transfer_ms": round(st.transfer_ms, 3), "queued_ms": round(st.queued_ms, 3)}
             for (s, d, k), st in sorted(net.stats.items())]
    processing: dict[str, dict[str, float]] = {}
    for (site, op), secs in sensor.processing.items():
        processing.setdefault(site, {})[op] = secs
    changes = [sensor.changes[g] for g in sorted(sensor.changes)]
    gens = [{"from_epoch": 0, "plan": run.initial.to_json()}] + [{"from_epoch": c["from_epoch"], "plan": c["plan"]}
                                                                  for c in changes]
    rep = AdaptiveReport(q.name, gens if changes else run.initial.to_json(), run.tap.count, len(all_ts),
                         (max(all_ts) - min(all_ts) + 1) if all_ts else 0, links, processing,
                         sum(sensor.late.values()), wall, net.now, run.tap.summary,
                         mode=run.cfg.mode, initial=run.initial, changes=changes, triggers=sensor.triggers,
                         rounds=run.meter.by_round(), timeline=run.meter.series(), restarts=run.done_restarts)
    stops = [c["from_epoch"] - 1 for c in changes] + [None]
    if changes:
        rep.switches = [{"generation": i, "from_epoch": g["from_epoch"], "to_epoch": stops[i]}
                        for i, g in enumerate(gens)]
    return rep
