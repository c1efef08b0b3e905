"""Result rows on a live query's sink topic (``output.topic``), exactly once: written, recovered and read.

Where ``out.<query>`` takes a result batch, the result site also writes each of its results as a row
(:mod:`joinlib.rows`) to partition 0 of the sink topic, one Kafka record per row: the JSON line
``joinlib run --out`` writes, or Avro in the Confluent wire format (:mod:`joinlib.rows_avro`) with the schema
registered at the output's ``registry`` (``POST /subjects/<topic>-value/versions``, on the first row).  The key is
null (the row holds its ``ids``); the headers are ``run`` (as on ``out.<query>``), ``joinlib.site`` and
``joinlib.seq`` = ``part.gen.head.n``: the row's number among the rows of its plan instance and head stream.

Exactly once, the way result batches are (:mod:`joinlib.node.recovery`): a head's rows are emitted in epoch
order, so a run replaying from a checkpoint numbers them the same; a checkpoint keeps the numbers so far and the
sink topic's end offset, and a restarted node reads the topic from there and skips every row number it finds of
its site and run (Kafka keeps an idempotent producer's order within the partition: what was delivered is a
prefix; :func:`joinlib.node.recovery.delivered_rows`).  So each result's row is on the topic once, whatever
became of ``out.<query>``'s batch.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable, Collection, Optional, Union

import orjson

from joinlib.adapters.kafka import Producing, TopicPartition, consume, make_consumer, watermarks
from joinlib.errors import ClusterError
from joinlib.model import Query
from joinlib.rows import Record, TupleRecords, group_rows
from joinlib.rows_avro import AvroRows, SchemaLookup, decode_row, row_schema
from joinlib.runtime.sink import Group

SEQ_HEADER, SITE_HEADER = "joinlib.seq", "joinlib.site"
Key = tuple[int, int, int]   # (plan partition, generation, head stream position), as result batches
Runs = Union[None, str, Collection[str]]   # the runs to read: one, several (a replanned query's) or every one


def register_schema(url: str, subject: str, schema: dict[str, Any], timeout_s: float = 5.0,
                    retry_s: float = 30.0) -> int:
    """Register ``schema`` under ``subject`` at a Confluent schema registry; its id (the same schema: the same id).
    Retried for ``retry_s`` while the registry cannot be reached; a refusal is a :class:`ClusterError`."""
    body = json.dumps({"schema": json.dumps(schema)}).encode()
    deadline = time.monotonic() + retry_s
    while True:
        req = urllib.request.Request(f"{url.rstrip('/')}/subjects/{subject}/versions", data=body, method="POST",
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return int(json.loads(r.read())["id"])
        except urllib.error.HTTPError as e:
            if e.code < 500:
                raise ClusterError(f"schema registry {url} refused the rows' schema for {subject} (HTTP {e.code}: "
                                   f"{e.read()[:200]!r}); an incompatible schema of that subject? give the sink "
                                   "another topic or relax the subject's compatibility") from None
            why = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
            why = str(getattr(e, "reason", e))
        if time.monotonic() > deadline:
            raise ClusterError(f"schema registry {url}: cannot register the rows' schema for {subject} ({why}); "
                               "check the query's 'registry' URL")
        time.sleep(1.0)


class RowsOut:
    """The rows part of a result site's sink (:class:`joinlib.adapters.kafka.KafkaResultSink` calls :meth:`emit`
    with each call's groups): numbers, skips (``skip``: per key, how many rows a predecessor delivered) and
    produces; the Avro schema is registered when the first row is written."""

    def __init__(self, out: Producing, query: Query, site: str, origin_ms: int, headers: Any = None,
                 written: Optional[Callable[[int], None]] = None) -> None:
        assert query.output.columns is not None and query.output.topic is not None
        self.out, self.query = out, query
        self.topic = query.output.topic
        self.columns, self.names = query.output.columns, query.names
        self.record = TupleRecords(query, origin_ms)
        self.origin = origin_ms
        self.headers = [*(headers or []), (SITE_HEADER, site.encode())]
        self.seq: dict[Key, int] = {}
        self.skip: dict[Key, int] = {}
        self._avro: Optional[AvroRows] = None
        self._written = written   # told how many rows each emit produced (the rows/s metric)

    def encode(self, row: Record) -> bytes:
        if self.query.output.format == "json":
            return orjson.dumps(row)
        if self._avro is None:
            schema = row_schema(self.query)
            assert self.query.output.registry is not None
            self._avro = AvroRows(schema, register_schema(self.query.output.registry, f"{self.topic}-value", schema))
        return self._avro.encode(row)

    def emit(self, key: Key, head_pos: int, pos: int, groups: list[Group]) -> None:
        n, skip = self.seq.get(key, 0), self.skip.get(key, 0)
        tag = f"{key[0]}.{key[1]}.{key[2]}."
        produced = 0
        for row in group_rows(self.columns, self.names, self.record, head_pos, pos, groups, self.origin):
            if n >= skip:
                self.out.produce(self.topic, self.encode(row), None,
                                 [*self.headers, (SEQ_HEADER, (tag + str(n)).encode())])
                produced += 1
            n += 1
        self.seq[key] = n
        if produced and self._written is not None:
            self._written(produced)


def read_rows(bootstrap: str, query: Query, run: Runs, start: int, max_rows: int, wait_s: float,
              schemas: Optional[SchemaLookup] = None) -> dict[str, Any]:
    """Rows of ``run`` on ``query``'s sink topic from offset ``start`` (negative: the end), decoded (JSON, or Avro
    with ``schemas``: the writer schema of an id), as :func:`read_page` pages them."""
    assert query.output.topic is not None
    if query.output.format == "json":
        return read_page(bootstrap, query.output.topic, run, start, max_rows, wait_s, lambda v: [orjson.loads(v)])
    lookup: SchemaLookup = schemas or (lambda i: None)

    def avro(value: bytes) -> list[Record]:
        row = decode_row(value, lookup)
        return [] if row is None else [row]
    return read_page(bootstrap, query.output.topic, run, start, max_rows, wait_s, avro)


def read_page(bootstrap: str, topic: str, run: Runs, start: int, max_results: int, wait_s: float,
              decode: Callable[[bytes], list[Record]],
              decode_of: Optional[Callable[[bytes, bytes], list[Record]]] = None) -> dict[str, Any]:
    """The records of ``run`` (header ``run``; several runs: a replanned query's, docs/live.md "Replan"; None: every
    record) in partition 0 of ``topic`` from offset ``start`` (negative: the end), each message ``decode``d into
    results (``decode_of``: given the value and the run header instead): ``{"results": [...], "next": offset to ask
    from next time, "end": the topic's end offset}``; waits up to ``wait_s`` for the first result when there is
    none."""
    c = make_consumer(bootstrap, f"joinlib-results-{uuid.uuid4().hex[:8]}")
    results: list[Record] = []
    try:
        lo, end = watermarks(c, TopicPartition(topic, 0), 10.0)
        nxt = end if start < 0 else max(start, lo)
        deadline = time.monotonic() + wait_s
        if nxt >= end and wait_s <= 0:
            return {"results": results, "next": nxt, "end": end}
        c.assign([TopicPartition(topic, 0, nxt)])
        runs_b = None if not run else {run.encode()} if isinstance(run, str) else {r.encode() for r in run}
        while len(results) < max_results:
            msgs = consume(c, 2000, 0.2)
            for m in msgs:
                nxt = (m.offset() or 0) + 1
                value = m.value()
                got = dict(m.headers() or ()).get("run") or b""
                header = got.encode() if isinstance(got, str) else got
                if value is None or runs_b is not None and header not in runs_b:
                    continue
                results += decode(value) if decode_of is None else decode_of(value, header)
            if nxt >= end and (results or time.monotonic() >= deadline):
                break  # caught up with the end as of the call (a follower asks again)
            if not msgs and time.monotonic() >= deadline:
                break
        return {"results": results, "next": nxt, "end": max(end, nxt)}
    finally:
        c.close()
