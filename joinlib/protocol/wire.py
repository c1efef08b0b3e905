"""Avro wire encoding of the node-to-node messages: :class:`~joinlib.protocol.messages.Envelope` and its
bodies (``joinlib.Envelope``, topic ``node.<query>.<site>.from.<peer>``).

* :func:`encode_envelope` / :func:`decode_envelope`; :func:`envelope_size` is the exact byte count the
  simulator charges, :func:`naive_batch_size` what shipping a source batch whole would cost;
* :func:`encode_body` / :func:`decode_body` -- a body alone (a checkpoint's inbox).

The messages that enter and leave the system (source batches, result batches, control messages) are
:mod:`joinlib.protocol.records`; the primitives both build on are :mod:`joinlib.protocol.avro`, the schemas
:mod:`joinlib.protocol.schemas`.  All encodings are *schemaless* Avro (no container header): they are Kafka
message values.

Encoding is on the hot path (every message a plan sends: encoded on Kafka, sized in the simulator), so envelopes
are written by a hand-written encoder that produces exactly the bytes fastavro's ``schemaless_writer`` produces
(``tests/unit/test_wire.py`` checks byte identity against :func:`_encode_envelope_reference`): in C where the
``_avroc`` kernel is built (``envelope``, and ``envelope_size``, which counts the bytes without writing them), else
in Python (``tests/property/test_wire_c.py`` checks the two alike).  Decoding is on every node's receiving path: the
kernel's ``decode_envelope`` decodes what the encoders write into the very objects the Python form makes, and declines
anything malformed or unusual, which :func:`_decode_envelope` (the definition) then decodes or refuses: tuple batches
by hand (checked against fastavro's decoding, :func:`_decode_envelope_reference`), the other bodies through fastavro.
"""
from __future__ import annotations

import io
from typing import Any, Callable

import fastavro

from joinlib.kernels import kernel
from joinlib.model import Tup, Value
from joinlib.protocol.avro import (
    END,
    Append,
    Record,
    decode_whole,
    encode_int,
    encode_long,
    encode_tuple,
    fastavro_read,
    fastavro_record,
    put_keys,
    put_longs,
    put_tups,
    read_count,
    read_int,
    read_long,
    read_tups,
    tup_of_record,
    tup_record,
    tuples_size,
)
from joinlib.protocol.bloom import MAX_HASHES
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
from joinlib.protocol.schemas import SCHEMAS

__all__ = [
    "encode_envelope",
    "decode_envelope",
    "envelope_size",
    "naive_batch_size",
    "encode_body",
    "decode_body",
]

_ENVELOPE = SCHEMAS["joinlib.Envelope"]

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


# The union branch of each body class, written first by the class's writer.
_BRANCH = {cls: encode_long(_BODY_NAMES.index(name)) for name, cls in _BODY_CLASSES.items()}
_BR_TUPLE_BATCH = _BRANCH[TupleBatch]
_BR_KEY_BATCH = _BRANCH[KeyBatch]
_BR_EXPIRY_UPDATE = _BRANCH[ExpiryUpdate]
_BR_DJA_UPDATE = _BRANCH[DjaUpdate]
_BR_WINDOW_SNAPSHOT = _BRANCH[WindowSnapshot]
_BR_KEY_FILTER = _BRANCH[KeyFilter]
_BR_SHIPPED_BATCH = _BRANCH[ShippedBatch]


def _put_tuple_batch(ap: Append, body: TupleBatch) -> None:
    ap(_BR_TUPLE_BATCH)
    rows = body.rows
    if rows:
        ap(encode_long(len(rows)))
        for row in rows:
            put_tups(ap, row)  # Row.parts
    ap(END)


def _put_key_batch(ap: Append, body: KeyBatch) -> None:
    ap(_BR_KEY_BATCH)
    put_keys(ap, body.keys)


def _put_expiry_update(ap: Append, body: ExpiryUpdate) -> None:
    ap(_BR_EXPIRY_UPDATE)
    ap(encode_long(body.expired))
    put_longs(ap, body.arrivals)


def _put_window_snapshot(ap: Append, body: WindowSnapshot) -> None:
    ap(_BR_WINDOW_SNAPSHOT)
    ap(encode_long(body.base))
    put_tups(ap, body.tuples)
    put_keys(ap, body.keys)
    put_longs(ap, body.counts)


def _put_dja_update(ap: Append, body: DjaUpdate) -> None:
    ap(_BR_DJA_UPDATE)
    put_keys(ap, body.vj)
    put_longs(ap, body.vc)
    put_tups(ap, body.sf)
    put_longs(ap, body.arrivals)


def _put_key_filter(ap: Append, body: KeyFilter) -> None:
    ap(_BR_KEY_FILTER)
    ap(encode_long(body.back))
    ap(encode_long(body.live))
    put_keys(ap, body.keys)
    if body.ages:
        ap(b"\x04")        # bloom: the Ages record (written-out keys of several arrival epochs)
        put_longs(ap, body.ages)
        return
    if not body.bits:
        ap(b"\x00")        # bloom: null
        return
    ap(b"\x02")            # bloom: the record
    ap(encode_long(len(body.bits)))
    ap(body.bits)
    ap(encode_int(body.hashes))
    ap(encode_long(body.n))


