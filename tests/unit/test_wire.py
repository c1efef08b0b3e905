"""Avro wire encoding (joinlib.protocol: schemas, avro, wire, records; schemas/*.avsc)."""
from __future__ import annotations

import io
import json
import math
import random
from pathlib import Path
from typing import Any, TypeVar

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.protocol import avro, records, schemas, values, wire
from joinlib.protocol.messages import (
    DjaUpdate,
    Envelope,
    ExpiryUpdate,
    KeyBatch,
    KeyFilter,
    ShippedBatch,
    TupleBatch,
    WindowSnapshot,
)
from joinlib.runtime.algorithms import base
from tests.kernels import BOTH, kernels

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


# ----------------------------------------------------------------------- helpers


def typed(v):
    """A value with its type, so that True, 1 and 1.0 compare different."""
    if isinstance(v, float) and math.isnan(v):
        return ("float", "nan")
    return (type(v).__name__, v)


def tup_fields(t: Tup):
    assert isinstance(t, Tup)
    assert isinstance(t.key, tuple)
    assert isinstance(t.rest, bytes)
    return (t.pos, t.id, t.ts, t.seq, tuple(typed(v) for v in t.key), t.rest)


def key_fields(k):
    assert isinstance(k, tuple)
    return tuple(typed(v) for v in k)


def norm(env: Envelope):
    """Everything an envelope carries, comparable field by field (Tup.__eq__ only
    compares (pos, id))."""
    b = env.body
    body: tuple[Any, ...]
    if isinstance(b, TupleBatch):
        for row in b.rows:
            assert isinstance(row, tuple)
        body = ("full", [tuple(tup_fields(t) for t in row) for row in b.rows])
    elif isinstance(b, KeyBatch):
        body = ("partial", [key_fields(k) for k in b.keys])
    elif isinstance(b, ExpiryUpdate):
        body = ("expiry", b.expired, list(b.arrivals))
    elif isinstance(b, WindowSnapshot):
        body = ("snapshot", b.base, [tup_fields(t) for t in b.tuples], [key_fields(k) for k in b.keys],
                list(b.counts))
    elif isinstance(b, KeyFilter):
        body = ("filter", b.back, b.live, [key_fields(k) for k in b.keys], b.bits, b.hashes, b.n, list(b.ages))
    elif isinstance(b, ShippedBatch):
        body = ("shipped", [tup_fields(t) for t in b.tuples], list(b.arrivals))
    else:
        body = (
            "dja",
            [key_fields(k) for k in b.vj],
            list(b.vc),
            [tup_fields(t) for t in b.sf],
            list(b.arrivals),
        )
    return (type(b), env.src, env.dst, env.part, env.gen, env.flow, env.epoch, body)


def roundtrip(env: Envelope) -> Envelope:
    data = wire.encode_envelope(env)
    assert isinstance(data, bytes)
    assert data == wire._encode_envelope_reference(env), "hand-written encoder differs from fastavro"
    assert wire.envelope_size(env) == len(data)
    back = wire.decode_envelope(data, env.src, env.dst)
    assert norm(back) == norm(env)
    assert wire.encode_envelope(back) == data
    return back


B = TypeVar("B")


def body_as(e: Envelope, kind: type[B]) -> B:
    """The body of ``e``, checked to be a ``kind`` (so that its fields type-check)."""
    assert isinstance(e.body, kind)
    return e.body


def T(pos=0, id=1, ts=1000, seq=0, key=("a",), rest=b"payload"):
    return Tup(pos, id, ts, seq, tuple(key), rest)


def env(body, src="site-A", dst="site-B", flow=3, epoch=17, part=0, gen=0):
    return Envelope(src, dst, flow, epoch, body, part, gen)


# ----------------------------------------------------------------------- schemas


