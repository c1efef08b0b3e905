"""Embedded mode: every site's host in one process, on the simulated network."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

from .errors import PlanError
from .ir import PlanIR, Topology, lower
from .messages import Envelope
from .model import Query, Tup
from .partitioned import Partitioned
from .plan import Plan
from .runtime.host import Host
from .runtime.instance import InstanceSpec
from .runtime.sensor import TotalsSensor
from .runtime.sink import LatencyTap, Sink
from .sim.network import SimNetwork
from .state.base import WindowStore

#: a plan, generations of plans: (first head epoch, plan), the first at epoch 0, or a plan per
#: partition (:class:`~joinlib.partitioned.Partitioned`)
Plans = Union[Plan, Sequence[tuple[int, Plan]], Partitioned]


@dataclass
class Report:
    """What a run cost: per link and kind, and totals (times in ms unless named _s)."""

    query: str
    plan: Any
    results: int
    input_tuples: int
    duration_ms: int                      # event-time span of the input
    links: list[dict[str, Any]] = field(default_factory=list)
    processing_s: dict[str, dict[str, float]] = field(default_factory=dict)   # site -> operator -> seconds
    late_messages: int = 0
    wall_s: float = 0.0
    virtual_end_ms: float = 0.0
    latency: Optional[Callable[[], dict[str, Optional[float]]]] = None   # summary, computed on first use
    switches: list[dict[str, Any]] = field(default_factory=list)
    _latency: Optional[dict[str, Optional[float]]] = field(default=None, repr=False, compare=False)

    def _lat(self, key: str) -> Optional[float]:
        if self._latency is None:
            self._latency = self.latency() if self.latency is not None else {}
        return self._latency.get(key)

    @property
    def mean_latency_ms(self) -> Optional[float]:
        """Mean result latency (emit time - head tuple ts), simulated ms."""
        return self._lat("mean_latency_ms")

    @property
    def p50_latency_ms(self) -> Optional[float]:
        return self._lat("p50_latency_ms")

    @property
    def p99_latency_ms(self) -> Optional[float]:
        return self._lat("p99_latency_ms")

    @property
    def bytes(self) -> int:
        return sum(link["bytes"] for link in self.links)

    @property
    def messages(self) -> int:
        return sum(link["messages"] for link in self.links)

    @property
    def transmission_ms(self) -> float:
        return float(sum(link["transfer_ms"] for link in self.links))

    @property
    def processing_total_s(self) -> float:
        return sum(sum(ops.values()) for ops in self.processing_s.values())

    @property
    def execution_s_per_s(self) -> float:
        """The paper's metric: (processing + transmission time) per second of stream time."""
        span = max(self.duration_ms, 1) / 1000.0
        return (self.processing_total_s + self.transmission_ms / 1000.0) / span

    def to_dict(self) -> dict[str, Any]:
        def r(x: Optional[float]) -> Optional[float]:
            return None if x is None else round(x, 3)
        out = {
            "query": self.query, "plan": self.plan, "results": self.results,
            "input_tuples": self.input_tuples, "duration_ms": self.duration_ms,
            "bytes": self.bytes, "messages": self.messages,
            "transmission_ms": round(self.transmission_ms, 3),
            "processing_s": round(self.processing_total_s, 6),
            "execution_s_per_s": round(self.execution_s_per_s, 6),
            "late_messages": self.late_messages, "wall_s": round(self.wall_s, 4),
            "virtual_end_ms": round(self.virtual_end_ms, 3),
            "mean_latency_ms": r(self.mean_latency_ms), "p50_latency_ms": r(self.p50_latency_ms),
            "p99_latency_ms": r(self.p99_latency_ms),
            "links": self.links,
            "processing_by_site": {s: {op: round(v, 6) for op, v in ops.items()}
                                   for s, ops in self.processing_s.items()},
        }
        if self.switches:
            out["switches"] = self.switches
        return out


class StuckError(RuntimeError):
    """The simulation ran out of events before every host finished (a bug, not user error)."""


def generations(query: Query, plans: Plans, topology: Optional[Topology] = None) -> list[InstanceSpec]:
    """The instances of a run: one per plan generation, each serving the head epochs from its
    first epoch to the epoch before the next generation's (a partitioned plan: one per partition)."""
    topo = topology or Topology.of(query)
    if isinstance(plans, Partitioned):
        return [InstanceSpec(lower(query, p, topo), 0, 0, None, part) for part, p in enumerate(plans.plans)]
    gens = [(0, plans)] if isinstance(plans, Plan) else sorted(plans, key=lambda g: g[0])
    if not gens or gens[0][0] != 0:
        raise PlanError("the first plan generation must start at epoch 0")
    for (a, _), (b, _) in zip(gens, gens[1:], strict=False):
        if a == b:
            raise PlanError(f"two plan switches at the same epoch {a}")
    specs = []
    for g, (start, plan) in enumerate(gens):
        stop = gens[g + 1][0] - 1 if g + 1 < len(gens) else None
        specs.append(InstanceSpec(lower(query, plan, topo), g, start, stop))
    return specs


def hosts_for(specs: Sequence[InstanceSpec], transport: Any, sink: Sink, sensor: TotalsSensor,
              store_factory: Optional[Callable[[str], WindowStore]] = None) -> dict[str, Host]:
    """One host per node that any generation uses, every instance installed where it runs."""
    nodes: dict[str, None] = {}
    for spec in specs:
        nodes.update(dict.fromkeys(spec.ir.nodes))
    hosts = {n: Host(n, transport, sink, sensor=sensor, store_factory=store_factory) for n in nodes}
    for spec in specs:
        for n, host in hosts.items():
            if n in spec.ir.nodes or any(s.site == n for s in spec.ir.query.streams):
                host.install(spec)
    return hosts


