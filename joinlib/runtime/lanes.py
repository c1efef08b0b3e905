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
from typing import Any, Callable, Optional

from joinlib.kernels import kernel
from joinlib.runtime.sensor import Sensor, TotalsSensor

PhaseFn = Callable[[int], bool]
#: a condition a phase cannot run without, as (obj, name, mul, add, start): at an epoch e >= start, ``obj[name]`` (a
#: dict: its item, -1 when missing) or else ``getattr(obj, name)`` must be at least ``mul * e + add``
Gate = tuple[Any, Any, int, int, int]
#: the clock phases are timed by (bench/ab_embedded.py sets the thread's CPU clock); read at every call
_perf = time.perf_counter
#: the loops below in C (joinlib/runtime/_lanesc.c), None: this module's Python form
_c = kernel("joinlib.runtime._lanesc")


@dataclass(frozen=True, slots=True)
class Phase:
    """``fn(epoch) -> ran?``; ``op`` names it in processing-time reports; ``rank`` orders the
    phases of a lane."""

    rank: tuple[int, ...]
    op: str
    fn: PhaseFn
    #: a message the phase cannot run without, as (host, key prefix, start): at an epoch e >= start the phase
    #: answers False (doing nothing) until ``host.inbox`` holds ``prefix + (e,)``, so the scheduler tests that
    #: and skips the call -- most polls of a phase that waits for a message find none (issue 27)
    wait: Optional[tuple[Any, tuple[Any, ...], int]] = None
    #: conditions the phase tests first and answers False (doing nothing) without, so the scheduler tests them and
    #: skips the call: a window or replica not applied that far (its ``next``), a watermark short of the epoch's end,
    #: the previous step not done -- about two polls in three on the demo's query fail so, each a Python call
    #: (issue 27).  Each gate must be implied by the phase's own test; tests/property/test_lane_gates.py checks that
    #: every gate that fails in a run finds its phase answering False (``CHECK_GATES``).
    gates: tuple[Gate, ...] = ()


def next_gate(obj: Any, start: int = 0) -> Gate:
    """The gate of a phase that needs ``obj`` (a window or a replica) applied through its epoch: ``obj.next > e``."""
    return (obj, "next", 1, 1, start)


#: tests: when a gate is shut, call the phase anyway and fail unless it answers False (the Python form only)
CHECK_GATES = False


def shut(gates: tuple[Gate, ...], e: int) -> bool:
    """Is a gate of ``gates`` shut at epoch ``e`` (:attr:`Phase.gates`)?"""
    for obj, name, mul, add, start in gates:
        if e >= start:
            v = obj.get(name, -1) if type(obj) is dict else getattr(obj, name)
            if v < mul * e + add:
                return True
    return False


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
        if _c is not None and not CHECK_GATES:
            return bool(_c.run_lane(self, site, hook(sensor), _perf))
        hi = self.hi
        if hi is not None and self.epoch > hi:
            return False
        moved, phases, on_phase = False, self.phases, sensor.on_phase
        t0 = _perf()   # once before the first phase, then once after each that runs: its end, the next one's start
        while True:
            ph = phases[self.cursor]
            w = ph.wait
            if w is not None and self.epoch >= w[2] and w[1] + (self.epoch,) not in w[0].inbox:
                return moved
            if ph.gates and shut(ph.gates, self.epoch):
                if CHECK_GATES and ph.fn(self.epoch):
                    raise AssertionError(f"{ph.op} phase {ph.fn!r} ran at epoch {self.epoch} with a gate shut")
                return moved
            if not ph.fn(self.epoch):
                return moved
            t1 = _perf()
            on_phase(site, ph.op, t1 - t0)
            t0 = t1
            moved = True
            self.cursor += 1
            if self.cursor == self._n:
                self.cursor = 0
                self.epoch += 1
                if hi is not None and self.epoch > hi:
                    return True

    def __repr__(self) -> str:
        return f"Lane({self.name}, epoch={self.epoch}, cursor={self.cursor}, hi={self.hi})"


def hook(sensor: Sensor) -> object:
    """What the C loop reports a phase's time to: a :class:`TotalsSensor`'s totals, added to in place (what its
    ``on_phase`` does, without the call), else ``sensor.on_phase``."""
    return sensor.processing if type(sensor) is TotalsSensor else sensor.on_phase


def lowest_epoch(lanes: list[Lane], low: int) -> int:
    """The lowest epoch a lane of ``lanes`` that is not done still runs, at most ``low`` (:attr:`Lane.done`, inlined:
    windows and replicas ask this at every insert, about their readers)."""
    for u in lanes:
        ep = u.epoch
        if ep < low and (u.hi is None or ep <= u.hi):
            low = ep
    return low


def run_lanes(lanes: list[Lane], site: str, sensor: Sensor) -> bool:
    """Run every lane as far as it can, round robin until every other lane has failed since the last one that
    moved (a lane runs as far as it can, so only another lane's progress can unblock it); True if anything ran.
    ``lanes`` as it is at the call: a phase that changes the host's lanes takes effect at the next call."""
    if _c is not None and not CHECK_GATES:
        return _c.run_lanes(lanes, site, hook(sensor), _perf)  # type: ignore[no-any-return]
    lanes = list(lanes)
    ran, n, i, idle = False, len(lanes), 0, 0
    while idle < n - 1 or (not ran and idle < n):
        if lanes[i].run(site, sensor):
            ran, idle = True, 0
        else:
            idle += 1
        i = i + 1 if i + 1 < n else 0
    return ran