def test_schema_files_parse_and_are_the_loaded_ones():
    assert schemas.SCHEMA_DIR == Path(schemas.__file__).resolve().parents[2] / "schemas"
    files = sorted(schemas.SCHEMA_DIR.glob("*.avsc"))
    assert files
    for path in files:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(raw, dict) and "name" in raw:
            assert raw.get("namespace") == "joinlib", path
    loaded = schemas.load_schemas(schemas.SCHEMA_DIR)
    assert len(loaded) == len(files)
    for name in [
        "joinlib.BaseTuple",
        "joinlib.TupleBatch",
        "joinlib.KeyBatch",
        "joinlib.ExpiryUpdate",
        "joinlib.DjaUpdate",
        "joinlib.Envelope",
        "joinlib.SourceBatch",
        "joinlib.ResultBatch",
        "joinlib.Control",
        "values",
    ]:
        assert name in schemas.SCHEMAS, name


def _unions(node, out):
    if isinstance(node, list):
        out.append(node)
        for x in node:
            _unions(x, out)
    elif isinstance(node, dict):
        for x in node.values():
            _unions(x, out)
    return out


def test_value_unions_match_values_module():
    assert values.VALUE_TYPES == ["null", "boolean", "long", "double", "string"]
    raw_values = json.loads((schemas.SCHEMA_DIR / "values.avsc").read_text())
    assert raw_values == {"type": "array", "items": values.VALUE_TYPES}
    # every union of scalars in any schema file is the Value union
    for path in schemas.SCHEMA_DIR.glob("*.avsc"):
        raw = json.loads(path.read_text())
        for u in _unions(raw.get("fields", raw), []):
            if all(isinstance(x, str) and "." not in x for x in u) and u and isinstance(u[0], str):
                if set(u) & {"boolean", "long", "double"}:
                    assert u == values.VALUE_TYPES, (path, u)


def test_values_avsc_encodes_like_values_module():
    payload = [None, True, False, 0, -1, LONG_MAX, 1.5, "", "héllo ☃"]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schemas.SCHEMAS["values"], payload)
    assert buf.getvalue() == values.encode_values(payload)
    assert values.decode_values(buf.getvalue()) == payload


def test_body_union_order():
    assert wire._BODY_NAMES == (
        "joinlib.TupleBatch",
        "joinlib.KeyBatch",
        "joinlib.ExpiryUpdate",
        "joinlib.DjaUpdate",
        "joinlib.WindowSnapshot",
        "joinlib.KeyFilter",
        "joinlib.ShippedBatch",
    )


def test_layout_check_detects_schema_drift(tmp_path):
    schemas.check_layouts(schemas.load_schemas(schemas.SCHEMA_DIR))
    for path in schemas.SCHEMA_DIR.glob("*.avsc"):
        (tmp_path / path.name).write_text(path.read_text())
    raw = json.loads((tmp_path / "BaseTuple.avsc").read_text())
    raw["fields"][2]["type"] = "int"  # ts: long -> int (same bytes for small values)
    (tmp_path / "BaseTuple.avsc").write_text(json.dumps(raw))
    with pytest.raises(ImportError, match="BaseTuple"):
        schemas.check_layouts(schemas.load_schemas(tmp_path))


def test_load_schemas_reports_unresolvable(tmp_path):
    (tmp_path / "A.avsc").write_text(
        json.dumps({"type": "record", "name": "A", "namespace": "x", "fields": [{"name": "b", "type": "x.Missing"}]})
    )
    with pytest.raises(ValueError, match="unresolvable"):
        schemas.load_schemas(tmp_path)


# ------------------------------------------------------------------- round trips


def test_empty_bodies():
    for body in [TupleBatch(), KeyBatch(), ExpiryUpdate(), DjaUpdate()]:
        back = roundtrip(env(body))
        assert type(back.body) is type(body)
        assert back.kind == body.kind


def test_tuple_batch_single_part_rows():
    rows: list[tuple[Tup, ...]] = [(T(0, i, 1000 + i, i, (f"k{i % 3}", i), values.encode_values([i, "x" * i])),)
                                   for i in range(20)]
    back = roundtrip(env(TupleBatch(rows)))
    assert all(isinstance(r, tuple) and len(r) == 1 for r in body_as(back, TupleBatch).rows)


