"""Avro wire encoding of every message that leaves a process.

The schemas live in ``schemas/*.avsc`` (the single source of truth) and are loaded
once, at import.  All encodings are *schemaless* Avro (no container header): they
are Kafka message values.

* :func:`encode_envelope` / :func:`decode_envelope` -- node-to-node messages
  (``joinlib.Envelope``, topic ``node.<query>.<site>``); :func:`envelope_size` is the exact
  byte count the simulator charges.
* :func:`encode_source_batch` / :func:`decode_source_batch` -- source tuples
  (``joinlib.SourceBatch``, topic ``src.<query>.<stream>``).
* :func:`encode_result_batch` / :func:`decode_result_batch` -- join results, many per
  message and factorised by group (``joinlib.ResultBatch``, topic ``out.<query>``);
  :meth:`ResultBatch.results` expands them into :class:`Result` values.
* :func:`encode_control` / :func:`decode_control` -- control messages
  (``joinlib.Control``, topic ``control``); the payload is any JSON value.

Encoding is on the simulator's hot path, so envelopes and source batches are
written by a hand-written encoder that produces exactly the bytes fastavro's
``schemaless_writer`` produces (``tests/unit/test_wire.py`` checks byte identity
against :func:`_encode_envelope_reference`).  Tuples are decoded by hand too (checked against
fastavro's decoding, ``_decode_envelope_reference``); the rest uses fastavro.
"""
from __future__ import annotations

import io
import json
import re
import struct
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Sequence, TypeVar

import fastavro
from fastavro.schema import UnknownType

from joinlib.model import Tup, Value
from joinlib.protocol.messages import (
    Body,
    DjaUpdate,
    Envelope,
    ExpiryUpdate,
    Key,
    KeyBatch,
    KeyFilter,
    ShippedBatch,
    TupleBatch,
    WindowSnapshot,
)
from joinlib.protocol.values import varint

__all__ = [
    "SCHEMA_DIR",
    "SCHEMAS",
    "load_schemas",
    "SourceBatch",
    "Result",
    "Control",
    "encode_envelope",
    "decode_envelope",
    "encode_body",
    "naive_batch_size",
    "decode_body",
    "decode_tuple",
    "envelope_size",
    "encode_tuple",
    "encode_source_batch",
    "decode_source_batch",
    "ResultGroup",
    "ResultBatch",
    "encode_result_batch",
    "decode_result_batch",
    "encode_control",
    "decode_control",
]

# --------------------------------------------------------------------------- schemas

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def load_schemas(directory: Path = SCHEMA_DIR) -> dict[str, Any]:
    """Parse every ``*.avsc`` of ``directory``; named types may refer to one another
    across files (``"joinlib.BaseTuple"``), in any order.

    Returns parsed schemas by name: the full name (``"joinlib.Envelope"``) for named
    types and the file stem (``"values"``) for the others.
    """
    pending: dict[str, Any] = {}
    for path in sorted(directory.glob("*.avsc")):
        with open(path, encoding="utf-8") as f:
            pending[path.stem] = json.load(f)
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    while pending:
        progress = False
        missing: dict[str, str] = {}
        for stem, raw in list(pending.items()):
            trial = dict(named)  # a failed parse may leave half-registered names
            try:
                schema = fastavro.parse_schema(raw, trial)
            except UnknownType as e:
                missing[stem] = e.name
                continue
            named = trial
            name = raw.get("name") if isinstance(raw, dict) else None
            if name is not None and "." not in name:
                ns = raw.get("namespace")
                name = f"{ns}.{name}" if ns else name
            parsed[name or stem] = schema
            del pending[stem]
            progress = True
        if not progress:
            raise ValueError(f"unresolvable Avro schemas in {directory}: {missing}")
    return parsed


SCHEMAS = load_schemas()
_ENVELOPE = SCHEMAS["joinlib.Envelope"]
_SOURCE_BATCH = SCHEMAS["joinlib.SourceBatch"]
_RESULT_BATCH = SCHEMAS["joinlib.ResultBatch"]
_CONTROL = SCHEMAS["joinlib.Control"]

# Branch order of the Envelope body union, as declared in Envelope.avsc.
_BODY_NAMES: tuple[str, ...] = tuple(
    t if isinstance(t, str) else t["name"]
    for t in next(f["type"] for f in _ENVELOPE["fields"] if f["name"] == "body")
)
_BODY_CLASSES = {
    "joinlib.TupleBatch": TupleBatch,
    "joinlib.KeyBatch": KeyBatch,
    "joinlib.ExpiryUpdate": ExpiryUpdate,
    "joinlib.DjaUpdate": DjaUpdate,
    "joinlib.WindowSnapshot": WindowSnapshot,
    "joinlib.KeyFilter": KeyFilter,
    "joinlib.ShippedBatch": ShippedBatch,
}
if set(_BODY_NAMES) != set(_BODY_CLASSES):  # pragma: no cover - schema/code drift
    raise ImportError(f"Envelope body union {_BODY_NAMES} does not match joinlib.protocol.messages")


