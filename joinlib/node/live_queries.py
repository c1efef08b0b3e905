"""What the planner service needs from Kafka for live queries: where each source starts, and the
results of a run in the OUT format.

* :func:`source_starts`: per live stream, every partition of its topic and the offset the query
  starts reading it at (``latest``: the end when the query is submitted; ``earliest``: the
  beginning).  They go into the plan message, so every node (and a node restarted before its first
  checkpoint) starts at the same records.
* :func:`replan_point`: where ``joinlib replan`` switches a running query to a new run (docs/live.md "Replan").
* :func:`read_results`: the results of one run from ``out.<query>``, as OUT objects
  ``{"ids": {stream: id}, "ts": <head event time, ms since the Unix epoch>}``, or, for a query writing rows to a
  sink topic, its rows from there (docs/sql.md "Results as rows").
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

from joinlib.adapters.kafka import TopicPartition, consume, make_consumer, out_topic, watermarks
from joinlib.adapters.kafka_rows import read_page, read_rows
from joinlib.control.messages import LiveStart
from joinlib.errors import JoinlibError
from joinlib.ingest.records import Decoder, Event
from joinlib.model import Query
from joinlib.node.sources import live_streams
from joinlib.protocol import records
from joinlib.rows_avro import SchemaLookup


def source_starts(bootstrap: str, admin: Any, query: Query, timeout_s: float = 10.0) -> dict[str, dict[str, int]]:
    """stream -> {partition (as text): first offset} for every live source of ``query``."""
    streams = live_streams(query)
    if not streams:
        return {}
    md = admin.list_topics(timeout=timeout_s)
    consumer = make_consumer(bootstrap, f"joinlib-planner-{uuid.uuid4().hex[:8]}")
    try:
        out: dict[str, dict[str, int]] = {}
        for s in streams:
            assert s.source is not None
            topic = md.topics.get(s.source.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise JoinlibError(f"stream {s.name}: its source topic '{s.source.topic}' does not exist on the "
                                   f"broker; create it (any number of partitions) or start its producer first")
            starts = {}
            for part in sorted(topic.partitions):
                lo, hi = watermarks(consumer, TopicPartition(s.source.topic, part), timeout_s)
                starts[str(part)] = hi if s.source.start == "latest" else lo
            out[s.name] = starts
        return out
    finally:
        consumer.close()


def read_results(bootstrap: str, query: Query, run: Optional[str], origin_ms: int, start: int,
                 max_results: int = 10_000, wait_s: float = 0.0,
                 schemas: Optional[SchemaLookup] = None,
                 replaced: Optional[Mapping[str, int]] = None) -> dict[str, Any]:
    """Results of ``run`` from offset ``start`` (negative: the end): ``{"results": [...], "next": offset to ask
    from next time, "end": the topic's end offset}``; waits up to ``wait_s`` for the first result when there is
    none yet.  A query with rows on a sink topic: its rows (:func:`~joinlib.adapters.kafka_rows.read_rows`, Avro
    decoded with ``schemas``), the offsets the sink topic's; else OUT objects from ``out.<query>``.  ``replaced``:
    the runs a replan switched from (docs/live.md "Replan") and their origins, read as the same query."""
    runs = {**(replaced or {}), **({run: origin_ms} if run is not None else {})}
    wanted = list(runs) if run is not None else None
    if query.output.sink_topic is not None:
        return read_rows(bootstrap, query, wanted, start, max_results, wait_s, schemas)
    names = query.names
    seen: set[tuple[str, str, int, int, str, int]] = set()
    origins = {r.encode(): o for r, o in runs.items()}

    def ids(value: bytes, run_b: bytes) -> list[dict[str, Any]]:
        bid = records.result_batch_id(value)
        if bid in seen:   # written twice (a fenced instance's queued messages): read once
            return []
        seen.add(bid)
        origin = origins.get(run_b, origin_ms)
        return [{"ids": {n: r.ids[n] for n in names}, "ts": r.head_ts + origin}
                for r in records.decode_result_batch(value).results()]
    return read_page(bootstrap, out_topic(query.name), wanted, start, max_results, wait_s, lambda v: ids(v, b""), ids)


#: how many times a replan's start offset is looked for again with a nearer record's lag (:func:`_start_at`)
LOCATE_STEPS = 4


@dataclass(frozen=True)
class ReplanPoint:
    """Where a replan switches a running live query (docs/live.md "Replan"): the switch time (an epoch boundary of
    both runs), the new run's origin and where it starts reading each source partition (one window and a slack
    before the switch: its jump-start), and the handover offsets (the partitions' ends when it was asked)."""

    switch_ms: int
    origin_ms: int
    starts: dict[str, dict[str, int]]
    handover: dict[str, dict[str, int]]
    reread_all: bool   # the sources' Kafka timestamps did not locate the window: the new run reads from the start


def replan_point(bootstrap: str, query: Query, live: LiveStart, watermark_ms: Optional[float], margin_ms: int,
                 slack_ms: int = 5_000, timeout_s: float = 10.0) -> ReplanPoint:
    """The switch of a replan of ``query`` (running with ``live``): ``margin_ms`` after the newest event time its
    sources hold and the nodes' ``watermark_ms``, on the epoch grid of the run's origin; the new run reads each
    partition from the first record whose Kafka timestamp is within the longest window, δ and ``slack_ms`` before
    the switch (the timestamps are mapped to event times by each partition's newest record; where that does not
    hold -- the record before that offset is newer than the window's start -- from the old run's start offset)."""
    tau, origin = query.execution.interval_ms, live.origin_ms
    consumer = make_consumer(bootstrap, f"joinlib-planner-{uuid.uuid4().hex[:8]}")
    try:
        tails: dict[tuple[str, int], tuple[int, int]] = {}   # (stream, partition) -> (event time, Kafka timestamp)
        handover: dict[str, dict[str, int]] = {}
        first = live.starts()
        newest = max([origin] + ([int(watermark_ms)] if watermark_ms is not None else []))
        for s, decoder, part, start, tp in live_partitions(query, first):
            hi = watermarks(consumer, tp, timeout_s)[1]
            handover.setdefault(s, {})[str(part)] = hi
            tail = _well_formed_before(consumer, tp, hi, start, decoder, timeout_s)
            if tail is not None:
                tails[(s, part)] = tail
                newest = max(newest, tail[0])
        switch = origin + tau * -(-(newest + margin_ms - origin) // tau)
        need = switch - max(s.window.size for s in query.streams) - query.execution.max_delay_ms   # the warm-up's start
        target = need - slack_ms
        starts: dict[str, dict[str, int]] = {}
        reread = False
        for s, decoder, part, start, tp in live_partitions(query, first):
            at, mapped = _start_at(consumer, tp, (start, handover[s][str(part)]), tails.get((s, part)),
                                   (target, need), decoder, timeout_s)
            reread = reread or not mapped
            starts.setdefault(s, {})[str(part)] = at
        new_origin = origin if reread else max(origin, origin + tau * ((target - origin) // tau))
        return ReplanPoint(switch, new_origin, starts, handover, reread)
    finally:
        consumer.close()


def live_partitions(query: Query, first: dict[str, dict[int, int]]) -> Iterator[tuple[str, Decoder, int, int,
                                                                                 TopicPartition]]:
    """(stream, its decoder, partition, the old run's start offset, the topic partition) of every live source."""
    for s in live_streams(query):
        assert s.source is not None
        decoder = Decoder(s, s.source, 0)
        for part, start in sorted(first.get(s.name, {}).items()):
            yield s.name, decoder, part, start, TopicPartition(s.source.topic, part)


def _start_at(consumer: Any, tp: TopicPartition, span: tuple[int, int], tail: Optional[tuple[int, int]],
              times: tuple[int, int], decoder: Decoder, timeout_s: float) -> tuple[int, bool]:
    """The first offset of ``tp`` (holding the query's records in ``span``: the old run's start offset, the end) a
    replanned run reads: the first whose Kafka timestamp maps to event time ``target`` or later (``times``: target,
    need), where the last well-formed record before it must be older than ``need`` -- else ``start`` and False (the
    timestamps did not locate the window).

    A timestamp maps to an event time by the lag of a record's Kafka timestamp behind its event time: first the
    newest record's (``tail``), then, while the record before the offset found is not older than ``need``, that
    record's -- a producer that fell behind (a loaded machine) stamps its newest records later after their event
    times than the older ones, and the tail's lag alone put the start too late (a flaky replan test).  Each step
    looks earlier; starting earlier than needed only reads more."""
    (start, hi), (target, need) = span, times
    if hi <= start:
        return hi, True
    if tail is None:
        return start, False
    ts, kafka_ts = tail
    for _ in range(LOCATE_STEPS):
        found = consumer.offsets_for_times([TopicPartition(tp.topic, tp.partition, target + kafka_ts - ts)],
                                           timeout_s)
        at = max(found[0].offset if found and found[0].offset >= 0 else hi, start)
        if at <= start:
            return at, True
        before = _well_formed_before(consumer, tp, at, start, decoder, timeout_s)
        if before is None:
            return start, False
        if before[0] < need:
            return at, True
        ts, kafka_ts = before   # its lag, nearer the window's start (and a timestamp before the last guess)
    return start, False


def _well_formed_before(consumer: Any, tp: TopicPartition, end: int, floor: int, decoder: Decoder,
                        timeout_s: float) -> Optional[tuple[int, int]]:
    """(event time, Kafka timestamp) of the last well-formed record of ``tp`` before offset ``end`` among the five
    before it (not before ``floor``); None if none is.  A malformed record (a dead letter) says nothing of time."""
    return next(filter(None, (_event_at(consumer, tp, o, decoder, timeout_s)
                              for o in range(end - 1, max(floor, end - 5) - 1, -1))), None)


def _event_at(consumer: Any, tp: TopicPartition, offset: int, decoder: Decoder,
              timeout_s: float) -> Optional[tuple[int, int]]:
    """(event time, Kafka timestamp) of the record at ``offset`` of ``tp``; None if it is not well formed (or
    filtered) or cannot be read."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, offset)])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in consume(consumer, 1, 0.2):
            if m.offset() != offset:
                return None
            ev = decoder.decode(m.value(), tp.partition, offset)
            return (ev.ts, m.timestamp()[1]) if isinstance(ev, Event) else None
    return None
