"""The ``beam`` planner: beam search over sequence prefixes plus local search.

Per head:

1. **Beam search** of width B: layer k holds the B cheapest prefixes of length k
   (accumulated step cost), deduplicated on (joined set, location) — two prefixes
   with the same key have the same future, so only the cheaper is kept.
2. **Candidates**: the best complete beam sequence and the greedy sequence
   (Algorithm 10), so the result is never worse than greedy.
3. **Local search** from each candidate over join orders — swap two positions or
   move one stream elsewhere, keeping the join graph order — re-choosing the best
   algorithms of every order exactly (DP over the location, O(m² · 6)); first
   improvement, until no neighbour is cheaper.

Cost per head: beam O(m · B · m · 6) formulas; one local-search pass O(m² neighbours
× m² · 6).  Polynomial; ``beam(width=∞)`` with dedup is the exact DP.

The random-query generator of the paper's Table 2 and the gap study are in
:mod:`joinlib.planner.improved` (``python -m joinlib.planner.improved --help``).
"""
from __future__ import annotations

from typing import Iterator, Optional

from joinlib.costs.unit_time import CostModel, MemoKey, SeqState, StepCache, frontier
from joinlib.model import Query
from joinlib.plan.logical import Plan, Sequence, Step, validate
from joinlib.planner.exhaustive import Layers, _better, best_algorithms
from joinlib.planner.greedy import greedy_sequence

DEFAULT_WIDTH = 8


def _beam_search(query: Query, cache: StepCache, head: str, width: int) -> tuple[Sequence, float]:
    layer: list[tuple[float, SeqState, tuple[Step, ...]]] = [(0.0, cache.canonical(SeqState.start(query, head)), ())]
    for _ in range(len(query.streams) - 1):
        cand: dict[MemoKey, tuple[float, SeqState, tuple[Step, ...]]] = {}
        for cost, state, steps in layer:
            for nxt in frontier(query, state):
                for alg, c, st in cache.options(state, nxt):
                    total, key = cost + c, st.memo_key()
                    if key not in cand or _better(total, cand[key][0]):
                        cand[key] = (total, st, steps + (Step(nxt, alg),))
        layer = sorted(cand.values(), key=lambda v: v[0])[:width]  # stable: ties keep order
    cost, _, steps = layer[0]
    return Sequence(head, steps), cost


def _is_order(query: Query, head: str, order: list[str]) -> bool:
    done = {head}
    for n in order:
        if not any(query.predicates_between(n, d) for d in done):
            return False
        done.add(n)
    return True


def _neighbours(order: list[str]) -> Iterator[list[str]]:
    n = len(order)
    for i in range(n):
        for j in range(i + 1, n):
            o = list(order)
            o[i], o[j] = o[j], o[i]
            yield o
    for i in range(n):
        for j in range(n):
            if abs(i - j) > 1:  # moves by one position are swaps, done above
                o = list(order)
                o.insert(j, o.pop(i))
                yield o


def local_search(query: Query, model: CostModel, seq: Sequence, cost: float,
                 max_rounds: int = 1000, cache: Optional[StepCache] = None) -> tuple[Sequence, float]:
    """Improve ``seq`` by order moves (swap / insertion) with exact algorithm choice."""
    cache = cache or StepCache(query, model)
    layers: Layers = {}
    order = [st.stream for st in seq.steps]
    best_seq, best_cost = best_algorithms(query, model, seq.head, order, cache, layers)
    if not _better(best_cost, cost):
        best_seq, best_cost = seq, cost
    for _ in range(max_rounds):
        for nb in _neighbours(order):
            if nb == order or not _is_order(query, seq.head, nb):
                continue
            s, c = best_algorithms(query, model, seq.head, nb, cache, layers)
            if _better(c, best_cost):
                best_seq, best_cost, order = s, c, nb
                break
        else:
            break
    return best_seq, best_cost


def beam_sequence(query: Query, model: CostModel, head: str, width: int = DEFAULT_WIDTH,
                  search: bool = True) -> tuple[Sequence, float]:
    """The beam planner's sequence for ``head`` and its cost (never above greedy's)."""
    if width < 1:
        raise ValueError("beam width must be at least 1")
    cache = StepCache(query, model)
    # greedy first: on equal cost the result stays greedy's sequence
    cands = [greedy_sequence(query, model, head), _beam_search(query, cache, head, width)]
    if cands[1][0] == cands[0][0]:
        cands.pop()
    if search:
        cands = [local_search(query, model, s, c, cache=cache) for s, c in cands]
    best = cands[0]
    for s, c in cands[1:]:
        if _better(c, best[1]):
            best = (s, c)
    return best


def beam(query: Query, model: CostModel, width: int = DEFAULT_WIDTH, search: bool = True) -> Plan:
    """Beam search (width ``width``) + local search; cost ≤ greedy's by construction."""
    seqs = tuple(beam_sequence(query, model, s.name, width, search)[0] for s in query.streams)
    return validate(query, Plan(seqs))
