"""What the planner service needs from Kafka for live queries: where each source starts, and the
results of a run in the OUT format.

* :func:`source_starts`: per live stream, every partition of its topic and the offset the query
  starts reading it at (``latest``: the end when the query is submitted; ``earliest``: the
  beginning).  They go into the plan message, so every node (and a node restarted before its first
  checkpoint) starts at the same records.
* :func:`read_results`: the results of one run from ``out.<query>``, as OUT objects
  ``{"ids": {stream: id}, "ts": <head event time, ms since the Unix epoch>}``, or, for a query writing rows to a
  sink topic, its rows from there (docs/sql.md "Results as rows").
"""
from __future__ import annotations

import uuid
from typing import Any, Optional

from joinlib.adapters.kafka import TopicPartition, make_consumer, out_topic, watermarks
from joinlib.adapters.kafka_rows import read_page, read_rows
from joinlib.errors import JoinlibError
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
                 schemas: Optional[SchemaLookup] = None) -> dict[str, Any]:
    """Results of ``run`` from offset ``start`` (negative: the end): ``{"results": [...], "next": offset to ask
    from next time, "end": the topic's end offset}``; waits up to ``wait_s`` for the first result when there is
    none yet.  A query with rows on a sink topic: its rows (:func:`~joinlib.adapters.kafka_rows.read_rows`, Avro
    decoded with ``schemas``), the offsets the sink topic's; else OUT objects from ``out.<query>``."""
    if query.output.sink_topic is not None:
        return read_rows(bootstrap, query, run, start, max_results, wait_s, schemas)
    names = query.names
    seen: set[tuple[str, str, int, int, str, int]] = set()

    def ids(value: bytes) -> list[dict[str, Any]]:
        bid = records.result_batch_id(value)
        if bid in seen:   # written twice (a fenced instance's queued messages): read once
            return []
        seen.add(bid)
        return [{"ids": {n: r.ids[n] for n in names}, "ts": r.head_ts + origin_ms}
                for r in records.decode_result_batch(value).results()]
    return read_page(bootstrap, out_topic(query.name), run, start, max_results, wait_s, ids)
