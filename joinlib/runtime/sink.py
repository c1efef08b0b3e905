"""Where results go.  The last step of a sequence hands over *groups* — a row and the
list of tuples of the last stream that join it — so a counting sink never pays for
building every combination.  ``inst`` names the plan instance (query, partition, generation)
that produced them: a sink numbering its output batches does so per instance."""
from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from operator import itemgetter, mul
from typing import Any, Protocol, Sequence

from joinlib.model import Query, Tup
from joinlib.protocol.messages import InstanceKey

Group = tuple[tuple[Any, ...], Sequence[Tup]]  # (row without the last stream, matching tuples)


class Sink(Protocol):
    """Where a host hands its results (files, Kafka, a counter, a test's list)."""

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None: ...


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


_second = itemgetter(1)


class LatencyTap(Sink):
    """Forwards results to ``sink`` and records their latencies (emit time - head ts) and count.

    Per emit call it keeps the emit time, the head timestamps and the group sizes (a list
    comprehension and a map: this sits on the engine's hot path, measured cheaper than typed
    arrays); :meth:`summary` weighs each group's latency by its number of results."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.count = 0
        self._emits: list[tuple[float, list[int], list[int]]] = []

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        self.sink.emit(inst, head_pos, pos, groups, now)
        sizes = list(map(len, map(_second, groups)))
        self.count += sum(sizes)
        self._emits.append((now, [row[head_pos].ts for row, _ in groups], sizes))

    @property
    def latencies(self) -> list[tuple[float, int]]:
        """(latency ms, number of results) per group."""
        return [(now - ts, n) for now, heads, sizes in self._emits for ts, n in zip(heads, sizes, strict=True)]

    def summary(self) -> dict[str, Any]:
        """Mean, p50 and p99 latency in ms (None without results), each group weighted by its
        number of results (sorting and summing in C: a long run has millions of groups)."""
        if not self.count:
            return {"mean_latency_ms": None, "p50_latency_ms": None, "p99_latency_ms": None}
        lats = [now - ts for now, heads, _ in self._emits for ts in heads]
        sizes = [n for _, _, ns in self._emits for n in ns]
        order = sorted(range(len(lats)), key=lats.__getitem__)
        cum = list(accumulate(map(sizes.__getitem__, order)))
        total = cum[-1]

        def q(f: float) -> float:
            return lats[order[min(len(order) - 1, bisect_left(cum, f * total))]]
        return {"mean_latency_ms": sum(map(mul, lats, sizes)) / total, "p50_latency_ms": q(0.5),
                "p99_latency_ms": q(0.99)}


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
        return [{"ids": dict(zip(names, ids, strict=True)), "ts": ts, "emit_ms": round(now, 3)}
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
