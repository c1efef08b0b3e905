"""R_1^disk and R_2^disk: runs in a :class:`~.runs.RunStore`, grouped into *slots*, plus
the histories duplicate avoidance needs.

Slots carry the paper's "matching runs" (Sect. 5.2).  A slot holds at most one run per
relation, and **every pair between its two runs has already been dealt with** (reported,
or known to be reported elsewhere).  That holds for

* a flush: the R_1 and R_2 runs one flush writes for a partition were in memory together
  at the flush tick, so the mm-stage reported every pair between them (HMJ's concurrent
  flush, whose k-th runs "match", is the case where both sides are flushed);
* a PSMJ merge operation: it combines whole slots, reports the new pairs across them,
  and writes one merged run per side: a new slot.

Because slots are never split, matching runs stay aligned and "both tuples from one slot"
is exactly "checked before by a dd-task" (the third duplicate case of Sect. 5.2).

Histories per relation and partition: flush ticks with cumulative counts (|S_bfr| of
Sect. 5.3), md-task ticks T^md (Figs. 5 and 7).  With ``index=True`` the disk tuples are
also kept in RAM by key so md-tasks find their matches without scanning - the simulator's
speed-up; the costs charged are still the paper's scans and the output is identical.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Optional

from joinlib.progressive.model import DiskTuple, Key, PageCosts
from joinlib.progressive.runs import RunStore


@dataclass(frozen=True)
class RunRef:
    """A committed run: its id in the store and its size in tuples."""

    run: int
    size: int


@dataclass(frozen=True)
class Slot:
    """At most one run per relation whose cross pairs were all dealt with."""

    runs: tuple[Optional[RunRef], Optional[RunRef]]


class DiskPartition:
    """Everything on disk for one partition j, both relations."""

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.n = [0, 0]
        self.runs = [0, 0]
        self.pages = [0, 0]
        self.tflush: tuple[list[int], list[int]] = ([], [])
        self.cumflush: tuple[list[int], list[int]] = ([], [])
        self.tmd: tuple[list[int], list[int]] = ([], [])
        self.index: Optional[tuple[dict[Key, list[DiskTuple]], dict[Key, list[DiskTuple]]]] = None

    def flushed_before(self, rel: int, tick: int) -> int:
        """|S_bfr|: tuples of R_rel^disk[j] flushed before ``tick``."""
        i = bisect_left(self.tflush[rel], tick)
        return self.cumflush[rel][i - 1] if i else 0

    def last_md(self, rel: int) -> Optional[int]:
        """Tick of the last md-task R_rel^mem[j] ⋈ R_other^disk[j], if any."""
        return self.tmd[rel][-1] if self.tmd[rel] else None


class Disk:
    """The disk partitions of both relations over one run store."""

    def __init__(self, store: RunStore, partitions: int, costs: PageCosts, *, index: bool = False) -> None:
        self.store = store
        self.costs = costs
        self.parts = [DiskPartition() for _ in range(partitions)]
        if index:
            for p in self.parts:
                p.index = ({}, {})

    def write_flush(self, part: int, batches: tuple[list[DiskTuple], list[DiskTuple]], tick: int) -> Slot:
        """Write what one flush evicted from partition ``part`` (sorted runs, either side may be
        empty) as one slot, and record the flush in the history."""
        p = self.parts[part]
        refs: list[Optional[RunRef]] = [None, None]
        for rel, tuples in enumerate(batches):
            if not tuples:
                continue
            refs[rel] = RunRef(self.store.write_run(rel, part, tuples), len(tuples))
            p.n[rel] += len(tuples)
            p.runs[rel] += 1
            p.pages[rel] += self.costs.pages(len(tuples))
            p.tflush[rel].append(tick)
            p.cumflush[rel].append(p.n[rel])
            if p.index is not None:
                idx = p.index[rel]
                for t in tuples:
                    idx.setdefault(t.key, []).append(t)
        slot = Slot((refs[0], refs[1]))
        p.slots.append(slot)
        return slot

    def replace_slots(self, part: int, old: list[Slot], new: Slot) -> None:
        """A merge operation turned ``old`` (consecutive slots) into ``new``; drop the old runs."""
        p = self.parts[part]
        at = p.slots.index(old[0])
        assert p.slots[at:at + len(old)] == old, "merge operations take consecutive slots"
        p.slots[at:at + len(old)] = [new]
        for slot in old:
            for rel, ref in enumerate(slot.runs):
                if ref is not None:
                    self.store.delete_run(rel, part, ref.run)
                    p.runs[rel] -= 1
                    p.pages[rel] -= self.costs.pages(ref.size)
        for rel, ref in enumerate(new.runs):
            if ref is not None:
                p.runs[rel] += 1
                p.pages[rel] += self.costs.pages(ref.size)

    def run_refs(self, part: int, rel: int) -> list[RunRef]:
        return [ref for s in self.parts[part].slots if (ref := s.runs[rel]) is not None]
