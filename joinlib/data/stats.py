"""Measure the statistics of stream data that the cost model needs (``joinlib stats``).

For every stream of a query, from ``DIR/<stream>.jsonl``:

* ``rate`` — tuples per second: (n − 1) / (last ts − first ts) (the arrival rate
  between the first and last tuple; n / span would undercount by one interval);
* ``tuple_bytes`` — the paper's F: the mean number of bytes a full tuple adds to a
  full-tuple message on the wire, measured as
  ``(encode_envelope(TupleBatch(all tuples)) − encode_envelope(TupleBatch([]))) / n``
  with :func:`joinlib.protocol.wire.encode_envelope`, in chunks of 1000 tuples.  That is the
  Avro encoding of the tuple (pos, id, ts, seq, join key, payload) plus the two bytes
  of its one-element ``parts`` array; it is what the simulator and Kafka carry;
* ``attributes`` — the number of payload (non-join, non id/ts) attributes;
* per join attribute: ``distinct`` values, ``selectivity`` f = 1 / distinct (the
  paper's definition, uniform values), ``collision`` Σ p_v² (the probability that
  two random tuples agree: equals 1 / distinct for uniform values, larger under skew),
  and ``partial_bytes``, the mean bytes one key value adds to a partial-tuple message
  (``KeyBatch``);
* ``window_tuples`` — tuples in the window: for a time window T, the mean number of
  tuples of the stream with ts in [s.ts − T, s.ts) over tuples s at least T after the
  first (full windows only); for a tuple window, its size.

``--write OUT.yaml`` writes the query with ``rate``, ``attributes``, ``tuple_bytes``
and per-attribute ``selectivity`` replaced by the measured values.
"""
from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, TypedDict, TypeVar

from joinlib.data.files import load_streams
from joinlib.errors import DataError, JoinlibError
from joinlib.model import Query, Stream, StreamStats, Tup, Value
from joinlib.protocol.messages import Body, Envelope, KeyBatch, TupleBatch
from joinlib.protocol.values import decode_values
from joinlib.protocol.wire import encode_envelope
from joinlib.query import dump_query
from joinlib.sql import load_query_file, query_to_sql

# What a stream is assumed to have where neither its query file nor its data says (docs/cost-model.md): the
# cost models price it, the generator (joinlib.data.gen) generates it, warm-ups and samples are sized by it.
DEFAULT_RATE = 100.0          # tuples per second
DEFAULT_SELECTIVITY = 0.1     # f = 1 / distinct values
DEFAULT_ATTRIBUTES = 100      # payload attributes the cost models assume (the paper's Fig. 9 tuple: 500 bytes)
BYTES_PER_ATTRIBUTE = 5       # the paper's unit: 250 attributes = 1250 bytes

CHUNK = 1000
T = TypeVar("T")


class AttributeStats(TypedDict):
    """What :func:`stream_stats` measures of one join attribute."""

    distinct: int
    selectivity: Optional[float]
    collision: Optional[float]
    partial_bytes: Optional[float]
    declared: Optional[float]


class DeclaredStats(TypedDict):
    rate: Optional[float]
    attributes: Optional[int]
    tuple_bytes: Optional[int]


class StreamMeasurement(TypedDict):
    """What :func:`stream_stats` measures of one stream (the JSON of ``joinlib stats --json``)."""

    stream: str
    site: str
    tuples: int
    first_ts: Optional[int]
    last_ts: Optional[int]
    rate: Optional[float]
    tuple_bytes: Optional[float]
    attributes: Optional[int]
    join_attributes: dict[str, AttributeStats]
    window: str
    window_tuples: Optional[float]
    declared: DeclaredStats


def _batch_bytes(body_of: Callable[[list[T]], Body], items: list[T]) -> float:
    """Mean bytes each item adds to a message body (chunks of :data:`CHUNK`)."""
    if not items:
        return 0.0
    empty = len(encode_envelope(Envelope("a", "b", 0, 0, body_of([]))))
    total = 0
    for i in range(0, len(items), CHUNK):
        chunk = items[i:i + CHUNK]
        total += len(encode_envelope(Envelope("a", "b", 0, 0, body_of(chunk)))) - empty
    return total / len(items)


def tuple_bytes(tups: list[Tup]) -> float:
    """F: mean bytes a full tuple adds to a TupleBatch (see the module docstring)."""
    return _batch_bytes(lambda c: TupleBatch(rows=[(t,) for t in c]), tups)


def key_bytes(keys: list[tuple[Value, ...]]) -> float:
    """P: mean bytes a key adds to a KeyBatch."""
    return _batch_bytes(lambda c: KeyBatch(keys=list(c)), keys)


def measured_attributes(t: Tup) -> Optional[int]:
    """The number of payload values, or None when the payload is not in joinlib's value encoding
    (opaque bytes from another producer: the tuple size still counts)."""
    try:
        return len(decode_values(t.rest))
    except (EOFError, ValueError, IndexError, StopIteration):
        return None


def measured_window_tuples(stream: Stream, tups: list[Tup]) -> Optional[float]:
    """Tuples in the window, measured on ``tups`` (see the module docstring); the size of a tuple window."""
    if not stream.window.is_time:
        return float(stream.window.size)
    if not tups:
        return None
    T = stream.window.size
    ts = [t.ts for t in tups]
    start = bisect_left(ts, ts[0] + T)
    if start >= len(ts):
        return None  # the data is shorter than one window
    counts = [i - bisect_left(ts, ts[i] - T, 0, i) - _ties(ts, i) for i in range(start, len(ts))]
    return sum(counts) / len(counts)


