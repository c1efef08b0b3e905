"""What a node's run reports: its ``status`` every ~2 s and its ``done`` at the end (typed control messages,
:mod:`joinlib.control.messages`), its metrics gauges, and the counters and sensors they come from.
"""
from __future__ import annotations

import time
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from joinlib.adapters.kafka import TopicPartition, links_to_list, now_ms
from joinlib.control.messages import DoneMessage, LinkTraffic, Naive, StatusMessage
from joinlib.pmjoin.value_monitor import VALUES_EVERY_S
from joinlib.runtime.report import LinkStats
from joinlib.runtime.sensor import Sensor, TotalsSensor
from joinlib.runtime.sink import Group, Sink

LATENCY_SAMPLES = 4096


class TeeSensor(Sensor):
    """Forwards every hook to several sensors (Prometheus + in-memory totals for ``done``).  Its ``on_phase`` is
    :func:`phase_hook`'s of them: the hook a node's scheduler calls after every phase."""

    def __init__(self, *sensors: Sensor) -> None:
        self.sensors = sensors
        self.on_phase = phase_hook(sensors)   # type: ignore[method-assign, assignment]

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


def _phase_leaves(sensors: tuple[Sensor, ...]) -> list[Sensor]:
    """The sensors a phase's time reaches through nested tees (a node's: a tee of its query's sensor, itself a tee
    of Prometheus, and the run's totals)."""
    out: list[Sensor] = []
    for s in sensors:
        if isinstance(s, TeeSensor) and type(s).on_phase is TeeSensor.on_phase:
            out += _phase_leaves(s.sensors)
        else:
            out.append(s)
    return out


def phase_hook(sensors: tuple[Sensor, ...]) -> Callable[[str, str, float], None]:
    """``on_phase`` of a tee of ``sensors``, called after every phase a node runs (tens of thousands a second in a
    backlog's drain).  A node's usual tee -- one Prometheus sensor and one :class:`TotalsSensor`, possibly nested --
    adds to the histogram's series and to the totals directly, both found once per (site, operator): one Python
    call per phase instead of four, and no label tuple made per phase.  Any other mix calls each sensor."""
    leaves = _phase_leaves(sensors)
    totals = [s for s in leaves if type(s) is TotalsSensor]
    proms = [s for s in leaves if type(s) is not TotalsSensor]
    if len(leaves) != 2 or len(totals) != 1 or not getattr(proms[0], "phases_direct", False):
        hooks = [s.on_phase for s in leaves]

        def each(site: str, operator: str, seconds: float) -> None:
            for h in hooks:
                h(site, operator, seconds)
        return each
    prom, processing = proms[0], totals[0].processing
    bounds = prom.processing.bounds   # type: ignore[attr-defined]
    series = prom.phase_series   # type: ignore[attr-defined]
    cache: dict[str, tuple[str, list[float], tuple[str, str]]] = {}

    def on_phase(site: str, operator: str, seconds: float) -> None:
        c = cache.get(operator)
        if c is None or c[0] != site:
            c = cache[operator] = (site, series(site, operator), (site, operator))
        s = c[1]
        s[bisect_left(bounds, seconds)] += 1
        s[-1] += seconds
        processing[c[2]] += seconds
    return on_phase


class QuerySensor(TeeSensor):
    """The service's Prometheus sensor for one run: results are labelled with its query."""

    def __init__(self, prom: Any, query: str, *others: Sensor) -> None:
        super().__init__(prom, *others)
        self.prom, self.query = prom, query

    def on_emit(self, site: str, n: int) -> None:
        self.prom.on_results(site, self.query, n)
        for s in self.sensors[1:]:
            s.on_emit(site, n)


class StatusLatencySampler(Sink):
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


@dataclass
class Counters:
    """What a run counts besides the host's state (kept in checkpoints too)."""

    totals: TotalsSensor = field(default_factory=TotalsSensor)
    received: defaultdict[tuple[str, str, str], LinkStats] = field(default_factory=lambda: defaultdict(LinkStats))
    naive: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def inputs(self) -> dict[str, int]:
        """Input tuples per stream."""
        return {s: n for (_, s), n in self.totals.inputs.items()}

    def naive_rows(self) -> tuple[Naive, ...]:
        return tuple(Naive(src, dst, n) for (src, dst), n in sorted(self.naive.items()))


def links_of(stats: Any) -> tuple[LinkTraffic, ...]:
    """Per (src, dst, kind) counters as the ``links`` of a ``done``."""
    return tuple(LinkTraffic.from_json(ln) for ln in links_to_list(stats))


