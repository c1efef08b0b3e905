"""Arrival statistics and the optimal flush of Lemma 1 (Sect. 4).

p_arr[i][j] = P(R_i) · P(j | R_i) (Eq. 6): P(j | R_i) from the tuples ever received in
each partition, P(R_i) from exponentially decayed recent counts n_rcnt (λ per time unit
of virtual time), 0 once R_i has ended.
"""
from __future__ import annotations

from typing import Optional

FlushPlan = list[tuple[int, int, int]]
"""(relation, partition, tuples to evict) in eviction order."""


class ArrivalStats:
    """n_total[i][j], α_i of the current time unit, n_rcnt[i] and the end-of-stream flags."""

    def __init__(self, partitions: int, lam: float, unit_ms: float) -> None:
        self.n_total = [[0] * partitions for _ in range(2)]
        self.sum_total = [0, 0]
        self.alpha = [0, 0]
        self.n_rcnt: Optional[list[float]] = None
        self.lam = lam
        self.unit_ms = unit_ms
        self.unit = 0
        self.ended = [False, False]

    def roll(self, now_ms: float) -> None:
        """Close the time units elapsed up to ``now_ms``: n_rcnt ← λ·n_rcnt + (1 − λ)·α."""
        unit = int(now_ms // self.unit_ms)
        if unit <= self.unit:
            return
        if self.n_rcnt is None:  # the first unit [0, 1] sets n_rcnt directly
            self.n_rcnt = [float(a) for a in self.alpha]
        else:
            self.n_rcnt = [self.lam * r + (1 - self.lam) * a for r, a in zip(self.n_rcnt, self.alpha, strict=True)]
        idle = unit - self.unit - 1  # units without arrivals decay n_rcnt
        if idle and self.lam < 1:
            self.n_rcnt = [r * self.lam ** idle for r in self.n_rcnt]
        self.alpha = [0, 0]
        self.unit = unit

    def record(self, rel: int, part: int, now_ms: float) -> None:
        self.roll(now_ms)
        self.n_total[rel][part] += 1
        self.sum_total[rel] += 1
        self.alpha[rel] += 1

    def end(self, rel: int) -> None:
        self.ended[rel] = True

    def p_rel(self) -> list[float]:
        """P(R_i): recent arrivals' share (the current unit's counts before one has closed)."""
        recent = self.n_rcnt if self.n_rcnt is not None else [float(a) for a in self.alpha]
        total = recent[0] + recent[1]
        return [r / total for r in recent] if total > 0 else [0.5, 0.5]

    def p_arr(self, now_ms: float) -> list[list[float]]:
        """p_arr[i][j] (Eq. 6) at ``now_ms``."""
        self.roll(now_ms)
        p_rel = self.p_rel()
        out = []
        for i in range(2):
            tot = self.sum_total[i]
            if self.ended[i] or tot == 0:
                out.append([0.0] * len(self.n_total[i]))
            else:
                out.append([p_rel[i] * n / tot for n in self.n_total[i]])
        return out


def plan_optimal_flush(p_arr: list[list[float]], n_mem: list[list[int]], n_flush: int) -> FlushPlan:
    """Fig. 4: walk the arrival probabilities in ascending order; for p_i[j] evict from the
    **opposite** relation's partition j (its tuples are worth p_i[j] each, Eq. 4) until
    ``n_flush`` tuples are planned.  Ties break by (relation, partition)."""
    order = sorted((p, i, j) for i, row in enumerate(p_arr) for j, p in enumerate(row))
    plan: FlushPlan = []
    left = n_flush
    for _, i, j in order:
        if left <= 0:
            break
        o = 1 - i
        k = min(n_mem[o][j], left)
        if k > 0:
            plan.append((o, j, k))
            left -= k
    return plan
