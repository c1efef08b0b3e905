"""Encoding of a tuple's non-join attributes into opaque Avro bytes.

A tuple's payload is encoded once, when it is loaded at its source, as an Avro
``array`` of nullable scalars (schema ``schemas/values.avsc``); the engine then ships
those bytes as they are.  Join-attribute values travel separately (``Tup.key``).
"""
from __future__ import annotations

import io
from typing import Any, Sequence

import fastavro

VALUE_TYPES = ["null", "boolean", "long", "double", "string"]
_SCHEMA = fastavro.parse_schema({"type": "array", "items": VALUE_TYPES})


def encode_values(values: Sequence[Any]) -> bytes:
    """Avro-encode a list of scalars (str, int, float, bool, None)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _SCHEMA, list(values))
    return buf.getvalue()


def decode_values(data: bytes) -> list[Any]:
    """Inverse of :func:`encode_values`."""
    return fastavro.schemaless_reader(io.BytesIO(data), _SCHEMA)