def _shape(s: Any) -> str:
    """A compact signature of a parsed schema: what the binary encoding depends on."""
    if isinstance(s, str):
        return s
    if isinstance(s, list):
        return "[" + "|".join(_shape(x) for x in s) + "]"
    t = s["type"]
    if t == "record":
        fields = ",".join(f"{f['name']}:{_shape(f['type'])}" for f in s["fields"])
        return f"{s['name']}{{{fields}}}"
    if t == "array":
        return f"array<{_shape(s['items'])}>"
    if t == "map":
        return f"map<{_shape(s['values'])}>"
    if isinstance(t, (str, list)) and "logicalType" not in s and t not in ("enum", "fixed"):
        return _shape(t)
    return repr(s)  # not produced by the hand-written encoder


# The layouts the hand-written encoder below writes.  If a schema file changes, the
# import fails here rather than producing bytes that disagree with the schema.
_V = "[null|boolean|long|double|string]"
_HAND_ENCODED = {
    "joinlib.BaseTuple": (
        f"joinlib.BaseTuple{{pos:int,id:long,ts:long,seq:long,key:array<{_V}>,rest:bytes}}"
    ),
    "joinlib.TupleBatch": "joinlib.TupleBatch{rows:array<joinlib.Row{parts:array<joinlib.BaseTuple>}>}",
    "joinlib.KeyBatch": f"joinlib.KeyBatch{{keys:array<array<{_V}>>}}",
    "joinlib.ExpiryUpdate": "joinlib.ExpiryUpdate{expired:long,arrivals:array<long>}",
    "joinlib.DjaUpdate": (
        f"joinlib.DjaUpdate{{vj:array<array<{_V}>>,vc:array<long>,"
        "sf:array<joinlib.BaseTuple>,arrivals:array<long>}"
    ),
    "joinlib.WindowSnapshot": (
        f"joinlib.WindowSnapshot{{base:long,tuples:array<joinlib.BaseTuple>,keys:array<array<{_V}>>,"
        "counts:array<long>}"
    ),
    "joinlib.KeyFilter": (
        f"joinlib.KeyFilter{{back:long,live:long,keys:array<array<{_V}>>,"
        "bloom:[null|joinlib.Bloom{bits:bytes,hashes:int,n:long}]}"
    ),
    "joinlib.ShippedBatch": "joinlib.ShippedBatch{tuples:array<joinlib.BaseTuple>,arrivals:array<long>}",
    "joinlib.Envelope": (
        "joinlib.Envelope{part:int,gen:int,flow:int,epoch:long,body:[joinlib.TupleBatch|"
        "joinlib.KeyBatch|joinlib.ExpiryUpdate|joinlib.DjaUpdate|joinlib.WindowSnapshot|"
        "joinlib.KeyFilter|joinlib.ShippedBatch]}"
    ),
    "joinlib.SourceBatch": (
        "joinlib.SourceBatch{stream:string,tuples:array<joinlib.BaseTuple>,watermark:long}"
    ),
    "joinlib.ResultBatch": (
        "joinlib.ResultBatch{query:string,site:string,part:int,gen:int,batch:long,emit_ms:long,groups:array<"
        "joinlib.ResultGroup{head:string,head_ts:long,ids:map<long>,last:string,last_ids:array<long>}>}"
    ),
}


def _check_layouts(schemas: dict[str, Any]) -> None:
    for name, expected in _HAND_ENCODED.items():
        actual = _shape(schemas[name]) if name in schemas else "missing"
        if actual != expected:
            raise ImportError(
                f"schema {name} is {actual}, but joinlib.protocol.wire's encoder writes {expected}: "
                "update schemas/ and joinlib/protocol/wire.py together"
            )


_check_layouts(SCHEMAS)


# ------------------------------------------------------------- other message records


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


# ------------------------------------------------------------------ binary primitives

_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
_INT_MIN = -(1 << 31)
_INT_MAX = (1 << 31) - 1

_pack_double = struct.Struct("<d").pack


def _varint_slow(n: int) -> bytes:
    """Zig-zag varint of a long (range-checked); the definition the tables follow."""
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n!r} does not fit an Avro long")
    return varint(n)


