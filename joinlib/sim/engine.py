"""Embedded mode: every site's host in one process, on the simulated network."""
from __future__ import annotations

import gc
import time
from typing import Any, Callable, Optional, Sequence

from tqdm import tqdm

from joinlib.model import Query, Tup
from joinlib.plan.ir import PlanIR, Topology, lower
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.protocol import wire
from joinlib.protocol.messages import Envelope
from joinlib.runtime.deploy import Plans, generations, hosts_for, plan_json
from joinlib.runtime.host import Host
from joinlib.runtime.instance import InstanceSpec
from joinlib.runtime.report import Report
from joinlib.runtime.sensor import TotalsSensor
from joinlib.runtime.sink import LatencyTap, Sink
from joinlib.sim.network import SimNetwork
from joinlib.state.base import WindowStore


class StuckError(RuntimeError):
    """The simulation ran out of events before every host finished (a bug, not user error)."""


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
    gc.freeze()   # the inputs and the plan live through the run: no collection need scan them again
    wall = drive(net, hosts, last, tau, lambda h, at: h.advance(query.name, int(at)), progress=progress,
                 name=query.name)
    return _report(query, specs, net, sensor, tap, wall, all_ts, plan)


def sim_network(query: Query, size_of: Optional[Callable[[Envelope], int]] = None,
                roundtrip: bool = False) -> SimNetwork:
    """The simulated network of ``query``'s network section: messages sized by ``size_of`` (default: their
    encoded size); ``roundtrip``: every message is encoded and decoded on the way (the codec under test)."""
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
    return tqdm(total=total, desc=f"{name}: epochs", unit="epoch", leave=False)


def _check_finished(hosts: dict[str, Host]) -> None:
    stuck = [h for h in hosts.values() if not h.finished]
    if stuck:
        raise StuckError(stuck[0].stuck())


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
