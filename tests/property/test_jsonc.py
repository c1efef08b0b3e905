"""The flat-JSON kernel (joinlib/ingest/_jsonc.c) decodes a live record as the Python path does, or declines.

``Decoder.decode`` with the kernel must answer exactly what it answers without it, for every record: well-formed
ones, malformed ones (bad JSON, wrong types, big ints, floats, escapes, raw UTF-8, invalid UTF-8, duplicate names,
odd whitespace, bytes after the object) and both payload layouts (listed attributes; every field, named or not).
The kernel may decline any record (then Python decodes it); the tests also check that it does take the plain
records a generator writes, so that they are not vacuous."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.ingest import records
from joinlib.ingest.records import Decoder, Event
from joinlib.model import Stream, Window
from joinlib.source_spec import SourceSpec

pytestmark = pytest.mark.skipif(records._c is None, reason="the _jsonc kernel is not built (no C compiler)")

ORIGIN = 1_000_000
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=6), st.integers(-2**63, 2**63 - 1),
    st.sampled_from([2**63, -2**63 - 1, 0, -1, 10**18]), st.floats(allow_nan=False, allow_infinity=False))
_VALUES = st.one_of(_SCALARS, st.lists(st.integers(0, 3), max_size=2))
_NAMES = st.sampled_from(["ts", "id", "J", "K", "p", "q", "r", "é", "a\"b"])


@st.composite
def _record(draw) -> bytes:
    """A JSON object, mostly with the layout's fields and plain values, written several ways, sometimes damaged."""
    members: list[tuple[str, Any]] = []
    if draw(st.integers(0, 9)):
        members.append(("ts", ORIGIN + draw(st.integers(-5, 10_000)) if draw(st.integers(0, 4)) else draw(_VALUES)))
    if draw(st.integers(0, 9)):
        members.append(("id", draw(st.integers(0, 99)) if draw(st.integers(0, 4)) else draw(_VALUES)))
    for a in ("J", "K", "p", "q"):
        if draw(st.integers(0, 7)):
            members.append((a, draw(st.text(max_size=5)) if draw(st.integers(0, 2)) else draw(_VALUES)))
    for name in draw(st.lists(_NAMES, max_size=2)):   # extra fields, or the same name twice
        members.append((name, draw(_VALUES)))
    members = draw(st.permutations(members))
    ascii_only = draw(st.booleans())
    sep = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", "\t:\r ")]))
    body = sep[0].join(json.dumps(k, ensure_ascii=ascii_only) + sep[1] + json.dumps(v, ensure_ascii=ascii_only)
                       for k, v in members)
    text = draw(st.sampled_from(["{%s}", " {%s} ", "\n{ %s }\t", "{%s}x", "{%s", "[{%s}]", "{%s,}", "\f{%s}"]))
    raw = (text % body).encode()
    if draw(st.integers(0, 5)) == 0 and raw:   # a damaged byte: invalid UTF-8, a control character, a stray quote
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.sampled_from([0x80, 0xC3, 0xED, 0xFF, 0x01, 0x22, 0x5C, 0x30]))]) + raw[at + 1:]
    return raw


def _stream(id_field: str | None, attributes: tuple[str, ...] | None) -> Stream:
    return Stream("S", 0, "a", Window("time", 3000), ("J", "K"), source=SourceSpec("t", "json", "ts", "ms", id_field,
                                                                                   attributes))


def _decoders(id_field: str | None, attributes: tuple[str, ...] | None, named: bool) -> tuple[Decoder, Decoder]:
    s = _stream(id_field, attributes)
    assert s.source is not None
    with_c, without = Decoder(s, s.source, ORIGIN, named=named), Decoder(s, s.source, ORIGIN, named=named)
    without._c_layout = lambda lay: None   # type: ignore[method-assign]   # the Python path only
    return with_c, without


@settings(max_examples=400, deadline=None)
@given(recs=st.lists(_record(), min_size=1, max_size=25), id_field=st.sampled_from(["id", None]),
       attributes=st.sampled_from([None, ("p",), ("p", "q")]), named=st.booleans())
def test_the_kernel_decodes_as_python_does(recs, id_field, attributes, named):
    with_c, without = _decoders(id_field, attributes, named)
    for offset, raw in enumerate(recs):
        assert with_c.decode(raw, 2, offset) == without.decode(raw, 2, offset), raw


@pytest.mark.parametrize("attributes", [None, ("p",)])
@pytest.mark.parametrize("named", [False, True])
def test_the_kernel_takes_plain_records(attributes, named):
    with_c, without = _decoders("id", attributes, named)
    plain = [json.dumps({"id": i, "ts": ORIGIN + i, "J": f"k{i}", "K": i - 3, "p": "x" * (i * 40),
                         "q": [None, True, False][i % 3]}, ensure_ascii=False).encode() for i in range(6)]
    plain.append('{"id":9,"ts":1000009,"J":"été","K":null,"p":"ü\U0001F600","q":-9223372036854775808}'.encode())
    with_c.decode(plain[0], 0, 0)   # the first record of a layout goes the Python way and makes the layout
    assert with_c._cspec is not None
    fn, spec = with_c._cspec
    for i, raw in enumerate(plain[1:], 1):
        ev = fn(raw, spec, 0, i)
        assert isinstance(ev, Event) and ev == without.decode(raw, 0, i), raw


@pytest.mark.parametrize("raw", [
    b'{"id":1,"ts":1000001,"J":"a\\"b","K":1,"p":"x","q":1}',        # an escape
    b'{"id":1,"ts":1000001.0,"J":"a","K":1,"p":"x","q":1}',          # a float time
    b'{"id":1,"ts":1000001,"J":"a","K":1,"p":"x","q":1,"q":2}',      # a name twice
    b'{"id":1,"ts":1000001,"J":"a","K":1,"p":"x","q":9223372036854775808}',   # beyond 64 bits
    b'{"id":1,"ts":01000001,"J":"a","K":1,"p":"x","q":1}',           # a leading zero: not JSON
    b'{"id":1,"ts":1000001,"J":"\xed\xa0\x80","K":1,"p":"x","q":1}',  # a surrogate in UTF-8: not JSON
    b'{"id":1,"ts":1000001,"J":"a","K":[1],"p":"x","q":1}',          # a nested value
    b'{"id":1,"ts":1000001,"J":"a","K":1,"p":"x","q":1} 1',          # after the object
])
def test_the_kernel_declines_what_is_not_plain(raw):
    with_c, without = _decoders("id", ("p", "q"), False)
    with_c.decode(b'{"id":0,"ts":1000000,"J":"a","K":1,"p":"x","q":1}', 0, 0)
    assert with_c._cspec is not None
    fn, spec = with_c._cspec
    assert fn(raw, spec, 0, 1) is None
    assert with_c.decode(raw, 0, 1) == without.decode(raw, 0, 1)
