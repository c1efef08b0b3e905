"""The scheduler's unit: a *lane*, phases that run epoch after epoch in a fixed order.

A phase is a function of the epoch that does its work and returns True, or returns False
(changing nothing) when an input it needs is not there yet (a message, rows of the previous
step, a window not inserted that far).  A lane runs its phases in order for epoch e, then for
e + 1, ...; it never runs ahead of a phase that cannot run.  Phases that share mutable state (a
replica and the steps probing it, a sender and the semijoins answering from it) are put in
one lane, in a canonical order; every other phase has a lane of its own, so epochs pipeline:
a ship phase of epoch e + 1 does not wait for the round trip of epoch e.

Each lane covers an epoch range ``[lo, hi]`` (``hi`` None: open-ended; a run's last epoch or a
generation's stop epoch closes it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from joinlib.runtime.sensor import Sensor

PhaseFn = Callable[[int], bool]
_perf = time.perf_counter


@dataclass(frozen=True, slots=True)
class Phase:
    """``fn(epoch) -> ran?``; ``op`` names it in processing-time reports; ``rank`` orders the
    phases of a lane."""

    rank: tuple[int, ...]
    op: str
    fn: PhaseFn


class Lane:
    """Phases cycling over an epoch range; ``epoch`` is the next epoch to run (its cursor:
    the next phase within it)."""

    __slots__ = ("name", "phases", "epoch", "cursor", "hi", "_n")

    def __init__(self, name: str, phases: list[Phase], lo: int, hi: Optional[int]) -> None:
        self.name = name
        self.phases = sorted(phases, key=lambda p: p.rank)
        self.epoch = lo
        self.cursor = 0
        self.hi = hi
        self._n = len(self.phases)

    @property
    def done(self) -> bool:
        return self.hi is not None and self.epoch > self.hi

    def past(self, epoch: int) -> bool:
        """Has the lane finished ``epoch`` (or will it never run it)?"""
        return self.epoch > epoch or (self.hi is not None and epoch > self.hi)

    def run(self, site: str, sensor: Sensor) -> bool:
        """Run phases while they can; True if any ran."""
        hi = self.hi
        if hi is not None and self.epoch > hi:
            return False
        moved, phases, on_phase = False, self.phases, sensor.on_phase
        while True:
            ph = phases[self.cursor]
            t0 = _perf()
            if not ph.fn(self.epoch):
                return moved
            on_phase(site, ph.op, _perf() - t0)
            moved = True
            self.cursor += 1
            if self.cursor == self._n:
                self.cursor = 0
                self.epoch += 1
                if hi is not None and self.epoch > hi:
                    return True

    def __repr__(self) -> str:
        return f"Lane({self.name}, epoch={self.epoch}, cursor={self.cursor}, hi={self.hi})"
