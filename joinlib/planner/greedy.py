"""Algorithm 10 of Tran & Lee: the greedy planner.

For every head stream, start from the head and repeatedly append the stream
adjacent (in the join graph) to any stream already joined whose cheapest one-way
join algorithm has the smallest estimated cost; then advance the intermediate
stream (r_new = r_old × w_next × ρ).  Ties go to the earlier stream in query order,
then to the earlier algorithm in ``ALGORITHMS`` order (strict ``<`` as in Line 15).

Cost: m heads × (m − 1) steps × at most m − 1 candidates × 6 formulas = O(m³)
formula evaluations (the paper counts O(m²) candidate evaluations).
"""
from __future__ import annotations

import math

from joinlib.algorithms import ALGORITHMS
from joinlib.costs.unit_time import CostModel, SeqState, all_step_costs, frontier
from joinlib.model import Query
from joinlib.plan.logical import Plan, Sequence, Step, validate


def greedy_step(query: Query, model: CostModel, state: SeqState) -> tuple[str, str, float]:
    """Lines 8–18: the (S_next, A_next, C_min) chosen from ``state``."""
    best: tuple[str, str, float] | None = None
    for cand in frontier(query, state):
        costs = all_step_costs(model, query, state, cand)
        alg, c = ALGORITHMS[0], math.inf
        for a in ALGORITHMS:
            if costs[a] < c:
                alg, c = a, costs[a]
        if best is None or c < best[2]:
            best = (cand, alg, c)
    if best is None:
        raise ValueError(f"nothing can be joined after {', '.join(state.joined)}")
    return best


def greedy_sequence(query: Query, model: CostModel, head: str) -> tuple[Sequence, float]:
    """The greedy join sequence of ``head`` and its estimated cost."""
    state = SeqState.start(query, head)
    steps, total = [], 0.0
    while len(state.joined) < len(query.streams):
        nxt, alg, c = greedy_step(query, model, state)
        steps.append(Step(nxt, alg))
        total += c
        state = state.advance(query, nxt, alg)
    return Sequence(head, tuple(steps)), total


def greedy(query: Query, model: CostModel) -> Plan:
    """Algorithm 10: one greedy join sequence per head stream."""
    seqs = tuple(greedy_sequence(query, model, s.name)[0] for s in query.streams)
    return validate(query, Plan(seqs))
