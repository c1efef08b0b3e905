"""RPJ (Tao et al., SIGMOD 2005): optimal flush, a rate-based reactive stage, clean-up.

* **mm-stage** - :class:`~.base.ProgressiveJoin`, with the optimal flush of Lemma 1
  (:func:`~.stats.plan_optimal_flush`): memory keeps the tuples the *opposite* relation is
  most likely to hit next.
* **reactive stage** - each call of :meth:`RPJ.blocked` runs the md- or dd-task with the
  highest expected output rate Er / Et (Sect. 5.3), to completion.  Er is maintained
  incrementally:

  - Er_mem[i][j] (md-task R_i^mem[j] ⋈ R_o^disk[j]): + n_o^disk[j] / s per arrival; when a
    tuple t leaves R_i^mem[j] and no md-task of that partition ran since t.ATS (Lemma 2),
    − |S_bfr| / s, the part of R_o^disk[j] that existed at t.ATS - what its arrival added
    (clamped at 0); reset by the md-task;
  - Er_disk[j]: + |S_bfr| / s under the same condition; reset by the dd-task.

  Et_md = x·c_ran + (y − x)·c_seq over the x runs, y pages of the disk partition;
  Et_dd = 2·c_ran·(y1 + y2)·⌈log_f max(y1, y2)⌉.  Nothing worth doing (all Er = 0):
  ``blocked`` returns False and the driver idles until input resumes.
* **clean-up** - flush everything, dd-task per partition with the large fan-in.

:class:`RPJmd` / :class:`RPJdd` restrict the reactive stage to md- / dd-tasks (Sect. 6.2).
"""
from __future__ import annotations

import math
from typing import ClassVar, Optional

from joinlib.progressive.base import FlushRequest, ProgressiveJoin
from joinlib.progressive.model import JoinSpec, MemTuple, PairSink, VirtualClock
from joinlib.progressive.runs import RunStore
from joinlib.progressive.stats import plan_optimal_flush
from joinlib.progressive.tasks import dd_task, md_task

Task = tuple[str, int, int]
"""("md", relation of the memory side, partition) or ("dd", -1, partition)."""


class RPJ(ProgressiveJoin):
    """Rate-based progressive join."""

    name: ClassVar[str] = "RPJ"
    kinds: ClassVar[frozenset[str]] = frozenset({"md", "dd"})

    def __init__(self, spec: JoinSpec, store: RunStore, clock: VirtualClock, sink: PairSink, *,
                 index: Optional[bool] = None) -> None:
        super().__init__(spec, store, clock, sink, index=index)
        self.er_mem = [[0.0] * spec.partitions for _ in range(2)]
        self.er_disk = [0.0] * spec.partitions

    def _flush_requests(self) -> list[FlushRequest]:
        p_arr = self.stats.p_arr(self.clock.now_ms)
        return [(o, j, k) for o, j, k in plan_optimal_flush(p_arr, self.mem.sizes(), self.spec.flush_size)]

    def _on_arrival(self, rel: int, part: int) -> None:
        self.er_mem[rel][part] += self.disk.parts[part].n[1 - rel] / self.spec.s

    def _on_evict(self, rel: int, part: int, tuples: list[MemTuple]) -> None:
        dp = self.disk.parts[part]
        last = dp.last_md(rel)
        s = self.spec.s
        for t in tuples:
            if last is not None and last > t.ats:  # Lemma 2: its disk results are reported
                continue
            bfr = dp.flushed_before(1 - rel, t.ats) / s
            if bfr:
                self.er_mem[rel][part] = max(0.0, self.er_mem[rel][part] - bfr)
                self.er_disk[part] += bfr

    def blocked(self) -> bool:
        task = self.best_task()
        if task is None:
            return False
        kind, rel, part = task
        if kind == "md":
            md_task(self.ctx, self.mem.parts[rel][part], rel, part)
            self.er_mem[rel][part] = 0.0
        else:
            dd_task(self.ctx, part, self.spec.fanin)
            self.er_disk[part] = 0.0
        return True

    def rates(self) -> list[tuple[float, Task]]:
        """Er / Et of every task that may produce something, in the paper's loop order."""
        out: list[tuple[float, Task]] = []
        costs = self.spec.costs
        for j, dp in enumerate(self.disk.parts):
            if "md" in self.kinds:
                for rel in (0, 1):
                    er, other = self.er_mem[rel][j], 1 - rel
                    if er > 0 and dp.n[other] and self.mem.size(rel, j):
                        out.append((_rate(er, costs.scan(dp.runs[other], dp.pages[other])), ("md", rel, j)))
            if "dd" in self.kinds and self.er_disk[j] > 0 and len(dp.slots) > 1:
                out.append((_rate(self.er_disk[j], self.spec.et_dd(dp.pages[0], dp.pages[1])), ("dd", -1, j)))
        return out

    def best_task(self) -> Optional[Task]:
        """argmax Er / Et (the first one on ties), None when every rate is 0."""
        best: Optional[Task] = None
        best_rate = 0.0
        for rate, task in self.rates():
            if rate > best_rate:
                best, best_rate = task, rate
        return best


def _rate(er: float, et: float) -> float:
    return er / et if et > 0 else math.inf


class RPJmd(RPJ):
    """RPJ whose reactive stage runs md-tasks only (≈ an optimised XJoin)."""

    name: ClassVar[str] = "RPJ-md"
    kinds: ClassVar[frozenset[str]] = frozenset({"md"})


class RPJdd(RPJ):
    """RPJ whose reactive stage runs dd-tasks only (≈ an optimised HMJ)."""

    name: ClassVar[str] = "RPJ-dd"
    kinds: ClassVar[frozenset[str]] = frozenset({"dd"})
