"""Where a new reader of a shared operator starts reading its derived topic (docs/multiquery.md "Shared
operators", "Where a new reader starts").

A shared operator publishes one ``SourceBatch`` per head epoch on ``derived.<producer>``, epochs in order; the
tuples of epoch ``e``'s batch have their time in ``[e·tau, (e+1)·tau)`` (a derived tuple's time is its latest
component's).  Each time the operator checkpoints, its producer is flushed, so every epoch it has handed over
(those below ``OpOutput.next_epoch``) is in the topic below the topic's end offset: the pair is a
:class:`Mark`, saved with the checkpoint.  A reader drops every derived tuple older than a horizon (its origin
minus its windows, in the operator's time: :func:`joinlib.mjoin.derived.moved`); a mark whose epoch starts at
or before that horizon lets it skip everything below the mark's offset: no tuple there can reach the horizon.
So the reader starts from the latest such mark instead of offset 0, and sees the same tuples it would have
kept from the beginning.

Why offsets and not the window's content: the operator's checkpoint holds the windows of its *inputs*, not
its derived stream; the derived tuples a reader needs are the last window's worth of the topic, and a mark
says where that begins.  After a crash the operator resumes from its last checkpoint and hands the epochs
after it over again, past the mark's offset, so a mark stays true for what a reader keeps (a reader drops an
epoch it already has, as it does today).

Marks are kept thinned (:meth:`DerivedMarks.add`): every recent one, fewer and fewer of the older ones, so a
reader whose origin lies far back (``--since``) still finds one below its horizon.  Pure: no Kafka, no Redis.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

#: how many marks an operator keeps; past it, every second one of the older half goes (so they thin out with age)
MAX_MARKS = 64


@dataclass(frozen=True)
class Mark:
    """Every derived batch below ``offset`` of the topic is of an epoch below ``epoch``."""

    epoch: int
    offset: int


@dataclass(frozen=True)
class DerivedMarks:
    """An operator's marks, oldest first (epochs and offsets increasing), of epoch length ``tau`` ms."""

    tau: int
    marks: tuple[Mark, ...] = ()

    def add(self, epoch: int, offset: int, keep: int = MAX_MARKS) -> DerivedMarks:
        """With the mark of a checkpoint taken now added (unchanged when it hands nothing new over: the first
        offset of an epoch is the better mark), thinned to at most ``keep`` marks: the newer half stays whole,
        every second mark of the older half goes."""
        last = self.marks[-1] if self.marks else Mark(0, 0)
        if epoch <= last.epoch or offset < last.offset:
            return self
        marks = (*self.marks, Mark(epoch, offset))
        if len(marks) > keep:
            old = (len(marks) - keep // 2) & ~1   # even: what stays of the older half keeps a regular spacing
            marks = (*marks[:old:2], *marks[old:])
        return DerivedMarks(self.tau, marks)

    def start(self, horizon: int) -> Optional[Mark]:
        """The latest mark whose epoch starts at or before ``horizon`` (ms in the operator's time): a reader that
        keeps only tuples at or after the horizon may start there; None when every mark is later."""
        best = None
        for m in self.marks:
            if m.epoch * self.tau > horizon:
                break
            best = m
        return best

    def to_json(self) -> bytes:
        return json.dumps({"tau": self.tau, "marks": [[m.epoch, m.offset] for m in self.marks]}).encode()

    @staticmethod
    def from_json(data: Any) -> DerivedMarks:
        """The inverse of :meth:`to_json` (bytes, str or the parsed object); a ValueError when it is not one."""
        try:
            obj = json.loads(data) if isinstance(data, (bytes, str)) else data
            marks = tuple(Mark(int(e), int(o)) for e, o in obj["marks"])
            out = DerivedMarks(int(obj["tau"]), marks)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a list of derived-topic marks: {e}") from None
        pairs = zip(marks, marks[1:], strict=False)
        if out.tau <= 0 or any(b.epoch <= a.epoch or b.offset < a.offset for a, b in pairs):
            raise ValueError("not a list of derived-topic marks: epochs must increase and offsets not decrease")
        return out
