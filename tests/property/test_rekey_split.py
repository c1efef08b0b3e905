"""The re-keyer's epoch split (joinlib.node.rekey_split), against the replayer's rule: partition p of
``src.<query>.<stream>`` holds plan partition p's tuples in order, in batches of whole epochs whose watermark is
the end of their last epoch -- every partition a batch whenever an epoch completes, even an empty one.

The stream's tuples are released below a watermark that rises in random steps.  Sometimes the re-keyer crashes:
a snapshot at a random step, more batches written after it (they are in the topic), then a fresh split restored
from the snapshot that skips the epochs found in the topic and is fed the same tuples again, *in other slices*
(another sequence of watermarks).  The topic must hold each epoch of each partition once, with the reference
content.
"""
from __future__ import annotations

from typing import Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.model import Tup
from joinlib.node.rekey_split import EpochBatch, EpochSplit

TAU = 100


@st.composite
def scenarios(draw):
    n = draw(st.integers(0, 60))
    ts = sorted(draw(st.lists(st.integers(0, 2_000), min_size=n, max_size=n)))
    tups = [Tup(0, i, t, i, (draw(st.integers(0, 9)),)) for i, t in enumerate(ts)]
    d = draw(st.integers(1, 4))
    broadcast = draw(st.booleans())
    marks = sorted(draw(st.lists(st.integers(0, 2_200), min_size=1, max_size=12)))
    crash = draw(st.none() | st.tuples(st.integers(0, len(marks)), st.integers(0, len(marks)),
                                       st.lists(st.integers(0, 2_200), max_size=12)))
    return tups, d, broadcast, marks, crash


def _route(d: int, broadcast: bool) -> Optional[object]:
    return None if broadcast else (lambda t: t.key[0] % d)


def _feed(split: EpochSplit, tups: list[Tup], released: int, w: int) -> tuple[list[EpochBatch], int]:
    """Release the tuples below ``w`` not released yet; the batches that completes, and how many are out."""
    j = released
    while j < len(tups) and tups[j].ts < w:
        j += 1
    split.add(tups[released:j])
    return split.close(w), j


def _check(topic: list[EpochBatch], tups: list[Tup], d: int, broadcast: bool, final_w: int) -> None:
    last = final_w // TAU - 1
    for p in range(d):
        mine = [b for b in topic if b.part == p]
        epochs = [b.last_epoch for b in mine]
        assert epochs == sorted(set(epochs)), f"partition {p}: epochs {epochs} out of order or twice"
        assert (epochs[-1] if epochs else -1) == last
        prev = -1
        for b in mine:
            assert b.watermark == (b.last_epoch + 1) * TAU
            assert all((prev + 1) * TAU <= t.ts < b.watermark for t in b.tuples)
            prev = b.last_epoch
        want = [t for t in tups if t.ts < (last + 1) * TAU and (broadcast or t.key[0] % d == p)]
        got = [t for b in mine for t in b.tuples]
        assert [(t.id, t.ts) for t in got] == [(t.id, t.ts) for t in want]


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_epoch_of_every_partition_once_across_crashes(sc):
    tups, d, broadcast, marks, crash = sc
    route = _route(d, broadcast)
    split = EpochSplit(d, route, TAU)  # type: ignore[arg-type]
    topic: list[EpochBatch] = []
    released = 0
    if crash is None:
        for w in marks:
            out, released = _feed(split, tups, released, w)
            topic += out
        _check(topic, tups, d, broadcast, marks[-1])
        return
    at, more, later = crash
    at, more = min(at, more), max(at, more)
    for w in marks[:at]:
        out, released = _feed(split, tups, released, w)
        topic += out
    snap, snap_released = split.snapshot(), released
    for w in marks[at:more]:   # written after the snapshot, then the crash
        out, released = _feed(split, tups, released, w)
        topic += out
    fresh = EpochSplit(d, route, TAU)  # type: ignore[arg-type]
    fresh.restore(snap)
    for b in topic:
        fresh.skip_to(b.part, b.last_epoch)
    released = snap_released
    start = marks[at - 1] if at else 0
    final = max([start, *marks, *later])
    for w in sorted([x for x in later if x >= start]) + [final]:   # the same tuples, in other slices
        out, released = _feed(fresh, tups, released, w)
        topic += out
    _check(topic, tups, d, broadcast, max(final, marks[more - 1] if more else 0))


def test_a_checkpoint_of_another_plan_is_refused():
    split = EpochSplit(3, None, TAU)
    try:
        split.restore(EpochSplit(2, None, TAU).snapshot())
    except ValueError as e:
        assert "2 partitions" in str(e)
    else:
        raise AssertionError("restored a split of 2 partitions into one of 3")