# Varints are assembled from 14-bit chunks: _T14[z] is the varint of z < 2**14
# (1-2 bytes), _C14[z] the two 7-bit groups of z with both continuation bits set.
_T14: list[bytes] = [
    bytes([z]) if z < 0x80 else bytes(((z & 0x7F) | 0x80, z >> 7)) for z in range(1 << 14)
]
_C14: list[bytes] = [bytes(((z & 0x7F) | 0x80, (z >> 7) | 0x80)) for z in range(1 << 14)]
# _SMALL[n] is the encoding of -_NSMALL <= n < _NSMALL (zig-zag < 2**14); negative n
# index from the end, where their encodings are stored.
_NSMALL = 1 << 13
_SMALL: list[bytes] = [b""] * (2 * _NSMALL)
for _n in range(-_NSMALL, _NSMALL):
    _SMALL[_n] = _T14[(_n << 1) ^ (_n >> 63)]
del _n


def _long(n: int) -> bytes:
    """Avro long (zig-zag varint)."""
    if -_NSMALL <= n < _NSMALL:
        return _SMALL[n]
    # For any integer n, z >= 2**64 exactly when n is outside the long range.
    z = (n << 1) ^ (n >> 63)
    if z < 0x10000000:  # 2**28
        return _C14[z & 0x3FFF] + _T14[z >> 14]
    if z < 0x40000000000:  # 2**42 (ms timestamps up to year 2109)
        return _C14[z & 0x3FFF] + _C14[(z >> 14) & 0x3FFF] + _T14[z >> 28]
    return _varint_slow(n)


def _int(n: int) -> bytes:
    """Avro int (range-checked)."""
    if -_NSMALL <= n < _NSMALL:
        return _SMALL[n]
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n!r} does not fit an Avro int")
    return _long(n)


_ZERO = _SMALL[0]
# Value union ["null", "boolean", "long", "double", "string"]: branch index + value
_V_NULL = _SMALL[0]
_V_TRUE = _SMALL[1] + b"\x01"
_V_FALSE = _SMALL[1] + b"\x00"
_V_LONG = _SMALL[2]
_V_DOUBLE = _SMALL[3]
_V_STRING = _SMALL[4]

# Encoded Values of the strings seen (join keys repeat); only exact str keys are
# stored, and no str equals a non-str, so a lookup of any value is safe.
_STR_CACHE: dict[str, bytes] = {}
_STR_CACHE_MAX = 1 << 16


def _value(v: Value) -> bytes:
    """The Value-union encoding of a scalar (str, int, float, bool, None)."""
    t = type(v)
    if t is str:
        b = _STR_CACHE.get(v)
        if b is None:
            u = v.encode()
            b = _V_STRING + _long(len(u)) + u
            if len(u) <= 256:
                if len(_STR_CACHE) >= _STR_CACHE_MAX:
                    _STR_CACHE.clear()
                _STR_CACHE[v] = b
        return b
    if t is int:
        return _V_LONG + _long(v)
    if v is None:
        return _V_NULL
    if t is float:
        return _V_DOUBLE + _pack_double(v)
    if t is bool:
        return _V_TRUE if v else _V_FALSE
    return _subclass_value(v)


def _subclass_value(v: object) -> bytes:
    """:func:`_value` of an instance of a subclass of a Value type (IntEnum, str subclasses, ...)."""
    if isinstance(v, bool):
        return _V_TRUE if v else _V_FALSE
    if isinstance(v, int):
        return _V_LONG + _long(int(v))
    if isinstance(v, float):
        return _V_DOUBLE + _pack_double(float(v))
    if isinstance(v, str):
        return _value(str(v))
    raise TypeError(f"join-attribute value {v!r} of type {type(v).__name__} is not an Avro Value")


Append = Callable[[bytes], None]  # the append of the list of a message's pieces


def _put_key(ap: Append, key: Key) -> None:
    """Append an array of Values (a composite key)."""
    if key:
        ap(_long(len(key)))
        for v in key:
            ap(_value(v))
    ap(_ZERO)


def _tup_head(pos: int, id: int, ts: int, seq: int, key: Key) -> bytes:
    """A joinlib.BaseTuple's encoding up to ``rest`` (pos, id, ts, seq, key)."""
    h = (
        (_SMALL[pos] if -_NSMALL <= pos < _NSMALL else _int(pos))
        + _long(id)
        + _long(ts)
        + _long(seq)
    )
    if key:
        n = len(key)
        h += _SMALL[n] if n < _NSMALL else _long(n)
        for v in key:
            h += _value(v)
    return h + _ZERO


