"""Optimal plans: dynamic programming over (joined set, location), and brute force.

Plan cost is a sum of independent per-head sequence costs (Eq. 1), so each head is
optimised on its own.  The state of a sequence prefix (rate, tuple size, key
classes) is a function of the *set* of joined streams; only its location depends
on the algorithms chosen.  Hence the optimal completion of a prefix depends only on
(joined set, location), and

    best(set, loc) = min over next adjacent stream n, algorithm a of
                     step_cost(state(set, loc), n, a) + best(set ∪ {n}, loc')

is exact (Bellman).  Branch-and-bound skips a candidate whose step cost alone
already reaches the best total found (costs are non-negative).  States:
2^(m−1) sets × ≤ m locations; work O(2^m · m² · 6) per head, O(2^m · m³ · 6) per plan.

:func:`brute_force` enumerates every join-graph-consistent order × 6^(m−1)
algorithm choices (the paper's O(m! 6^m) exhaustive search) for tests.
"""
from __future__ import annotations

import math
from typing import Iterator, Optional

from joinlib.algorithms import ALGORITHMS
from joinlib.costs.unit_time import CostModel, MemoKey, SeqState, StepCache, frontier
from joinlib.model import Query
from joinlib.plan.logical import Plan, Sequence, Step, validate

_REL_TIE = 1e-12  # relative tolerance under which two totals count as a tie

#: one DP layer of :func:`best_algorithms`: location -> (cost, state, steps) of the cheapest prefix there
Layer = dict[str, tuple[float, SeqState, tuple[Step, ...]]]
#: the layers of every (head, order prefix) already computed
Layers = dict[tuple[str, tuple[str, ...]], Layer]


def _better(total: float, best: float) -> bool:
    """``total`` beats ``best`` by more than rounding noise (ties keep the earlier)."""
    if best == math.inf:
        return total < best
    return total < best - _REL_TIE * abs(best)


def _below(best: float) -> float:
    """The bound a total must be under to beat ``best`` (:func:`_better` as one comparison, for the DP's loop)."""
    return best if best == math.inf else best - _REL_TIE * abs(best)


_DONE: tuple[float, tuple[Step, ...]] = (0.0, ())   # every stream joined: nothing left to pay

_STEPS: dict[tuple[str, str], Step] = {}


def _step(stream: str, algorithm: str) -> Step:
    """``Step(stream, algorithm)``, one (immutable) instance per pair: the DP makes one per improvement."""
    hit = _STEPS.get((stream, algorithm))
    if hit is None:
        if len(_STEPS) > 10_000:
            _STEPS.clear()
        hit = _STEPS[(stream, algorithm)] = Step(stream, algorithm)
    return hit


#: the DP's table: (head, joined set, location) -> cheapest completion (cost, steps)
Memo = dict[MemoKey, tuple[float, tuple[Step, ...]]]


def exhaustive_sequence(query: Query, model: CostModel, head: str, start: Optional[str] = None,
                        cache: Optional[StepCache] = None, memo: Optional[Memo] = None) -> tuple[Sequence, float]:
    """The optimal join sequence of ``head`` and its cost (steps only), the sequence starting at
    ``start`` (default: the head's site).

    Ties go to the earlier next stream in query order, then the earlier algorithm.  ``cache`` and
    ``memo`` may be shared by the calls of one (query, model): the best completion of a state does
    not depend on where its sequence started, so the per-start searches of one head (``auto``) reuse
    each other's states instead of each solving its own DP.
    """
    memo = {} if memo is None else memo
    m, inf = len(query.streams), math.inf
    cache = cache or StepCache(query, model)

    def best(state: SeqState) -> tuple[float, tuple[Step, ...]]:
        if len(state.joined) == m:
            return _DONE
        key = state.memo_key()
        hit = memo.get(key)
        if hit is not None:
            return hit
        b_cost, b_rank, below = math.inf, 0, math.inf   # below: _better(x, b_cost) is x < below
        b_steps: tuple[Step, ...] = ()
        # cheapest step first: the best total found early bounds the rest (a step whose own cost
        # reaches it is not expanded); ties still go to the earlier stream, then algorithm
        moves = cache.moves(state)   # options not kept: each state is solved once
        for c, rank, nxt, alg, succ in moves:
            if not c < below and (b_cost < (c if c == inf else c - _REL_TIE * abs(c)) or rank > b_rank):
                continue   # bound: the rest costs >= 0
            hit = memo.get(succ.memo_key()) if len(succ.joined) < m else _DONE   # solved: no call
            rest, steps = hit if hit is not None else best(succ)
            total = c + rest
            if total < below or (not b_cost < _below(total) and rank < b_rank):
                b_cost, b_rank, b_steps = total, rank, (_step(nxt, alg),) + steps
                below = _below(b_cost)
        memo[key] = (b_cost, b_steps)
        return b_cost, b_steps

    cost, steps = best(SeqState.start(query, head, start))
    best = None   # type: ignore[assignment]  # the closure refers to itself: a cycle holding the cache, for the collector
    return Sequence(head, steps, start), cost