def test_tuple_batch_multi_part_rows_and_shared_tuples():
    a = T(0, 1, 10, 0, ("x",), b"A" * 100)
    b1 = T(1, 7, 11, 0, ("x", 2), b"B")
    b2 = T(1, 8, 12, 1, ("x", 3), b"")
    c = T(2, 9, 13, 0, (3,), b"C" * 3000)
    rows = [(a, b1, c), (a, b2, c), (a, b1), ()]
    back = roundtrip(env(TupleBatch(rows)))
    assert [len(r) for r in body_as(back, TupleBatch).rows] == [3, 3, 2, 0]


def test_keys_of_every_value_type():
    keys = [
        (None,),
        (True,),
        (False,),
        (0,),
        (1,),
        (-1,),
        (LONG_MIN,),
        (LONG_MAX,),
        (1.0,),
        (-0.0,),
        (1e300,),
        (float("inf"),),
        (float("-inf"),),
        ("",),
        ("ünïcödé ✓ 日本語 🎉",),
        (None, True, 7, 2.5, "s"),
        (),
    ]
    back = roundtrip(env(KeyBatch(keys)))
    # bools stay bools, ints stay ints, floats stay floats
    assert [key_fields(k) for k in body_as(back, KeyBatch).keys] == [key_fields(k) for k in keys]
    t = T(key=(None, True, 1, 1.0, "1"))
    back = roundtrip(env(TupleBatch([(t,)])))
    assert key_fields(body_as(back, TupleBatch).rows[0][0].key) == key_fields(t.key)


def test_nan_key_bytes_identical():
    e = env(KeyBatch([(float("nan"),)]))
    data = wire.encode_envelope(e)
    assert data == wire._encode_envelope_reference(e)
    assert math.isnan(body_as(wire.decode_envelope(data), KeyBatch).keys[0][0])


def test_unicode_sites():
    roundtrip(env(ExpiryUpdate(3, [1, 2]), src="Zürich", dst="東京"))
    roundtrip(env(KeyBatch([("a",)]), src="", dst=""))


def test_expiry_update():
    roundtrip(env(ExpiryUpdate(0, [])))
    roundtrip(env(ExpiryUpdate(5, [1000, 1000, 1001, LONG_MAX, LONG_MIN])))


def test_dja_update():
    roundtrip(
        env(
            DjaUpdate(
                vj=[("a", 1), ("b", None), (2.5,)],
                vc=[3, 0, -1],
                sf=[T(1, 5, 100, 2, ("a", 1)), T(1, 6, 101, 3, ("b", None), b"")],
                arrivals=[100, 101],
            )
        )
    )
    roundtrip(env(DjaUpdate(vj=[("a",)], vc=[1])))


def test_envelope_int_fields_extremes():
    roundtrip(env(KeyBatch(), flow=INT_MAX, epoch=LONG_MAX))
    roundtrip(env(KeyBatch(), flow=INT_MIN, epoch=LONG_MIN))
    roundtrip(env(TupleBatch([(T(INT_MAX, LONG_MAX, LONG_MIN, LONG_MAX),), (T(INT_MIN, LONG_MIN, 0, -1),)])))


def test_out_of_range_and_bad_types_raise():
    with pytest.raises(ValueError):
        wire.encode_envelope(env(KeyBatch(), flow=INT_MAX + 1))
    with pytest.raises(ValueError):
        wire.encode_envelope(env(KeyBatch(), epoch=LONG_MAX + 1))
    with pytest.raises(ValueError):
        wire.encode_envelope(env(KeyBatch([(LONG_MIN - 1,)])))
    with pytest.raises(ValueError):
        wire.encode_envelope(env(TupleBatch([(T(pos=INT_MIN - 1),)])))
    with pytest.raises(ValueError):
        wire.encode_envelope(env(TupleBatch([(T(ts=1 << 64),)])))
    with pytest.raises(TypeError):
        wire.encode_envelope(env(KeyBatch([(b"bytes",)])))
    with pytest.raises(TypeError):
        wire.encode_envelope(env(KeyBatch([([1],)])))
    with pytest.raises(TypeError):
        wire.encode_envelope(env("not a body"))


