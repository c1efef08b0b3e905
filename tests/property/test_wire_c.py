"""The envelope kernel (``envelope`` and ``envelope_size`` in joinlib/protocol/_avroc.c) against wire.py's Python
writers: for random envelopes of every body class the kernel writes exactly the Python bytes (and fastavro's), and
the size it counts without writing is their length.  Envelopes the kernel does not take (subclasses, values of
other types, ints beyond their Avro type, sequences that are neither lists nor tuples) come out of wire.py as they
did without the kernel: the same bytes or the same error.  Tuples are drawn both with their encoding cached and
without: the size leaves the latter unencoded, the encoding caches it.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import fields
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.protocol import avro, wire
from joinlib.protocol import messages as m
from joinlib.protocol.messages import Envelope
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


def outcome(f: Callable[[Envelope], Any], e: Envelope) -> Any:
    """What ``f`` answers, or the error it raises (its type and message)."""
    try:
        return f(e)
    except Exception as x:   # the errors are compared, whatever they are
        return (type(x).__name__, str(x))


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
