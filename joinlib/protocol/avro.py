"""The Avro building blocks every message of :mod:`joinlib.protocol.wire` and :mod:`joinlib.protocol.records`
is written from: zig-zag longs and ints, the Value union, strings, arrays, and the ``joinlib.BaseTuple`` --
encoded and decoded by hand -- plus the fastavro reads the smaller messages use.

Why a module of its own: envelopes (node to node) and source, result and control records share every
primitive, and a tuple is the same bytes in all of them (it is encoded once, at its source, and cached in
``Tup.wire``).  The encoders are on the simulator's hot path: they are table-driven and produce exactly the
bytes fastavro's ``schemaless_writer`` produces (``tests/unit/test_wire.py`` checks it); importing this module
checks that the schema files still have the layouts these encoders write
(:func:`joinlib.protocol.schemas.check_layouts`).
"""
from __future__ import annotations

import io
import struct
from operator import attrgetter
from typing import Any, Callable, Sequence, TypeVar

import fastavro

from joinlib.kernels import kernel
from joinlib.model import Tup, Value
from joinlib.protocol.messages import Key
from joinlib.protocol.schemas import SCHEMAS, check_layouts
from joinlib.protocol.values import varint

#: The size and tuple kernel (_avroc.c, built by setup.py: it says why), or None: no compiler at install; then
#: :func:`tuples_size` adds up :func:`tuple_size` and :func:`encode_tuple` is :func:`_encode_tuple`, the same answers
#: more slowly.
_c: Any = kernel("joinlib.protocol._avroc")
if _c is not None:
    _c.setup_tuples(Tup)   # the class its encode_tuple takes

check_layouts(SCHEMAS)  # schema files that disagree with the hand-written encoders below fail the import

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


def encode_long(n: int) -> bytes:
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


def encode_int(n: int) -> bytes:
    """Avro int (range-checked)."""
    if -_NSMALL <= n < _NSMALL:
        return _SMALL[n]
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n!r} does not fit an Avro int")
    return encode_long(n)


END = _SMALL[0]  # a block count of 0: the end of an array or map (an empty one is just this)
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
            b = _V_STRING + encode_long(len(u)) + u
            if len(u) <= 256:
                if len(_STR_CACHE) >= _STR_CACHE_MAX:
                    _STR_CACHE.clear()
                _STR_CACHE[v] = b
        return b
    if t is int:
        return _V_LONG + encode_long(v)
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
        return _V_LONG + encode_long(int(v))
    if isinstance(v, float):
        return _V_DOUBLE + _pack_double(float(v))
    if isinstance(v, str):
        return _value(str(v))
    raise TypeError(f"join-attribute value {v!r} of type {type(v).__name__} is not an Avro Value")


Append = Callable[[bytes], None]  # the append of the list of a message's pieces


def put_key(ap: Append, key: Key) -> None:
    """Append an array of Values (a composite key)."""
    if key:
        ap(encode_long(len(key)))
        for v in key:
            ap(_value(v))
    ap(END)


def _tup_head(pos: int, id: int, ts: int, seq: int, key: Key) -> bytes:
    """A joinlib.BaseTuple's encoding up to ``rest`` (pos, id, ts, seq, key)."""
    h = (
        (_SMALL[pos] if -_NSMALL <= pos < _NSMALL else encode_int(pos))
        + encode_long(id)
        + encode_long(ts)
        + encode_long(seq)
    )
    if key:
        n = len(key)
        h += _SMALL[n] if n < _NSMALL else encode_long(n)
        for v in key:
            h += _value(v)
    return h + END


def encode_tuple(t: Tup) -> bytes:
    """The Avro ``joinlib.BaseTuple`` encoding of ``t``, cached in ``t.wire``: a tuple is
    encoded once — at its source — however many times it is shipped.  The C kernel encodes a Tup (the class
    exactly) where it is built; what it declines (a subclass, a value of another type, an int beyond its Avro
    type, ...) :func:`_encode_tuple` writes, or raises its error."""
    w = t.wire
    if w is None:
        if _c is not None:
            out: bytes | None = _c.encode_tuple(t)
            if out is not None:   # None: declined, nothing cached: the Python form's bytes or its error
                return out
        w = _encode_tuple(t)
    return w


def _encode_tuple(t: Tup) -> bytes:
    """:func:`encode_tuple` in Python (the definition the kernel follows)."""
    w = t.wire
    if w is None:
        rest = t.rest
        n = len(rest)
        w = t.wire = (_tup_head(t.pos, t.id, t.ts, t.seq, t.key)
                      + (_SMALL[n] if n < _NSMALL else encode_long(n)) + rest)
    return w