def _put_shipped_batch(ap: Append, body: ShippedBatch) -> None:
    ap(_BR_SHIPPED_BATCH)
    put_tups(ap, body.tuples)
    put_longs(ap, body.arrivals)


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


#: The envelope kernel (_avroc.c), or None: no compiler at install; then the writers above do it all.  It takes the
#: classes above exactly; a subclass, or a value it does not take, it declines by answering None, and goes to the
#: writers (same bytes, or their error).  Only None falls back: an exception it raises (no memory -- the Python form
#: would need more -- or a bug of its own) propagates rather than hide behind the Python form's answer.  It makes
#: the same classes when it decodes (setup_envelopes refuses them unless it sets every slot they have).
_c: Any = kernel("joinlib.protocol._avroc")
if _c is not None:
    _KERNEL_BODIES = (TupleBatch, KeyBatch, ExpiryUpdate, DjaUpdate, WindowSnapshot, KeyFilter, ShippedBatch)
    _NAME_OF = {cls: name for name, cls in _BODY_CLASSES.items()}
    _c.setup_envelopes(Envelope, Tup, _KERNEL_BODIES, tuple(_BODY_NAMES.index(_NAME_OF[cls]) for cls in _KERNEL_BODIES),
                       encode_tuple, MAX_HASHES)


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
    if _c is not None:
        out: bytes | None = _c.envelope(env)
        if out is not None:   # None: declined (a subclass, an int beyond 64 bits, ...): the writers' bytes or error
            return out
    return _encode_envelope(env)


def _encode_envelope(env: Envelope) -> bytes:
    """:func:`encode_envelope` by the Python writers."""
    parts: list[bytes] = []
    ap = parts.append
    ap(encode_int(env.part))
    ap(encode_int(env.gen))
    ap(encode_int(env.flow))
    ap(encode_long(env.epoch))
    body = env.body
    put_body = _BODY_WRITERS.get(type(body)) or _subclass_writer(body)
    put_body(ap, body)
    return b"".join(parts)


def envelope_size(env: Envelope) -> int:
    """The exact number of bytes of :func:`encode_envelope` (``env``): what the simulator charges a message.  The
    kernel counts them without writing them (a tuple not encoded yet is sized from its fields, and stays
    unencoded)."""
    if _c is not None:
        n: int | None = _c.envelope_size(env)
        if n is not None:   # None: declined, see encode_envelope
            return n
    return len(_encode_envelope(env))


def naive_batch_size(epoch: int, tups: list[Tup]) -> int:
    """The size of the envelope that would ship ``tups`` (a source batch) to another site in one
    full message (flow 0, partition 0, generation 0) -- what shipping every tuple to every other
    site costs -- computed from the tuples' cached encodings, without encoding."""
    size = 3 + len(encode_long(epoch)) + 1   # part, gen, flow; epoch; body branch
    if tups:
        size += len(encode_long(len(tups))) + 1
        size += 2 * len(tups) + tuples_size(tups)  # per Row: count 1, the tuple, end of array
    else:
        size += 1
    return size


def encode_body(body: Body) -> bytes:
    """A message body alone (as an envelope with empty addresses): what a checkpoint keeps of
    the messages waiting in a host's inbox."""
    return encode_envelope(Envelope("", "", 0, 0, body))


def decode_body(data: bytes) -> Body:
    return decode_envelope(data).body


def _bloom_of(rec: Any) -> tuple[Any, ...]:
    """(bits, hashes, n, ages) of a KeyFilter's ``bloom`` union as fastavro reads it (a (name, record)
    pair with ``return_record_name``), () for null."""
    if rec is None:
        return ()
    if isinstance(rec, tuple):
        rec = rec[1]
    if "runs" in rec:   # the Ages branch
        return b"", 0, 0, _ages_of(rec["runs"])
    if rec["bits"] and not 1 <= rec["hashes"] <= MAX_HASHES:  # the Bloom tests read k of sixteen words
        raise ValueError(f"a Bloom filter with {rec['hashes']} hash functions (1..{MAX_HASHES})")
    return rec["bits"], rec["hashes"], rec["n"]


def _ages_of(runs: list[int]) -> list[int]:
    """A KeyFilter's runs of ages, checked: (age, count) pairs, ages >= 0, counts >= 1."""
    if len(runs) % 2 or any(a < 0 for a in runs[::2]) or any(n < 1 for n in runs[1::2]):
        raise ValueError(f"a key set's ages must be (age >= 0, count >= 1) pairs, not {runs[:8]}")
    return list(runs)


def _keys_of(rec: list[list[Value]]) -> list[Key]:
    return [tuple(k) for k in rec]


