"""The interface every progressive join implements, and the mm-stage they share.

A driver (the simulator, the CLI) calls

* :meth:`ProgressiveJoin.arrival` for each tuple as it arrives (mm-stage: probe the other
  relation's memory partition, insert, flush when memory exceeds M);
* :meth:`ProgressiveJoin.end` when a relation's end-of-stream arrives;
* :meth:`ProgressiveJoin.blocked` while both inputs are blocked: one reactive task per call,
  ``False`` when there is nothing worth doing (the driver then waits for input);
* :meth:`ProgressiveJoin.cleanup` once both relations have ended.

Every result goes to the injected :class:`~.model.PairSink` once, when it is produced.  Time
is the injected :class:`~.model.VirtualClock`: one tick per event, costs charged per page.
"""
from __future__ import annotations

import abc
from typing import ClassVar, Optional

from joinlib.progressive.disk import Disk, Slot
from joinlib.progressive.memory import Memory
from joinlib.progressive.model import DiskTuple, Id, JoinSpec, Key, MemTuple, PairSink, VirtualClock, partition_of
from joinlib.progressive.runs import RunStore
from joinlib.progressive.stats import ArrivalStats
from joinlib.progressive.tasks import TaskContext, dd_task

FlushRequest = tuple[int, int, Optional[int]]
"""(relation, partition, how many oldest tuples; None = the whole partition)."""


class ProgressiveJoin(abc.ABC):
    """State and mm-stage shared by RPJ, XJoin and HMJ; subclasses choose flushes and tasks."""

    name: ClassVar[str] = "?"

    def __init__(self, spec: JoinSpec, store: RunStore, clock: VirtualClock, sink: PairSink, *,
                 index: Optional[bool] = None) -> None:
        self.spec = spec
        self.clock = clock
        self.mem = Memory(spec.partitions)
        self.disk = Disk(store, spec.partitions, spec.costs, index=store.in_memory if index is None else index)
        self.stats = ArrivalStats(spec.partitions, spec.lam, spec.time_unit_ms)
        self.ctx = TaskContext(self.disk, clock, sink)
        self._sink = sink
        self._probe_pages = 1.0 / (spec.sub_partitions * spec.costs.page_tuples)
        self.last_arrival_tick = 0
        self.done = False

    # ------------------------------------------------------------------ driver interface

    def arrival(self, rel: int, tid: Id, key: Key) -> None:
        """mm-stage for one tuple of R_{rel+1}: report its matches in the other memory, insert it."""
        if self.done or self.stats.ended[rel]:
            raise RuntimeError(f"arrival on relation {rel} after its end or the clean-up")
        part = partition_of(key, self.spec.partitions)
        self.stats.record(rel, part, self.clock.now_ms)
        ats = self.last_arrival_tick = self.clock.tick()
        other = self.mem.parts[1 - rel][part]
        sink = self._sink
        for m in other.probe(key):  # reported at the arrival's time, then the probe is charged
            if rel == 0:
                sink(tid, m.id, "arrival", ats)
            else:
                sink(m.id, tid, "arrival", ats)
        self.clock.charge_cpu(1.0 + len(other) * self._probe_pages)
        self.mem.insert(rel, part, MemTuple(key, ats, tid))
        self._on_arrival(rel, part)
        if self.mem.total > self.spec.memory:
            self._flush(self._flush_requests())

    def end(self, rel: int) -> None:
        """End-of-stream of R_{rel+1}: its arrival probabilities drop to 0."""
        self.stats.end(rel)

    @abc.abstractmethod
    def blocked(self) -> bool:
        """Run one reactive task; ``False`` if none is worth running."""

    def cleanup(self) -> None:
        """Flush all memory, then join what is left on disk, partition by partition."""
        if self.done:
            raise RuntimeError("clean-up already ran")
        self.done = True
        self._flush([(rel, part, None) for rel in range(2) for part in range(self.spec.partitions)
                     if self.mem.size(rel, part)], hooks=False)
        for part in range(self.spec.partitions):
            self._cleanup_partition(part)

    # ------------------------------------------------------------------ for subclasses

    def _cleanup_partition(self, part: int) -> None:
        dp = self.disk.parts[part]
        if dp.n[0] and dp.n[1] and len(dp.slots) > 1:
            dd_task(self.ctx, part, self.spec.final_fanin, "cleanup")

    @abc.abstractmethod
    def _flush_requests(self) -> list[FlushRequest]:
        """What to evict now that memory holds M + 1 tuples."""

    def _on_arrival(self, rel: int, part: int) -> None:
        """A tuple entered R_rel^mem[part] (statistics hook)."""
        return None

    def _on_evict(self, rel: int, part: int, tuples: list[MemTuple]) -> None:
        """``tuples`` leave R_rel^mem[part] in a flush (before their run is written)."""
        return None

    def _on_slot(self, part: int, slot: Slot) -> None:
        """A flush wrote ``slot`` to partition ``part``."""
        return None

    def _flush(self, requests: list[FlushRequest], hooks: bool = True) -> None:
        """One flush: every evicted tuple gets DTS = this flush's tick; per partition, the
        evicted tuples of each relation become one sorted run, both in one slot.  The runs are
        written one after the other (they are immutable, so they may live anywhere): one seek
        per flush, then a page per run's page."""
        if not requests:
            return
        dts = self.clock.tick()
        batches: dict[int, tuple[list[DiskTuple], list[DiskTuple]]] = {}
        for rel, part, k in requests:
            evicted = self.mem.evict(rel, part, k)
            if not evicted:
                continue
            if hooks:
                self._on_evict(rel, part, evicted)
            batch = batches.setdefault(part, ([], []))[rel]
            batch.extend(DiskTuple(m.key, m.ats, m.id, dts) for m in evicted)
        pages = sum(self.spec.costs.pages(len(b)) for pair in batches.values() for b in pair if b)
        self.clock.charge_scan(1, pages)  # a flush writes its runs one after the other: one seek
        self.clock.charge_cpu(pages)
        for part in sorted(batches):
            pair = batches[part]
            for rel in (0, 1):
                pair[rel].sort()
            slot = self.disk.write_flush(part, pair, dts)
            if hooks:
                self._on_slot(part, slot)
