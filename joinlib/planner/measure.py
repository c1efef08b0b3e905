"""Measuring plans on a sample of the data: long enough for every window to fill.

A plan's bytes per second grow while its windows fill (a semijoin finds more partners in a full
window, a replica ships more), so a sample shorter than the largest window makes semijoins look
cheap.  :func:`sample_ms` is at least twice the fill time, and :func:`steady_bytes` counts only the
messages of the epochs after the fill: the rate a long run pays.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Union

from joinlib.data.stats import DEFAULT_RATE
from joinlib.mjoin.derived import TreeProgram, deploy
from joinlib.mjoin.tree_plans import PartitionedTrees
from joinlib.model import Query, Tup
from joinlib.plan.logical import Plan
from joinlib.plan.partitioned import Partitioned
from joinlib.protocol.messages import Envelope, TupleBatch
from joinlib.protocol.wire import envelope_size
from joinlib.runtime.report import Report
from joinlib.runtime.sink import CountingSink
from joinlib.sim.engine import run_embedded
from joinlib.sim.tree_engine import run_deployment, run_tree

Streams = dict[str, list[Tup]]
Runnable = Union[Plan, Partitioned, TreeProgram, PartitionedTrees]
MIN_SAMPLE_EPOCHS = 20  # epochs measured after the windows are full


def sample_of(streams: Streams, sample_ms: int) -> Streams:
    """The tuples of the first ``sample_ms`` of event time."""
    starts = [ts[0].ts for ts in streams.values() if ts]
    if not starts:
        return streams
    end = min(starts) + sample_ms
    return {name: [t for t in tups if t.ts < end] for name, tups in streams.items()}


def fill_ms(query: Query, streams: Optional[Streams] = None) -> int:
    """When every window is full: the largest time window; for a tuple window, the time its
    stream takes to produce that many tuples (measured rate, else the declared one)."""
    out = 0.0
    for s in query.streams:
        if s.window.is_time:
            out = max(out, s.window.size)
            continue
        tups = (streams or {}).get(s.name) or []
        if len(tups) > 1 and tups[-1].ts > tups[0].ts:
            rate = (len(tups) - 1) / ((tups[-1].ts - tups[0].ts) / 1000.0)
        else:
            rate = s.stats.rate or DEFAULT_RATE
        out = max(out, 1000.0 * s.window.size / max(rate, 1e-9))
    return int(math.ceil(out))


def sample_ms(query: Query, streams: Optional[Streams] = None) -> int:
    """A sample long enough for windows to fill and then be measured: the larger of 2 × the fill
    time and the fill time + :data:`MIN_SAMPLE_EPOCHS` batch intervals."""
    fill, tau = fill_ms(query, streams), query.execution.interval_ms
    return max(2 * fill, fill + MIN_SAMPLE_EPOCHS * tau, 2000)


@dataclass(frozen=True)
class Sample:
    """One plan run on a sample: bytes per second of the epochs after the windows filled, bytes
    of the whole sample, results, and the paper's execution time per second of stream time."""

    steady_bytes_per_s: float
    bytes: int
    results: int
    execution_s_per_s: float


def steady_bytes(query: Query, streams: Streams, plan: Runnable, length_ms: int) -> Sample:
    """Run ``plan`` (any kind ``auto`` weighs) on the first ``length_ms`` of ``streams`` (see :class:`Sample`)."""
    sample = sample_of(streams, length_ms)
    tau = query.execution.interval_ms
    first = min((ts[0].ts for ts in sample.values() if ts), default=0)
    e0 = (first + fill_ms(query, streams)) // tau + 1
    late = [0]

    def size_of(env: Envelope) -> int:
        n = envelope_size(env)
        if env.epoch >= e0:
            late[0] += n
        return n
    rep = run_candidate(query, sample, plan, size_of)
    last = max((t.ts for ts in sample.values() for t in ts), default=0) // tau
    epochs = last - e0 + 1
    if epochs <= 0:  # the data is shorter than a window: compare whole runs
        rate = rep.bytes / max(1.0, rep.duration_ms / 1000.0)
    else:
        rate = late[0] / (epochs * tau / 1000.0)
    return Sample(rate, rep.bytes, rep.results, rep.execution_s_per_s)


def run_candidate(query: Query, streams: Streams, plan: Runnable,
                  size_of: Optional[Callable[[Envelope], int]] = None) -> Report:
    """Run any kind of candidate on the simulated network: a plan or a plan per partition
    (:func:`~joinlib.sim.engine.run_embedded`), an MJoin tree or a tree per partition (every operator on
    one network, :func:`~joinlib.sim.tree_engine.run_deployment`)."""
    if isinstance(plan, (Plan, Partitioned)):
        return run_embedded(query, streams, plan, CountingSink(), size_of=size_of)
    if isinstance(plan, TreeProgram):
        return run_tree(plan, streams, CountingSink(), size_of=size_of)
    parts = plan.split.split(query, streams)
    sink = CountingSink()
    return run_deployment(deploy(plan.programs, share=False),
                          {p.base.name: s for p, s in zip(plan.programs, parts, strict=True)},
                          {p.base.name: sink for p in plan.programs}, size_of=size_of)


def central_bytes(query: Query, streams: Streams, node: str) -> int:
    """The bytes ``central:node`` ships over ``streams``, computed without running it: every other
    stream's batch of every epoch in one full-tuple message to ``node``."""
    tau = query.execution.interval_ms
    last = max((t.ts for ts in streams.values() for t in ts), default=0) // tau
    total = 0
    for s in query.streams:
        if s.site == node:
            continue
        batches: dict[int, list[Tup]] = {}
        for t in streams.get(s.name, []):
            batches.setdefault(t.ts // tau, []).append(t)
        total += sum(envelope_size(Envelope(s.site, node, 0, e, TupleBatch([(t,) for t in batches.get(e, [])])))
                     for e in range(last + 1))
    return total
