"""XJoin (Urhan & Franklin), as RPJ's paper describes it (Sect. 2.1).

* flush **largest**: evict the whole R_i^mem[j] with the most tuples (over both relations);
  repeated until n_flush tuples are freed, so every algorithm frees the same amount;
* md-stage when blocked: **one** md-task per stall - the largest memory partition joins
  the other relation's disk partition ("XJoin assumes that the transmission ... will
  resume before the md-stage terminates"), among partitions whose other side has a disk
  partition at all;
* dd-stage only after both inputs ended: a hash join per partition (each run read once).

Duplicate avoidance by ATS/DTS and the md-task times, the rules of :mod:`.tasks`.
"""
from __future__ import annotations

from typing import ClassVar, Optional

from joinlib.progressive.base import FlushRequest, ProgressiveJoin
from joinlib.progressive.model import JoinSpec, PairSink, VirtualClock
from joinlib.progressive.runs import RunStore
from joinlib.progressive.tasks import hash_join_task, md_task


class XJoin(ProgressiveJoin):
    name: ClassVar[str] = "XJoin"

    def __init__(self, spec: JoinSpec, store: RunStore, clock: VirtualClock, sink: PairSink, *,
                 index: Optional[bool] = None) -> None:
        super().__init__(spec, store, clock, sink, index=index)
        self._stage_done_at = -1  # tick of the last arrival when the md-stage last ran

    def _flush_requests(self) -> list[FlushRequest]:
        sizes = self.mem.sizes()
        out: list[FlushRequest] = []
        freed = 0
        while freed < self.spec.flush_size:
            n, rel, part = max((n, -rel, -part) for rel, row in enumerate(sizes) for part, n in enumerate(row))
            rel, part = -rel, -part
            if n == 0:
                break
            out.append((rel, part, None))
            sizes[rel][part] = 0
            freed += n
        return out

    def blocked(self) -> bool:
        if self._stage_done_at == self.last_arrival_tick:  # one md-task per stall
            return False
        self._stage_done_at = self.last_arrival_tick
        best: Optional[tuple[int, int, int]] = None
        for rel in (0, 1):
            for part, dp in enumerate(self.disk.parts):
                size = self.mem.size(rel, part)
                if size and dp.n[1 - rel] and (best is None or size > best[0]):
                    best = (size, rel, part)
        if best is None:
            return False
        _, rel, part = best
        md_task(self.ctx, self.mem.parts[rel][part], rel, part)
        return True

    def _cleanup_partition(self, part: int) -> None:
        dp = self.disk.parts[part]
        if dp.n[0] and dp.n[1]:
            hash_join_task(self.ctx, part, "cleanup")
