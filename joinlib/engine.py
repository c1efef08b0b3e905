"""Embedded mode: every site's node in one process, on the simulated network."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from .model import Query, Tup
from .physical import PhysicalPlan, compile_plan
from .plan import Plan
from .runtime.messages import Envelope
from .runtime.node import Node
from .runtime.sensor import TotalsSensor
from .runtime.sink import Sink
from .sim.network import SimNetwork


@dataclass
class Report:
    """What a run cost: per link and kind, and totals (times in ms unless named _s)."""

    query: str
    plan: dict
    results: int
    input_tuples: int
    duration_ms: int                      # event-time span of the input
    links: list[dict] = field(default_factory=list)
    processing_s: dict = field(default_factory=dict)   # site -> operator -> seconds
    late_messages: int = 0
    wall_s: float = 0.0
    virtual_end_ms: float = 0.0
    mean_latency_ms: Optional[float] = None

    @property
    def bytes(self) -> int:
        return sum(link["bytes"] for link in self.links)

    @property
    def messages(self) -> int:
        return sum(link["messages"] for link in self.links)

    @property
    def transmission_ms(self) -> float:
        return sum(link["transfer_ms"] for link in self.links)

    @property
    def processing_total_s(self) -> float:
        return sum(sum(ops.values()) for ops in self.processing_s.values())

    @property
    def execution_s_per_s(self) -> float:
        """The paper's metric: (processing + transmission time) per second of stream time."""
        span = max(self.duration_ms, 1) / 1000.0
        return (self.processing_total_s + self.transmission_ms / 1000.0) / span

    def to_dict(self) -> dict:
        return {
            "query": self.query, "plan": self.plan, "results": self.results,
            "input_tuples": self.input_tuples, "duration_ms": self.duration_ms,
            "bytes": self.bytes, "messages": self.messages,
            "transmission_ms": round(self.transmission_ms, 3),
            "processing_s": round(self.processing_total_s, 6),
            "execution_s_per_s": round(self.execution_s_per_s, 6),
            "late_messages": self.late_messages, "wall_s": round(self.wall_s, 4),
            "virtual_end_ms": round(self.virtual_end_ms, 3),
            "mean_latency_ms": None if self.mean_latency_ms is None else round(self.mean_latency_ms, 3),
            "links": self.links,
            "processing_by_site": {s: {op: round(v, 6) for op, v in ops.items()}
                                   for s, ops in self.processing_s.items()},
        }


class StuckError(RuntimeError):
    """The simulation ran out of events before every node finished (a bug, not user error)."""


def run_embedded(query: Query, streams: dict[str, list[Tup]], plan: Plan, sink: Sink, *,
                 size_of: Optional[Callable[[Envelope], int]] = None, roundtrip: bool = False,
                 progress: bool = False, store_factory=None) -> Report:
    """Run ``plan`` over ``streams`` on the simulated network; results go to ``sink``."""
    from . import wire
    pp = compile_plan(query, plan)
    tau = query.execution.interval_ms
    net = SimNetwork(query.network, size_of or wire.envelope_size,
                     (lambda env: wire.decode_envelope(wire.encode_envelope(env))) if roundtrip else None)
    sensor = TotalsSensor()
    nodes = {site: Node(pp, site, net, sink, sensor=sensor, store_factory=store_factory) for site in query.sites}
    all_ts = [t.ts for tups in streams.values() for t in tups]
    last = max(all_ts) // tau if all_ts else 0
    for s in query.streams:
        nodes[s.site].feed(s.name, streams.get(s.name, []))
    for n in nodes.values():
        n.last_epoch = last
    bar = _bar(progress, last + 1, query.name)
    t0 = time.perf_counter()
    net.schedule(tau, ("tick", 0))
    while (ev := net.pop()) is not None:
        at, (kind, x) = ev
        if kind == "tick":
            for n in nodes.values():
                for name in n.homes:
                    n.watermark[name] = int(at)
                n.run(at)
            if x < last:
                net.schedule(at + tau, ("tick", x + 1))
            if bar is not None:
                bar.update(1)
        else:
            env, sent = x
            n = nodes[env.dst]
            n.on_message(env, at, sent)
            n.run(at)
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    _check_finished(nodes)
    return _report(query, plan, pp, net, sensor, sink, streams, wall, all_ts)


def _bar(progress: bool, total: int, name: str):
    if not progress:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=f"{name}: epochs", unit="epoch", leave=False)


def _check_finished(nodes: dict[str, Node]) -> None:
    stuck = [n for n in nodes.values() if not n.finished]
    if stuck:
        n = stuck[0]
        rank, op, _ = n.schedule[n.cursor]
        raise StuckError(f"node {n.site} stuck at epoch {n.epoch}, phase {rank} ({op}); "
                         f"inbox: {sorted(n.inbox)[:10]}")


def _report(query: Query, plan: Plan, pp: PhysicalPlan, net: SimNetwork, sensor: TotalsSensor,
            sink: Sink, streams: dict[str, list[Tup]], wall: float, all_ts: list[int]) -> Report:
    links = [{"src": s, "dst": d, "kind": k, "messages": st.messages, "bytes": st.bytes,
              "transfer_ms": round(st.transfer_ms, 3), "queued_ms": round(st.queued_ms, 3)}
             for (s, d, k), st in sorted(net.stats.items())]
    processing: dict = {}
    for (site, op), secs in sensor.processing.items():
        processing.setdefault(site, {})[op] = secs
    results = sum(sensor.emitted.values())
    latency = None
    if hasattr(sink, "latency_sum") and results:
        latency = sink.latency_sum / results
    elif hasattr(sink, "results") and sink.results:
        latency = sum(now - ts for _, ts, now in sink.results) / len(sink.results)
    return Report(query.name, plan.to_json(), results, len(all_ts),
                  (max(all_ts) - min(all_ts) + 1) if all_ts else 0, links, processing,
                  sum(sensor.late.values()), wall, net.now, latency)
