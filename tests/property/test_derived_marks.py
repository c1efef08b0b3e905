"""A new reader of a shared operator that starts at the operator's derived-topic mark (joinlib/mjoin/marks.py)
keeps exactly the tuples it keeps reading from offset 0, over random operator lives: epochs handed over,
checkpoints, crashes that resume from the last checkpoint and hand the epochs after it over again (the same
batches: the operator is deterministic), the reader attaching at any point and keeping the tuples from any
horizon on, compared once the operator has caught up with what its crashed predecessors handed over.  The
reader is modelled as the node's (joinlib/node/tree_service.py): a batch at or below its window's watermark is
dropped, a tuple older than its horizon too; its window's watermark starts at the horizon (it keeps the tuples
from there on, before its origin too: ``HomeWindow.open_history``), and a reader starting at a mark with the
watermark the batches below it would have left, if higher."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joinlib.mjoin.marks import DerivedMarks

TAU = 10


def _read(topic: list[int], content: dict[int, list[int]], start: int, watermark: int,
          horizon: int) -> tuple[list[tuple[int, int]], int]:
    """What a reader keeps from ``topic`` (epochs of batches) from offset ``start`` on, and its last watermark."""
    kept = []
    for e in topic[start:]:
        if (e + 1) * TAU <= watermark:
            continue   # handed over again by a resumed operator: the reader has it
        watermark = (e + 1) * TAU
        kept += [(e, ts) for ts in content[e] if ts >= horizon]
    return kept, watermark


steps = st.lists(st.one_of(st.tuples(st.just("hand"), st.integers(1, 6)), st.just(("checkpoint", 0)),
                           st.just(("crash", 0))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(0, 60), st.integers(-30, 500), st.integers(2, 8), st.data())
def test_a_reader_from_a_mark_keeps_what_it_keeps_from_the_beginning(life, attach, horizon, keep, data):
    content: dict[int, list[int]] = {}   # one list per epoch: a resumed operator hands the same epoch over again
    topic: list[int] = []
    nxt, marks = 0, DerivedMarks(TAU)
    saved: tuple[int, DerivedMarks] | None = None
    published = None
    for k, (what, n) in enumerate(life):
        if k == attach:
            published = saved[1] if saved is not None else None
        if what == "hand":
            for e in range(nxt, nxt + n):
                content.setdefault(e, sorted(data.draw(st.lists(st.integers(e * TAU, e * TAU + TAU - 1),
                                                                max_size=3))))
                topic.append(e)
            nxt += n
        elif what == "checkpoint":
            marks = marks.add(nxt, len(topic), keep)
            saved = (nxt, marks)
        elif saved is not None:   # a crash: the successor resumes from the last checkpoint
            nxt, marks = saved
        else:
            nxt, marks = 0, DerivedMarks(TAU)
    if attach >= len(life):
        published = saved[1] if saved is not None else None
    for e in range(nxt, max(topic, default=-1) + 1):   # the live operator catches up with its predecessors
        topic.append(e)
    want = _read(topic, content, 0, horizon, horizon)   # a new reader's window: nothing seen below its horizon
    mark = published.start(horizon) if published is not None else None
    got = want if mark is None else _read(topic, content, mark.offset, max(horizon, mark.epoch * TAU), horizon)
    assert got == want
    if mark is not None:   # below the mark: its epochs, or a crashed predecessor's later ones, handed over again after
        assert all(e < mark.epoch or e in topic[mark.offset:] for e in topic[:mark.offset])
