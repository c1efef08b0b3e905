"""Plan by measurement: run candidate plans on a sample of the data and keep the cheapest.

The candidates are the plans of every planner under every model, ``central`` at every node, each
algorithm on every step, and every candidate of ``auto``'s search (mixed plans, sequences started
at any node: :func:`joinlib.planner.registry.candidates`, passed in as ``candidates``).  Each is
*run* on the deterministic simulator over a sample long enough for every window to fill
(:func:`joinlib.planner.measure.sample_ms`: at least twice the largest window); by default the
objective is the bytes per second of the epochs after the windows filled, what a long run pays.
The simulator ships the bytes Kafka would carry, so on the sample the choice is exact for
``bytes``; ``time`` (processing + transmission, the paper's metric) includes noisy wall-clock
processing time.  ``auto`` measures a short list of the same candidates; this planner measures all.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Optional

from tqdm import tqdm

from joinlib.errors import PlanError
from joinlib.model import Query
from joinlib.plan.logical import Plan
from joinlib.planner.measure import Streams, sample_ms, sample_of, steady_bytes

OBJECTIVES = ("bytes", "time")

#: the plans to try on a query, by name (:func:`joinlib.planner.registry.candidates`)
Candidates = Callable[[Query, Optional[Streams]], Mapping[str, Plan]]


@dataclass(frozen=True)
class Candidate:
    name: str
    plan: Plan
    bytes: int                 # bytes of the whole sample
    steady_bytes_per_s: float  # bytes per second once the windows are full
    execution_s_per_s: float
    results: int


def measure_candidates(query: Query, streams: Streams, length_ms: Optional[int] = None,
            progress: bool = False, *, candidates: Candidates) -> list[Candidate]:
    """Run every candidate on the sample; cheapest (by steady bytes per second) first."""
    length = length_ms or sample_ms(query, streams)
    items: Iterable[tuple[str, Plan]] = candidates(query, streams).items()
    if progress:
        items = tqdm(items, desc="sampling plans", unit="plan", leave=False)
    out = []
    for name, plan in items:
        m = steady_bytes(query, streams, plan, length)
        out.append(Candidate(name, plan, m.bytes, m.steady_bytes_per_s, m.execution_s_per_s, m.results))
    if len({c.results for c in out}) > 1:  # every plan is exact: a difference is a bug
        raise RuntimeError(f"candidate plans disagree on the sample's results: {[(c.name, c.results) for c in out]}")
    return sorted(out, key=lambda c: (c.steady_bytes_per_s, c.bytes))


def sampled(query: Query, streams: Optional[Streams], objective: str = "bytes",
            length_ms: Optional[int] = None, progress: bool = False, *, candidates: Candidates) -> Plan:
    """The candidate plan that is cheapest on the sample (``objective``: bytes | time)."""
    if objective not in OBJECTIVES:
        raise PlanError(f"unknown objective {objective!r} (choose from {', '.join(OBJECTIVES)})")
    if not streams:
        raise PlanError("the 'sampled' planner measures candidate plans on data: give --data DIR")
    ranked = measure_candidates(query, streams, length_ms, progress, candidates=candidates)
    if objective == "time":
        ranked.sort(key=lambda c: (c.execution_s_per_s, c.bytes))
    return ranked[0].plan


__all__ = ["Candidate", "OBJECTIVES", "measure_candidates", "sample_of", "sampled"]
