"""The envelope kernel (``envelope`` and ``envelope_size`` in joinlib/protocol/_avroc.c) against wire.py's Python
writers: for random envelopes of every body class the kernel writes exactly the Python bytes (and fastavro's), and
the size it counts without writing is their length.  Envelopes the kernel does not take (subclasses, values of
other types, ints beyond their Avro type, sequences that are neither lists nor tuples) come out of wire.py as they
did without the kernel: the same bytes or the same error.  Tuples are drawn both with their encoding cached and
without: the size leaves the latter unencoded, the encoding caches it.

The decoder (``decode_envelope``) against wire.py's Python form: the same objects, slot by slot, for every message
the writers write; spoiled messages (cut, changed, inserted, removed and trailing bytes) and hand-made odd ones
decode or fail alike with the kernel and without (the kernel declines them, and the Python form answers).
"""
from __future__ import annotations

import enum
import io
import re
import struct
from collections import deque
from dataclasses import fields
from typing import Any, Callable

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.protocol import avro, wire
from joinlib.protocol import messages as m
from joinlib.protocol.messages import Envelope
from joinlib.protocol.schemas import SCHEMAS
from tests.kernels import kernels

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
# the varint lengths' edges (7 bits a byte after zig-zag) and the Python encoder's table edges (2**13, 2**27, 2**41)
EDGES = sorted({s * (1 << b) + d for b in (6, 7, 13, 14, 20, 21, 27, 28, 41, 42, 62) for s in (1, -1) for d in (-1, 0)}
               | {0, 1, -1, LONG_MIN, LONG_MAX})


def test_the_envelope_kernel_is_built() -> None:
    assert wire._c is not None and avro._c is not None, \
        "joinlib/protocol/_avroc.c is not built: run `python setup.py build_ext --inplace`"
    e = Envelope("a", "b", 1, 2, m.KeyBatch([("k",)]))
    assert wire._c.envelope(e) == wire._encode_envelope(e)
    assert wire._c.envelope_size(e) == len(wire._encode_envelope(e))


# ------------------------------------------------------------------------------------------------ strategies

long_st = st.one_of(st.integers(LONG_MIN, LONG_MAX), st.integers(-3, 300), st.sampled_from(EDGES))
int_st = st.one_of(st.integers(INT_MIN, INT_MAX), st.integers(-3, 300), st.sampled_from([INT_MIN, INT_MAX, 8191, 8192]))
value_st = st.one_of(
    st.none(), st.booleans(), long_st, st.floats(), st.text(max_size=12), st.sampled_from(["a", "ключ", "x" * 300]),
)


class Color(enum.IntEnum):
    RED = 3


class Name(str):
    def __str__(self) -> str:   # the Python writers write str(v) of a str subclass
        return "renamed"


class Ratio(float):
    pass


class MyTup(Tup):
    __slots__ = ()


# what the kernel does not take: the Python writers write it, or raise
odd_value_st = st.one_of(
    st.sampled_from([Color.RED, Name("n"), Ratio(0.5), b"bytes", ("nested",), [1], "bad \udc80", object()]),
    st.integers(LONG_MAX + 1, 1 << 70), st.integers(-(1 << 70), LONG_MIN - 1),
)