def test_value_subclasses_encode_like_base_types():
    import enum

    class Color(enum.IntEnum):
        RED = 3

    class S(str):
        pass

    e = env(KeyBatch([(Color.RED, S("x"))]))
    data = wire.encode_envelope(e)
    assert data == wire.encode_envelope(env(KeyBatch([(3, "x")])))
    assert key_fields(body_as(wire.decode_envelope(data), KeyBatch).keys[0]) == (("int", 3), ("str", "x"))


def test_body_subclass_is_accepted():
    class MyKeys(KeyBatch):
        __slots__ = ()

    data = wire.encode_envelope(env(MyKeys([("a",)])))
    assert data == wire.encode_envelope(env(KeyBatch([("a",)])))


# ------------------------------------------------------------- encoder internals


def _boundaries():
    out = {0, 1, -1, LONG_MIN, LONG_MAX}
    for k in range(1, 64):
        for d in (-1, 0, 1):
            for sign in (1, -1):
                n = sign * (1 << k) + d
                if LONG_MIN <= n <= LONG_MAX:
                    out.add(n)
    return sorted(out)


def test_varints_match_fastavro():
    schema = fastavro.parse_schema("long")
    for n in _boundaries() + list(range(-20000, 20000, 7)):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, n)
        assert avro.encode_long(n) == buf.getvalue() == avro._varint_slow(n), n
        if INT_MIN <= n <= INT_MAX:
            assert avro.encode_int(n) == buf.getvalue()


def test_tuple_encoding_is_cached_on_the_tuple_and_exact():
    t = T(0, 1, 1000, 0, ("a",), b"r")
    e = env(TupleBatch([(t,), (t,)]))
    assert t.wire is None
    first = wire.encode_envelope(e)
    assert first == wire._encode_envelope_reference(e)
    assert t.wire is not None and first.count(t.wire) == 2
    assert wire.encode_envelope(e) == first  # second time from the cache


def test_fresh_tuples_are_encoded_exactly():
    rng = random.Random(7)
    for _ in range(3000):
        t = Tup(rng.randrange(4), rng.randrange(10), rng.randrange(1 << 40), rng.randrange(100),
                (rng.choice([1, True, 1.0, "1"]),), b"")
        e = env(TupleBatch([(t,)]))
        assert wire.encode_envelope(e) == wire._encode_envelope_reference(e)


def test_string_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(avro, "_STR_CACHE_MAX", 10)
    e = env(KeyBatch([(f"s{i}",) for i in range(25)] + [("x" * 1000,)]))
    assert wire.encode_envelope(e) == wire._encode_envelope_reference(e)
    for i in range(25):   # key arrays go to the C kernel when built; a single key's Values use the cache
        avro.put_key(lambda b: None, (f"s{i}",))
    avro.put_key(lambda b: None, ("x" * 1000,))
    assert 0 < len(avro._STR_CACHE) <= 10
    assert "x" * 1000 not in avro._STR_CACHE


# ------------------------------------------------------------------------ sizes