def tuple_size(t: Tup) -> int:
    """``len(encode_tuple(t))`` without encoding it (nor caching the encoding): what a tuple that may never
    ship would cost if it did -- the naive baseline prices every source tuple, and copying a payload into a
    fresh encoding just to measure it cost more than the join itself."""
    w = t.wire
    if w is not None:
        return len(w)
    n = len(t.rest)
    return len(_tup_head(t.pos, t.id, t.ts, t.seq, t.key)) + len(_SMALL[n] if n < _NSMALL else encode_long(n)) + n


def tuples_size(tups: Sequence[Tup]) -> int:
    """``sum(map(tuple_size, tups))``: in one call of the C kernel where it is built (a node prices every source
    batch as the naive baseline)."""
    if _c is not None:
        try:
            return int(_c.tuples_size(tups))
        except (TypeError, OverflowError):   # what the encoder refuses or handles in Python: its answer
            pass
    return sum(map(tuple_size, tups))


def result_group_runs(groups: Sequence[tuple[tuple[Any, ...], list[Tup]]], head_pos: int, names: list[bytes],
                      last: bytes, limit: int) -> list[tuple[bytes, int, int]]:
    """The groups of ``joinlib.ResultBatch`` messages, encoded, in runs of at least ``limit`` results (the last run
    may be shorter): ``[(bytes of the run's groups, groups, results), ...]``.  Per group: the head stream's name
    and the head's ts, the row's (stream, id) pairs, the last stream's name and its tuples' ids; ``names``: every
    stream's name as an Avro string, ``last``: the last stream's.  Empty groups are left out.  One C call where
    the kernel is built (a node emitting ~80 results per input tuple spent a quarter of its CPU here)."""
    if _c is not None and type(groups) is list:
        try:
            out: list[tuple[bytes, int, int]] = _c.encode_groups(groups, head_pos, names, last, limit)
            return out
        except (TypeError, OverflowError):   # not the shapes the kernel reads: the Python form's answer or error
            pass
    return _result_group_runs(groups, head_pos, names, last, limit)


def _result_group_runs(groups: Sequence[tuple[tuple[Any, ...], list[Tup]]], head_pos: int, names: list[bytes],
                       last: bytes, limit: int) -> list[tuple[bytes, int, int]]:
    L, head, out = encode_long, names[head_pos], []
    parts: list[bytes] = []
    ngroups = nresults = 0
    tail: dict[int, bytes] = {}   # by list object: groups of one head often share theirs (runtime base.join)
    for row, tups in groups:
        if not tups:
            continue
        ids = [names[i] + L(t.id) for i, t in enumerate(row) if t is not None]
        end = tail.get(id(tups))   # ``groups`` keeps every list alive: an id is not reused meanwhile
        if end is None:
            end = tail[id(tups)] = last + L(len(tups)) + encode_ids(tups) + b"\x00"
        parts.append(head + L(row[head_pos].ts) + (L(len(ids)) + b"".join(ids) if ids else b"") + b"\x00" + end)
        ngroups += 1
        nresults += len(tups)
        if nresults >= limit:
            out.append((b"".join(parts), ngroups, nresults))
            parts, ngroups, nresults = [], 0, 0
    if ngroups:
        out.append((b"".join(parts), ngroups, nresults))
    return out


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
                t.idb = encode_long(t.id)
        return b"".join(map(_get_idb, tups))


def put_tups(ap: Append, tups: Sequence[Tup]) -> None:
    """Append an array of joinlib.BaseTuple."""
    if tups:
        n = len(tups)
        ap(_SMALL[n] if n < _NSMALL else encode_long(n))
        for t in tups:
            ap(t.wire or encode_tuple(t))
    ap(END)


def put_keys(ap: Append, keys: Sequence[Key]) -> None:
    """Append an array of keys (each an array of Values, :func:`put_key`).  A key set or an update message
    lists a key per tuple or per changed key: the C kernel writes each key in one call (what it does not take,
    a subclass or an int beyond 64 bits, goes the Python way, which writes the same bytes or raises)."""
    if keys:
        ap(encode_long(len(keys)))
        if _c is not None:
            try:
                ap(b"".join(map(_c.encode_values, keys)))
                ap(END)
                return
            except (TypeError, OverflowError):
                pass
        for key in keys:
            put_key(ap, key)
    ap(END)


def put_longs(ap: Append, xs: Sequence[int]) -> None:
    """Append an array of longs (one C call with the kernels)."""
    if _c is not None:
        try:
            ap(_c.encode_longs(xs))
            return
        except (TypeError, OverflowError):
            pass
    if xs:
        ap(encode_long(len(xs)))
        for x in xs:
            ap(encode_long(x))
    ap(END)


def put_string(ap: Append, s: str) -> None:
    b = s.encode()
    ap(encode_long(len(b)))
    ap(b)