def encode_tuple(t: Tup) -> bytes:
    """The Avro ``joinlib.BaseTuple`` encoding of ``t``, cached in ``t.wire``: a tuple is
    encoded once — at its source — however many times it is shipped."""
    w = t.wire
    if w is None:
        rest = t.rest
        n = len(rest)
        w = t.wire = (_tup_head(t.pos, t.id, t.ts, t.seq, t.key)
                      + (_SMALL[n] if n < _NSMALL else _long(n)) + rest)
    return w


_get_idb = attrgetter("idb")


def encode_ids(tups: Sequence[Tup]) -> bytes:
    """The Avro longs of the tuples' ids, back to back (the items of an array<long> block).
    Each tuple's encoding is cached in ``Tup.idb``: a window tuple joins many heads, so its id
    is written into many result batches; then this is a C-level join."""
    try:
        return b"".join(map(_get_idb, tups))
    except TypeError:  # some not cached yet
        for t in tups:
            if t.idb is None:
                t.idb = _long(t.id)
        return b"".join(map(_get_idb, tups))


def _put_tups(ap: Append, tups: Sequence[Tup]) -> None:
    """Append an array of joinlib.BaseTuple."""
    if tups:
        n = len(tups)
        ap(_SMALL[n] if n < _NSMALL else _long(n))
        for t in tups:
            ap(t.wire or encode_tuple(t))
    ap(_ZERO)


def _put_longs(ap: Append, xs: Sequence[int]) -> None:
    if xs:
        ap(_long(len(xs)))
        for x in xs:
            ap(_long(x))
    ap(_ZERO)


def _put_string(ap: Append, s: str) -> None:
    b = s.encode()
    ap(_long(len(b)))
    ap(b)


# The union branch of each body class, written first by the class's writer.
_BRANCH = {cls: _SMALL[_BODY_NAMES.index(name)] for name, cls in _BODY_CLASSES.items()}
_BR_TUPLE_BATCH = _BRANCH[TupleBatch]
_BR_KEY_BATCH = _BRANCH[KeyBatch]
_BR_EXPIRY_UPDATE = _BRANCH[ExpiryUpdate]
_BR_DJA_UPDATE = _BRANCH[DjaUpdate]
_BR_WINDOW_SNAPSHOT = _BRANCH[WindowSnapshot]
_BR_KEY_FILTER = _BRANCH[KeyFilter]
_BR_SHIPPED_BATCH = _BRANCH[ShippedBatch]


def _put_keys(ap: Append, keys: Sequence[Key]) -> None:
    """Append an array of keys."""
    if keys:
        ap(_long(len(keys)))
        for key in keys:
            _put_key(ap, key)
    ap(_ZERO)


def _put_tuple_batch(ap: Append, body: TupleBatch) -> None:
    ap(_BR_TUPLE_BATCH)
    rows = body.rows
    if rows:
        ap(_long(len(rows)))
        for row in rows:
            _put_tups(ap, row)  # Row.parts
    ap(_ZERO)


def _put_key_batch(ap: Append, body: KeyBatch) -> None:
    ap(_BR_KEY_BATCH)
    _put_keys(ap, body.keys)


def _put_expiry_update(ap: Append, body: ExpiryUpdate) -> None:
    ap(_BR_EXPIRY_UPDATE)
    ap(_long(body.expired))
    _put_longs(ap, body.arrivals)


def _put_window_snapshot(ap: Append, body: WindowSnapshot) -> None:
    ap(_BR_WINDOW_SNAPSHOT)
    ap(_long(body.base))
    _put_tups(ap, body.tuples)
    _put_keys(ap, body.keys)
    _put_longs(ap, body.counts)


def _put_dja_update(ap: Append, body: DjaUpdate) -> None:
    ap(_BR_DJA_UPDATE)
    _put_keys(ap, body.vj)
    _put_longs(ap, body.vc)
    _put_tups(ap, body.sf)
    _put_longs(ap, body.arrivals)


def _put_key_filter(ap: Append, body: KeyFilter) -> None:
    ap(_BR_KEY_FILTER)
    ap(_long(body.back))
    ap(_long(body.live))
    _put_keys(ap, body.keys)
    if not body.bits:
        ap(b"\x00")        # bloom: null
        return
    ap(b"\x02")            # bloom: the record
    ap(_long(len(body.bits)))
    ap(body.bits)
    ap(_int(body.hashes))
    ap(_long(body.n))


def _put_shipped_batch(ap: Append, body: ShippedBatch) -> None:
    ap(_BR_SHIPPED_BATCH)
    _put_tups(ap, body.tuples)
    _put_longs(ap, body.arrivals)


