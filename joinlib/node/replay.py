"""Replaying stream data into Kafka: one ``SourceBatch`` per stream per batch interval.

Batch ``e`` of stream S holds S's tuples with ``e*tau <= ts < (e+1)*tau`` (event time
preserved) and carries the watermark ``(e+1)*tau``: the node's tick of epoch ``e`` needs
exactly that, as in embedded mode.  Every epoch from 0 to the last is sent for every
stream (empty batches included, so watermarks advance).  Afterwards a ``control`` message
``end {"last_epoch": E}`` with ``E = max ts // tau`` over all streams tells the nodes where
to stop.

A scaled-out partitioned plan (``split``: its :class:`~joinlib.plan.partitioned.Partitioned`, D
partitions; :mod:`joinlib.node.scale_out`) has D partitions per source topic: batch ``e`` of a
stream the plan partitions is split by the partition function, partition p's tuples (perhaps none)
to Kafka partition p; a stream it does not partition goes whole to every partition.

Pacing: ``rate_scale=None`` sends as fast as possible; ``rate_scale=X`` releases batch ``e``
at wall time ``t0 + (e+1)*tau/X`` (when its interval has ended, X times faster than
event time), so a result's latency is ``emit_ms - (t0 + head_ts/X)``.
"""
from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tqdm import tqdm

from joinlib.adapters.kafka import Producing, source_topic
from joinlib.control.messages import EndMessage
from joinlib.model import Query, Tup
from joinlib.node.control import publish
from joinlib.protocol import records


@dataclass
class ReplayInfo:
    last_epoch: int
    t0_ms: float            # wall-clock ms at which event time 0 was (notionally) replayed
    rate_scale: Optional[float]
    tuples: int
    messages: int
    bytes: int
    wall_s: float
    behind_ms: float = 0.0  # worst lag of a paced send behind its schedule

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def last_epoch_of(query: Query, streams: dict[str, list[Tup]]) -> int:
    tau = query.execution.interval_ms
    ends = [tups[-1].ts for tups in streams.values() if tups]
    return max(ends) // tau if ends else 0


def replay(out: Producing, query: Query, streams: dict[str, list[Tup]], *, rate_scale: Optional[float] = None,
           run: Optional[str] = None, progress: bool = False, end: bool = True,
           lead_ms: float = 50.0, split: Any = None) -> ReplayInfo:
    """Produce every stream of ``query`` to ``src.<query>.<stream>``; then ``end`` (if ``end``).
    ``split``: a scaled-out plan's :class:`~joinlib.plan.partitioned.Partitioned` (see above)."""
    tau = query.execution.interval_ms
    last = last_epoch_of(query, streams)
    names = [s.name for s in query.streams]
    data = {n: streams.get(n, []) for n in names}
    ts = {n: [t.ts for t in data[n]] for n in names}
    topics = {n: source_topic(query, n) for n in names}
    keys = {n: n.encode() for n in names}
    headers = [("run", run.encode())] if run else None
    bar = None
    if progress:
        bar = tqdm(total=last + 1, desc=f"{query.name}: replay", unit="epoch", leave=False)
    t_wall = time.perf_counter()
    t0 = time.time() * 1000.0 + (lead_ms if rate_scale else 0.0)
    n_tuples = n_msgs = n_bytes = 0
    behind = 0.0
    cursor = {n: 0 for n in names}
    d, routes = (split.function.d, split.router(query)) if split is not None else (0, {})
    try:
        for e in range(last + 1):
            end_ts = (e + 1) * tau
            if rate_scale:
                behind = max(behind, _pace(out, t0 + end_ts / rate_scale))
            for n in names:
                i = cursor[n]
                j = bisect_left(ts[n], end_ts, i)
                cursor[n] = j
                for part, tups in _parts(data[n][i:j], d, routes.get(n)):
                    value = records.encode_source_batch(records.SourceBatch(n, tups, end_ts))
                    out.produce(topics[n], value, keys[n], headers, part)
                    n_msgs += 1
                    n_bytes += len(value)
                n_tuples += j - i
            if rate_scale:
                out.poll()
            if bar is not None:
                bar.update(1)
        out.flush()
        if end:
            _publish_end(out, query, last, run)
    finally:
        if bar is not None:
            bar.close()
    return ReplayInfo(last, t0, rate_scale, n_tuples, n_msgs, n_bytes, time.perf_counter() - t_wall, behind)


def _parts(tups: list[Tup], d: int, route: Optional[Callable[[Tup], int]]) -> list[tuple[int, list[Tup]]]:
    """(Kafka partition, tuples) to produce: all to partition 0 (``d`` 0: not scaled out), all to every
    partition (no ``route``: a stream the plan does not partition), or each to its partition."""
    if d == 0:
        return [(0, tups)]
    if route is None:
        return [(p, tups) for p in range(d)]
    split: list[list[Tup]] = [[] for _ in range(d)]
    for t in tups:
        split[route(t)].append(t)
    return list(enumerate(split))


def _pace(out: Producing, due_ms: float) -> float:
    """Wait until wall time ``due_ms`` (serving the producer first); how late we already were, in ms."""
    wait = (due_ms - time.time() * 1000.0) / 1000.0
    if wait > 0:
        out.producer.poll(0)
        time.sleep(wait)
        return 0.0
    return -wait * 1000.0


def _publish_end(out: Producing, query: Query, last_epoch: int, run: Optional[str]) -> None:
    publish(out, query.name, EndMessage(last_epoch, run))
