"""A shared operator's derived-topic marks on the node: the operator saves one with each checkpoint, and a new
reader starts its derived topic at the latest one that fits it instead of offset 0 (:mod:`joinlib.mjoin.marks`
says why that is exact; docs/multiquery.md "Where a new reader starts").

The operator's run publishes its marks next to its checkpoint in Redis, in the same atomic save
(:func:`joinlib.adapters.redis_checkpoint.published`), so a mark exists only once the checkpoint it belongs to
does, and a fenced instance cannot write one.  A reader without Redis, or whose operator has not checkpointed
yet, reads from the beginning as before, and says so.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from joinlib.adapters.redis_checkpoint import published
from joinlib.mjoin.marks import DerivedMarks
from joinlib.node.node_run import run_namespace
from joinlib.node.recovery import end_offset


def next_marks(marks: Optional[DerivedMarks], consumer: Any, topic: str, next_epoch: int,
               tau: int) -> DerivedMarks:
    """``marks`` with the mark of a checkpoint being taken now: the derived ``topic``'s end offset (the producer
    was flushed: every epoch below ``next_epoch`` is below it).  Unchanged when the broker does not answer."""
    end = end_offset(consumer, topic, None)
    marks = marks if marks is not None else DerivedMarks(tau)
    return marks if end is None else marks.add(next_epoch, end)


def reader_mark(run: Any, topic: str, external: Mapping[str, Any], node: str,
                horizon: int) -> Optional[tuple[int, int]]:
    """Where ``run``, a new reader of the shared operator ``external`` names (its ``op`` and ``run``), at the
    operator's ``node``, may start reading its derived ``topic``: the offset of the latest mark at or before
    ``horizon`` (ms in the operator's time: older tuples the reader drops), and the watermark (operator's time)
    the batches below it would have taken the reader's window to.  None (read from the beginning) when there is
    none; the log says which."""
    op, op_run = str(external["op"]), str(external["run"])
    log, q = run.svc.log, run.q.name
    why = f"{q}: reads {topic} from the beginning"
    client = getattr(run.factory, "client", None)
    if client is None:
        log(f"{why}: no Redis here to find operator {op}'s checkpoints in")
        return None
    try:
        data = published(client, run_namespace(op, op_run), node)
    except Exception as e:   # Redis unreachable: reading from the beginning is always right, only slower
        log(f"{why}: could not read operator {op}'s checkpoint marks: {type(e).__name__}: {e}")
        return None
    if data is None:
        log(f"{why}: operator {op} (run {op_run}) has no checkpoint at {node} yet")
        return None
    try:
        marks = DerivedMarks.from_json(data)
    except ValueError as e:
        log(f"{why}: operator {op}'s checkpoint marks do not decode ({e})")
        return None
    mark = marks.start(horizon)
    if mark is None:
        log(f"{why}: operator {op}'s checkpoints all come after {horizon} ms of its time, the oldest tuple "
            "this run keeps (its origin is earlier)")
        return None
    log(f"{q}: reads {topic} from offset {mark.offset}, operator {op}'s checkpoint at its epoch {mark.epoch}: "
        "the messages before it hold no tuple this run keeps")
    return mark.offset, mark.epoch * marks.tau
