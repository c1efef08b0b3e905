"""Where results go.  The last step of a sequence hands over *groups* — a row and the
list of tuples of the last stream that join it — so a counting sink never pays for
building every combination.  ``inst`` names the plan instance (query, partition, generation)
that produced them: a sink numbering its output batches does so per instance."""
from __future__ import annotations

from typing import Any, Sequence

from ..model import Query, Tup
from .messages import InstanceKey

Group = tuple[tuple[Any, ...], Sequence[Tup]]  # (row without the last stream, matching tuples)


class Sink:
    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        raise NotImplementedError


class CountingSink(Sink):
    """Counts results and sums their latency (emit time - head ts), nothing else."""

    def __init__(self) -> None:
        self.count = 0
        self.latency_sum = 0.0

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        for row, tups in groups:
            n = len(tups)
            self.count += n
            self.latency_sum += n * (now - row[head_pos].ts)


class LatencyTap(Sink):
    """Forwards results to ``sink`` and records their latencies (emit time - head ts, one entry
    per group with its number of results) and their count."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.count = 0
        self.latencies: list[tuple[float, int]] = []

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.sink.emit(inst, head_pos, pos, groups, now)
        lat = self.latencies
        for row, tups in groups:
            n = len(tups)
            self.count += n
            lat.append((now - row[head_pos].ts, n))

    def summary(self) -> dict[str, Any]:
        """Mean, p50 and p99 latency in ms (None without results)."""
        if not self.count:
            return {"mean_latency_ms": None, "p50_latency_ms": None, "p99_latency_ms": None}
        mean = sum(d * n for d, n in self.latencies) / self.count
        return {"mean_latency_ms": mean, "p50_latency_ms": percentile(self.latencies, 0.5),
                "p99_latency_ms": percentile(self.latencies, 0.99)}


class CollectingSink(Sink):
    """Keeps every result as (ids by stream position, head ts, emit time)."""

    def __init__(self, query: Query) -> None:
        self.query = query
        self.results: list[tuple[tuple[int, ...], int, float]] = []

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        out = self.results
        for row, tups in groups:
            head_ts = row[head_pos].ts
            base = [t.id if t is not None else None for t in row]
            for t in tups:
                base[pos] = t.id
                out.append((tuple(base), head_ts, now))  # type: ignore[arg-type]  # every slot set

    def records(self) -> list[dict[str, Any]]:
        names = self.query.names
        return [{"ids": dict(zip(names, ids)), "ts": ts, "emit_ms": round(now, 3)}
                for ids, ts, now in self.results]


def percentile(weighted: list[tuple[float, int]], q: float) -> float:
    """The q-quantile (0..1) of values given as (value, weight) pairs."""
    items = sorted(weighted)
    total = sum(w for _, w in items)
    if not total:
        return 0.0
    target, acc = q * total, 0
    for v, w in items:
        acc += w
        if acc >= target:
            return v
    return items[-1][0]
