"""Plan by measurement: run candidate plans on a sample of the data and keep the cheapest.

The cost models price each join sequence on its own (Eq. 1 of the paper), so they cannot
see that a window replica or a shipped stream serves every sequence at a site — which is
exactly what makes ``central`` (every stream shipped once, to one site) cheap, and why a
formula-optimal plan can ship several times more.  This planner sidesteps the model:
the candidates are the plans of every planner under every model, ``central`` at every
site and each algorithm on every step (:func:`joinlib.planner.registry.candidates`, passed
in as ``candidates``), and each is *run* on the deterministic simulator
over the first ``sample_ms`` of the data; the cheapest by the measured objective wins.
The simulator ships the bytes Kafka would carry, so on the sample the choice is exact for
``bytes``; ``time`` (processing + transmission, the paper's metric) includes noisy
wall-clock processing time.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Optional

from ..errors import PlanError
from ..model import Query, Tup
from ..plan import Plan

OBJECTIVES = ("bytes", "time")

#: the plans to try on a query, by name (:func:`joinlib.planner.registry.candidates`)
Candidates = Callable[[Query], Mapping[str, Plan]]


@dataclass(frozen=True)
class Candidate:
    name: str
    plan: Plan
    bytes: int
    execution_s_per_s: float
    results: int


def sample_of(streams: dict[str, list[Tup]], sample_ms: int) -> dict[str, list[Tup]]:
    """The tuples of the first ``sample_ms`` of event time."""
    starts = [ts[0].ts for ts in streams.values() if ts]
    if not starts:
        return streams
    end = min(starts) + sample_ms
    return {name: [t for t in tups if t.ts < end] for name, tups in streams.items()}


def measure(query: Query, streams: dict[str, list[Tup]], sample_ms: int = 2000,
            progress: bool = False, *, candidates: Candidates) -> list[Candidate]:
    """Run every candidate on the sample; cheapest (by bytes) first."""
    from ..engine import run_embedded
    from ..runtime.sink import CountingSink
    sample = sample_of(streams, sample_ms)
    items: Iterable[tuple[str, Plan]] = candidates(query).items()
    if progress:
        from tqdm import tqdm
        items = tqdm(items, desc="sampling plans", unit="plan", leave=False)
    out = []
    for name, plan in items:
        sink = CountingSink()
        rep = run_embedded(query, sample, plan, sink)
        out.append(Candidate(name, plan, rep.bytes, rep.execution_s_per_s, rep.results))
    if len({c.results for c in out}) > 1:  # every plan is exact: a difference is a bug
        raise RuntimeError(f"candidate plans disagree on the sample's results: {[(c.name, c.results) for c in out]}")
    return sorted(out, key=lambda c: (c.bytes, c.execution_s_per_s))


def sampled(query: Query, streams: Optional[dict[str, list[Tup]]], objective: str = "bytes",
            sample_ms: int = 2000, progress: bool = False, *, candidates: Candidates) -> Plan:
    """The candidate plan that is cheapest on the sample (``objective``: bytes | time)."""
    if objective not in OBJECTIVES:
        raise PlanError(f"unknown objective {objective!r} (choose from {', '.join(OBJECTIVES)})")
    if not streams:
        raise PlanError("the 'sampled' planner measures candidate plans on data: give --data DIR")
    ranked = measure(query, streams, sample_ms, progress, candidates=candidates)
    if objective == "time":
        ranked.sort(key=lambda c: (c.execution_s_per_s, c.bytes))
    return ranked[0].plan
