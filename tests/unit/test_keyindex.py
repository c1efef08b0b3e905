"""KeyIndex answers exactly what Matcher.has answers, pair by pair: the array form of the Bloom test (issue 27)
must not change which tuples a reduction ships."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol.bloom import Bloom, KeySet, filter_bits, key_hash
from joinlib.runtime.algorithms.keyindex import KeyIndex, LiveSet, held_keys

values = st.one_of(st.integers(-5, 40), st.sampled_from([1.0, 2.5, True, None]), st.text("ab", max_size=2))
keys = st.tuples(values) | st.tuples(values, values)


@st.composite
def live_sets(draw: st.DrawFn) -> list[LiveSet]:
    out: list[LiveSet] = []
    for idx in range(draw(st.integers(0, 6))):
        held = draw(st.lists(keys, max_size=12))
        if draw(st.booleans()):
            # rates giving k = 8 and 16 too: those are tested as 64-bit words
            ks = KeySet(bloom=Bloom.of(held, draw(st.sampled_from([0.5, 0.1, 0.01, 0.004, 1e-6]))))
        else:
            ks = KeySet(keys=tuple(dict.fromkeys(held)))
        out.append((idx + 1, draw(st.integers(0, 9)), ks.matcher()))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=30), st.lists(keys, max_size=10), live_sets(), st.data())
def test_settle_and_holding_agree_with_the_matchers(pending, later, live, data) -> None:
    index = KeyIndex()
    for seq, k in enumerate(pending):
        index.add(k, seq)
    index.settle(live)
    gone = data.draw(st.lists(st.sampled_from(range(len(pending))), unique=True)) if pending else []
    for seq in gone:
        index.discard(pending[seq], seq)
    for seq, k in enumerate(later, start=len(pending)):
        index.add(k, seq)
    index.settle(live)
    left = {k for i, k in enumerate(pending) if i not in gone} | set(later)
    assert set(index.seqs) == left
    for k in left:
        want = max((tag for _, tag, m in live if m.has(k)), default=-1)
        assert index.best[k] == want, k
    for _, _, m in live:
        held = index.holding(m)   # equal keys (1 == 1.0) may come back as the set spells them
        assert len(held) == len(set(held)) and set(held) == {k for k in left if m.has(k)}


def _bits_by_definition(ks: list, m: int, k: int) -> bytes:
    """Bit (word mod m) of byte p // 8, bit p % 8, for each key's first k hash words: the wire's definition."""
    out = bytearray(m // 8)
    for key in ks:
        for p in key_hash(key)[:k]:
            p %= m
            out[p >> 3] |= 1 << (p & 7)
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(st.lists(keys, max_size=60), st.integers(1, 16), st.integers(1, 300))
def test_filter_bits_are_the_definitions(ks, k, bytes_) -> None:
    """Bloom.of sets its bits in array operations for more than a few keys: the same bits as one at a time."""
    assert filter_bits(ks, 8 * bytes_, k) == _bits_by_definition(ks, 8 * bytes_, k)


@settings(max_examples=200, deadline=None)
@given(st.lists(keys, max_size=40), st.lists(keys, min_size=1, max_size=20),
       st.sampled_from([0.5, 0.1, 0.01, 0.004, 1e-6]))
def test_held_keys_agree_with_the_matcher(probe, held, fpr) -> None:
    m = KeySet(bloom=Bloom.of(held, fpr)).matcher()
    assert held_keys(m, probe) == [k for k in probe if m.has(k)]