# Bodies other than TupleBatch, from the plain record fastavro reads (both decoders use these).
_BODY_OF_RECORD: dict[str, Callable[[Record], Body]] = {
    "joinlib.KeyBatch": lambda b: KeyBatch(_keys_of(b["keys"])),
    "joinlib.ExpiryUpdate": lambda b: ExpiryUpdate(b["expired"], b["arrivals"]),
    "joinlib.DjaUpdate": lambda b: DjaUpdate(_keys_of(b["vj"]), b["vc"], [tup_of_record(p) for p in b["sf"]],
                                             b["arrivals"]),
    "joinlib.WindowSnapshot": lambda b: WindowSnapshot(b["base"], [tup_of_record(p) for p in b["tuples"]],
                                                       _keys_of(b["keys"]), b["counts"]),
    "joinlib.KeyFilter": lambda b: KeyFilter(b["back"], b["live"], _keys_of(b["keys"]), *_bloom_of(b["bloom"])),
    "joinlib.ShippedBatch": lambda b: ShippedBatch([tup_of_record(p) for p in b["tuples"]], b["arrivals"]),
}


def _rows_at(data: bytes, i: int) -> tuple[list[tuple[Tup, ...]], int]:
    rows: list[tuple[Tup, ...]] = []
    n, i = read_count(data, i)
    while n:
        for _ in range(n):
            parts, i = read_tups(data, i)
            rows.append(tuple(parts))
        n, i = read_count(data, i)
    return rows, i


def _envelope_at(data: bytes, src: str = "", dst: str = "") -> tuple[Envelope, int]:
    part, i = read_int(data, 0, "part")
    gen, i = read_int(data, i, "gen")
    flow, i = read_int(data, i, "flow")
    epoch, i = read_long(data, i)
    br, i = read_long(data, i)
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
        b = fastavro_record(buf, SCHEMAS[name])
    except (EOFError, StopIteration) as e:
        raise IndexError(repr(e)) from None
    return Envelope(src, dst, flow, epoch, _BODY_OF_RECORD[name](b), part, gen), buf.tell()


def decode_envelope(data: bytes, src: str = "", dst: str = "") -> Envelope:
    """Inverse of :func:`encode_envelope`; ``src`` and ``dst`` come from outside the message (the
    Kafka key and topic).  Malformed data raises ValueError.  The kernel decodes what the encoders write; what it
    declines (anything malformed or unusual) goes to :func:`_decode_envelope`, the definition, which decodes it or
    raises."""
    if _c is not None:
        env: Envelope | None = _c.decode_envelope(data, src, dst)
        if env is not None:   # None: declined; what it raises (no memory, a bug of its own) is no decline
            return env
    return _decode_envelope(data, src, dst)


def _decode_envelope(data: bytes, src: str = "", dst: str = "") -> Envelope:
    """:func:`decode_envelope` in Python: TupleBatch bodies by hand, the others through fastavro."""
    return decode_whole(data, "joinlib.Envelope", lambda b: _envelope_at(b, src, dst))


def _decode_envelope_reference(data: bytes, src: str = "", dst: str = "") -> Envelope:
    """fastavro's decoding of an Envelope (the reference the hand decoder is tested against; the
    hand decoder reads the small bodies with fastavro too)."""
    rec = fastavro_read(data, _ENVELOPE, return_record_name=True)
    name, b = rec["body"]
    if name == "joinlib.TupleBatch":
        body: Body = TupleBatch([tuple([tup_of_record(p) for p in row["parts"]]) for row in b["rows"]])
    else:
        body = _BODY_OF_RECORD[name](b)
    return Envelope(src, dst, rec["flow"], rec["epoch"], body, rec["part"], rec["gen"])


# ---------------------------------------------- fastavro reference path (for tests)


def _envelope_record(env: Envelope) -> Record:
    """``env`` as the plain record fastavro writes (body in tuple notation)."""
    body = env.body
    if isinstance(body, TupleBatch):
        rec: Record = {"rows": [{"parts": [tup_record(t) for t in row]} for row in body.rows]}
        name = "joinlib.TupleBatch"
    elif isinstance(body, KeyBatch):
        rec = {"keys": [list(k) for k in body.keys]}
        name = "joinlib.KeyBatch"
    elif isinstance(body, ExpiryUpdate):
        rec = {"expired": body.expired, "arrivals": list(body.arrivals)}
        name = "joinlib.ExpiryUpdate"
    elif isinstance(body, WindowSnapshot):
        rec = {"base": body.base, "tuples": [tup_record(t) for t in body.tuples],
               "keys": [list(k) for k in body.keys], "counts": list(body.counts)}
        name = "joinlib.WindowSnapshot"
    elif isinstance(body, KeyFilter):
        bloom = (("joinlib.Ages", {"runs": list(body.ages)}) if body.ages else
                 {"bits": body.bits, "hashes": body.hashes, "n": body.n} if body.bits else None)
        rec = {"back": body.back, "live": body.live, "keys": [list(k) for k in body.keys], "bloom": bloom}
        name = "joinlib.KeyFilter"
    elif isinstance(body, ShippedBatch):
        rec = {"tuples": [tup_record(t) for t in body.tuples], "arrivals": list(body.arrivals)}
        name = "joinlib.ShippedBatch"
    elif isinstance(body, DjaUpdate):
        rec = {
            "vj": [list(k) for k in body.vj],
            "vc": list(body.vc),
            "sf": [tup_record(t) for t in body.sf],
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