# ------------------------------------------------------------------ hand-written decoder
# Tuples are decoded by hand (5x faster than fastavro on 250-attribute tuples) and keep their
# own bytes as ``Tup.wire``: a node that ships a tuple on (SP-S replicas, intermediate
# results) sends the bytes it received without encoding them again.

_unpack_double = struct.Struct("<d").unpack_from


def read_long(b: bytes, i: int) -> tuple[int, int]:
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


def read_string(b: bytes, i: int) -> tuple[str, int]:
    n, i = read_long(b, i)
    if n < 0:
        raise ValueError("negative string length")
    j = i + n
    if j > len(b):
        raise IndexError("string beyond the end")
    return b[i:j].decode("utf-8"), j


def read_count(b: bytes, i: int) -> tuple[int, int]:
    """An array/map block count (a negative count is followed by the block's byte size)."""
    n, i = read_long(b, i)
    if n < 0:
        _, i = read_long(b, i)
        n = -n
    return n, i


def _rvalue(b: bytes, i: int) -> tuple[Value, int]:
    br, i = read_long(b, i)
    if br == 2:
        return read_long(b, i)
    if br == 4:
        return read_string(b, i)
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
    n, i = read_count(b, i)
    while n:
        for _ in range(n):
            v, i = _rvalue(b, i)
            out.append(v)
        n, i = read_count(b, i)
    return tuple(out), i


def _rtup(b: bytes, i: int) -> tuple[Tup, int]:
    start = i
    pos, i = read_long(b, i)
    if not _INT_MIN <= pos <= _INT_MAX:
        raise ValueError(f"pos {pos} does not fit an Avro int")
    tid, i = read_long(b, i)
    ts, i = read_long(b, i)
    seq, i = read_long(b, i)
    if b[i] == 0:  # the usual: the key is one block
        i += 1
        key: Key = ()
    else:
        key, i = _rkey(b, i)
    n, i = read_long(b, i)
    j = i + n
    if n < 0 or j > len(b):
        raise ValueError("bad rest length")
    t = Tup(pos, tid, ts, seq, key, b[i:j])
    t.wire = b[start:j]
    return t, j


def decode_tuple(data: bytes) -> Tup:
    """Inverse of :func:`encode_tuple` (the tuple keeps ``data`` as its wire bytes)."""
    return decode_whole(data, "joinlib.BaseTuple", lambda b: _rtup(b, 0))


def encode_tuple_list(tups: Sequence[Tup]) -> bytes:
    """An Avro array of ``joinlib.BaseTuple``: a derived tuple's components (:mod:`joinlib.mjoin.derived`)."""
    out: list[bytes] = []
    put_tups(out.append, tups)
    return b"".join(out)


def decode_tuple_list(data: bytes) -> list[Tup]:
    """Inverse of :func:`encode_tuple_list`."""
    return decode_whole(data, "array of joinlib.BaseTuple", lambda b: read_tups(b, 0))


def read_tups(b: bytes, i: int) -> tuple[list[Tup], int]:
    out: list[Tup] = []
    ap = out.append
    n, i = read_count(b, i)
    while n:
        for _ in range(n):
            t, i = _rtup(b, i)
            ap(t)
        n, i = read_count(b, i)
    return out, i


_T = TypeVar("_T")


def decode_whole(data: bytes, name: str, decode: Callable[[bytes], tuple[_T, int]]) -> _T:
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


def read_int(data: bytes, i: int, what: str) -> tuple[int, int]:
    n, i = read_long(data, i)
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{what} {n} does not fit an Avro int")
    return n, i


# ------------------------------------------------------------- fastavro (small messages, references)

Record = dict[str, Any]  # a record as fastavro reads and writes it: field name -> value


def fastavro_record(buf: io.BytesIO, schema: Record, **options: Any) -> Record:
    """fastavro's schemaless read of one record (a dict: every schema read here is a record)."""
    rec = fastavro.schemaless_reader(buf, schema, **options)
    assert isinstance(rec, dict), f"{schema['name']} is not a record schema"
    return rec


def fastavro_read(data: bytes, schema: Record, **options: Any) -> Record:
    """fastavro's schemaless read of a whole message; truncated input or trailing
    bytes raise ValueError."""
    buf = io.BytesIO(data)
    try:
        rec = fastavro_record(buf, schema, **options)
    except (EOFError, StopIteration, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed {schema['name']} message: {e!r}") from e
    if buf.tell() != len(data):
        raise ValueError(
            f"malformed {schema['name']} message: {len(data) - buf.tell()} trailing bytes"
        )
    return rec


def tup_of_record(d: Record) -> Tup:
    return Tup(d["pos"], d["id"], d["ts"], d["seq"], tuple(d["key"]), d["rest"])


def tup_record(t: Tup) -> Record:
    return {"pos": t.pos, "id": t.id, "ts": t.ts, "seq": t.seq, "key": list(t.key), "rest": t.rest}
