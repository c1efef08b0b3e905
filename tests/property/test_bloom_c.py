"""The Bloom kernels' tests and filters (``filter_bits``, ``hits``, ``hit_index``, ``latest`` in
joinlib/protocol/_bloomc.c) against the definition (bloom.py's docstrings): bit p of a filter of m bits is bit p % 8
of byte p // 8, and a key is held when the bits of its first k hash words (mod m) are all set.  The kernel takes a
word modulo m by multiplications and tests bits four at a time; drawn here: filters from one byte to a few
thousand (m not a power of two, most of them), sparse, half full and dense, every k from 1 to 16, and hash words
at the edges (0, 2^32 - 1, multiples of m and their neighbours) as well as anywhere."""
from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol import bloom

pytestmark = pytest.mark.skipif(bloom._c is None, reason="the Bloom kernels are not built")

TOP = (1 << 32) - 1


def _held(bits: bytes, k: int, words: tuple[int, ...]) -> bool:
    m = len(bits) * 8
    return all(bits[(w % m) >> 3] >> ((w % m) & 7) & 1 for w in words[:k])


@st.composite
def _filter(draw: Any) -> tuple[bytes, int]:
    size = draw(st.one_of(st.integers(1, 40), st.integers(1, 4000)))
    fill = draw(st.sampled_from(["sparse", "half", "dense"]))
    raw = draw(st.binary(min_size=size, max_size=size))
    if fill == "sparse":
        raw = bytes(b & (b >> 1) & (b >> 2) for b in raw)
    elif fill == "dense":
        raw = bytes(b | (b << 1) & 0xFF | (b << 2) & 0xFF for b in raw)
    return raw, draw(st.integers(1, bloom.MAX_HASHES))


def _rows(draw: Any, m: int, n: int) -> list[tuple[int, ...]]:
    word = st.one_of(st.integers(0, TOP), st.sampled_from([0, 1, TOP, TOP - 1, 1 << 31, m - 1, m, m + 1]),
                     st.integers(1, TOP // m).map(lambda q: q * m), st.integers(1, TOP // m).map(lambda q: q * m - 1))
    return [tuple(draw(word) for _ in range(bloom.MAX_HASHES)) for _ in range(n)]


def _packed(rows: list[tuple[int, ...]]) -> bytes:
    return b"".join(struct.pack("<16I", *r) for r in rows)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_hits_and_hit_index_are_the_definitions(data: Any) -> None:
    bits, k = data.draw(_filter())
    rows = _rows(data.draw, len(bits) * 8, data.draw(st.integers(0, 40)))
    want = [_held(bits, k, r) for r in rows]
    digests = _packed(rows)
    assert list(bloom._c.hits(bits, k, digests)) == [int(w) for w in want]
    assert bloom._c.hit_index(bits, k, digests) == [i for i, w in enumerate(want) if w]
    m = bloom.Matcher.of(bloom=bloom.Bloom(bits, k, 1))
    assert bloom.bloom_hits_np(m, np.frombuffer(digests, dtype="<u4").reshape(-1, 16)).tolist() == want


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_latest_is_the_largest_tag_holding_each_key(data: Any) -> None:
    filters = [(*data.draw(_filter()), data.draw(st.integers(-3, 50))) for _ in range(data.draw(st.integers(0, 12)))]
    rows = _rows(data.draw, 8 * min((len(b) for b, _, _ in filters), default=1), data.draw(st.integers(0, 20)))
    want = [max([t for b, k, t in filters if _held(b, k, r)] + [-1]) for r in rows]
    assert bloom._c.latest(filters, _packed(rows)) == want


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_filter_bits_are_the_definitions(data: Any) -> None:
    m = 8 * data.draw(st.one_of(st.integers(1, 40), st.integers(1, 4000)))
    k = data.draw(st.integers(1, bloom.MAX_HASHES))
    rows = _rows(data.draw, m, data.draw(st.integers(0, 30)))
    want = bytearray(m // 8)
    for r in rows:
        for w in r[:k]:
            want[(w % m) >> 3] |= 1 << ((w % m) & 7)
    assert bloom._c.filter_bits(_packed(rows), m, k) == bytes(want)