def _ties(ts: list[int], i: int) -> int:
    """Tuples before i with the same ts as i (not in the window [ts − T, ts))."""
    j = i
    while j > 0 and ts[j - 1] == ts[i]:
        j -= 1
    return i - j


def attribute_stats(stream: Stream, tups: list[Tup], i: int) -> AttributeStats:
    """The measured statistics of join attribute ``i`` of ``stream``."""
    n = len(tups)
    counts: dict[Value, int] = {}
    for t in tups:
        v = t.key[i]
        counts[v] = counts.get(v, 0) + 1
    d = len(counts)
    return {"distinct": d, "selectivity": 1.0 / d if d else None,
            "collision": sum((c / n) ** 2 for c in counts.values()) if n else None,
            "partial_bytes": key_bytes([(t.key[i],) for t in tups]) if n else None,
            "declared": stream.stats.selectivity_of(stream.join_attrs[i])}


def stream_stats(stream: Stream, tups: list[Tup]) -> StreamMeasurement:
    """The measured statistics of one stream (see the module docstring)."""
    n = len(tups)
    span = (tups[-1].ts - tups[0].ts) / 1000.0 if n else 0.0
    st = stream.stats
    return {"stream": stream.name, "site": stream.site, "tuples": n,
            "first_ts": tups[0].ts if n else None, "last_ts": tups[-1].ts if n else None,
            "rate": (n - 1) / span if n > 1 and span > 0 else None,
            "tuple_bytes": tuple_bytes(tups) if n else None,
            "attributes": measured_attributes(tups[0]) if n else None,
            "join_attributes": {a: attribute_stats(stream, tups, i) for i, a in enumerate(stream.join_attrs)},
            "window": str(stream.window),
            "window_tuples": measured_window_tuples(stream, tups),
            "declared": {"rate": st.rate, "attributes": st.attributes, "tuple_bytes": st.tuple_bytes}}


def measure_query(query: Query, data_dir: Path) -> list[StreamMeasurement]:
    streams = load_streams(query, data_dir)
    return [stream_stats(s, streams[s.name]) for s in query.streams]


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def with_measured(query: Query, stats: list[StreamMeasurement]) -> Query:
    """``query`` with the measured rate, attributes, tuple_bytes and selectivities."""
    by = {s["stream"]: s for s in stats}
    streams = []
    for s in query.streams:
        m = by[s.name]
        old = s.stats
        measured = ((a, _sig(v["selectivity"]) if v["selectivity"] else old.selectivity_of(a))
                    for a, v in m["join_attributes"].items())
        sel = tuple((a, f) for a, f in measured if f is not None)
        new = StreamStats(rate=_sig(m["rate"]) if m["rate"] else old.rate,
                          tuple_bytes=round(m["tuple_bytes"]) if m["tuple_bytes"] else old.tuple_bytes,
                          attributes=m["attributes"] if m["attributes"] is not None else old.attributes,
                          selectivity=sel or old.selectivity)
        streams.append(replace(s, stats=new))
    return replace(query, streams=tuple(streams))


def format_stats(stats: list[StreamMeasurement]) -> str:
    def num(x: Optional[float], fmt: str) -> str:
        return "-" if x is None else format(x, fmt)
    lines = [f"{'stream':<8}{'tuples':>8}{'rate/s':>10}{'(declared)':>11}{'bytes F':>9}{'(declared)':>11}"
             f"{'attrs':>7}{'window':>12}{'w tuples':>10}"]
    for s in stats:
        d = s["declared"]
        lines.append(f"{s['stream']:<8}{s['tuples']:>8}{num(s['rate'], '.2f'):>10}{num(d['rate'], 'g'):>11}"
                     f"{num(s['tuple_bytes'], '.1f'):>9}{num(d['tuple_bytes'], 'g'):>11}"
                     f"{num(s['attributes'], 'd'):>7}{s['window']:>12}{num(s['window_tuples'], '.1f'):>10}")
    lines.append("")
    lines.append(f"{'attribute':<16}{'distinct':>9}{'f = 1/d':>10}{'(declared)':>11}{'Σp²':>10}{'P bytes':>9}")
    for s in stats:
        for a, v in s["join_attributes"].items():
            lines.append(f"{s['stream'] + '.' + a:<16}{v['distinct']:>9}{num(v['selectivity'], '.4g'):>10}"
                         f"{num(v['declared'], 'g'):>11}{num(v['collision'], '.4g'):>10}"
                         f"{num(v['partial_bytes'], '.1f'):>9}")
    return "\n".join(lines)


def main(query_path: Path, data_dir: Path, write: Optional[Path] = None,
         json_out: Optional[Path] = None) -> list[StreamMeasurement]:
    query = load_query_file(query_path)
    if not Path(data_dir).is_dir():
        raise DataError(f"--data {data_dir}: no such directory (expected one <stream>.jsonl per stream)")
    stats = measure_query(query, data_dir)
    print(format_stats(stats))
    if write is not None:
        if write.parent and not write.parent.exists():
            raise JoinlibError(f"cannot write {write}: directory {write.parent} does not exist")
        measured = with_measured(query, stats)
        if write.suffix.lower() == ".sql":
            write.write_text(query_to_sql(measured), encoding="utf-8")
        else:
            dump_query(measured, write)
        print(f"\nwrote {write} (query with the measured statistics)")
    if json_out is not None:
        if json_out.parent and not json_out.parent.exists():
            raise JoinlibError(f"cannot write {json_out}: directory {json_out.parent} does not exist")
        json_out.write_text(json.dumps(stats, indent=1) + "\n")
        print(f"wrote {json_out}")
    return stats
