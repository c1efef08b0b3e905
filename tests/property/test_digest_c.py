"""The key digest kernel (joinlib/protocol/_digestc.c) against its definition: ``blake2b`` is hashlib's BLAKE2b-512
on any bytes (empty, one block, block boundaries, several blocks), and ``remember`` -- what bloom._remember is when
the kernel is built -- gives bloom._digest's bytes for every key (one str: encoded in C, surrogates and every other
key type: through the Python form), caches it, and empties the cache when it is full."""
from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol import bloom

pytestmark = pytest.mark.skipif(bloom._d is None, reason="the digest kernel is not built")

_SIZES = st.one_of(st.integers(0, 300), st.sampled_from([127, 128, 129, 255, 256, 257, 1023, 1024, 1025]))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_blake2b_is_hashlibs(data: Any) -> None:
    n = data.draw(_SIZES)
    raw = data.draw(st.binary(min_size=n, max_size=n))
    assert bloom._d.blake2b(raw) == hashlib.blake2b(raw, digest_size=64).digest()


_KEYS = st.one_of(
    st.tuples(st.text()),                                          # the usual key, any code point
    st.tuples(st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF))),  # lone surrogates
    st.tuples(st.integers(-2**70, 2**70)),
    st.tuples(st.text(max_size=5), st.integers()),
    st.tuples(st.floats(allow_nan=False)),
    st.just(()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYS, max_size=20))
def test_remember_is_the_python_form(keys: list[Any]) -> None:
    bloom._DIGESTS.clear()
    try:
        for k in keys:
            assert bloom._remember(k) == bloom._digest(k)
            assert bloom._DIGESTS[k] == bloom._digest(k)
            assert bloom.key_digest(k) == bloom._digest(k)
    finally:
        bloom._DIGESTS.clear()


def test_remember_empties_a_full_cache() -> None:
    bloom._DIGESTS.clear()
    try:
        for i in range(bloom.KEY_HASH_CACHE):
            bloom._DIGESTS[(i,)] = b""
        d = bloom._remember(("new",))
        assert bloom._DIGESTS == {("new",): d} and d == bloom._digest(("new",))
    finally:
        bloom._DIGESTS.clear()
