"""Results as rows: a result's selected columns, built from its member tuples where results are written.

A row is one JSON object::

    {"dest": "10.0.0.7", "id1": 3, "id2": 9, "ids": {"S1": 3, "S2": 9, "S3": 1}, "ts": 1234}

* the columns of the SELECT list (:class:`joinlib.output_spec.Output`), in its order: ``S1.dest`` is ``dest``,
  ``S1.id AS id1`` is ``id1``; a member's field that its record does not have is ``null``;
* ``*`` every member's fields, ``S1.*`` S1's, each as ``"S1.dest"`` (stream, dot, field: two streams' fields of one
  name cannot clash), the ``id`` and ``ts`` of the record included;
* ``ids`` (the members' ids by stream, as in the ids-only results) and ``ts`` (the result's event time: its latest
  member's ts), which no output column may be named (parse time: :data:`joinlib.output_spec.ROW_KEYS`).

Why here and not in the engine: a member tuple carries its join values (``Tup.key``) and its other attributes as
Avro bytes (``Tup.rest``); decoding ``rest`` costs, so only a sink that writes rows does it, per written result,
never the plans' hot path.  ``rest`` holds values, not names: the loader knows the names of each row's attributes
(:func:`joinlib.data.files.load_stream`'s ``rest_names``) and hands them over.
"""
from __future__ import annotations

from typing import IO, Any, Callable, Iterator, Mapping, Optional, Sequence

import orjson

from joinlib.model import Query, Stream, Tup
from joinlib.output_spec import Column
from joinlib.protocol.messages import InstanceKey
from joinlib.protocol.values import decode_values
from joinlib.runtime.sink import Group, Sink

Record = dict[str, Any]
#: per stream, a tuple's id -> the names of the attributes of its ``rest``
RestNames = Mapping[str, Mapping[int, tuple[str, ...]]]


def project(columns: Sequence[Column], names: Sequence[str], members: Sequence[Record], ts: int) -> Record:
    """The row of one result: ``members`` the members' records (``id``, ``ts`` and every field) by stream position,
    ``names`` the streams' names in that order."""
    row: Record = {}
    pos = {n: i for i, n in enumerate(names)}
    for c in columns:
        if c.field == "*":
            for i, name in enumerate(names):
                if c.stream is None or c.stream == name:
                    for field, value in members[i].items():
                        row[f"{name}.{field}"] = value
        else:
            assert c.stream is not None
            row[c.name] = members[pos[c.stream]].get(c.field)
    row["ids"] = {n: m["id"] for n, m in zip(names, members, strict=True)}
    row["ts"] = ts
    return row


def group_rows(columns: Sequence[Column], names: Sequence[str], record: Callable[[Tup], Record], head_pos: int,
               pos: int, groups: list[Group], origin: int = 0) -> Iterator[Record]:
    """The rows of one :meth:`~joinlib.runtime.sink.Sink.emit` call's ``groups``, in the order the ids-only sinks
    write them (per group, per tuple of stream ``pos``); ``record``: a member tuple's record, ``origin``: added to
    the head's ts (a live run's event time 0, in ms since the Unix epoch)."""
    for row, tups in groups:
        head_ts = row[head_pos].ts + origin
        members = [None if t is None else record(t) for t in row]
        for t in tups:
            members[pos] = record(t)
            yield project(columns, names, members, head_ts)  # type: ignore[arg-type]


def live_rest_names(stream: Stream) -> Optional[tuple[str, ...]]:
    """The names of the values of a live source's ``Tup.rest``, as :class:`joinlib.ingest.records.Decoder` encodes
    them: the carried attributes, sorted; None when the source carries every field (``attributes`` None: the
    decoder then writes name, value pairs, see :func:`names_every_field`); () for a stream without a live source
    (a replayed stream's rest is not named at the result site: its rows have its id, ts and join values)."""
    src = stream.source
    if src is None or not src.live:
        return ()
    return None if src.attributes is None else tuple(sorted(src.attributes))