def test_sizes_are_deterministic():
    rows: list[tuple[Tup, ...]] = [(T(0, i, 1_700_000_000_000 + i, i, (f"k{i}", i), b"z" * 1250),) for i in range(30)]
    e = env(TupleBatch(rows))
    n = wire.envelope_size(e)
    assert n == len(wire.encode_envelope(e)) == len(wire._encode_envelope_reference(e))
    assert all(wire.envelope_size(e) == n for _ in range(3))
    copy = env(TupleBatch([tuple(T(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in r) for r in rows]))
    assert wire.envelope_size(copy) == n
    assert wire.encode_envelope(copy) == wire.encode_envelope(e)
    # the exact size of a known message: header 2 strings + ints, body branch, arrays
    small = env(ExpiryUpdate(1, []), src="a", dst="b", flow=1, epoch=1)
    assert wire.envelope_size(small) == 1 + 1 + 1 + 1 + 1 + 1 + 1  # part, gen, flow, epoch, branch, k, []


# --------------------------------------------------------------------- malformed


def test_malformed_input_raises_value_error():
    data = wire.encode_envelope(env(TupleBatch([(T(key=("x", 1.5, None, True)),)])))
    with pytest.raises(ValueError):
        wire.decode_envelope(data[:-1])
    with pytest.raises(ValueError):
        wire.decode_envelope(data + b"\x00")
    with pytest.raises(ValueError):
        wire.decode_envelope(b"")
    rng = random.Random(1)
    for _ in range(500):
        b = bytearray(data)
        b[rng.randrange(len(b))] = rng.randrange(256)
        try:
            wire.decode_envelope(bytes(b))
        except ValueError:
            pass


@pytest.mark.parametrize("hashes", [0, 17, -1])
def test_a_bloom_filter_with_a_hash_count_the_tests_cannot_read_is_malformed(hashes):
    """A filter's test reads k of a key's sixteen hash words (and the C kernels refuse anything else): a message
    claiming another k is refused at decoding, like any malformed message, not when a reducer tests it."""
    data = wire.encode_envelope(env(KeyFilter(0, 1, [], b"\xff", hashes, 2)))
    with pytest.raises(ValueError, match="hash functions"):
        wire.decode_envelope(data)
    back = wire.decode_envelope(wire.encode_envelope(env(KeyFilter(0, 1, [], b"\xff", 16, 2)))).body
    assert isinstance(back, KeyFilter) and back.hashes == 16


def test_key_filter_ages_cost_nothing_when_absent_and_are_checked():
    """A key set of one arrival epoch is encoded as before (the union's null branch); runs of ages take the
    union's third branch, and malformed runs (odd length, a negative age, an empty run) are refused."""
    plain = wire.encode_envelope(env(KeyFilter(0, 3, [("a",), ("b",)])))
    aged = wire.encode_envelope(env(KeyFilter(0, 3, [("a",), ("b",)], ages=[0, 1, 4, 1])))
    assert len(aged) == len(plain) + 6   # count, two runs of two one-byte varints, end of array
    back = roundtrip(env(KeyFilter(0, 3, [("a",), ("b",)], ages=[0, 1, 4, 1]))).body
    assert isinstance(back, KeyFilter) and back.ages == [0, 1, 4, 1] and not back.bits
    for runs in ([0, 1, 4], [-1, 2], [0, 0]):
        with pytest.raises(ValueError, match="ages"):
            wire.decode_envelope(wire.encode_envelope(env(KeyFilter(0, 3, [("a",)], ages=runs))))


# ------------------------------------------------------ source, result, control


def test_source_batch_roundtrip():
    for batch in [
        records.SourceBatch("S1", [], 0),
        records.SourceBatch("Strøm", [T(0, i, 10 * i, i, (i, "k"), values.encode_values([i])) for i in range(5)], 40),
        records.SourceBatch("s", [T(1, 2, LONG_MIN, 0, (), b"")], LONG_MIN),
    ]:
        data = records.encode_source_batch(batch)
        assert data == records._encode_source_batch_reference(batch)
        back = records.decode_source_batch(data)
        assert isinstance(back, records.SourceBatch)
        assert back.stream == batch.stream and back.watermark == batch.watermark
        assert [tup_fields(t) for t in back.tuples] == [tup_fields(t) for t in batch.tuples]


def test_result_batch_roundtrip():
    G = records.ResultGroup
    for b in [
        records.ResultBatch("q1", "n1", 0, 0, 0, 1_700_000_000_123,
                         [G("S1", 1000, {"S1": 1, "S3": LONG_MAX}, "S2", [2, 3, LONG_MIN])]),
        records.ResultBatch("q", "s", INT_MAX, INT_MIN, LONG_MAX, -1, []),
        records.ResultBatch("запрос", "узел", 1, 2, 5, 6, [G("流", 5, {}, "S", []), G("S", -7, {"流": -3}, "流", [9])]),
    ]:
        data = records.encode_result_batch(b)
        assert data == records._encode_result_batch_reference(b)
        back = records.decode_result_batch(data)
        assert back == b
        assert len(back) == sum(len(g.last_ids) for g in b.groups)
        head = b.groups[0].head if b.groups else ""
        assert records.result_batch_id(data) == (b.query, b.site, b.part, b.gen, head, b.batch)


def test_result_batch_expands_to_results():
    b = records.ResultBatch("q", "n1", 0, 0, 3, 50, [records.ResultGroup("A", 10, {"A": 1, "C": 4}, "B", [7, 8])])
    assert list(b.results()) == [records.Result("q", "A", 10, 50, {"A": 1, "C": 4, "B": 7}),
                                 records.Result("q", "A", 10, 50, {"A": 1, "C": 4, "B": 8})]


def test_control_roundtrip():
    for c in [
        records.Control("q1", "plan", {"head": "S1", "sequence": ["S1", "S2"], "n": 3, "x": None, "f": 1.5}),
        records.Control("q1", "operators", [{"site": "A", "ops": []}]),
        records.Control("", "stop", None),
        records.Control("q", "text", "ünï"),
    ]:
        back = records.decode_control(records.encode_control(c))
        assert back == c
    # the payload field holds JSON text
    raw = fastavro.schemaless_reader(
        io.BytesIO(records.encode_control(records.Control("q", "k", {"a": [1]}))), schemas.SCHEMAS["joinlib.Control"]
    )
    assert isinstance(raw, dict)
    assert json.loads(raw["payload"]) == {"a": [1]}


# ------------------------------------------------------------------- properties

value_st = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(LONG_MIN, LONG_MAX),
    st.integers(-20000, 20000),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["a", "b", "ключ"]),
)
key_st = st.lists(value_st, max_size=4).map(tuple)
long_st = st.one_of(st.integers(LONG_MIN, LONG_MAX), st.integers(-3, 1 << 42))
tup_st = st.builds(
    Tup,
    pos=st.one_of(st.integers(0, 5), st.integers(INT_MIN, INT_MAX)),
    id=long_st,
    ts=long_st,
    seq=long_st,
    key=key_st,
    rest=st.binary(max_size=64),
)
body_st = st.one_of(
    st.builds(TupleBatch, st.lists(st.lists(tup_st, max_size=3).map(tuple), max_size=4)),
    st.builds(KeyBatch, st.lists(key_st, max_size=6)),
    st.builds(ExpiryUpdate, long_st, st.lists(long_st, max_size=5)),
    st.builds(
        DjaUpdate,
        st.lists(key_st, max_size=4),
        st.lists(long_st, max_size=4),
        st.lists(tup_st, max_size=3),
        st.lists(long_st, max_size=4),
    ),
    st.builds(WindowSnapshot, long_st, st.lists(tup_st, max_size=3), st.lists(key_st, max_size=4),
              st.lists(long_st, max_size=4)),
    st.builds(KeyFilter, long_st, long_st, st.lists(key_st, max_size=4)),       # keys (bloom null)
    st.builds(KeyFilter, long_st, long_st, st.lists(key_st, max_size=4), st.binary(min_size=1, max_size=16),
              st.integers(1, 16), long_st),   # a filter's k: 1..16 (more is malformed, see below)
    st.builds(lambda back, live, keys, runs: KeyFilter(back, live, keys, ages=[x for r in runs for x in r]),
              long_st, long_st, st.lists(key_st, max_size=4),   # keys of several arrival epochs
              st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(1, 1 << 20)), min_size=1, max_size=4)),
    st.builds(ShippedBatch, st.lists(tup_st, max_size=3), st.lists(long_st, max_size=4)),
)
envelope_st = st.builds(
    Envelope,
    src=st.text(max_size=10),
    dst=st.text(max_size=10),
    part=st.integers(INT_MIN, INT_MAX),
    gen=st.integers(INT_MIN, INT_MAX),
    flow=st.integers(INT_MIN, INT_MAX),
    epoch=long_st,
    body=body_st,
)


