"""HMJ, Hash-Merge Join (Mokbel et al.), as RPJ's paper describes it (Sect. 2.2).

* **concurrent flushing**: evicting R_1^mem[j] also evicts R_2^mem[j]; both become sorted
  runs of one slot (the paper's aligned k-th runs, whose pairs the mm-stage reported);
* flush policies, each repeated until n_flush tuples are freed (``all`` frees everything):
  ``all``; ``largest`` (the pair holding the largest R_i^mem[j]); ``smallest`` (the pair
  holding the smallest non-empty R_i^mem[j]); ``adaptive`` (HMJ's best; the paper gives no
  formula - ours: the pair maximising n1 + n2 − |n1 − n2|, i.e. large *and* balanced, ties
  to the larger sum);
* no md-stage: when blocked, the dd-stage - PSMJ over **every** partition with new runs,
  before HMJ looks at its input again (one call of :meth:`HMJ.blocked`);
* clean-up: flush all, PSMJ per partition.
"""
from __future__ import annotations

from typing import ClassVar, Optional

from joinlib.progressive.base import FlushRequest, ProgressiveJoin
from joinlib.progressive.disk import Slot
from joinlib.progressive.model import JoinSpec, PairSink, SpecError, VirtualClock
from joinlib.progressive.runs import RunStore
from joinlib.progressive.tasks import dd_task

POLICIES = ("adaptive", "all", "largest", "smallest")


class HMJ(ProgressiveJoin):
    name: ClassVar[str] = "HMJ"

    def __init__(self, spec: JoinSpec, store: RunStore, clock: VirtualClock, sink: PairSink, *,
                 index: Optional[bool] = None, policy: str = "adaptive") -> None:
        if policy not in POLICIES:
            raise SpecError(f"HMJ flush policy {policy!r}: choose from {', '.join(POLICIES)}")
        super().__init__(spec, store, clock, sink, index=index)
        self.policy = policy
        self.dirty = [False] * spec.partitions

    def _flush_requests(self) -> list[FlushRequest]:
        sizes = self.mem.sizes()
        parts: list[int] = []
        if self.policy == "all":
            parts = [j for j in range(self.spec.partitions) if sizes[0][j] or sizes[1][j]]
        freed = sum(sizes[0][j] + sizes[1][j] for j in parts)
        while freed < self.spec.flush_size:
            j = self._victim(sizes)
            if j is None:
                break
            parts.append(j)
            freed += sizes[0][j] + sizes[1][j]
            sizes[0][j] = sizes[1][j] = 0
        return [(rel, j, None) for j in parts for rel in (0, 1)]

    def _victim(self, sizes: list[list[int]]) -> Optional[int]:
        """The partition pair the policy evicts next (None when memory is empty)."""
        cands = [j for j in range(self.spec.partitions) if sizes[0][j] or sizes[1][j]]
        if not cands:
            return None
        n1, n2 = sizes
        if self.policy == "largest":
            return max(cands, key=lambda j: (max(n1[j], n2[j]), -j))
        if self.policy == "smallest":
            return min(cands, key=lambda j: (min(n for n in (n1[j], n2[j]) if n), j))
        return max(cands, key=lambda j: (n1[j] + n2[j] - abs(n1[j] - n2[j]), n1[j] + n2[j], -j))

    def _on_slot(self, part: int, slot: Slot) -> None:
        dp = self.disk.parts[part]
        if dp.n[0] and dp.n[1] and len(dp.slots) > 1:
            self.dirty[part] = True

    def blocked(self) -> bool:
        todo = [j for j, dirty in enumerate(self.dirty) if dirty]
        for j in todo:
            dd_task(self.ctx, j, self.spec.fanin)
            self.dirty[j] = False
        return bool(todo)