# The writer of each body class (branch, then fields): one dict lookup per message.  Any stands
# for the key class: a writer takes exactly the bodies of its class, which a dict type cannot say.
BodyWriter = Callable[[Append, Any], None]
_BODY_WRITERS: dict[type, BodyWriter] = {
    TupleBatch: _put_tuple_batch,
    KeyBatch: _put_key_batch,
    ExpiryUpdate: _put_expiry_update,
    DjaUpdate: _put_dja_update,
    WindowSnapshot: _put_window_snapshot,
    KeyFilter: _put_key_filter,
    ShippedBatch: _put_shipped_batch,
}
if set(_BODY_WRITERS) != set(_BODY_CLASSES.values()):  # pragma: no cover - a body class without a writer
    raise ImportError("joinlib.protocol.wire has no writer for some Envelope body class")


def _subclass_writer(body: object) -> BodyWriter:
    """The writer of the body class ``body`` is an instance of a subclass of."""
    for cls in _BODY_CLASSES.values():  # union order: the first class that matches
        if isinstance(body, cls):
            return _BODY_WRITERS[cls]
    raise TypeError(f"not a message body: {body!r}")


# ------------------------------------------------------------------------- envelopes


def encode_envelope(env: Envelope) -> bytes:
    """Schemaless Avro encoding of ``env`` (schema ``joinlib.Envelope``).  The sending and receiving
    sites are not part of it: on Kafka the message key and the topic carry them (and the
    simulator hands the envelope object over), so every message is a few bytes shorter."""
    parts: list[bytes] = []
    ap = parts.append
    ap(_int(env.part))
    ap(_int(env.gen))
    ap(_int(env.flow))
    ap(_long(env.epoch))
    body = env.body
    put_body = _BODY_WRITERS.get(type(body)) or _subclass_writer(body)
    put_body(ap, body)
    return b"".join(parts)


def envelope_size(env: Envelope) -> int:
    """The exact number of bytes of :func:`encode_envelope` (``env``)."""
    return len(encode_envelope(env))


def naive_batch_size(epoch: int, tups: list[Tup]) -> int:
    """The size of the envelope that would ship ``tups`` (a source batch) to another site in one
    full message (flow 0, partition 0, generation 0) -- what shipping every tuple to every other
    site costs -- computed from the tuples' cached encodings, without encoding."""
    size = 3 + len(_long(epoch)) + 1   # part, gen, flow; epoch; body branch
    if tups:
        size += len(_long(len(tups))) + 1
        for t in tups:
            size += len(t.wire or encode_tuple(t)) + 2  # Row.parts: count 1, the tuple, end of array
    else:
        size += 1
    return size


def encode_body(body: Body) -> bytes:
    """A message body alone (as an envelope with empty addresses): what a checkpoint keeps of
    the messages waiting in a host's inbox."""
    return encode_envelope(Envelope("", "", 0, 0, body))


def decode_body(data: bytes) -> Body:
    return decode_envelope(data).body


Record = dict[str, Any]  # a record as fastavro reads and writes it: field name -> value


def _record(buf: io.BytesIO, schema: Record, **options: Any) -> Record:
    """fastavro's schemaless read of one record (a dict: every schema read here is a record)."""
    rec = fastavro.schemaless_reader(buf, schema, **options)
    assert isinstance(rec, dict), f"{schema['name']} is not a record schema"
    return rec