@BOTH
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope_st)
def test_property_roundtrip_and_byte_identity(c, e):
    """fastavro's bytes, with the C kernels (key arrays and long arrays in one call each) and without."""
    with kernels(avro, c):
        roundtrip(e)


@BOTH
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(key_st, st.tuples(st.integers(1 << 63, 1 << 70))), max_size=6),
       st.lists(st.one_of(long_st, st.booleans(), st.integers(1 << 63, 1 << 70)), max_size=6))
def test_key_and_long_arrays_write_what_one_at_a_time_writes_or_raise_alike(c, keys, longs):
    """put_keys and put_longs (a C call each) write exactly the per-item encoders' bytes, and an int beyond a
    long fails the same way on both paths."""
    def one_at_a_time(put, xs):
        parts: list[bytes] = []
        if xs:
            parts.append(avro.encode_long(len(xs)))
            for x in xs:
                put(parts.append, x)
        parts.append(avro.END)
        return b"".join(parts)

    def at_once(put, xs):
        parts: list[bytes] = []
        put(parts.append, xs)
        return b"".join(parts)

    def outcome(f, *args):
        try:
            return f(*args)
        except ValueError as e:
            return ("ValueError", str(e))

    with kernels(avro, c):
        for put, one, xs in ((avro.put_keys, avro.put_key, keys),
                             (avro.put_longs, lambda ap, x: ap(avro.encode_long(x)), longs)):
            assert outcome(at_once, put, xs) == outcome(one_at_a_time, one, xs)


