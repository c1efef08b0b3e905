"""Writing synthetic live events (:mod:`joinlib.ingest.events`) to the streams' source topics.

:class:`LiveGenerator` produces, for every stream of a query with a json source (or the ones
named), the records of an :class:`~joinlib.ingest.events.EventGen` to the source's topic, keyed by
destination: paced at the profile's rate against the wall clock (:meth:`run`), or as fast as
possible (:meth:`burst`).  ``on_delivered(stream, record, partition, offset)`` sees every record
once Kafka has it (tests rebuild the expected output from it).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Sequence

from joinlib.adapters.kafka import Producing, ensure_topics, make_admin, make_producer
from joinlib.ingest.events import EventGen, EventProfile, Record
from joinlib.model import Query

Delivered = Callable[[str, Record, int, int], None]


def json_streams(query: Query, names: Optional[Sequence[str]] = None) -> list[str]:
    out = [s.name for s in query.streams if s.source is not None and s.source.format == "json"
           and (names is None or s.name in names)]
    if not out:
        among = f" among {list(names)}" if names else ""
        raise ValueError(f"query {query.name}: no stream with a json source{among}")
    return out


def ensure_source_topics(bootstrap: str, query: Query, partitions: int, names: Optional[Sequence[str]] = None) -> None:
    """Create the source topics that do not exist yet, with ``partitions`` partitions."""
    topics = []
    for n in json_streams(query, names):
        src = query.stream(n).source
        assert src is not None
        topics.append(src.topic)
    ensure_topics(make_admin(bootstrap), topics, partitions=partitions)


class LiveGenerator:
    """See the module docstring; ``time_base_ms``: added to every event time (None: the wall clock at
    the start, so event time is real time)."""

    def __init__(self, bootstrap: str, query: Query, profile: EventProfile, *, seed: int = 1,
                 streams: Optional[Sequence[str]] = None, time_base_ms: Optional[int] = None,
                 id_base: int = 0, on_delivered: Optional[Delivered] = None) -> None:
        self.query, self.profile, self.seed = query, profile, seed
        self.names = json_streams(query, streams)
        self.t0_ms = time.time() * 1000.0
        base = int(self.t0_ms) if time_base_ms is None else time_base_ms
        self.gens = {n: EventGen(query.stream(n), profile, seed=seed, time_base_ms=base, id_base=id_base)
                     for n in self.names}
        self.topics = {n: query.stream(n).source.topic for n in self.names}  # type: ignore[union-attr]
        # idempotent: a retried send (a loaded broker) can neither duplicate nor reorder records, and order
        # within a partition decides which records are late
        self.out = Producing(make_producer(bootstrap, **{"linger.ms": 5, "enable.idempotence": True, "acks": "all"}))
        self.on_delivered = on_delivered
        self.sent = {n: 0 for n in self.names}
        self.sent_bytes = 0

    def _send(self, name: str, rec: Record) -> None:
        cb = None
        if self.on_delivered is not None:
            def cb(err, msg, name: str = name, rec: Record = rec) -> None:
                if err is None:
                    self.on_delivered(name, rec, msg.partition(), msg.offset())  # type: ignore[misc]
        p = self.out.producer
        while True:
            try:
                p.produce(self.topics[name], rec.value, rec.key, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        self.sent[name] += 1
        self.sent_bytes += len(rec.value)

    def burst(self, n: int) -> None:
        """``n`` records per stream, interleaved stream by stream in creation order, unpaced."""
        for _ in range(n):
            for name, gen in self.gens.items():
                self._send(name, gen.next())
            self.out.producer.poll(0)
        self.flush()

    def run(self, duration_s: Optional[float] = None, stop: Optional[threading.Event] = None,
            every_s: float = 5.0, report: Optional[Callable[[str], None]] = None) -> None:
        """Produce at the profile's rate until ``duration_s`` (None: forever) or ``stop``."""
        start, next_report = time.monotonic(), time.monotonic() + every_s
        while (stop is None or not stop.is_set()) and (duration_s is None or time.monotonic() - start < duration_s):
            t = (time.monotonic() - start) * 1000.0
            for name, gen in self.gens.items():
                for rec in gen.until(t):
                    self._send(name, rec)
            self.out.producer.poll(0)
            if report is not None and time.monotonic() >= next_report:
                next_report += every_s
                report(f"{sum(self.sent.values()):,} events written ({self.sent_bytes:,} bytes)")
            time.sleep(0.005)
        self.flush()

    def flush(self) -> None:
        self.out.drain()  # every record delivered (or failed after message.timeout.ms): rides out a broker restart