def exhaustive(query: Query, model: CostModel) -> Plan:
    """The plan of minimum estimated cost under ``model``."""
    seqs = tuple(exhaustive_sequence(query, model, s.name)[0] for s in query.streams)
    return validate(query, Plan(seqs))


def best_algorithms(query: Query, model: CostModel, head: str, order: list[str],
                    cache: Optional[StepCache] = None,
                    layers: Optional[Layers] = None) -> tuple[Sequence, float]:
    """The cheapest algorithms for a fixed join order (DP over the location).

    O(m · L · 6) with L ≤ m locations.  ``order`` must follow the join graph.
    ``layers`` (a dict kept by the caller) memoises the DP layer of every prefix,
    so orders sharing a prefix (local search) reuse its work.
    """
    cache = cache or StepCache(query, model)
    layers = {} if layers is None else layers
    k = len(order)
    while k > 0 and (head, tuple(order[:k])) not in layers:
        k -= 1
    if k:
        layer = layers[(head, tuple(order[:k]))]
    else:
        s0 = cache.canonical(SeqState.start(query, head))
        layer = {s0.location: (0.0, s0, ())}
    for i in range(k, len(order)):
        nxt = order[i]
        new: Layer = {}
        for cost, state, steps in layer.values():
            for alg, c, st in cache.options(state, nxt):
                total = cost + c
                cur = new.get(st.location)
                if cur is None or _better(total, cur[0]):
                    new[st.location] = (total, st, steps + (Step(nxt, alg),))
        layer = new
        layers[(head, tuple(order[:i + 1]))] = layer
    cost, _, steps = min(layer.values(), key=lambda v: v[0])
    return Sequence(head, steps), cost


def valid_orders(query: Query, head: str) -> Iterator[list[str]]:
    """Every join-graph-consistent order of the other streams, in query order."""
    names = query.names

    def rec(done: list[str]) -> Iterator[list[str]]:
        if len(done) == len(names):
            yield done[1:]
            return
        for n in names:
            if n not in done and any(query.predicates_between(n, d) for d in done):
                yield from rec(done + [n])

    yield from rec([head])


def brute_force_sequence(query: Query, model: CostModel, head: str) -> tuple[Sequence, float]:
    """Enumerate all orders × 6^(m−1) algorithms of ``head`` (prefix costs shared)."""
    best_cost = math.inf
    best_steps: tuple[Step, ...] = ()
    m = len(query.streams)

    def rec(state: SeqState, cost: float, steps: tuple[Step, ...]) -> None:
        nonlocal best_cost, best_steps
        if len(state.joined) == m:
            if _better(cost, best_cost):
                best_cost, best_steps = cost, steps
            return
        for nxt in frontier(query, state):
            for alg in ALGORITHMS:
                c = model.step_cost(query, state, nxt, alg)
                rec(state.advance(query, nxt, alg), cost + c, steps + (Step(nxt, alg),))

    rec(SeqState.start(query, head), 0.0, ())
    return Sequence(head, best_steps), best_cost


def brute_force(query: Query, model: CostModel) -> Plan:
    """The paper's exhaustive search, literally (exponential: tests only)."""
    seqs = tuple(brute_force_sequence(query, model, h)[0] for h in query.names)
    return validate(query, Plan(seqs))