def _same_tuples(a, b) -> None:
    assert [tup_fields(t) for t in a] == [tup_fields(t) for t in b]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelope_st)
def test_property_hand_decoder_agrees_with_fastavro(e):
    """The hand-written decoder reads what fastavro reads, and a decoded tuple's cached ``wire``
    is exactly its encoding (what the node ships on without encoding again)."""
    data = wire.encode_envelope(e)
    got, ref = wire.decode_envelope(data), wire._decode_envelope_reference(data)
    assert (got.src, got.dst, got.flow, got.epoch, type(got.body)) == (ref.src, ref.dst, ref.flow, ref.epoch,
                                                                       type(ref.body))
    if isinstance(got.body, TupleBatch):
        ref_rows = body_as(ref, TupleBatch).rows
        assert len(got.body.rows) == len(ref_rows)
        for a, b in zip(got.body.rows, ref_rows, strict=True):
            _same_tuples(a, b)
            for t in a:
                assert t.wire == avro.encode_tuple(T(t.pos, t.id, t.ts, t.seq, t.key, t.rest))
    for cut in (1, len(data) // 2):
        with pytest.raises(ValueError):
            wire.decode_envelope(data[:-cut] if cut < len(data) else b"")


@settings(max_examples=100, deadline=None)
@given(st.lists(value_st, max_size=6), st.lists(value_st, max_size=6))
def test_property_size_depends_on_content_only(k1, k2):
    a = env(KeyBatch([tuple(k1), tuple(k2)]))
    b = env(KeyBatch([tuple(k1), tuple(k2)]))
    assert wire.envelope_size(a) == wire.envelope_size(b) == len(wire._encode_envelope_reference(a))


@settings(max_examples=100, deadline=None)
@given(
    st.text(max_size=8),
    st.lists(tup_st, max_size=4),
    long_st,
)
def test_property_source_batch(stream, tups, wm):
    b = records.SourceBatch(stream, tups, wm)
    data = records.encode_source_batch(b)
    assert data == records._encode_source_batch_reference(b)
    back = records.decode_source_batch(data)
    assert (back.stream, back.watermark) == (stream, wm)
    assert [tup_fields(t) for t in back.tuples] == [tup_fields(t) for t in tups]
    _same_tuples(back.tuples, records._decode_source_batch_reference(data).tuples)
    with pytest.raises(ValueError):
        records.decode_source_batch(data[:-1])


@settings(max_examples=100, deadline=None)
@given(
    st.text(max_size=8),
    st.text(max_size=8),
    st.integers(0, INT_MAX),
    st.integers(0, INT_MAX),
    long_st,
    long_st,
    st.lists(st.tuples(st.text(max_size=6), long_st, st.dictionaries(st.text(max_size=6), long_st, max_size=4),
                       st.text(max_size=6), st.lists(long_st, max_size=5)), max_size=4),
)
def test_property_result_batch(query, site, part, gen, batch, emit_ms, groups):
    b = records.ResultBatch(query, site, part, gen, batch, emit_ms, [records.ResultGroup(*g) for g in groups])
    data = records.encode_result_batch(b)
    assert data == records._encode_result_batch_reference(b)
    assert records.decode_result_batch(data) == b
    assert records.result_batch_summary(data) == (emit_ms, [(g.head_ts, len(g.last_ids)) for g in b.groups])
    with pytest.raises(ValueError):
        records.result_batch_summary(data[:-1])


@BOTH
@settings(max_examples=200, deadline=None)
@given(st.lists(tup_st, max_size=6), st.integers(0, 2**40))
def test_the_naive_price_of_a_batch_is_its_envelope_without_encoding_it(c, tups, epoch):
    """naive_batch_size prices every source tuple of a live run (what `central` would ship) from sizes alone
    (the C size kernel, or its Python form): it equals the size of the envelope that would carry the batch, and
    leaves the tuples unencoded."""
    with kernels(avro, c):
        _naive_price(tups, epoch)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(st.text(), st.integers(-2**70, 2**70), st.floats(), st.booleans(), st.none()),
                         max_size=3).map(tuple), max_size=8))