def rarely(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` seven times in eight, else ``odd`` (an envelope has many fields: an odd one in most would make
    nearly every envelope an error)."""
    return st.integers(0, 7).flatmap(lambda i: odd if i == 0 else usual)


odd_long_st = rarely(long_st, st.sampled_from([True, Color.RED, 1.0, None, LONG_MAX + 1, LONG_MIN - 1, 1 << 80]))
odd_int_st = rarely(int_st, st.sampled_from([True, Color.RED, INT_MAX + 1, INT_MIN - 1, LONG_MAX + 1, 2.0]))


def _seq(items: st.SearchStrategy[list[Any]], odd: bool) -> st.SearchStrategy[Any]:
    """A list, or (odd) rarely a tuple or a deque of the items."""
    if not odd:
        return items
    return rarely(items, st.one_of(items.map(tuple), items.map(deque)))


def _strategies(odd: bool) -> st.SearchStrategy[Envelope]:
    longs = odd_long_st if odd else long_st
    ints = odd_int_st if odd else int_st
    values = rarely(value_st, odd_value_st) if odd else value_st
    key = st.lists(values, max_size=4).map(tuple)   # a key is a tuple; (odd) rarely a list or a deque
    if odd:
        key = rarely(key, st.one_of(st.lists(values, max_size=4), st.lists(values, max_size=4).map(deque)))

    @st.composite
    def tup(draw: Callable[..., Any]) -> Tup:
        rest = st.one_of(st.binary(max_size=40), st.binary(min_size=62, max_size=66))   # its length: 1 or 2 bytes
        cls = draw(rarely(st.just(Tup), st.just(MyTup))) if odd else Tup
        t = cls(draw(ints), draw(longs), draw(longs), draw(longs), draw(key),
                draw(rarely(rest, st.just(bytearray(b"ba"))) if odd else rest))
        if draw(st.booleans()):   # cached (a tuple sent before, or received), or not encoded yet
            try:
                avro.encode_tuple(t)
            except (TypeError, ValueError):
                pass
        return t

    tups = _seq(st.lists(tup(), max_size=4), odd)
    # arrays of up to 63 items have a count of 1 byte, longer ones 2
    keys = _seq(st.one_of(st.lists(key, max_size=5), st.lists(st.just(("k",)), min_size=63, max_size=65)), odd)
    arr = _seq(st.one_of(st.lists(longs, max_size=5), st.lists(st.integers(-1, 1), min_size=63, max_size=65)), odd)
    bits = st.one_of(st.just(b""), st.binary(min_size=1, max_size=16))
    if odd:
        bits = rarely(bits, st.just(bytearray(b"\x01\x02")))
    ages: st.SearchStrategy[list[int]] = st.one_of(st.just([]), st.lists(st.integers(0, 1 << 40), min_size=1,
                                                                          max_size=6))
    rows = _seq(st.lists(st.lists(tup(), max_size=3).map(tuple), max_size=4), odd)

    def body(cls: type, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        sub = type("My" + cls.__name__, (cls,), {"__slots__": ()})   # written by _subclass_writer
        return st.builds(lambda c, *a: c(*a), rarely(st.just(cls), st.just(sub)) if odd else st.just(cls), *args)

    bodies = st.one_of(
        body(m.TupleBatch, rows),
        body(m.KeyBatch, keys),
        body(m.ExpiryUpdate, longs, arr),
        body(m.DjaUpdate, keys, arr, tups, arr),
        body(m.WindowSnapshot, longs, tups, keys, arr),
        body(m.KeyFilter, longs, longs, keys, bits, ints, longs, ages),   # keys, Bloom filter or Ages
        body(m.ShippedBatch, tups, arr),
    )
    return st.builds(Envelope, src=st.text(max_size=4), dst=st.text(max_size=4), flow=ints, epoch=longs,
                     body=bodies, part=ints, gen=ints)


# ------------------------------------------------------------------------------------------------ checks


def _copy(x: Any) -> Any:
    """``x`` with every tuple in it a new one with the same fields and the same cached encoding (or none)."""
    if isinstance(x, Tup):
        t = type(x)(x.pos, x.id, x.ts, x.seq, _copy(x.key), x.rest)
        t.wire = x.wire
        return t
    if type(x) in (list, tuple, deque):
        return type(x)(_copy(y) for y in x)
    return x


def fresh(e: Envelope) -> Envelope:
    """A copy of ``e``: writing it does not change what the next copy's writer sees."""
    b = e.body
    body = type(b)(**{f.name: _copy(getattr(b, f.name)) for f in fields(b)})
    return Envelope(e.src, e.dst, e.flow, e.epoch, body, e.part, e.gen)


def tuples_of(e: Envelope) -> list[Tup]:
    b = e.body
    if isinstance(b, m.TupleBatch):
        return [t for row in b.rows for t in row]
    return list(getattr(b, "tuples", [])) + list(getattr(b, "sf", []))


def outcome(f: Callable[[Any], Any], e: Any) -> Any:
    """What ``f`` answers, or the error it raises (its type and message; an object's address in it masked: some
    of fastavro's name its buffer)."""
    try:
        return f(e)
    except Exception as x:   # the errors are compared, whatever they are
        return (type(x).__name__, re.sub(r" at 0x[0-9a-f]+", " at 0x...", str(x)))


def python_forms(e: Envelope) -> list[Any]:
    """The Python writers' outcome for ``e``, with avro.py's key and long kernels and without."""
    out = []
    for c in (True, False):
        with kernels(wire, False), kernels(avro, c):
            out.append(outcome(wire.encode_envelope, fresh(e)))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_strategies(odd=False))
def test_the_kernel_writes_the_python_bytes_and_counts_them(e):
    want = python_forms(e)
    assert want[0] == want[1] == wire._encode_envelope_reference(fresh(e)), "the Python writers differ from fastavro"
    sized = fresh(e)
    assert wire._c.envelope_size(sized) == len(want[0])   # the kernel takes every plain envelope: no fallback
    assert [t.wire is None for t in tuples_of(sized)] == [t.wire is None for t in tuples_of(e)], "sizing encodes"
    written = fresh(e)
    assert wire._c.envelope(written) == want[0]
    assert all(t.wire == avro.encode_tuple(Tup(t.pos, t.id, t.ts, t.seq, t.key, t.rest)) for t in tuples_of(written))
    assert wire.encode_envelope(fresh(e)) == want[0]
    assert wire.envelope_size(fresh(e)) == len(want[0])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_strategies(odd=True))
def test_what_the_kernel_declines_comes_out_as_without_it(e):
    want = python_forms(e)
    assert want[0] == want[1]
    got = outcome(wire.encode_envelope, fresh(e))
    assert got == want[0]
    size = outcome(wire.envelope_size, fresh(e))
    assert size == (len(got) if isinstance(got, bytes) else got)
    # the kernel itself declines (None) what it does not take; the one error it passes on is avro.encode_tuple's, which
    # it calls for a tuple it declines: the Python form's error for that tuple
    assert outcome(wire._c.envelope, fresh(e)) in (None, want[0])
    assert outcome(wire._c.envelope_size, fresh(e)) in (None, len(got) if isinstance(got, bytes) else "never")


# ------------------------------------------------------------------------------------------------ decoding
# The kernel's decode_envelope against wire.py's Python form (_decode_envelope: TupleBatch by hand, the other
# bodies through fastavro): every message the Python form decodes the kernel decodes to the same objects (the
# same classes, and in every slot the same values of the same types, down to a tuple's cached ``wire``), or --
# only for what it declines by design -- answers None; everything else, wire.decode_envelope answers as the
# Python form does (the same envelope, or the same error: type and message).

SLOTTED = (Envelope, Tup, m.TupleBatch, m.KeyBatch, m.ExpiryUpdate, m.DjaUpdate, m.WindowSnapshot, m.KeyFilter,
           m.ShippedBatch)


def same(a: Any, b: Any, path: str = "env") -> None:
    """``a`` and ``b`` alike: the same types all the way down, every slot (``Tup.wire`` and ``idb`` too), floats
    bit for bit (NaN)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, SLOTTED):
        for name in type(a).__slots__:
            same(getattr(a, name), getattr(b, name), f"{path}.{name}")
    elif type(a) in (list, tuple):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    elif type(a) is float:
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def python_decoded(data: Any, src: str = "s", dst: str = "d") -> Any:
    """The Python form's outcome: an Envelope, or (error type, message)."""
    with kernels(wire, False):
        return outcome(lambda d: wire.decode_envelope(d, src, dst), data)


def check_decoded(data: Any, must_take: bool = False) -> Any:
    """``data`` decodes (or fails) alike with the kernel and without; the kernel itself answers the Python form's
    envelope or declines (None), and (``must_take``) declines nothing the Python form decodes."""
    want = python_decoded(data)
    got = outcome(lambda d: wire.decode_envelope(d, "s", "d"), data)
    direct = wire._c.decode_envelope(data, "s", "d")
    if isinstance(want, Envelope):
        same(got, want)
        if must_take:
            assert direct is not None, "the kernel declined a message the Python form decodes"
        if direct is not None:
            same(direct, want)
    else:
        assert got == want
        assert direct is None, f"the kernel decoded what the Python form refuses: {want}"
    return want


def test_the_decoding_kernel_is_built() -> None:
    data = wire._encode_envelope(Envelope("", "", 1, 2, m.ShippedBatch([Tup(0, 1, 2, 3, ("k", 1.5), b"r")], [4])))
    got = wire._c.decode_envelope(data, "a", "b")
    assert got is not None, "setup_envelopes did not set the decoder up"
    with kernels(wire, False):
        same(got, wire.decode_envelope(data, "a", "b"))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_strategies(odd=False))
def test_the_kernel_decodes_what_the_python_form_decodes(e):
    data = wire._encode_envelope(e)
    want = check_decoded(data, must_take=True)
    # what the Python form refuses of what the writers write: a Bloom filter's k beyond 1..16, malformed ages
    if not isinstance(want, Envelope):
        b = e.body
        assert isinstance(b, m.KeyFilter) and (b.ages or (b.bits and not 1 <= b.hashes <= 16)), want
        assert want[0] == "ValueError"


def _mutations() -> st.SearchStrategy[Callable[[bytes], bytes]]:
    """Ways to spoil a message: cut it, change, insert or remove bytes, add some at the end."""
    def cut(i: int) -> Callable[[bytes], bytes]:
        return lambda d: d[: i % (len(d) + 1)]

    def put(i: int, c: int) -> Callable[[bytes], bytes]:
        return lambda d: d[: i % len(d)] + bytes([c]) + d[i % len(d) + 1:] if d else d

    def insert(i: int, s: bytes) -> Callable[[bytes], bytes]:
        return lambda d: d[: i % (len(d) + 1)] + s + d[i % (len(d) + 1):]

    def remove(i: int, k: int) -> Callable[[bytes], bytes]:
        return lambda d: d[: i % (len(d) + 1)] + d[i % (len(d) + 1) + k:]

    i = st.integers(0, 1 << 16)
    return st.one_of(st.builds(cut, i), st.builds(put, i, st.integers(0, 255)),
                     st.builds(put, i, st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF])),
                     st.builds(insert, i, st.binary(min_size=1, max_size=12)), st.builds(remove, i, st.integers(1, 4)),
                     st.builds(lambda s: lambda d: d + s, st.binary(min_size=1, max_size=3)))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_strategies(odd=False), st.lists(_mutations(), min_size=1, max_size=3))
def test_spoiled_messages_come_out_as_without_the_kernel(e, spoil):
    data = wire._encode_envelope(e)
    for f in spoil:
        data = f(data)
    check_decoded(data)


# hand-made messages: the header (part, gen, flow, epoch) and a body's branch, then the body
L = avro.encode_long


def head(branch: int, epoch: bytes = L(7)) -> bytes:
    return L(0) + L(1) + L(2) + epoch + L(branch)


BR = {cls: wire._BODY_NAMES.index(name) for name, cls in wire._BODY_CLASSES.items()}


def tup_bytes(pos: bytes = L(1), key: bytes = b"\x00", rest: bytes = L(2) + b"ab", ids: bytes = L(5) * 3) -> bytes:
    return pos + ids + key + rest


def shipped(*tups: bytes, arrivals: bytes = b"\x00") -> bytes:
    return head(BR[m.ShippedBatch]) + (L(len(tups)) + b"".join(tups) if tups else b"") + b"\x00" + arrivals


def batch(*tups: bytes) -> bytes:   # a TupleBatch of one row
    return head(BR[m.TupleBatch]) + L(1) + L(len(tups)) + b"".join(tups) + b"\x00\x00"


def key_batch(*values: bytes) -> bytes:   # a KeyBatch of one key
    return head(BR[m.KeyBatch]) + L(1) + L(len(values)) + b"".join(values) + b"\x00\x00"


def key_filter(bloom: bytes) -> bytes:
    return head(BR[m.KeyFilter]) + L(0) + L(3) + b"\x00" + bloom


BEYOND_64 = b"\xff" * 9 + b"\x03"     # a varint of 65 bits: the hand decoder reads a big int, fastavro wraps it
OVERLONG = b"\x82\x80\x80\x00"        # 1, in four bytes


@pytest.mark.parametrize("data", [
    b"", b"\x00", head(7), head(-1), head(1 << 40), head(BR[m.TupleBatch]),
    head(BR[m.TupleBatch], BEYOND_64) + b"\x00", head(BR[m.TupleBatch], OVERLONG) + b"\x00",
    L(1 << 31) + head(0)[1:] + b"\x00", L(-(1 << 31)) + head(0)[1:] + b"\x00",
    batch(tup_bytes()), batch(tup_bytes()) + b"\x00", batch(tup_bytes())[:-1],
    batch(tup_bytes(pos=L(1 << 31))), shipped(tup_bytes(pos=L(1 << 31))),         # fastavro takes any int
    batch(tup_bytes(ids=BEYOND_64 + L(1) + L(2))), shipped(tup_bytes(ids=BEYOND_64 + L(1) + L(2))),
    batch(tup_bytes(ids=OVERLONG * 3)), shipped(tup_bytes(ids=OVERLONG * 3)),
    batch(tup_bytes(rest=L(-1) + b"ab")), shipped(tup_bytes(rest=L(-1) + b"ab")),  # negative lengths
    batch(tup_bytes(rest=L(-2))), shipped(tup_bytes(rest=L(-2) + b"\x00")),
    batch(tup_bytes(rest=L(1 << 62) + b"ab")), shipped(tup_bytes(rest=L(1 << 62) + b"ab")),   # huge lengths
    head(BR[m.ShippedBatch]) + L(1 << 62) + b"\x00", head(BR[m.KeyBatch]) + L(1 << 40) + b"\x00\x00",
    head(BR[m.ShippedBatch]) + L(-1) + L(9) + tup_bytes() + b"\x00\x00",        # a negative block count
    head(BR[m.TupleBatch]) + L(-1) + L(0) + L(1) + tup_bytes() + b"\x00\x00",
    head(BR[m.ShippedBatch]) + L(1) + tup_bytes() + L(2) + tup_bytes() * 2 + b"\x00\x00",   # blocks of items
    head(BR[m.TupleBatch]) + L(1) + L(1) + tup_bytes() + L(1) + tup_bytes() + b"\x00" + L(1) + b"\x00\x00\x00",
    key_batch(L(4) + L(2) + b"ab") + b"", key_batch(L(4) + L(-1)), key_batch(L(4) + L(1 << 50)),
    key_batch(L(4) + L(1) + b"\xff"), key_batch(L(4) + L(3) + b"\xed\xa0\x80"),    # invalid UTF-8, a surrogate
    batch(tup_bytes(key=L(1) + L(4) + L(1) + b"\xff" + b"\x00")),
    key_batch(L(1) + b"\x02"), key_batch(L(1) + b"\x01"), key_batch(L(1) + b"\x00"),  # fastavro: 2 is True
    batch(tup_bytes(key=L(1) + L(1) + b"\x02\x00")), batch(tup_bytes(key=L(1) + L(1) + b"\x01\x00")),
    key_batch(L(5)), key_batch(L(-1)), key_batch(L(3) + b"\x00" * 7),
    key_batch(L(3) + b"\x00\x00\x00\x00\x00\x00\xf8\x7f"),
    batch(tup_bytes(key=L(2) + L(3) + b"\x00" * 7 + L(2) + L(5) + b"\x00")),       # a double cut short
    batch(tup_bytes(key=L(1) + L(2) + L(-3) + L(1) + L(0) + b"\x00")),           # a key in two blocks
    key_batch(L(0)) + b"\x00", head(BR[m.KeyBatch]) + L(1) + L(1) + L(0) + L(1) + L(2) + L(9) + b"\x00\x00",
    key_filter(L(0)), key_filter(L(1) + L(1) + b"\xff" + L(16) + L(2)),
    key_filter(L(1) + L(1) + b"\xff" + L(17) + L(2)),
    key_filter(L(1) + L(1) + b"\xff" + L(0) + L(2)), key_filter(L(1) + L(1) + b"\xff" + L(-1) + L(2)),
    key_filter(L(1) + L(0) + L(99) + L(2)), key_filter(L(1) + L(0) + L(1 << 40) + L(2)),
    key_filter(L(1) + L(1) + b"\xff" + L(1 << 40) + L(2)), key_filter(L(1) + L(-1) + b"\xff" + L(3) + L(2)),
    key_filter(L(2) + L(2) + L(0) + L(1) + b"\x00"), key_filter(L(2) + L(1) + L(0) + b"\x00"),
    key_filter(L(2) + L(2) + L(-1) + L(1) + b"\x00"), key_filter(L(2) + L(2) + L(3) + L(0) + b"\x00"),
    key_filter(L(2) + b"\x00"), key_filter(L(3)), key_filter(L(-1)),
    head(BR[m.ExpiryUpdate]) + L(4) + L(2) + L(1) + L(2) + b"\x00", head(BR[m.ExpiryUpdate]) + BEYOND_64 + b"\x00",
    head(BR[m.WindowSnapshot]) + L(1) + L(1) + tup_bytes() + b"\x00" + b"\x00" + b"\x00",
    head(BR[m.DjaUpdate]) + b"\x00" + b"\x00" + L(1) + tup_bytes() + b"\x00" + b"\x00",
], ids=lambda d: d.hex()[:60])
def test_odd_and_malformed_messages_come_out_as_without_the_kernel(data):
    check_decoded(data)


@pytest.mark.parametrize("data", [bytearray(batch(tup_bytes())), memoryview(key_batch(L(0))), None, "text"])
def test_data_that_is_not_bytes_comes_out_as_without_the_kernel(data):
    assert wire._c.decode_envelope(data, "s", "d") is None
    with kernels(wire, False):
        want = outcome(wire.decode_envelope, data)
    got = outcome(wire.decode_envelope, data)
    if isinstance(want, Envelope):
        same(got, want)
    else:
        assert got == want


def test_the_decoder_refuses_classes_whose_slots_it_does_not_set() -> None:
    """A class with a slot the decoder would leave unset (or without one it sets) is refused at setup, which
    leaves the classes set up before."""
    class Wider(Tup):
        __slots__ = ("extra",)

    bodies = wire._KERNEL_BODIES
    branches = tuple(wire._BODY_NAMES.index(wire._NAME_OF[cls]) for cls in bodies)
    with pytest.raises(TypeError, match="slots"):
        wire._c.setup_envelopes(Envelope, Wider, bodies, branches, avro.encode_tuple, 16)
    with pytest.raises(TypeError, match="slot"):
        wire._c.setup_envelopes(Envelope, Color, bodies, branches, avro.encode_tuple, 16)
    test_the_decoding_kernel_is_built()


# ------------------------------------------------------------------------------------------------ tuples
# avro.encode_tuple by the kernel (_avroc.encode_tuple) against its Python form (avro._encode_tuple): the same bytes,
# cached in ``wire`` the same way (the cached object is what later calls answer), or the same error with nothing
# cached; what the kernel declines it leaves untouched.

surrogate_st = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
tup_value_st = st.one_of(value_st, st.text(st.characters(), max_size=8), st.sampled_from([-(1 << 63), (1 << 63) - 1,
                                                                                           float("nan"), -0.0]))
rest_st = st.one_of(st.binary(max_size=40), st.binary(min_size=62, max_size=66), st.just(bytes(1250)),
                    st.sampled_from([bytes(8191), bytes(8192)]))


@st.composite
def tup_case(draw: Callable[..., Any], odd: bool) -> tuple[type, tuple[Any, ...], Any]:
    """(class, fields, a ``wire`` set beforehand or None): a Tup as nodes make them, or (odd) rarely anything."""
    values = rarely(tup_value_st, st.one_of(odd_value_st, surrogate_st)) if odd else tup_value_st
    key: st.SearchStrategy[Any] = st.lists(values, max_size=3).map(tuple)
    rest: st.SearchStrategy[Any] = rest_st
    cls: st.SearchStrategy[Any] = st.just(Tup)
    cached: st.SearchStrategy[Any] = st.one_of(st.none(), st.none(), st.just(b"cached"))
    ints, longs = int_st, long_st
    if odd:
        key = rarely(key, st.one_of(st.lists(values, max_size=3), st.lists(values, max_size=3).map(deque),
                                    st.sampled_from([None, "ab", b"", 7])))
        rest = rarely(rest, st.sampled_from([bytearray(b"ba"), memoryview(b"mv"), "str", None, 3]))
        cls = rarely(cls, st.just(MyTup))
        cached = rarely(cached, st.sampled_from([b"", "a str", 0]))
        ints, longs = odd_int_st, odd_long_st
    fields = (draw(ints), draw(longs), draw(longs), draw(longs), draw(key), draw(rest))
    return draw(cls), fields, draw(cached)


def _made(case: tuple[type, tuple[Any, ...], Any]) -> Tup:
    cls, fields, cached = case
    t = cls(*fields)
    if cached is not None:
        t.wire = cached
    return t


def check_tuple(case: tuple[type, tuple[Any, ...], Any], must_take: bool) -> None:
    py = _made(case)
    with kernels(avro, False):
        want = outcome(avro.encode_tuple, py)
    assert avro._c is not None
    t = _made(case)
    got = outcome(avro.encode_tuple, t)
    assert got == want
    assert type(t.wire) is type(py.wire) and t.wire == py.wire, "cached otherwise"
    if not isinstance(want, tuple):   # encoded: cached, and the cached object is the answer from now on
        assert t.wire is got and avro.encode_tuple(t) is got
        assert type(t) is not Tup or avro._c.encode_tuple(t) is got
        assert case[2] is None or got is case[2], "a cached encoding is answered as it is"
    direct = _made(case)
    w = avro._c.encode_tuple(direct)   # the kernel declines (None) rather than raise
    if w is None:   # declined: nothing cached
        assert not must_take, "the kernel declined a plain tuple"
        assert direct.wire is case[2] and direct.idb is None
        return
    assert w == want and direct.wire is w and direct.idb is None
    assert type(direct) is Tup and (case[2] is not None or type(w) is bytes)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tup_case(odd=False))
def test_the_kernel_encodes_a_tuple_as_python_does(case):
    check_tuple(case, must_take=True)
    t = _made(case)
    if case[2] is None:   # and as fastavro does
        assert avro.encode_tuple(t) == fastavro_tuple(t)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tup_case(odd=True))
def test_a_tuple_the_kernel_declines_comes_out_as_without_it(case):
    check_tuple(case, must_take=False)


def fastavro_tuple(t: Tup) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, SCHEMAS["joinlib.BaseTuple"], avro.tup_record(t))
    return buf.getvalue()


@pytest.mark.parametrize("fill", [(), ("pos", "id", "ts", "seq", "key"), ("pos", "id", "ts", "seq", "key", "rest"),
                                  ("wire",), ("pos", "id", "ts", "seq", "key", "wire")])
def test_a_tuple_with_unset_slots_comes_out_as_without_the_kernel(fill):
    def made() -> Tup:
        t = Tup.__new__(Tup)
        for name, v in zip(("pos", "id", "ts", "seq", "key", "rest"), (1, 2, 3, 4, ("k",), b"r"), strict=True):
            if name in fill:
                setattr(t, name, v)
        if "wire" in fill:
            t.wire = None
        return t
    with kernels(avro, False):
        want = outcome(avro.encode_tuple, made())
    assert outcome(avro.encode_tuple, made()) == want
    assert avro._c.encode_tuple(made()) is None


def test_the_tuple_kernel_is_built_and_set_up() -> None:
    assert avro._c is not None and avro._c.encode_tuple is not None, "run `python setup.py build_ext --inplace`"
    t = Tup(3, 1 << 40, -7, 9, ("k", 2, 0.5, None, True), b"rest")
    w = avro._c.encode_tuple(t)
    assert t.wire is w and w == avro._encode_tuple(Tup(3, 1 << 40, -7, 9, t.key, t.rest))
    with pytest.raises(TypeError):
        avro._c.setup_tuples(MyTup.__mro__[-1])   # object: not a class with the slots


class _Broken:
    """A kernel with a bug: it raises (the error must come out, not the Python form's answer)."""

    def __getattr__(self, name: str) -> Any:
        def broken(*args: Any) -> Any:
            raise SystemError(f"{name}: a bug")
        return broken


@pytest.mark.parametrize("call", [
    lambda: wire.encode_envelope(Envelope("a", "b", 1, 2, m.KeyBatch([("k",)]))),
    lambda: wire.envelope_size(Envelope("a", "b", 1, 2, m.KeyBatch([("k",)]))),
    lambda: wire.decode_envelope(wire._encode_envelope(Envelope("", "", 1, 2, m.KeyBatch([("k",)])))),
    lambda: avro.encode_tuple(Tup(1, 2, 3, 4, ("k",), b"r")),
], ids=["envelope", "envelope_size", "decode_envelope", "encode_tuple"])
def test_a_kernel_that_raises_is_not_hidden(call: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the kernel's None (declined) goes to the Python form: an error it raises propagates."""
    monkeypatch.setattr(wire, "_c", _Broken())
    monkeypatch.setattr(avro, "_c", _Broken())
    with pytest.raises(SystemError, match="a bug"):
        call()
