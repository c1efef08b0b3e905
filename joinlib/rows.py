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

from typing import IO, Any, Mapping, Optional, Sequence

import orjson

from joinlib.model import Query, Tup
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
        lines: list[bytes] = []
        for row, tups in groups:
            head_ts = row[head_pos].ts
            members = [None if t is None else self.record(t) for t in row]
            for t in tups:
                members[pos] = self.record(t)
                lines.append(orjson.dumps(project(self.columns, self.names, members, head_ts)))  # type: ignore[arg-type]
            self.count += len(tups)
            self.latency_sum += len(tups) * (now - head_ts)
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
