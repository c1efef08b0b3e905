"""Result rows as Avro: the schema a query's SELECT list gives them, and the Confluent wire format.

A row (:mod:`joinlib.rows`) on an Avro sink topic is one Kafka record in the Confluent wire format: a zero byte,
the schema's id in the registry (4 bytes, big-endian) and the row's Avro binary body.  The schema
(:func:`row_schema`) is a record named after the query with

* one field per SELECT column, in its order, named as the JSON row names it: ``S1.id`` / ``S1.ts`` (the
  record's id and event time) are ``long``; every other field is the union ``["null", "boolean", "long",
  "double", "string"]`` with default null -- the values a tuple carries (``schemas/values.avsc``).  Why not the
  ``CREATE STREAM`` column types: they are not checked at the source (a JSON record's ``VARCHAR`` field may hold a
  number), so a narrower type could make a valid result unwritable; and a field a member's record lacks is null;
* ``ids``: a record of one ``long`` per stream (the members' ids), ``ts``: ``long`` (the result's event time).

``*`` has no schema of its own (which fields the records have is not known ahead), so Avro sinks need named
columns (:mod:`joinlib.output_spec` says so at parse time).
"""
from __future__ import annotations

import io
import re
from typing import Any, Callable, Optional

import fastavro

from joinlib.model import Query
from joinlib.protocol.values import VALUE_TYPES
from joinlib.rows import Record

MAGIC = 0
#: a parsed writer schema for a schema id (None: unknown), e.g. joinlib.node.sources.RegistrySchemas
SchemaLookup = Callable[[int], Any]


def _avro_name(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def row_schema(query: Query) -> dict[str, Any]:
    """The Avro schema of ``query``'s rows (see the module docstring); ``query`` has named columns."""
    columns = query.output.columns
    assert columns is not None and all(c.field != "*" for c in columns), "an Avro sink needs named columns"
    fields: list[dict[str, Any]] = []
    for c in columns:
        if c.field in ("id", "ts"):
            fields.append({"name": c.name, "type": "long"})
        else:
            fields.append({"name": c.name, "type": list(VALUE_TYPES), "default": None})
    ids = {"type": "record", "name": "Ids", "fields": [{"name": n, "type": "long"} for n in query.names]}
    fields += [{"name": "ids", "type": ids}, {"name": "ts", "type": "long"}]
    return {"type": "record", "name": f"{_avro_name(query.name)}_row", "namespace": "joinlib.rows",
            "doc": f"a result row of query {query.name} (joinlib, docs/sql.md)", "fields": fields}


class AvroRows:
    """Encodes rows of one schema, registered under ``schema_id``, in the Confluent wire format."""

    def __init__(self, schema: dict[str, Any], schema_id: int) -> None:
        self.parsed = fastavro.parse_schema(schema)
        self.prefix = bytes([MAGIC]) + schema_id.to_bytes(4, "big")

    def encode(self, row: Record) -> bytes:
        buf = io.BytesIO()
        buf.write(self.prefix)
        fastavro.schemaless_writer(buf, self.parsed, row)
        return buf.getvalue()


def decode_row(value: bytes, schemas: SchemaLookup) -> Optional[Record]:
    """A row in the Confluent wire format, decoded with the writer schema its id names (None: not in the wire
    format, or an id the lookup does not know)."""
    if len(value) < 5 or value[0] != MAGIC:
        return None
    schema = schemas(int.from_bytes(value[1:5], "big"))
    if schema is None:
        return None
    row = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
    return row if isinstance(row, dict) else None
