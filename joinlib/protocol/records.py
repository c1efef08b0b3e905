"""Avro wire encoding of the messages that enter and leave the system, and their records:

* :class:`SourceBatch` -- source tuples (``joinlib.SourceBatch``, topic ``src.<query>.<stream>``):
  :func:`encode_source_batch` / :func:`decode_source_batch`;
* :class:`ResultBatch` -- join results, many per message and factorised by group (``joinlib.ResultBatch``,
  topic ``out.<query>``): :func:`encode_result_batch` / :func:`decode_result_batch`,
  :func:`result_batch_summary`; :meth:`ResultBatch.results` expands them into :class:`Result` values;
* :class:`Control` -- control messages (``joinlib.Control``, topic ``control``; the payload is any JSON
  value): :func:`encode_control` / :func:`decode_control`.

Why apart from :mod:`joinlib.protocol.wire`: these are the system's edges (sources, sinks, the control topic,
the Spark jobs), the envelopes its inside; both build on :mod:`joinlib.protocol.avro`.  Source and result
batches are written by hand (the same bytes as fastavro's, checked by ``tests/unit/test_wire.py`` against the
``_reference`` functions below); control messages and result decoding use fastavro.
"""
from __future__ import annotations

import io
import json
import re
from typing import Any, Iterator, NamedTuple

import fastavro

from joinlib.model import Tup
from joinlib.protocol.avro import (
    END,
    decode_whole,
    encode_int,
    encode_long,
    fastavro_read,
    put_longs,
    put_string,
    put_tups,
    read_count,
    read_long,
    read_string,
    read_tups,
    tup_of_record,
    tup_record,
)
from joinlib.protocol.schemas import SCHEMAS

__all__ = [
    "SourceBatch",
    "Result",
    "ResultGroup",
    "ResultBatch",
    "Control",
    "encode_source_batch",
    "decode_source_batch",
    "encode_result_batch",
    "decode_result_batch",
    "result_batch_id",
    "result_batch_summary",
    "encode_control",
    "decode_control",
]

_SOURCE_BATCH = SCHEMAS["joinlib.SourceBatch"]
_RESULT_BATCH = SCHEMAS["joinlib.ResultBatch"]
_CONTROL = SCHEMAS["joinlib.Control"]


class SourceBatch(NamedTuple):
    """Source tuples of ``stream``; every later tuple of it has ``ts >= watermark``."""

    stream: str
    tuples: list[Tup]
    watermark: int


class Result(NamedTuple):
    """A join result: ``ids`` maps stream name -> tuple id."""

    query: str
    head: str
    head_ts: int
    emit_ms: int
    ids: dict[str, int]


class ResultGroup(NamedTuple):
    """Results that differ only in the last stream's tuple: one per entry of ``last_ids``;
    ``ids`` maps every other stream's name to its tuple id."""

    head: str
    head_ts: int
    ids: dict[str, int]
    last: str
    last_ids: list[int]


class ResultBatch(NamedTuple):
    """A node's results in one message; ``batch`` numbers the node's batches of a run, per head
    stream and plan instance (partition ``part``, generation ``gen``)."""

    query: str
    site: str
    part: int
    gen: int
    batch: int
    emit_ms: int
    groups: list[ResultGroup]

    def __len__(self) -> int:  # the number of results, not fields
        return sum(len(g.last_ids) for g in self.groups)

    def results(self) -> Iterator[Result]:
        """Every result of the batch as a :class:`Result`."""
        for g in self.groups:
            for i in g.last_ids:
                yield Result(self.query, g.head, g.head_ts, self.emit_ms, {**g.ids, g.last: i})


class Control(NamedTuple):
    """A control-topic message; ``payload`` is any JSON-serialisable value."""

    query: str
    kind: str
    payload: Any


# --------------------------------------------------------------------- source batches


def encode_source_batch(batch: SourceBatch) -> bytes:
    """Schemaless Avro encoding of a :class:`SourceBatch` (schema ``joinlib.SourceBatch``)."""
    parts: list[bytes] = []
    ap = parts.append
    put_string(ap, batch.stream)
    put_tups(ap, batch.tuples)
    ap(encode_long(batch.watermark))
    return b"".join(parts)


def _source_batch_at(data: bytes) -> tuple[SourceBatch, int]:
    stream, i = read_string(data, 0)
    tups, i = read_tups(data, i)
    watermark, i = read_long(data, i)
    return SourceBatch(stream, tups, watermark), i


def decode_source_batch(data: bytes) -> SourceBatch:
    """Inverse of :func:`encode_source_batch`."""
    return decode_whole(data, "joinlib.SourceBatch", _source_batch_at)


def _decode_source_batch_reference(data: bytes) -> SourceBatch:
    rec = fastavro_read(data, _SOURCE_BATCH)
    return SourceBatch(rec["stream"], [tup_of_record(d) for d in rec["tuples"]], rec["watermark"])


def _encode_source_batch_reference(batch: SourceBatch) -> bytes:
    buf = io.BytesIO()
    rec = {
        "stream": batch.stream,
        "tuples": [tup_record(t) for t in batch.tuples],
        "watermark": batch.watermark,
    }
    fastavro.schemaless_writer(buf, _SOURCE_BATCH, rec)
    return buf.getvalue()


# ---------------------------------------------------------------- results and control