def run_embedded(query: Query, streams: dict[str, list[Tup]], plan: Plans, sink: Sink, *,
                 size_of: Optional[Callable[[Envelope], int]] = None, roundtrip: bool = False,
                 progress: bool = False, store_factory: Optional[Callable[[str], WindowStore]] = None,
                 topology: Optional[Topology] = None) -> Report:
    """Run ``plan`` (or generations of plans, switching at their first epochs) over ``streams``
    on the simulated network; results go to ``sink``."""
    specs = generations(query, plan, topology)
    tau = query.execution.interval_ms
    net = sim_network(query, size_of, roundtrip)
    sensor = TotalsSensor()
    tap = LatencyTap(sink)
    hosts = hosts_for(specs, net, tap, sensor, store_factory)
    all_ts = [t.ts for tups in streams.values() for t in tups]
    last = max(all_ts) // tau if all_ts else 0
    _feed(query, streams, plan, hosts)
    for h in hosts.values():
        h.set_last(query.name, last)
    wall = drive(net, hosts, last, tau, lambda h, at: h.advance(query.name, int(at)), progress=progress,
                 name=query.name)
    return _report(query, specs, net, sensor, tap, wall, all_ts, plan)


def sim_network(query: Query, size_of: Optional[Callable[[Envelope], int]] = None,
                roundtrip: bool = False) -> SimNetwork:
    """The simulated network of ``query``'s network section: messages sized by ``size_of`` (default: their
    encoded size); ``roundtrip``: every message is encoded and decoded on the way (the codec under test)."""
    from . import wire

    def decode(env: Envelope) -> Envelope:
        out = wire.decode_envelope(wire.encode_envelope(env), env.src, env.dst)
        out.query = env.query
        return out
    return SimNetwork(query.network, size_of or wire.envelope_size, decode if roundtrip else None)


def drive(net: SimNetwork, hosts: dict[str, Host], last: int, tau: int, advance: Callable[[Host, float], None], *,
          after: Optional[Callable[[float], None]] = None, progress: bool = False, name: str = "") -> float:
    """The simulation loop: a tick per epoch (``advance`` moves a host's source watermarks to the
    tick's time), each message delivered when the network says, every host run after each; ``after``
    runs after every event. Returns the wall time; raises :class:`StuckError` if a host did not finish."""
    bar = _bar(progress, last + 1, name)
    t0 = time.perf_counter()
    net.schedule(tau, ("tick", 0))
    while (ev := net.pop()) is not None:
        at, (kind, x) = ev
        if kind == "tick":
            for h in hosts.values():
                advance(h, at)
                h.run(at)
            if x < last:
                net.schedule(at + tau, ("tick", x + 1))
            if bar is not None:
                bar.update(1)
        else:
            env, sent = x
            h = hosts[env.dst]
            h.on_message(env, at, sent)
            h.run(at)
        if after is not None:
            after(at)
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    _check_finished(hosts)
    return wall


def _feed(query: Query, streams: dict[str, list[Tup]], plan: Plans, hosts: dict[str, Host]) -> None:
    """Every stream's tuples to its site's host: a partitioned plan's to their partitions."""
    inputs = plan.split(query, streams) if isinstance(plan, Partitioned) else [streams]
    for part, part_streams in enumerate(inputs):
        for s in query.streams:
            hosts[s.site].feed(query.name, s.name, part_streams.get(s.name, []), part=part)


def _bar(progress: bool, total: int, name: str) -> Any:
    if not progress:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=f"{name}: epochs", unit="epoch", leave=False)


def _check_finished(hosts: dict[str, Host]) -> None:
    stuck = [h for h in hosts.values() if not h.finished]
    if stuck:
        raise StuckError(stuck[0].stuck())


def plan_json(specs: Sequence[InstanceSpec], plan: Optional[Plans] = None) -> Any:
    """The report's ``plan``: the plan's JSON, per generation its first epoch and plan, or the
    partitioned plan's JSON."""
    if isinstance(plan, Partitioned):
        return plan.to_json()
    if len(specs) == 1:
        return specs[0].ir.plan.to_json()
    return [{"from_epoch": s.start, "plan": s.ir.plan.to_json()} for s in specs]


def _report(query: Query, specs: Sequence[InstanceSpec], net: SimNetwork, sensor: TotalsSensor, tap: LatencyTap,
            wall: float, all_ts: list[int], plan: Optional[Plans] = None) -> Report:
    links = [{"src": s, "dst": d, "kind": k, "messages": st.messages, "bytes": st.bytes,
              "transfer_ms": round(st.transfer_ms, 3), "queued_ms": round(st.queued_ms, 3)}
             for (s, d, k), st in sorted(net.stats.items())]
    processing: dict[str, dict[str, float]] = {}
    for (site, op), secs in sensor.processing.items():
        processing.setdefault(site, {})[op] = secs
    rep = Report(query.name, plan_json(specs, plan), tap.count, len(all_ts),
                 (max(all_ts) - min(all_ts) + 1) if all_ts else 0, links, processing,
                 sum(sensor.late.values()), wall, net.now, tap.summary)
    if len(specs) > 1 and not isinstance(plan, Partitioned):
        rep.switches = [{"generation": s.gen, "from_epoch": s.start, "to_epoch": s.stop} for s in specs]
    return rep


def ir_of(query: Query, plan: Plan) -> PlanIR:
    return lower(query, plan)
