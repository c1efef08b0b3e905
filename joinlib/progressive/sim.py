"""Deterministic virtual-time simulation of two relations arriving over a network.

* :class:`Workload` - the paper's data (Sect. 6): each tuple belongs to R1 with
  probability P(R1), falls in partition j with P(j | R_i) = 1% + (8/19)%·(j − 1)
  (``harmony``: the same for R2; ``reverse``: P(j | R2) = P(21 − j | R1)), and takes a
  uniform join value among the partition's values (H(v) = v mod n_part).
* :class:`ArrivalNetwork` - gaps between consecutive arrivals: ``reliable`` a fixed 1 ms;
  ``unreliable`` k ms, k ∈ 1..30, P(k) ∝ k^−θ (θ = 1.05, mean ≈ 7.12 ms).  The join
  decides the input is blocked after ``timeout_ms`` (25 ms) without an arrival.
* :func:`simulate` - one server: arrivals queue while the join works (tasks are not
  pre-empted); when the queue is empty and no arrival came for the timeout, the join
  runs reactive tasks until the next arrival is due or it has nothing to do; once both
  relations ended and the queue is drained, the clean-up.  All in virtual time
  (:class:`~.model.VirtualClock`), seeded: the same inputs give the same run.
"""
from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Optional

from joinlib.progressive.base import ProgressiveJoin
from joinlib.progressive.model import PHASES, Id, Key, Phase, SpecError, VirtualClock


class Arrival(NamedTuple):
    """A tuple of relation ``rel`` (0 = R1, 1 = R2), or its end-of-stream when ``end`` (what arrives, unlike a
    live source's record, :class:`joinlib.ingest.records.Event`)."""

    rel: int
    id: Id
    key: Key
    end: bool = False


def end_of(rel: int) -> Arrival:
    return Arrival(rel, 0, 0, True)


# --------------------------------------------------------------------------- workload

def partition_probabilities(partitions: int, distribution: str) -> tuple[list[float], list[float]]:
    """P(j | R1) and P(j | R2) for j = 1..n_part (the paper's, rescaled to sum to 1)."""
    if partitions == 1:
        return [1.0], [1.0]
    step = 0.08 / (partitions - 1) * (20 / partitions)
    p1 = [0.01 * 20 / partitions + step * j for j in range(partitions)]
    total = sum(p1)
    p1 = [p / total for p in p1]
    if distribution == "harmony":
        return p1, list(p1)
    if distribution == "reverse":
        return p1, p1[::-1]
    raise SpecError(f"distribution {distribution!r}: choose harmony or reverse")


@dataclass(frozen=True)
class Workload:
    """``n`` tuples, P(R1):P(R2) = ``ratio``:1, join values in [1, domain]."""

    n: int
    ratio: float = 1.0
    distribution: str = "harmony"
    domain: int = 10_000
    partitions: int = 20
    seed: int = 1

    def __post_init__(self) -> None:
        if self.n < 0 or self.ratio <= 0 or self.domain < self.partitions:
            raise SpecError("workload: n >= 0, ratio > 0, domain >= partitions")
        partition_probabilities(self.partitions, self.distribution)

    def values(self, part: int) -> range:
        """Join values v in [1, domain] with v mod n_part = paper partition j (j = n_part -> 0)."""
        r = (part + 1) % self.partitions
        return range(r if r else self.partitions, self.domain + 1, self.partitions)

    def events(self) -> Iterator[Arrival]:
        """Arrivals in order, each relation's end right after its last tuple; ids count from 0."""
        rng = random.Random(self.seed)
        p_r1 = self.ratio / (self.ratio + 1)
        rels = [0 if rng.random() < p_r1 else 1 for _ in range(self.n)]
        last = {rel: i for i, rel in enumerate(rels)}
        probs = partition_probabilities(self.partitions, self.distribution)
        cum = [_cumulative(p) for p in probs]
        parts = range(self.partitions)
        values = [self.values(j) for j in parts]
        ids = [0, 0]
        for rel in (0, 1):
            if rel not in last:
                yield end_of(rel)
        for i, rel in enumerate(rels):
            part = rng.choices(parts, cum_weights=cum[rel])[0]
            vals = values[part]
            yield Arrival(rel, ids[rel], vals[rng.randrange(len(vals))])
            ids[rel] += 1
            if last[rel] == i:
                yield end_of(rel)


def _cumulative(p: list[float]) -> list[float]:
    out, acc = [], 0.0
    for x in p:
        acc += x
        out.append(acc)
    return out


# --------------------------------------------------------------------------- network

NetworkKind = Literal["reliable", "unreliable"]


