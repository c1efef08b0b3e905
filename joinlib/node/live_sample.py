"""A sample of a running live query's sources, for ``auto`` to plan on as it plans on ``--data`` (issue 30).

``auto`` with data weighs every run kind -- partitioned plans, per-site partitions, reductions -- on the
statistics it measures and runs its short list on a sample (docs/cost-model.md).  A live query has no data
directory, but its source topics hold its recent records: :func:`sample_sources` reads the newest ``per_stream``
records of each live stream (its partitions in proportion to what they hold; records from before the query's start
too: they are the same source's), decodes
them with the query's own decoder, and returns them as the streams ``auto`` takes -- in (event time, id) order,
ranked, on a common event-time span (each stream from the latest of their first records) shifted to start at
epoch 0, so that the simulator does not walk the epochs since 1970.

Malformed and filtered records and repeated ids are left out, as the nodes leave them out of the windows.  Why
the newest records: a replan moves a query for what comes, and the per-value spread ``auto`` fits partition
functions to is the current one.
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Optional

from joinlib.adapters.kafka import TopicPartition, consume, make_consumer, watermarks
from joinlib.control.messages import LiveStart
from joinlib.control.run_plan import Deployable, TreesRun
from joinlib.ingest.records import Decoder, Event
from joinlib.model import Query, Tup
from joinlib.node.live_queries import live_partitions
from joinlib.planner.auto import auto_any
from joinlib.planner.registry import run_plan_of

Streams = dict[str, list[Tup]]
#: records per stream a sample reads at most (the routers demo's 200 events/s: 100 s)
PER_STREAM = 20_000


def sample_sources(bootstrap: str, query: Query, live: LiveStart, per_stream: int = PER_STREAM,
                   timeout_s: float = 30.0) -> Streams:
    """The newest records of every live stream of ``query`` (see the module docstring); a stream without any:
    an empty list."""
    consumer = make_consumer(bootstrap, f"joinlib-planner-sample-{uuid.uuid4().hex[:8]}")
    events: dict[str, list[Event]] = {s.name: [] for s in query.streams}
    try:
        spans = [(s, dec, tp, *watermarks(consumer, tp, timeout_s))
                 for s, dec, _, _, tp in live_partitions(query, live.starts())]
        held: dict[str, int] = {}
        for s, _, _, lo, hi in spans:
            held[s] = held.get(s, 0) + max(0, hi - lo)
        for s, dec, tp, lo, hi in spans:
            n = hi - lo
            if n <= 0:
                continue
            take = min(n, -(-per_stream * n // max(1, held[s])))   # this partition's share of the stream's sample
            events[s] += _read(consumer, tp, hi - take, hi, dec, timeout_s)
    finally:
        consumer.close()
    return _aligned(query, events)


def _read(consumer: Any, tp: TopicPartition, lo: int, hi: int, decoder: Decoder, timeout_s: float) -> list[Event]:
    """The well-formed events at offsets [lo, hi) of ``tp``."""
    consumer.assign([TopicPartition(tp.topic, tp.partition, lo)])
    out: list[Event] = []
    at, deadline = lo, time.monotonic() + timeout_s
    while at < hi and time.monotonic() < deadline:
        got = consume(consumer, 5000, 0.2)
        if not got and consumer.position([TopicPartition(tp.topic, tp.partition)])[0].offset >= hi:
            break   # the offsets left are no records (a transaction's markers)
        for m in got:
            off = m.offset()
            if off is None or off >= hi:
                continue
            at = max(at, off + 1)
            ev = decoder.decode(m.value(), tp.partition, off)
            if isinstance(ev, Event):
                out.append(ev)
    return out


def _aligned(query: Query, events: dict[str, list[Event]]) -> Streams:
    """Per stream its events as ranked tuples in (ts, id) order, each id once, all on the event-time span every
    stream covers, shifted so that the span starts at 0 (on the query's epoch grid)."""
    firsts = [min(e.ts for e in evs) for evs in events.values() if evs]
    tau = query.execution.interval_ms
    start = max(firsts) // tau * tau if firsts else 0
    out: Streams = {}
    for s in query.streams:
        seen: set[int] = set()
        kept = []
        for ev in sorted(events.get(s.name, []), key=lambda e: (e.ts, e.id)):
            if ev.ts >= start and ev.id not in seen:
                seen.add(ev.id)
                kept.append(ev)
        out[s.name] = [Tup(s.pos, ev.id, ev.ts - start, i, ev.key, ev.rest) for i, ev in enumerate(kept)]
    return out


def auto_on_sample(bootstrap: str, query: Query, live: LiveStart) -> Optional[Deployable]:
    """``auto`` for a live query (a submission or a replan), as with ``--data``: every run kind but MJoin trees,
    weighed on a sample of the newest records of its sources (:func:`sample_sources`); None when one of them holds
    none yet (the caller then plans on the query file's statistics)."""
    streams = sample_sources(bootstrap, query, live)
    if not all(streams.get(s.name) for s in query.streams):
        return None   # a silent (or replayed) stream: its statistics are the query file's, and so is the plan
    plan = run_plan_of(auto_any(query, streams, trees=False).plan)
    assert not isinstance(plan, TreesRun)
    return plan