class RunReport:
    """The status reporter of a run (a :class:`~.node_run.PlanRun`): its ``status`` and ``done`` messages from
    the host, the sink, the transport, the counters and the live sources, and its gauges."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.values_due = 0.0

    def epochs(self) -> dict[str, int]:
        """The first epoch each generation here has not finished (for logs, status and ``done``)."""
        return {f"g{k[2]}": min((lane.epoch for lane in inst.lanes), default=0)
                for k, inst in self.run.host.instances.items()}

    def status(self) -> StatusMessage:
        r = self.run
        epochs = self.epochs()
        live = r.live
        # a scaled-out live query's partition: live, but its site's re-keyer reports the inputs (joinlib.node.rekey)
        rekeyed = r.scope.rekeyed
        return StatusMessage(
            r.site, r.run_id, round(now_ms()), r.sink.count, sum(st.bytes for st in r.transport.stats.values()),
            {} if rekeyed else r.counters.inputs(), epoch=min(epochs.values(), default=0), epochs=epochs,
            last_epoch=r.host.last.get(r.q.name), naive=r.counters.naive_rows(), part=r.scope.part,
            instance=r.scope.instance, live=live is not None or rekeyed,
            dead_letters=live.stats()["dead_letters"] if live is not None else {} if rekeyed else None,
            watermarks_ms=live.watermarks_ms() if live is not None else {} if rekeyed else None,
            latency_ms=r.tap.take() if live is not None or rekeyed else None,
            values=self._values() if live is not None else None,
            adaptive=r.adaptive.status() if r.adaptive is not None else None)

    def _values(self) -> Optional[dict[str, Any]]:
        """A live run's per-value rates, every ``VALUES_EVERY_S`` (docs/pmjoin.md "Live statistics")."""
        monitor = self.run.values
        if monitor is None or time.monotonic() < self.values_due:
            return None
        report = monitor.report()
        if report is not None:
            self.values_due = time.monotonic() + VALUES_EVERY_S
        return report

    def done(self, wall: float, cpu: float) -> DoneMessage:
        """The ``done`` message: what the node did, for the cluster report."""
        r, c = self.run, self.run.counters
        processing: dict[str, float] = defaultdict(float)
        for (_, op), secs in c.totals.processing.items():
            processing[op] += secs
        resumed = r.resumed_from
        live = r.live.stats() if r.live is not None else None
        return DoneMessage(
            r.site, r.run_id, r.sink.count, links_of(r.transport.stats), links_of(c.received), c.naive_rows(),
            sum(c.totals.inputs.values()), {op: round(v, 6) for op, v in processing.items()},
            sum(c.totals.late.values()), r.host.last.get(r.q.name), round(wall, 4),
            # CPU of the whole process (librdkafka's threads included); a thread node shares it
            round(cpu, 4), resumed, min(resumed.values()) if resumed else None, r.startup_s,
            r.ckpt.saved if r.ckpt else 0, tuple(sorted(k[2] for k in r.host.instances)),
            part=r.scope.part, instance=r.scope.instance,
            stopped=r.stopped if live is not None else (True if r.stopped else None),
            inputs=live["inputs"] if live is not None else None,
            dead_letters=live["dead_letters"] if live is not None else None,
            adaptive=r.adaptive.done_extra() if r.adaptive is not None else None)

    def gauges(self) -> None:
        """Window sizes, consumer lag and (live) watermark lag, to the service's metrics."""
        r = self.run
        sens, site = r.svc.sensor, r.site
        try:
            for (_, _, name), w in r.host.windows.items():
                sens.on_window(site, name, "home", len(w.store))
            for inst in r.host.instances.values():
                for sig, store in inst.stores.items():
                    op = inst.ir.replica(sig)
                    sens.on_window(site, op.stream, op.kind, len(store))
            positions = r.consumer.position([TopicPartition(tp.topic, tp.partition) for tp in r.inputs.tps])
            for tp in positions:
                lo, hi = r.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
                if hi >= 0:
                    pos = tp.offset if tp.offset >= 0 else lo
                    sens.set_lag(site, r.q.name, tp.topic, max(0, hi - pos))
            if r.live is not None:
                now = now_ms()
                for name, wm in r.live.watermarks_ms().items():
                    sens.set_watermark_lag(site, r.q.name, name, (now - wm) / 1000.0)
        except Exception:  # metrics must never take the node down
            pass
