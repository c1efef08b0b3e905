"""Encoding of a tuple's non-join attributes into opaque Avro bytes.

A tuple's payload is encoded once, when it is loaded at its source, as an Avro
``array`` of nullable scalars (schema ``schemas/values.avsc``); the engine then ships
those bytes as they are.  Join-attribute values travel separately (``Tup.key``).
"""
from __future__ import annotations

import io
import struct
from typing import Any, Sequence, cast

import fastavro

from joinlib.kernels import kernel

#: The Avro kernel (_avroc.c, built by setup.py), or None: no compiler at install; then the Python forms
#: below encode, byte for byte the same.
_c: Any = kernel("joinlib.protocol._avroc")

VALUE_TYPES = ["null", "boolean", "long", "double", "string"]
_SCHEMA = fastavro.parse_schema({"type": "array", "items": VALUE_TYPES})

# Avro union branch indexes of values.VALUE_TYPES, already zig-zag encoded.
_NULL, _TRUE, _FALSE = b"\x00", b"\x02\x01", b"\x02\x00"
_LONG, _DOUBLE, _STRING = b"\x04", b"\x06", b"\x08"
# "\x08" (string branch) + one-byte zig-zag length, for ASCII strings of < 64 characters.
_SHORT_STR_PREFIX = tuple("\x08" + chr(2 * n) for n in range(64))
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_pack_double = struct.Struct("<d").pack


def _encode_slow(values: Sequence[Any]) -> bytes:
    """fastavro's encoding: the definition the fast path below must match byte for byte."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _SCHEMA, list(values))
    return buf.getvalue()


def varint(n: int) -> bytes:
    """Avro long: zig-zag then little-endian base-128."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_values(values: Sequence[Any]) -> bytes:
    """Avro-encode a list of scalars (str, int, float, bool, None): one array block, then 0.

    Short ASCII strings (all the generator produces) are encoded by C-level joins, with
    one separator join when every string has the same length; other scalars by
    :func:`_encode_any`.  Anything else goes to fastavro, which raises.
    """
    if _c is not None:   # one C call; what it does not take (subclasses, ints beyond 64 bits) goes on below
        try:
            out: bytes = _c.encode_values(values)
            return out
        except (TypeError, OverflowError):
            pass
    if not values:
        return b"\x00"
    try:
        lengths = set(map(len, values))  # TypeError for numbers, booleans, None
        if len(lengths) == 1:
            prefix = _SHORT_STR_PREFIX[lengths.pop()]  # IndexError if >= 64 characters
            body = prefix + prefix.join(values)  # TypeError for lists, dicts
        else:
            body = "".join([_SHORT_STR_PREFIX[len(v)] + v for v in values])
        if body.isascii():
            return varint(len(values)) + body.encode("ascii") + b"\x00"
    except (TypeError, IndexError):
        pass
    return _encode_any(values)


def _encode_any(values: Sequence[Any]) -> bytes:
    parts = [varint(len(values))]
    for v in values:
        t = type(v)
        if t is str:
            b = v.encode("utf-8")
            parts += (_STRING, varint(len(b)), b)
        elif t is int and _LONG_MIN <= v <= _LONG_MAX:
            parts += (_LONG, varint(v))
        elif t is float:
            parts += (_DOUBLE, _pack_double(v))
        elif t is bool:
            parts.append(_TRUE if v else _FALSE)
        elif v is None:
            parts.append(_NULL)
        else:
            return _encode_slow(values)  # fastavro: exact behaviour, or its error
    parts.append(b"\x00")
    return b"".join(parts)


def decode_values(data: bytes) -> list[Any]:
    """Inverse of :func:`encode_values`."""
    return cast(list[Any], fastavro.schemaless_reader(io.BytesIO(data), _SCHEMA))  # _SCHEMA is an array