def test_the_size_kernel_counts_a_key_sets_bytes_as_the_python_form(keys) -> None:
    """keys_bytes, which every reduction weighs a Bloom filter against each epoch, in C (the size kernel) and in
    Python: the same count for every kind of value, the same error for a string UTF-8 cannot write."""
    with kernels(base, True):
        fast = base.keys_bytes(keys)
    with kernels(base, False):
        assert fast == base.keys_bytes(keys)
    for c in (True, False):
        with kernels(base, c), pytest.raises(UnicodeEncodeError):
            base.keys_bytes([("ok",), ("a\udc80",)])


def test_the_size_kernel_is_built() -> None:
    assert avro._c is not None, "joinlib/protocol/_avroc.c is not built: run `pip install -e .` with a C compiler"
    assert base._c is not None


def _naive_price(tups, epoch) -> None:
    fresh = [Tup(t.pos, t.id, t.ts, t.seq, t.key, t.rest) for t in tups]
    assert avro.tuples_size(fresh) == sum(len(avro.encode_tuple(Tup(t.pos, t.id, t.ts, t.seq, t.key, t.rest)))
                                          for t in fresh)
    assert all(avro.tuple_size(t) == len(avro.encode_tuple(Tup(t.pos, t.id, t.ts, t.seq, t.key, t.rest)))
               for t in fresh)
    n = wire.naive_batch_size(epoch, fresh)
    assert all(t.wire is None for t in fresh)
    batch = Envelope("", "", 0, epoch, TupleBatch([(t,) for t in fresh]), 0, 0)
    assert n == len(wire.encode_envelope(batch))
