"""KeyIndex answers exactly what Matcher.has answers, pair by pair: the array form of the Bloom test (issue 27)
must not change which tuples a reduction ships."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.protocol.bloom import Bloom, KeySet
from joinlib.runtime.algorithms.keyindex import KeyIndex, LiveSet

values = st.one_of(st.integers(-5, 40), st.sampled_from([1.0, 2.5, True, None]), st.text("ab", max_size=2))
keys = st.tuples(values) | st.tuples(values, values)


@st.composite
def live_sets(draw: st.DrawFn) -> list[LiveSet]:
    out: list[LiveSet] = []
    for idx in range(draw(st.integers(0, 6))):
        held = draw(st.lists(keys, max_size=12))
        if draw(st.booleans()):
            ks = KeySet(bloom=Bloom.of(held, draw(st.sampled_from([0.5, 0.1, 0.01]))))
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