@dataclass(frozen=True)
class ArrivalNetwork:
    """Inter-arrival gaps in virtual ms and the stall timeout (not the sites' links of
    :class:`joinlib.model.Network`)."""

    kind: NetworkKind = "reliable"
    gap_ms: float = 1.0
    max_gap_ms: int = 30
    theta: float = 1.05
    timeout_ms: float = 25.0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("reliable", "unreliable"):
            raise SpecError(f"network {self.kind!r}: choose reliable or unreliable")
        if self.gap_ms <= 0 or self.max_gap_ms < 1 or self.timeout_ms <= 0:
            raise SpecError("network: gaps and timeout must be > 0")

    def gaps(self) -> Iterator[float]:
        """An endless, seeded sequence of gaps."""
        if self.kind == "reliable":
            while True:
                yield self.gap_ms
        rng = random.Random(self.seed)
        ks = list(range(1, self.max_gap_ms + 1))
        cum = _cumulative([math.pow(k, -self.theta) for k in ks])
        while True:
            yield from map(float, rng.choices(ks, cum_weights=cum, k=4096))

    def mean_gap_ms(self) -> float:
        if self.kind == "reliable":
            return self.gap_ms
        w = [math.pow(k, -self.theta) for k in range(1, self.max_gap_ms + 1)]
        return sum(k * x for k, x in zip(range(1, self.max_gap_ms + 1), w, strict=True)) / sum(w)


def schedule(events: Iterable[Arrival], gaps: Iterator[float]) -> Iterator[tuple[float, Arrival]]:
    """Arrival times: the first tuple at 0, each next one a gap later; an end-of-stream at
    the time of the tuple before it."""
    t: Optional[float] = None
    for ev in events:
        if not ev.end:
            t = 0.0 if t is None else t + next(gaps)
        yield (t or 0.0), ev


# --------------------------------------------------------------------------- recording

@dataclass
class Recorder:
    """A sink counting results by phase and sampling (time, results, cost) every ``step_ms``;
    ``forward`` also receives each result (the CLI's writer, a checker); ``at_mark`` counts
    the results produced by virtual time ``mark_ms`` (the end of transmission)."""

    clock: VirtualClock
    step_ms: float = 1000.0
    forward: Optional[Callable[[Id, Id, Phase, int], None]] = None
    mark_ms: float = float("inf")
    results: int = 0
    at_mark: int = 0
    by_phase: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    samples: list[tuple[float, int, float]] = field(default_factory=list)
    _next: float = 0.0

    def __call__(self, left: Id, right: Id, phase: Phase, t: int) -> None:
        self.results += 1
        self.by_phase[phase] += 1
        now = self.clock.now_ms
        if now <= self.mark_ms:
            self.at_mark += 1
        if now >= self._next:
            self.sample()
        if self.forward is not None:
            self.forward(left, right, phase, t)

    def sample(self) -> None:
        now = self.clock.now_ms
        self.samples.append((now, self.results, self.clock.cost_ms))
        self._next = (now // self.step_ms + 1) * self.step_ms


@dataclass
class RunStats:
    """Times (virtual ms) and counts of one simulated run."""

    transmission_end_ms: float = 0.0
    cleanup_start_ms: float = 0.0
    end_ms: float = 0.0
    arrivals: int = 0
    stalls: int = 0
    reactive_tasks: int = 0
    results_before_cleanup: int = 0


def simulate(join: ProgressiveJoin, timed: Iterable[tuple[float, Arrival]], network: ArrivalNetwork,
             recorder: Recorder, progress: Optional[Callable[[int], None]] = None) -> RunStats:
    """Drive ``join`` through the timed events (see the module docstring); returns the run's
    times and counts.  ``progress(arrivals)`` is called every 1000 arrivals."""
    clock, stats = join.clock, RunStats()
    it = iter(timed)
    nxt = next(it, None)
    pending: deque[tuple[float, Arrival]] = deque()
    last_arrival = 0.0
    while True:
        while nxt is not None and nxt[0] <= clock.now_ms:
            pending.append(nxt)
            last_arrival = nxt[0]
            nxt = next(it, None)
        if pending:
            _deliver(join, pending.popleft()[1], stats, recorder, progress)
            continue
        if nxt is None:
            break
        blocked_at = max(clock.now_ms, last_arrival + network.timeout_ms)
        if nxt[0] > blocked_at:
            clock.advance_to(blocked_at)
            stats.stalls += 1
            while clock.now_ms < nxt[0] and join.blocked():
                stats.reactive_tasks += 1
        clock.advance_to(nxt[0])
    stats.transmission_end_ms = last_arrival
    stats.cleanup_start_ms = clock.now_ms
    stats.results_before_cleanup = recorder.results
    recorder.sample()
    join.cleanup()
    stats.end_ms = clock.now_ms
    recorder.sample()
    return stats


def _deliver(join: ProgressiveJoin, ev: Arrival, stats: RunStats, recorder: Recorder,
             progress: Optional[Callable[[int], None]]) -> None:
    if ev.end:
        join.end(ev.rel)
        return
    join.arrival(ev.rel, ev.id, ev.key)
    stats.arrivals += 1
    if progress is not None and stats.arrivals % 1000 == 0:
        progress(stats.arrivals)