def names_every_field(query: Query) -> bool:
    """Whether a live source carrying every field (``carry = 'all'``, ``SELECT *``) encodes its ``rest`` as name,
    value pairs: when the query writes rows to a sink topic, whose result site must name the fields; otherwise the
    names would only cost bytes."""
    return query.output.sink_topic is not None


class TupleRecords:
    """A live result site's member records: ``id``, ``ts`` (event time in ms since the Unix epoch: ``origin_ms`` +
    the tuple's ts), the join values (``Tup.key``) and ``rest`` decoded with :func:`live_rest_names` -- only for
    the results a rows sink writes (the plans themselves never decode ``rest``)."""

    def __init__(self, query: Query, origin_ms: int) -> None:
        self.origin = origin_ms
        self._attrs = [s.join_attrs for s in query.streams]
        self._rest = [live_rest_names(s) for s in query.streams]

    def __call__(self, t: Tup) -> Record:
        rec: Record = {}
        names = self._rest[t.pos]
        if t.rest and names != ():
            values = decode_values(t.rest)
            if names is None:
                rec.update(zip(values[0::2], values[1::2], strict=True))
            else:
                rec.update(zip(names, values, strict=True))
        rec.update(zip(self._attrs[t.pos], t.key, strict=True))
        rec["id"], rec["ts"] = t.id, t.ts + self.origin   # the tuple's own: a field of that name does not shadow them
        return rec


class RowsSink(Sink):
    """Writes each result as a row (see the module docstring) to an open binary file, one JSON object per line.

    ``tuples``: per stream position, the loaded tuples by id -- a sink of a run on Kafka gets the members' ids only,
    so it looks the members up there (in an embedded run it finds the very tuples it was handed)."""

    def __init__(self, query: Query, f: IO[bytes], rest_names: RestNames,
                 tuples: Optional[Mapping[str, Sequence[Tup]]] = None) -> None:
        assert query.output.columns is not None, "a query without a SELECT list writes ids (JsonlSink)"
        self.query, self.f = query, f
        self.columns = query.output.columns
        self.names = query.names
        self._rest_names = [rest_names.get(n, {}) for n in self.names]
        self._attrs = [s.join_attrs for s in query.streams]
        self._by_id = None if tuples is None else [{t.id: t for t in tuples.get(n, ())} for n in self.names]
        self.count = 0
        self.latency_sum = 0.0

    def record(self, t: Tup) -> Record:
        """A member tuple's record: id, ts, join values, and ``rest`` decoded (here, for a written result only)."""
        if self._by_id is not None:
            t = self._by_id[t.pos].get(t.id, t)
        rec: Record = {"id": t.id, "ts": t.ts}
        rec.update(zip(self._attrs[t.pos], t.key, strict=True))
        names = self._rest_names[t.pos].get(t.id)
        if names and t.rest:
            rec.update(zip(names, decode_values(t.rest), strict=True))
        return rec

    def emit(self, inst: InstanceKey, head_pos: int, pos: int, groups: list[Group], now: float) -> None:
        lines = [orjson.dumps(r) for r in group_rows(self.columns, self.names, self.record, head_pos, pos, groups)]
        for row, tups in groups:
            self.count += len(tups)
            self.latency_sum += len(tups) * (now - row[head_pos].ts)
        if lines:
            self.f.write(b"\n".join(lines) + b"\n")


def reference_rows(query: Query, rows: Mapping[str, Sequence[Record]],
                   results: Sequence[tuple[tuple[int, ...], int]]) -> list[Record]:
    """The rows of ``results`` (ids by stream position, head ts, as :func:`joinlib.reference.reference_join` gives
    them) projected from the data rows as written: what :class:`RowsSink` must write, independently of tuples."""
    assert query.output.columns is not None
    by_id = [{r["id"]: r for r in rows[s.name]} for s in query.streams]
    return [project(query.output.columns, query.names, [by_id[i][x] for i, x in enumerate(ids)], ts)
            for ids, ts in results]
