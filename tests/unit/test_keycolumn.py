"""KeyColumn answers what a scan of the window's tuples answers: the distinct keys of a view in the order they
first occur, and those a set holds (issue 27: a Bloom request is tested against the window as arrays)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.protocol.bloom import Bloom, KeySet
from joinlib.runtime.keycolumn import KeyColumn

values = st.one_of(st.integers(0, 12), st.sampled_from([1.0, True, None]), st.text("ab", max_size=2))


def _tuples(keys: list[tuple], gaps: list[int]) -> list[Tup]:
    out, ts = [], 0
    for seq, (k, gap) in enumerate(zip(keys, gaps, strict=True)):
        ts += gap
        out.append(Tup(0, seq, ts, seq, k))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(values, values), max_size=60), st.data())
def test_views_match_a_scan(keys, data) -> None:
    tups = _tuples(keys, data.draw(st.lists(st.integers(0, 3), min_size=len(keys), max_size=len(keys))))
    index = data.draw(st.sampled_from([(0,), (1,), (0, 1)]))
    cut = data.draw(st.integers(0, len(tups)))
    col = KeyColumn(index, tups[:cut])
    live = list(tups[:cut])
    rest = tups[cut:]
    held = data.draw(st.lists(st.tuples(values) | st.tuples(values, values), max_size=8))
    fpr = data.draw(st.sampled_from([None, 0.5, 0.01, 1e-6]))
    m = (KeySet(bloom=Bloom.of(held, fpr)) if fpr else KeySet(keys=tuple(held))).matcher()

    def check() -> None:
        lower = (data.draw(st.sampled_from(["ts", "seq"])), data.draw(st.integers(0, 200)))
        end = data.draw(st.integers(0, 200))
        view = [t for t in live if t.ts < end and (t.ts if lower[0] == "ts" else t.seq) >= lower[1]]
        want = list(dict.fromkeys(tuple(t.key[i] for i in index) for t in view))
        assert col.distinct(lower, end) == want
        assert col.held(m, lower, end) == [k for k in want if m.has(k)]

    while rest:
        n = data.draw(st.integers(1, len(rest)))
        batch, rest = rest[:n], rest[n:]
        assert col.append(batch)
        live += batch
        if data.draw(st.booleans()):
            field_ = data.draw(st.sampled_from(["ts", "seq"]))
            value = data.draw(st.integers(0, 2 + max(t.ts if field_ == "ts" else t.seq for t in live)))
            col.purge({field_: value})
            live = [t for t in live if (t.ts if field_ == "ts" else t.seq) >= value]
        if data.draw(st.booleans()):   # tested between batches: rows hashed so far must survive compaction
            check()
    for _ in range(3):
        check()


def test_a_batch_out_of_order_is_refused() -> None:
    col = KeyColumn((0,), [Tup(0, 5, 10, 5, (1,))])
    assert not col.append([Tup(0, 4, 10, 4, (2,))])
    assert not col.append([Tup(0, 7, 11, 7, (2,)), Tup(0, 6, 11, 6, (3,))])
    assert col.distinct(("ts", 0), 100) == [(1,)]


def test_rows_hashed_before_a_compaction_stay_with_their_keys() -> None:
    tups = [Tup(0, i, i, i, (f"k{i}",)) for i in range(200)]
    col = KeyColumn((0,), tups[:100])
    m = KeySet(bloom=Bloom.of([(f"k{i}",) for i in range(100, 200)], 1e-9)).matcher()
    everything = KeySet(bloom=Bloom.of([(f"k{i}",) for i in range(200)], 1e-9)).matcher()
    assert col.held(everything, ("ts", 0), 1000) == [(f"k{i}",) for i in range(100)]   # rows 0-99 hashed
    col.purge({"ts": 60})
    assert col.append(tups[100:])      # compacts: the 40 hashed rows left move to the front
    assert col.held(m, ("ts", 0), 1000) == [(f"k{i}",) for i in range(100, 200)]
    kept = KeySet(bloom=Bloom.of([(f"k{i}",) for i in range(60, 100)], 1e-9)).matcher()
    assert col.held(kept, ("ts", 0), 1000) == [(f"k{i}",) for i in range(60, 100)]
