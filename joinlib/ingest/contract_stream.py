"""The live contract (:mod:`joinlib.ingest.contract`) computed while the records are written, chunk by chunk.

A check of a long live run (bench/soak.py: 30 minutes, millions of records) cannot keep every record until the
end as :func:`~joinlib.ingest.contract.expected_output` does, nor the reference's whole multiset of results.
:class:`IncrementalExpected` takes the records as they are read, each partition in offset order, classifies
them with the same :class:`~joinlib.ingest.contract.PartitionClassifier`, and hands out the reference's
results by *chunk*: the results whose head (the ≺-latest member) has its event time in
``[k * chunk_ms, (k + 1) * chunk_ms)``.  Chunk ``k`` is final once every partition's watermark has passed its
end -- a later record with an earlier time is late there, so it cannot take part -- and is joined over the
on-time tuples of ``[k * chunk_ms - W, (k + 1) * chunk_ms)`` (W the largest window: a result's members lie
within its head's windows) by the embedded engine's ``central`` plan
(:func:`~joinlib.ingest.contract.exact_join`).  Tuples older than any chunk still to come needs are dropped,
so memory holds a chunk and a window of tuples.  Time windows only (a count window reaches back an unbounded
time).  ``tests/property/test_contract_stream.py`` holds the union of the chunks to :func:`expected_output`.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Optional

from joinlib.ingest.contract import PartitionClassifier, Results, Written, exact_join
from joinlib.ingest.records import Decoder, Filtered, SchemaLookup
from joinlib.model import Query, Tup, Value

# per stream, its on-time tuples not yet dropped: (ts, id, partition, offset, key)
Row = tuple[int, int, int, int, tuple[Value, ...]]


class IncrementalExpected:
    """See the module docstring.  ``partitions``: per stream, the partitions of its source (a chunk waits
    for every one of them); ``advances``: the logged idle advances, per (stream, partition), as for
    :func:`expected_output`.  ``dead`` collects the dead letters, ``on_time`` counts the on-time records."""

    def __init__(self, query: Query, origin_ms: int, partitions: dict[str, list[int]], chunk_ms: int,
                 advances: Optional[dict[tuple[str, int], list[tuple[int, int]]]] = None,
                 schemas: Optional[dict[str, SchemaLookup]] = None) -> None:
        if chunk_ms <= 0:
            raise ValueError(f"chunk_ms must be positive, not {chunk_ms}")
        tuple_windows = [s.name for s in query.streams if not s.window.is_time]
        if tuple_windows:
            raise ValueError(f"streams {tuple_windows} have count windows: the reference cannot be chunked by time")
        self.query, self.chunk_ms = query, chunk_ms
        self.reach = max(s.window.size for s in query.streams)
        delta = query.execution.max_delay_ms
        self.decoders: dict[str, Decoder] = {}
        self.parts: dict[tuple[str, int], PartitionClassifier] = {}
        for s in query.streams:
            assert s.source is not None and s.source.live, f"stream {s.name} has no live source"
            self.decoders[s.name] = Decoder(s, s.source, origin_ms, (schemas or {}).get(s.name))
            for p in partitions[s.name]:
                self.parts[(s.name, p)] = PartitionClassifier((advances or {}).get((s.name, p), []), delta,
                                                              s.window.size)
        self.rows: dict[str, list[Row]] = {s.name: [] for s in query.streams}
        self.dead: dict[tuple[str, int, int], str] = {}
        self.on_time = 0
        self.next_chunk: Optional[int] = None   # the first chunk not handed out yet (None: before the first)

    def add(self, stream: str, w: Written) -> Optional[str]:
        """Classify one record (each partition's records in offset order); its dead-letter reason or None."""
        dead = self.add_run(stream, w.part, [w.offset], [w.value])
        return dead[0][1] if dead else None

    def add_run(self, stream: str, part: int, offsets: list[int],
                values: list[Optional[bytes]]) -> list[tuple[int, str]]:
        """:meth:`add` of a run of one partition's records (consecutive in offset order), decoded in one call
        (:meth:`Decoder.decode_run`): a check reading millions of records (bench/soak.py) pays the per-record
        Python once per run instead of per record.  Returns the dead letters among them, (offset, reason)."""
        dead: list[tuple[int, str]] = []
        classify = self.parts[(stream, part)].classify
        keep = self.rows[stream].append
        topic = self.decoders[stream].spec.topic
        on_time = 0
        for off, ev in zip(offsets, self.decoders[stream].decode_run(part, offsets, values), strict=True):
            if type(ev) is Filtered:
                continue
            fate = classify(off, ev)
            if fate is not None:
                self.dead[(topic, part, off)] = fate
                dead.append((off, fate))
                continue
            on_time += 1
            keep((ev.ts, ev.id, part, off, ev.key))
        self.on_time += on_time
        return dead

    def watermark(self) -> int:
        """Every on-time record still to come has an event time at or after this."""
        return min(c.wm for c in self.parts.values())

    def ready(self) -> Iterator[tuple[int, Results]]:
        """The chunks final now, in order: (k, the reference's results with head in chunk k, ts from the origin)."""
        yield from self._upto(self.watermark() // self.chunk_ms)

    def finish(self) -> Iterator[tuple[int, Results]]:
        """Every chunk left (the input has ended: no record is still to come)."""
        last = max((r[0] for rows in self.rows.values() for r in rows), default=None)
        if last is not None:
            yield from self._upto(last // self.chunk_ms + 1)

    def _upto(self, end: int) -> Iterator[tuple[int, Results]]:
        if self.next_chunk is None:
            first = min((r[0] for rows in self.rows.values() for r in rows), default=None)
            if first is None:
                return
            self.next_chunk = first // self.chunk_ms
        if self.next_chunk >= end:
            return
        while self.next_chunk < end:
            k = self.next_chunk
            self.next_chunk += 1
            yield k, self._chunk(k)
        for c in self.parts.values():
            c.forget()

    def _chunk(self, k: int) -> Results:
        lo, hi = k * self.chunk_ms, (k + 1) * self.chunk_ms
        streams: dict[str, list[Tup]] = {}
        for s in self.query.streams:
            rows = sorted(self.rows[s.name])
            sel = [r for r in rows if lo - self.reach <= r[0] < hi]
            streams[s.name] = [Tup(s.pos, i, ts, n, key) for n, (ts, i, _p, _o, key) in enumerate(sel)]
            # what a later chunk may still need: its heads are at hi or later, its members within reach of them
            self.rows[s.name] = [r for r in rows if r[0] >= hi - self.reach]
        if not any(streams.values()):
            return Counter()
        # the engine's central plan at any size (the naive reference is cubic in a 3-way chain's window)
        res = exact_join(self.query, streams, naive_limit=0)
        return Counter({key: n for key, n in res.items() if lo <= key[1] < hi})