def encode_result_batch(batch: ResultBatch) -> bytes:
    """Schemaless Avro encoding of a :class:`ResultBatch` (schema ``joinlib.ResultBatch``).
    The node's sink writes the same bytes from pieces (``adapters.kafka.KafkaResultSink``)."""
    parts: list[bytes] = []
    ap = parts.append
    put_string(ap, batch.query)
    put_string(ap, batch.site)
    ap(encode_int(batch.part))
    ap(encode_int(batch.gen))
    ap(encode_long(batch.batch))
    ap(encode_long(batch.emit_ms))
    if batch.groups:
        ap(encode_long(len(batch.groups)))
        for g in batch.groups:
            put_string(ap, g.head)
            ap(encode_long(g.head_ts))
            if g.ids:
                ap(encode_long(len(g.ids)))
                for name, tid in g.ids.items():
                    put_string(ap, name)
                    ap(encode_long(tid))
            ap(END)
            put_string(ap, g.last)
            put_longs(ap, g.last_ids)
    ap(END)
    return b"".join(parts)


_SKIP: dict[int, re.Pattern[bytes]] = {}


def _skip_longs(b: bytes, i: int, n: int) -> int:
    """Index after ``n`` Avro longs from b[i] (a regular expression: C speed)."""
    r = _SKIP.get(n)
    if r is None:
        r = _SKIP[n] = re.compile(rb"(?:[\x80-\xff]*[\x00-\x7f]){%d}" % n, re.DOTALL)
    m = r.match(b, i)
    if m is None:
        raise IndexError("array beyond the end")
    return m.end()


def _header_at(data: bytes) -> tuple[tuple[str, str, int, int, int, int], int]:
    """(query, site, part, gen, batch, emit_ms) of an encoded ResultBatch, and where its groups begin."""
    query, i = read_string(data, 0)
    site, i = read_string(data, i)
    part, i = read_long(data, i)
    gen, i = read_long(data, i)
    batch, i = read_long(data, i)
    emit_ms, i = read_long(data, i)
    return (query, site, part, gen, batch, emit_ms), i


def _summary_at(data: bytes) -> tuple[tuple[int, list[tuple[int, int]]], int]:
    (_, _, _, _, _, emit_ms), i = _header_at(data)
    groups: list[tuple[int, int]] = []
    n, i = read_count(data, i)
    while n:
        for _ in range(n):
            _, i = read_string(data, i)
            head_ts, i = read_long(data, i)
            k, i = read_count(data, i)
            while k:
                for _ in range(k):
                    _, i = read_string(data, i)
                    _, i = read_long(data, i)
                k, i = read_count(data, i)
            _, i = read_string(data, i)
            total = 0
            k, i = read_count(data, i)
            while k:
                i = _skip_longs(data, i, k)
                total += k
                k, i = read_count(data, i)
            groups.append((head_ts, total))
        n, i = read_count(data, i)
    return (emit_ms, groups), i


def result_batch_summary(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(emit_ms, [(head_ts, number of results) per group]) of an encoded ResultBatch, without
    decoding the ids: what a collector that only counts and measures latency needs."""
    return decode_whole(data, "joinlib.ResultBatch", _summary_at)


def result_batch_id(data: bytes) -> tuple[str, str, int, int, str, int]:
    """(query, site, part, gen, head, batch) of an encoded ResultBatch: what names it among a run's batches (a node
    numbers them per plan instance and head stream, deterministically).  A reader that keeps the ids it saw
    drops a batch written twice -- a fenced instance's messages still queued in its producer when it was
    paused, docs/reliability.md -- so the results stay exactly once."""
    (query, site, part, gen, batch, _), i = _header_at(data)
    n, i = read_count(data, i)
    head = read_string(data, i)[0] if n else ""
    return query, site, part, gen, head, batch


def _encode_result_batch_reference(batch: ResultBatch) -> bytes:
    buf = io.BytesIO()
    rec = {"query": batch.query, "site": batch.site, "part": batch.part, "gen": batch.gen,
           "batch": batch.batch, "emit_ms": batch.emit_ms,
           "groups": [{"head": g.head, "head_ts": g.head_ts, "ids": dict(g.ids), "last": g.last,
                       "last_ids": list(g.last_ids)} for g in batch.groups]}
    fastavro.schemaless_writer(buf, _RESULT_BATCH, rec)
    return buf.getvalue()


def decode_result_batch(data: bytes) -> ResultBatch:
    """Inverse of :func:`encode_result_batch`."""
    rec = fastavro_read(data, _RESULT_BATCH)
    return ResultBatch(rec["query"], rec["site"], rec["part"], rec["gen"], rec["batch"], rec["emit_ms"],
                       [ResultGroup(g["head"], g["head_ts"], dict(g["ids"]), g["last"], g["last_ids"])
                        for g in rec["groups"]])


def encode_control(msg: Control) -> bytes:
    """Schemaless Avro encoding of a :class:`Control`; the payload is serialised as
    compact JSON (``json.dumps``, keys in insertion order)."""
    rec = {
        "query": msg.query,
        "kind": msg.kind,
        "payload": json.dumps(msg.payload, separators=(",", ":"), ensure_ascii=False),
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _CONTROL, rec)
    return buf.getvalue()


def decode_control(data: bytes) -> Control:
    """Inverse of :func:`encode_control`."""
    rec = fastavro_read(data, _CONTROL)
    return Control(rec["query"], rec["kind"], json.loads(rec["payload"]))