def _read(data: bytes, schema: Record, **options: Any) -> Record:
    """fastavro's schemaless read of a whole message; truncated input or trailing
    bytes raise ValueError."""
    buf = io.BytesIO(data)
    try:
        rec = _record(buf, schema, **options)
    except (EOFError, StopIteration, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed {schema['name']} message: {e!r}") from e
    if buf.tell() != len(data):
        raise ValueError(
            f"malformed {schema['name']} message: {len(data) - buf.tell()} trailing bytes"
        )
    return rec


def _tup_of(d: Record) -> Tup:
    return Tup(d["pos"], d["id"], d["ts"], d["seq"], tuple(d["key"]), d["rest"])


# ------------------------------------------------------------------ hand-written decoder
# Tuples are decoded by hand (5x faster than fastavro on 250-attribute tuples) and keep their
# own bytes as ``Tup.wire``: a node that ships a tuple on (SP-S replicas, intermediate
# results) sends the bytes it received without encoding them again.

_unpack_double = struct.Struct("<d").unpack_from


def _rlong(b: bytes, i: int) -> tuple[int, int]:
    """(Avro long at b[i], index after it)."""
    c = b[i]
    if c < 0x80:
        return (c >> 1) ^ -(c & 1), i + 1
    z, shift = c & 0x7F, 7
    while True:
        i += 1
        c = b[i]
        z |= (c & 0x7F) << shift
        if c < 0x80:
            return (z >> 1) ^ -(z & 1), i + 1
        shift += 7


def _rstring(b: bytes, i: int) -> tuple[str, int]:
    n, i = _rlong(b, i)
    if n < 0:
        raise ValueError("negative string length")
    j = i + n
    if j > len(b):
        raise IndexError("string beyond the end")
    return b[i:j].decode("utf-8"), j


def _rcount(b: bytes, i: int) -> tuple[int, int]:
    """An array/map block count (a negative count is followed by the block's byte size)."""
    n, i = _rlong(b, i)
    if n < 0:
        _, i = _rlong(b, i)
        n = -n
    return n, i


def _rvalue(b: bytes, i: int) -> tuple[Value, int]:
    br, i = _rlong(b, i)
    if br == 2:
        return _rlong(b, i)
    if br == 4:
        return _rstring(b, i)
    if br == 0:
        return None, i
    if br == 1:
        c = b[i]
        if c > 1:
            raise ValueError(f"bad boolean byte {c}")
        return c == 1, i + 1
    if br == 3:
        if i + 8 > len(b):
            raise IndexError("double beyond the end")
        return _unpack_double(b, i)[0], i + 8
    raise ValueError(f"bad Value union branch {br}")


def _rkey(b: bytes, i: int) -> tuple[Key, int]:
    out: list[Value] = []
    n, i = _rcount(b, i)
    while n:
        for _ in range(n):
            v, i = _rvalue(b, i)
            out.append(v)
        n, i = _rcount(b, i)
    return tuple(out), i


def _rtup(b: bytes, i: int) -> tuple[Tup, int]:
    start = i
    pos, i = _rlong(b, i)
    if not _INT_MIN <= pos <= _INT_MAX:
        raise ValueError(f"pos {pos} does not fit an Avro int")
    tid, i = _rlong(b, i)
    ts, i = _rlong(b, i)
    seq, i = _rlong(b, i)
    if b[i] == 0:  # the usual: the key is one block
        i += 1
        key: Key = ()
    else:
        key, i = _rkey(b, i)
    n, i = _rlong(b, i)
    j = i + n
    if n < 0 or j > len(b):
        raise ValueError("bad rest length")
    t = Tup(pos, tid, ts, seq, key, b[i:j])
    t.wire = b[start:j]
    return t, j


def decode_tuple(data: bytes) -> Tup:
    """Inverse of :func:`encode_tuple` (the tuple keeps ``data`` as its wire bytes)."""
    return _whole(data, "joinlib.BaseTuple", lambda b: _rtup(b, 0))


def encode_tuple_list(tups: Sequence[Tup]) -> bytes:
    """An Avro array of ``joinlib.BaseTuple``: a derived tuple's components (:mod:`joinlib.mjoin.derived`)."""
    out: list[bytes] = []
    _put_tups(out.append, tups)
    return b"".join(out)


def decode_tuple_list(data: bytes) -> list[Tup]:
    """Inverse of :func:`encode_tuple_list`."""
    return _whole(data, "array of joinlib.BaseTuple", lambda b: _rtups(b, 0))


def _rtups(b: bytes, i: int) -> tuple[list[Tup], int]:
    out: list[Tup] = []
    ap = out.append
    n, i = _rcount(b, i)
    while n:
        for _ in range(n):
            t, i = _rtup(b, i)
            ap(t)
        n, i = _rcount(b, i)
    return out, i


_T = TypeVar("_T")


def _whole(data: bytes, name: str, decode: Callable[[bytes], tuple[_T, int]]) -> _T:
    """Run a hand decoder over a whole message: malformed input and trailing bytes raise ValueError."""
    try:
        value, i = decode(data)
    except (IndexError, UnicodeDecodeError, struct.error) as e:
        raise ValueError(f"malformed {name} message: {e!r}") from None
    except ValueError as e:
        raise ValueError(f"malformed {name} message: {e}") from None
    if i != len(data):
        raise ValueError(f"malformed {name} message: {len(data) - i} trailing bytes")
    return value


def _rint(data: bytes, i: int, what: str) -> tuple[int, int]:
    n, i = _rlong(data, i)
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{what} {n} does not fit an Avro int")
    return n, i


def _bloom_of(rec: Any) -> tuple[Any, ...]:
    """(bits, hashes, n) of a KeyFilter's ``bloom`` union as fastavro reads it (a (name, record)
    pair with ``return_record_name``), () for null."""
    if rec is None:
        return ()
    if isinstance(rec, tuple):
        rec = rec[1]
    return rec["bits"], rec["hashes"], rec["n"]


def _keys_of(rec: list[list[Value]]) -> list[Key]:
    return [tuple(k) for k in rec]


# Bodies other than TupleBatch, from the plain record fastavro reads (both decoders use these).
_BODY_OF_RECORD: dict[str, Callable[[Record], Body]] = {
    "joinlib.KeyBatch": lambda b: KeyBatch(_keys_of(b["keys"])),
    "joinlib.ExpiryUpdate": lambda b: ExpiryUpdate(b["expired"], b["arrivals"]),
    "joinlib.DjaUpdate": lambda b: DjaUpdate(_keys_of(b["vj"]), b["vc"], [_tup_of(p) for p in b["sf"]],
                                             b["arrivals"]),
    "joinlib.WindowSnapshot": lambda b: WindowSnapshot(b["base"], [_tup_of(p) for p in b["tuples"]],
                                                       _keys_of(b["keys"]), b["counts"]),
    "joinlib.KeyFilter": lambda b: KeyFilter(b["back"], b["live"], _keys_of(b["keys"]), *_bloom_of(b["bloom"])),
    "joinlib.ShippedBatch": lambda b: ShippedBatch([_tup_of(p) for p in b["tuples"]], b["arrivals"]),
}


def _rows_at(data: bytes, i: int) -> tuple[list[tuple[Tup, ...]], int]:
    rows: list[tuple[Tup, ...]] = []
    n, i = _rcount(data, i)
    while n:
        for _ in range(n):
            parts, i = _rtups(data, i)
            rows.append(tuple(parts))
        n, i = _rcount(data, i)
    return rows, i


def _envelope_at(data: bytes, src: str = "", dst: str = "") -> tuple[Envelope, int]:
    part, i = _rint(data, 0, "part")
    gen, i = _rint(data, i, "gen")
    flow, i = _rint(data, i, "flow")
    epoch, i = _rlong(data, i)
    br, i = _rlong(data, i)
    if not 0 <= br < len(_BODY_NAMES):
        raise ValueError(f"bad body union branch {br}")
    name = _BODY_NAMES[br]
    if name == "joinlib.TupleBatch":  # the hot path: by hand, tuples keep their bytes
        rows, i = _rows_at(data, i)
        return Envelope(src, dst, flow, epoch, TupleBatch(rows), part, gen), i
    # small bodies: fastavro on the rest of the message
    buf = io.BytesIO(data)
    buf.seek(i)
    try:
        b = _record(buf, SCHEMAS[name])
    except (EOFError, StopIteration) as e:
        raise IndexError(repr(e)) from None
    return Envelope(src, dst, flow, epoch, _BODY_OF_RECORD[name](b), part, gen), buf.tell()


def decode_envelope(data: bytes, src: str = "", dst: str = "") -> Envelope:
    """Inverse of :func:`encode_envelope`; ``src`` and ``dst`` come from outside the message (the
    Kafka key and topic)."""
    return _whole(data, "joinlib.Envelope", lambda b: _envelope_at(b, src, dst))


def _decode_envelope_reference(data: bytes, src: str = "", dst: str = "") -> Envelope:
    """fastavro's decoding of an Envelope (the reference the hand decoder is tested against; the
    hand decoder reads the small bodies with fastavro too)."""
    rec = _read(data, _ENVELOPE, return_record_name=True)
    name, b = rec["body"]
    if name == "joinlib.TupleBatch":
        body: Body = TupleBatch([tuple([_tup_of(p) for p in row["parts"]]) for row in b["rows"]])
    else:
        body = _BODY_OF_RECORD[name](b)
    return Envelope(src, dst, rec["flow"], rec["epoch"], body, rec["part"], rec["gen"])


# ---------------------------------------------- fastavro reference path (for tests)


def _tup_record(t: Tup) -> Record:
    return {"pos": t.pos, "id": t.id, "ts": t.ts, "seq": t.seq, "key": list(t.key), "rest": t.rest}


def _envelope_record(env: Envelope) -> Record:
    """``env`` as the plain record fastavro writes (body in tuple notation)."""
    body = env.body
    if isinstance(body, TupleBatch):
        rec: Record = {"rows": [{"parts": [_tup_record(t) for t in row]} for row in body.rows]}
        name = "joinlib.TupleBatch"
    elif isinstance(body, KeyBatch):
        rec = {"keys": [list(k) for k in body.keys]}
        name = "joinlib.KeyBatch"
    elif isinstance(body, ExpiryUpdate):
        rec = {"expired": body.expired, "arrivals": list(body.arrivals)}
        name = "joinlib.ExpiryUpdate"
    elif isinstance(body, WindowSnapshot):
        rec = {"base": body.base, "tuples": [_tup_record(t) for t in body.tuples],
               "keys": [list(k) for k in body.keys], "counts": list(body.counts)}
        name = "joinlib.WindowSnapshot"
    elif isinstance(body, KeyFilter):
        rec = {"back": body.back, "live": body.live, "keys": [list(k) for k in body.keys],
               "bloom": {"bits": body.bits, "hashes": body.hashes, "n": body.n} if body.bits else None}
        name = "joinlib.KeyFilter"
    elif isinstance(body, ShippedBatch):
        rec = {"tuples": [_tup_record(t) for t in body.tuples], "arrivals": list(body.arrivals)}
        name = "joinlib.ShippedBatch"
    elif isinstance(body, DjaUpdate):
        rec = {
            "vj": [list(k) for k in body.vj],
            "vc": list(body.vc),
            "sf": [_tup_record(t) for t in body.sf],
            "arrivals": list(body.arrivals),
        }
        name = "joinlib.DjaUpdate"
    else:
        raise TypeError(f"not a message body: {body!r}")
    return {
        "part": env.part,
        "gen": env.gen,
        "flow": env.flow,
        "epoch": env.epoch,
        "body": (name, rec),
    }


def _encode_envelope_reference(env: Envelope) -> bytes:
    """:func:`encode_envelope` done by fastavro (slower; the reference for tests)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _ENVELOPE, _envelope_record(env))
    return buf.getvalue()


# --------------------------------------------------------------------- source batches


def encode_source_batch(batch: SourceBatch) -> bytes:
    """Schemaless Avro encoding of a :class:`SourceBatch` (schema ``joinlib.SourceBatch``)."""
    parts: list[bytes] = []
    ap = parts.append
    _put_string(ap, batch.stream)
    _put_tups(ap, batch.tuples)
    ap(_long(batch.watermark))
    return b"".join(parts)


def _source_batch_at(data: bytes) -> tuple[SourceBatch, int]:
    stream, i = _rstring(data, 0)
    tups, i = _rtups(data, i)
    watermark, i = _rlong(data, i)
    return SourceBatch(stream, tups, watermark), i


def decode_source_batch(data: bytes) -> SourceBatch:
    """Inverse of :func:`encode_source_batch`."""
    return _whole(data, "joinlib.SourceBatch", _source_batch_at)


def _decode_source_batch_reference(data: bytes) -> SourceBatch:
    rec = _read(data, _SOURCE_BATCH)
    return SourceBatch(rec["stream"], [_tup_of(d) for d in rec["tuples"]], rec["watermark"])


def _encode_source_batch_reference(batch: SourceBatch) -> bytes:
    buf = io.BytesIO()
    rec = {
        "stream": batch.stream,
        "tuples": [_tup_record(t) for t in batch.tuples],
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
    _put_string(ap, batch.query)
    _put_string(ap, batch.site)
    ap(_int(batch.part))
    ap(_int(batch.gen))
    ap(_long(batch.batch))
    ap(_long(batch.emit_ms))
    if batch.groups:
        ap(_long(len(batch.groups)))
        for g in batch.groups:
            _put_string(ap, g.head)
            ap(_long(g.head_ts))
            if g.ids:
                ap(_long(len(g.ids)))
                for name, tid in g.ids.items():
                    _put_string(ap, name)
                    ap(_long(tid))
            ap(_ZERO)
            _put_string(ap, g.last)
            _put_longs(ap, g.last_ids)
    ap(_ZERO)
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


def _summary_at(data: bytes) -> tuple[tuple[int, list[tuple[int, int]]], int]:
    _, i = _rstring(data, 0)
    _, i = _rstring(data, i)
    _, i = _rlong(data, i)
    _, i = _rlong(data, i)
    _, i = _rlong(data, i)
    emit_ms, i = _rlong(data, i)
    groups: list[tuple[int, int]] = []
    n, i = _rcount(data, i)
    while n:
        for _ in range(n):
            _, i = _rstring(data, i)
            head_ts, i = _rlong(data, i)
            k, i = _rcount(data, i)
            while k:
                for _ in range(k):
                    _, i = _rstring(data, i)
                    _, i = _rlong(data, i)
                k, i = _rcount(data, i)
            _, i = _rstring(data, i)
            total = 0
            k, i = _rcount(data, i)
            while k:
                i = _skip_longs(data, i, k)
                total += k
                k, i = _rcount(data, i)
            groups.append((head_ts, total))
        n, i = _rcount(data, i)
    return (emit_ms, groups), i


def result_batch_summary(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(emit_ms, [(head_ts, number of results) per group]) of an encoded ResultBatch, without
    decoding the ids: what a collector that only counts and measures latency needs."""
    return _whole(data, "joinlib.ResultBatch", _summary_at)


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
    rec = _read(data, _RESULT_BATCH)
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
    rec = _read(data, _CONTROL)
    return Control(rec["query"], rec["kind"], json.loads(rec["payload"]))
