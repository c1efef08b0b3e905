"""Derived-topic marks of a shared operator (joinlib/mjoin/marks.py): where a new reader may start."""
from __future__ import annotations

import pytest

from joinlib.mjoin.marks import MAX_MARKS, DerivedMarks, Mark


def test_start_is_the_latest_mark_whose_epoch_starts_at_or_before_the_horizon():
    m = DerivedMarks(100).add(5, 40).add(12, 90).add(30, 200)
    assert m.start(1199) == Mark(5, 40)
    assert m.start(1200) == Mark(12, 90)
    assert m.start(10**9) == Mark(30, 200)
    assert m.start(499) is None   # every mark after the horizon: read from the beginning
    assert DerivedMarks(100).start(10**9) is None


def test_a_checkpoint_that_handed_nothing_new_over_adds_no_mark():
    m = DerivedMarks(100).add(5, 40)
    assert m.add(5, 47) == m            # the same epoch at a later offset: the first offset is the better mark
    assert m.add(3, 50) == m            # (a resumed run never goes back; ignored if it did)
    assert m.add(6, 30) == m            # an offset below the last one: not a mark of this topic
    assert DerivedMarks(100).add(0, 0).marks == ()   # nothing handed over yet


def test_marks_thin_out_with_age_and_keep_the_newest():
    m = DerivedMarks(10)
    for e in range(1, 1001):
        m = m.add(e, e * 3)
        assert len(m.marks) <= MAX_MARKS
        assert m.marks[-1] == Mark(e, e * 3)
    epochs = [x.epoch for x in m.marks]
    assert epochs == sorted(set(epochs))
    assert epochs[-MAX_MARKS // 2:] == list(range(1001 - MAX_MARKS // 2, 1001))   # the recent ones, every one
    assert epochs[0] < 100   # an old reader still finds a mark far back
    gaps = [b - a for a, b in zip(epochs, epochs[1:], strict=False)]
    assert gaps == sorted(gaps, reverse=True)   # spacing grows with age


def test_json_round_trip_and_mistakes():
    m = DerivedMarks(100).add(5, 40).add(12, 90)
    assert DerivedMarks.from_json(m.to_json()) == m
    assert DerivedMarks.from_json(m.to_json().decode()) == m
    for bad in (b"{", b"[]", b'{"tau": 100}', b'{"tau": 0, "marks": []}', b'{"tau": 100, "marks": [[5, 9], [5, 10]]}',
                b'{"tau": 100, "marks": [[5, 9], [6, 8]]}', b'{"tau": 100, "marks": [["a", 1]]}'):
        with pytest.raises(ValueError, match="not a list of derived-topic marks"):
            DerivedMarks.from_json(bad)
