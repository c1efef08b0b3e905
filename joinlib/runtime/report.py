"""What a run cost, per link and kind and in total: the report of an embedded run and of a cluster run alike."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass(slots=True)
class LinkStats:
    """What one (src, dst, kind) carried in a run: counted alike by the simulated network
    (:class:`joinlib.sim.network.SimNetwork`) and the Kafka transport, reported as :attr:`Report.links` rows."""

    messages: int = 0
    bytes: int = 0
    transfer_ms: float = 0.0   # Σ S(x) = latency + bytes / bandwidth (the paper's measure)
    queued_ms: float = 0.0     # Σ time waiting for the link to be free (the simulator's FIFO links)


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
