"""The live contract as code: what a live query must output for the records that were written.

docs/live.md, "Which records take part": every record that is on time and well formed takes part
exactly as in the reference join over those records; every other record is in the dead-letter
topic.  :func:`expected_output` computes both sides naively from the records as written (stream,
partition, offset, bytes) and the idle advances the nodes logged (``wm.<query>``): each partition
classified on its own in offset order (no interleaving, no checkpoint, no Kafka), then the
centralized join over the on-time records (:func:`joinlib.reference.reference_join`; for large inputs
the embedded engine's ``central`` plan, which the property tests hold to the reference).  Integration
tests and the benchmarks compare a live run with it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from joinlib.ingest.records import DUPLICATE_ID, LATE, TOO_FAR_AHEAD, Bad, Decoder, Filtered, SchemaLookup
from joinlib.ingest.stream import MAX_AHEAD_MS, TUPLE_WINDOW_HORIZON_MS
from joinlib.model import Query, Tup
from joinlib.plan.logical import central
from joinlib.reference import reference_join
from joinlib.runtime.sink import CollectingSink, CountingSink
from joinlib.sim.engine import run_embedded

# (ids by stream position, head ts in ms from the origin) -> count
Results = Counter[tuple[tuple[Optional[int], ...], int]]


@dataclass
class Written:
    """One record as written to a source topic."""

    part: int
    offset: int
    value: Optional[bytes]


@dataclass
class Expected:
    results: Results                                             # empty when only counted
    dead: dict[tuple[str, int, int], str]                       # (topic, partition, offset) -> reason
    on_time: dict[str, list[Tup]] = field(default_factory=dict)  # per stream, ranked
    count: int = 0


class PartitionClassifier:
    """One partition's records classified one at a time, in offset order: what :func:`classify_partition` does
    for a whole list, for a checker that reads the records as they are written (bench/soak.py) and cannot keep
    them all.  ``wm`` is the partition's watermark: a later record of the partition with ``ts < wm`` is late."""

    def __init__(self, advances: list[tuple[int, int]], delta: int, horizon: int) -> None:
        self.delta, self.horizon = delta, horizon
        self.wm = 0
        self.max_ts: Optional[int] = None
        self.seen: dict[int, int] = {}
        self._advs = sorted(advances)

    def classify(self, off: int, ev: Any) -> Optional[str]:
        """None (on time) or the record's dead-letter reason; ``ev`` an event or :class:`Bad`."""
        advs = self._advs
        while advs and advs[0][0] <= off:
            self.wm = max(self.wm, advs.pop(0)[1])
        if isinstance(ev, Bad):
            return ev.reason
        if ev.ts < self.wm:
            return LATE
        if ev.ts > self.wm + MAX_AHEAD_MS:
            return TOO_FAR_AHEAD
        if ev.id in self.seen and self.seen[ev.id] >= self.wm - self.horizon:
            return DUPLICATE_ID
        self.seen[ev.id] = ev.ts
        self.max_ts = ev.ts if self.max_ts is None else max(self.max_ts, ev.ts)
        self.wm = max(self.wm, self.max_ts - self.delta)
        return None

    def forget(self) -> None:
        """Drop the ids too old to make a duplicate (the watermark only rises): memory stays bounded."""
        floor = self.wm - self.horizon
        self.seen = {i: ts for i, ts in self.seen.items() if ts >= floor}


def classify_partition(rows: list[tuple[int, Any]], advances: list[tuple[int, int]], delta: int,
                       horizon: int) -> dict[int, Optional[str]]:
    """offset -> None (on time) or a dead-letter reason, for one partition's records in offset order;
    ``rows``: (offset, event or :class:`Bad`); ``advances``: (at, wm) as logged."""
    c = PartitionClassifier(advances, delta, horizon)
    return {off: c.classify(off, ev) for off, ev in rows}


def expected_output(query: Query, written: dict[str, list[Written]], origin_ms: int,
                    advances: Optional[dict[tuple[str, int], list[tuple[int, int]]]] = None,
                    schemas: Optional[dict[str, SchemaLookup]] = None, count_only: bool = False) -> Expected:
    """The results and dead letters a live run of ``query`` must produce (see the module docstring);
    ``written``: per stream, its records; ``advances``: per (stream, partition), the logged idle
    advances (at, wm); ``schemas``: per avro stream, its writer schemas by id; ``count_only``: count
    the results without keeping them (millions of results)."""
    advances = advances or {}
    dead: dict[tuple[str, int, int], str] = {}
    on_time: dict[str, list[Tup]] = {}
    delta = query.execution.max_delay_ms
    for s in query.streams:
        assert s.source is not None and s.source.live, f"stream {s.name} has no live source"
        dec = Decoder(s, s.source, origin_ms, (schemas or {}).get(s.name))
        horizon = s.window.size if s.window.is_time else TUPLE_WINDOW_HORIZON_MS
        by_part: dict[int, list[tuple[int, Any]]] = {}
        for w in sorted(written.get(s.name, []), key=lambda w: (w.part, w.offset)):
            ev = dec.decode(w.value, w.part, w.offset)
            if not isinstance(ev, Filtered):   # not the stream's (its WHERE), not a dead letter either
                by_part.setdefault(w.part, []).append((w.offset, ev))
        keep = []
        for part, rows in by_part.items():
            fate = classify_partition(rows, advances.get((s.name, part), []), delta, horizon)
            for off, ev in rows:
                if fate[off] is None:
                    keep.append((ev.ts, ev.id, part, off, ev))
                else:
                    dead[(s.source.topic, part, off)] = str(fate[off])
        keep.sort(key=lambda k: k[:4])
        on_time[s.name] = [Tup(s.pos, ev.id, ev.ts, i, ev.key, ev.rest) for i, (*_, ev) in enumerate(keep)]
    if count_only:
        return Expected(Counter(), dead, on_time, count_join(query, on_time))
    results = exact_join(query, on_time)
    return Expected(results, dead, on_time, sum(results.values()))


def count_join(query: Query, streams: dict[str, list[Tup]]) -> int:
    """The number of results of the reference join (the embedded engine's ``central`` plan, counted)."""
    sink = CountingSink()
    run_embedded(query, streams, central(query), sink)
    return sink.count


def exact_join(query: Query, streams: dict[str, list[Tup]], naive_limit: int = 3000) -> Results:
    """The reference join's results: naively up to ``naive_limit`` tuples, else by the embedded
    engine's ``central`` plan (exact, and much faster on long inputs)."""
    if sum(len(v) for v in streams.values()) <= naive_limit:
        return Counter(reference_join(query, streams))
    sink = CollectingSink(query)
    run_embedded(query, streams, central(query), sink)
    return Counter((ids, ts) for ids, ts, _ in sink.results)
