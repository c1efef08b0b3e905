"""KeyIndex answers exactly what Matcher.has answers, pair by pair: the array form of the Bloom test (issue 27)
and the C kernels (joinlib/protocol/_bloomc.c) must not change which tuples a reduction ships.  Every test runs
twice: with the kernels, and with the numpy form a machine without a compiler falls back to."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol import bloom
from joinlib.protocol.bloom import Bloom, KeySet, filter_bits, key_hash
from joinlib.runtime.algorithms.keyindex import KeyIndex, KeyTable, LiveSet, held_keys
from tests.kernels import BOTH, kernels

values = st.one_of(st.integers(-5, 40), st.sampled_from([1.0, 2.5, True, None]), st.text("ab", max_size=2))
keys = st.tuples(values) | st.tuples(values, values)



def test_the_kernels_are_built() -> None:
    """`make deps` compiles them (setup.py); without them every reduction runs the slower numpy form."""
    assert bloom._c is not None, "joinlib/protocol/_bloomc.c is not built: run `pip install -e .` with a C compiler"


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


@BOTH
@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=30), st.lists(keys, max_size=10), live_sets(), st.data())
def test_settle_and_holding_agree_with_the_matchers(c, pending, later, live, data) -> None:
    with kernels(bloom, c):
        _settle_and_holding(pending, later, live, data)


def _settle_and_holding(pending, later, live, data) -> None:
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


@BOTH
@settings(max_examples=200, deadline=None)
@given(st.lists(keys, max_size=20), st.lists(st.tuples(live_sets(), st.integers(0, 9)), min_size=1, max_size=6))
def test_expired_sets_kept_in_the_forms_change_no_answer(c, pending, rounds) -> None:
    """A reducer appends each new set (``more_live``) and leaves expired ones in the index for a while: every
    key's latest tag is then the live sets' latest, or below the live tag like none."""
    with kernels(bloom, c):
        index, n, live_tag = KeyIndex(), 0, 0
        sets: list[LiveSet] = []
        for new, up in rounds:
            live_tag += up   # the live tag only moves up (Reducer.take)
            new = [(n + i + 1, tag + live_tag, m) for i, (_, tag, m) in enumerate(new)]
            n += len(new)
            sets = [f for f in sets if f[1] >= live_tag] + new
            index.more_live(sets, new)
            for seq, k in enumerate(pending):
                index.add(k, n * 100 + seq)
            index.settle()
            for k in set(pending):
                want = max((tag for _, tag, m in sets if m.has(k)), default=-1)
                got = index.best[k]
                assert got == want or (want == -1 and got < live_tag), (k, got, want)
            for seq, k in enumerate(pending):
                index.discard(k, n * 100 + seq)


def _bits_by_definition(ks: list, m: int, k: int) -> bytes:
    """Bit (word mod m) of byte p // 8, bit p % 8, for each key's first k hash words: the wire's definition."""
    out = bytearray(m // 8)
    for key in ks:
        for p in key_hash(key)[:k]:
            p %= m
            out[p >> 3] |= 1 << (p & 7)
    return bytes(out)


@BOTH
@settings(max_examples=200, deadline=None)
@given(st.lists(keys, max_size=60), st.integers(1, 16), st.integers(1, 300))
def test_filter_bits_are_the_definitions(c, ks, k, bytes_) -> None:
    """Bloom.of sets its bits in array operations (or C) for more than a few keys: the same bits as one at a
    time."""
    with kernels(bloom, c):
        assert filter_bits(ks, 8 * bytes_, k) == _bits_by_definition(ks, 8 * bytes_, k)


@BOTH
@settings(max_examples=200, deadline=None)
@given(st.lists(keys, max_size=40), st.lists(keys, min_size=1, max_size=20),
       st.sampled_from([0.5, 0.1, 0.01, 0.004, 1e-6]))
def test_held_keys_agree_with_the_matcher(c, probe, held, fpr) -> None:
    with kernels(bloom, c):
        m = KeySet(bloom=Bloom.of(held, fpr)).matcher()
        assert held_keys(m, probe) == [k for k in probe if m.has(k)]


@pytest.mark.parametrize("call", [
    lambda c: c.filter_bits(b"x" * 63, 8, 1),          # not whole rows
    lambda c: c.filter_bits(b"", 12, 1),               # m not a multiple of 8
    lambda c: c.hits(b"", 1, b""),                     # an empty filter
    lambda c: c.hits(b"\xff", 17, b""),                # more hash functions than words
    lambda c: c.latest([(b"\xff", 0, 1)], b""),        # no hash function
    lambda c: c.latest([(b"\xff", 2**40, 1)], b""),    # hash functions beyond an int
    lambda c: c.latest([(b"\xff", 1, 2**70)], b""),    # a tag beyond a long long
    lambda c: c.latest([(b"", 1, 1)], b""),            # an empty filter
])
def test_the_kernels_refuse_malformed_input(call) -> None:
    """A filter off the wire is checked before the kernels see it; they refuse what would read out of bounds
    anyway, rather than crash the node."""
    if bloom._c is None:
        pytest.fail("kernels not built (test_the_kernels_are_built)")
    with pytest.raises((ValueError, OverflowError)):
        call(bloom._c)


@BOTH
@settings(max_examples=200, deadline=None)
@given(rounds=st.lists(st.tuples(st.lists(keys, max_size=8), live_sets(), live_sets(), st.integers(0, 3), st.data()),
                       min_size=1, max_size=8), slack=st.sampled_from([0, 2, 64]))
def test_indexes_sharing_a_table_answer_as_their_own(c, rounds, slack) -> None:
    """A reducer in the middle of a chain keeps one key table for both neighbours (KeyTable): keys come and go in
    batches, some leave before being settled or come back, stale slots are trimmed or the buffer rebuilt (slack 0:
    often) -- every index's answers stay those of its own live sets."""
    with kernels(bloom, c):
        table = KeyTable()
        table.slack = slack
        sides = [KeyIndex(table), KeyIndex(table)]
        lives: list[list[LiveSet]] = [[], []]
        pending: dict[int, tuple] = {}
        seq, live_tag, n = 0, 0, 0
        for batch, new_a, new_b, up, data in rounds:
            live_tag += up
            for j, new in enumerate((new_a, new_b)):
                new = [(n + i + 1, tag + live_tag, m) for i, (_, tag, m) in enumerate(new)]
                n += len(new)
                lives[j] = [f for f in lives[j] if f[1] >= live_tag] + new
                sides[j].more_live(lives[j], new)
                for _, tag, m in new:   # what Reducer._matched does with a new set
                    for k in sides[j].holding(m):
                        sides[j].best[k] = max(sides[j].best[k], tag)
            seqs = list(range(seq, seq + len(batch)))
            seq += len(batch)
            table.add_all(batch, seqs)
            pending.update(zip(seqs, batch, strict=True))
            if pending and data.draw(st.booleans()):   # some leave before the indexes settle them
                early = data.draw(st.lists(st.sampled_from(sorted(pending)), unique=True, max_size=3))
                table.discard_all([pending[s] for s in early], early)
                for s in early:
                    del pending[s]
            for side in sides:
                side.settle()
            gone = data.draw(st.lists(st.sampled_from(sorted(pending)), unique=True)) if pending else []
            table.discard_all([pending[s] for s in gone], gone)
            for s in gone:
                del pending[s]
            left = set(pending.values())
            assert set(table.seqs) == left
            for side, sets in zip(sides, lives, strict=True):
                for k in left:
                    want = max((tag for _, tag, m in sets if m.has(k)), default=-1)
                    got = side.best[k]
                    assert got == want or (want == -1 and got < live_tag), (k, got, want)
                for _, _, m in sets:
                    held = side.holding(m)
                    assert len(held) == len(set(held)) and set(held) == {k for k in left if m.has(k)}


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=()), max_size=6))
def test_a_string_keys_digest_is_the_canonical_encodings(v) -> None:
    """key_digest's shortcut for a key of one string hashes _canon's bytes: the same bits on every node."""
    from hashlib import blake2b

    from joinlib.protocol.bloom import _canon, _digest
    assert _digest((v,)) == blake2b(b"\x1f".join(map(_canon, (v,))), digest_size=64).digest()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=5))
                | st.tuples(values, values), max_size=8))
def test_keys_bytes_counts_ascii_keys_as_encoded(ks) -> None:
    """keys_bytes counts an ASCII string a byte a character: what encoding it would count."""
    from joinlib.runtime.algorithms.base import keys_bytes
    want = 1 + sum(1 + sum(len(v.encode()) + 2 if isinstance(v, str) else 9 if isinstance(v, float) else 4
                           for v in k) for k in ks)
    assert keys_bytes(ks) == want
