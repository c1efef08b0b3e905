"""A live stream restored from a checkpoint that names its pending records by position (issue 27): the node reads
them again from the topic, feeds the host nothing -- not even a watermark -- until every one is back, and then
releases exactly what an uninterrupted node releases, with the same ranks."""
from __future__ import annotations

from typing import Any

from joinlib.ingest.stream import pending_refs
from joinlib.node.sources import LiveInputs
from joinlib.runtime import checkpoint
from tests.live_inputs import Record, two_stream_query

DELTA = 50




class _Host:
    def __init__(self) -> None:
        self.fed: list[tuple[list[tuple[int, int, int]], int]] = []

    def feed(self, query: str, stream: str, tups: list[Any], watermark: int) -> None:
        self.fed.append(([(t.id, t.ts, t.seq) for t in tups], watermark))

    def released(self) -> list[tuple[int, int, int]]:
        return [x for tups, _ in self.fed for x in tups]


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _inputs() -> LiveInputs:
    return LiveInputs(two_stream_query(DELTA), "a", 0, {"S1": {0: 0}}, bootstrap="unused:9092",
                      out=_Null(),  # type: ignore[arg-type]
                      run_id=None,
                      sensor=_Null(), log=lambda s: None, on_naive=lambda *a: None, now=0.0)


def _stored(inputs: LiveInputs) -> Any:
    """The live part of a checkpoint, written and read back as a node's checkpoint is."""
    return checkpoint.loads(checkpoint.dumps({"format": checkpoint.FORMAT, "live": inputs.snapshot()}))["live"]


# event times out of order within delta, so records wait below and above the watermark
TS = [0, 30, 10, 120, 90, 200, 170, 260, 300, 280, 400, 390, 520, 500, 610]


def test_pending_records_named_by_position_come_back_before_anything_moves_on() -> None:
    msgs = [Record(off, ts, 100 + off) for off, ts in enumerate(TS)]
    whole, host = _inputs(), _Host()
    for m in msgs:
        whole.handle(m, 0.0)
        whole.drain(host)

    first, before = _inputs(), _Host()
    for m in msgs[:9]:
        first.handle(m, 0.0)
        first.drain(before)
    snap = _stored(first)
    refs = pending_refs(snap["S1"]["ingest"])
    assert refs, "the scenario must leave records pending"
    assert "pending_cols" in snap["S1"]["ingest"] and all(len(r) == 4 for r in refs)   # positions, no payloads

    again, after = _inputs(), _Host()
    again.restore(snap, 0.0)
    (tp,) = again.topic_partitions()
    pending_offsets = [r[3] for r in refs]
    assert tp.offset == min(pending_offsets) < 9
    again.drain(after)
    assert after.fed == [], "nothing -- no watermark either -- before the named records are back"
    for m in msgs[tp.offset:]:
        again.handle(m, 0.0)
        again.drain(after)
    assert not again.sources["S1"].ingest.missing
    assert before.released() + after.released() == host.released()
    marks = [w for _, w in before.fed + after.fed]
    assert marks == sorted(marks)


def test_a_named_record_the_topic_no_longer_has_is_an_error() -> None:
    import pytest

    from joinlib.errors import ClusterError
    msgs = [Record(off, ts, 100 + off) for off, ts in enumerate(TS)]
    first = _inputs()
    for m in msgs[:9]:
        first.handle(m, 0.0)
        first.drain(_Host())
    snap = _stored(first)
    lost = min(r[3] for r in pending_refs(snap["S1"]["ingest"]))
    again = _inputs()
    again.restore(snap, 0.0)
    with pytest.raises(ClusterError, match="no longer holds offsets"):
        for m in msgs[lost + 1:]:   # retention removed the first named record
            again.handle(m, 0.0)


def test_a_partition_read_past_every_named_record_is_an_error_not_a_stall() -> None:
    import pytest

    from joinlib.errors import ClusterError
    msgs = [Record(off, ts, 100 + off) for off, ts in enumerate(TS)]
    first = _inputs()
    for m in msgs[:9]:
        first.handle(m, 0.0)
        first.drain(_Host())
    again = _inputs()
    again.restore(_stored(first), 0.0)
    with pytest.raises(ClusterError, match="no longer holds offsets"):
        again.handle(msgs[9], 0.0)   # the topic starts past the checkpoint's position now


def test_checkpoints_take_at_most_a_twentieth_of_the_cpu() -> None:
    from joinlib.node.recovery import CHECKPOINT_MAX_S, CHECKPOINT_SHARE, next_checkpoint
    assert next_checkpoint(100.0, 1.0, 0.01) == 101.0            # cheap: every second, as configured
    assert next_checkpoint(100.0, 1.0, 0.2) == 100.0 + 0.2 / CHECKPOINT_SHARE == 104.0   # costly: spaced out
    assert next_checkpoint(100.0, 5.0, 0.1) == 105.0
    assert next_checkpoint(100.0, 1.0, 60.0) == 100.0 + CHECKPOINT_MAX_S   # never more than 30 s of input to redo
    assert next_checkpoint(100.0, 60.0, 0.0) == 160.0                      # unless asked for


def test_end_offsets_that_never_answer_drop_the_idle_advance_and_release_the_held_records() -> None:
    """An idle advance waits for the broker's end offsets of its partition, and the partition's records that come
    meanwhile are held.  A request lost in a broker's restart may never answer (chaos seed 3011: a query stalled
    with its consumers caught up): after ``ASK_LIMIT_S`` the advance is dropped, the broker counts as unreachable,
    and the held records go on as if no advance had been pending."""
    from concurrent.futures import Future

    from joinlib.ingest.stream import Advance
    from joinlib.node.sources import ASK_LIMIT_S, _PendingAdvances
    msgs = [Record(off, ts, 100 + off) for off, ts in enumerate(TS)]
    inputs, host = _inputs(), _Host()
    for m in msgs[:5]:
        inputs.handle(m, 0.0)
    src = inputs.sources["S1"]
    never: Future = Future()
    inputs._pending = pend = _PendingAdvances([(src, Advance(0, 5, 150))], {("t1", 0): never})
    for m in msgs[5:]:
        inputs.handle(m, 0.0)
    assert len(pend.held) == len(msgs) - 5
    assert inputs._progress(0.0, block=False) == 0 and inputs._pending is pend, "still asking"
    pend.asked -= ASK_LIMIT_S + 1
    assert inputs._progress(0.0, block=False) == 0
    assert inputs._pending is None and inputs._unreachable
    inputs.drain(host)
    reference, ref_host = _inputs(), _Host()
    for m in msgs:
        reference.handle(m, 0.0)
    reference.drain(ref_host)
    assert host.released() == ref_host.released() and host.fed[-1][1] == ref_host.fed[-1][1]
