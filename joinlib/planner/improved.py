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

This module also holds the random-query generator of the paper's Table 2 and the
gap study (``python -m joinlib.planner.improved --help``).
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Iterator, Optional

from ..cost import CostModel, SeqState, StepCache, frontier, get_model, plan_cost
from ..model import Query
from ..synthetic import TOPOLOGIES, build_query, topology_edges  # noqa: F401  (re-exported)
from ..plan import Plan, Sequence, Step, validate
from .exhaustive import _better, best_algorithms
from .greedy import greedy_sequence

DEFAULT_WIDTH = 8


def _beam_search(query: Query, cache: StepCache, head: str, width: int) -> tuple[Sequence, float]:
    layer: list[tuple[float, SeqState, tuple[Step, ...]]] = [(0.0, cache.canonical(SeqState.start(query, head)), ())]
    for _ in range(len(query.streams) - 1):
        cand: dict = {}
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
    layers: dict = {}
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


improved = beam  # the brief's name for the polynomial planner; registered as "beam"


# --- random queries after the paper's Table 2, and the gap study -------------------------
TABLE2 = {
    "attributes": (10, 50, 100, 150, 200),
    "selectivity": (0.02, 0.04, 0.06, 0.08, 0.1),
    "rate": (10, 50, 100, 150, 200),
    "window_ms": (400, 800, 1200, 1600, 2000),
}


def make_query(stats: list[dict], edges: list[tuple[int, int]], *, name: str = "q", **kw) -> Query:
    """:func:`joinlib.synthetic.build_query` with the name last (the planner studies' form)."""
    return build_query(name, stats, edges, **kw)


def random_query(rng: random.Random, m: int = 4, topology: str = "complete", **kw) -> Query:
    """A random m-way query with Table 2 parameters (one site per stream)."""
    stats = [{"attributes": rng.choice(TABLE2["attributes"]),
              "selectivity": rng.choice(TABLE2["selectivity"]),
              "rate": rng.choice(TABLE2["rate"]),
              "window_ms": rng.choice(TABLE2["window_ms"])} for _ in range(m)]
    return make_query(stats, topology_edges(m, topology, rng), **kw)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 1.0


def gap_study(n: int = 100, m: int = 4, width: int = DEFAULT_WIDTH, seed: int = 1,
              topologies=TOPOLOGIES, model: Optional[CostModel] = None, search: bool = True) -> dict:
    """Greedy / exhaustive and beam / exhaustive cost ratios on random Table 2 queries."""
    from .exhaustive import exhaustive
    from .greedy import greedy
    model = model or get_model("paper")
    out = {}
    for topo in topologies:
        rng = random.Random(f"{seed}-{topo}")
        g, b = [], []
        for _ in range(n):
            q = random_query(rng, m, topo)
            e = plan_cost(q, exhaustive(q, model), model)
            g.append(_ratio(plan_cost(q, greedy(q, model), model), e))
            b.append(_ratio(plan_cost(q, beam(q, model, width, search), model), e))
        out[topo] = {"greedy": _summary(g), "beam": _summary(b)}
    return out


def _summary(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs),
            "std": statistics.pstdev(xs), "max": max(xs),
            "optimal": sum(1 for x in xs if x <= 1 + 1e-9) / len(xs)}


def timing(ms=(4, 5, 6), topology: str = "complete", seed: int = 1,
           model: Optional[CostModel] = None) -> list[dict]:
    """Wall-clock seconds of each planner on one random query per size."""
    from . import PLANNERS
    model = model or get_model("paper")
    rows = []
    for m in ms:
        q = random_query(random.Random(f"{seed}-{m}"), m, topology)
        row: dict = {"m": m}
        for name, fn in PLANNERS.items():
            t0 = time.perf_counter()
            fn(q, model)
            row[name] = time.perf_counter() - t0
        rows.append(row)
    return rows


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m joinlib.planner.improved",
                                 description="Gap of greedy and beam to the exhaustive optimum on random "
                                             "Table 2 queries, and planner timings.")
    ap.add_argument("-n", type=int, default=100, help="queries per topology (default 100)")
    ap.add_argument("-m", type=int, default=4, help="streams per query (default 4)")
    ap.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="beam width")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-search", action="store_true", help="beam without the local search")
    ap.add_argument("--model", default="paper", help="paper | bytes")
    ap.add_argument("--timing", type=str, default="", help="e.g. 4,5,6: time the planners instead")
    a = ap.parse_args(argv)
    model = get_model(a.model)
    if a.timing:
        for row in timing(tuple(int(x) for x in a.timing.split(",")), model=model):
            print(f"m={row.pop('m')}: " + ", ".join(f"{k} {v:.3f}s" for k, v in row.items()))
        return
    res = gap_study(a.n, a.m, a.width, a.seed, model=model, search=not a.no_search)
    print(f"{a.n} random {a.m}-way queries per topology, model {a.model}, beam width {a.width}"
          + (", no local search" if a.no_search else ""))
    print(f"{'topology':10} {'planner':7} {'mean':>6} {'median':>6} {'std':>6} {'max':>6} {'optimal':>8}")
    for topo, r in res.items():
        for planner, s in r.items():
            print(f"{topo:10} {planner:7} {s['mean']:6.3f} {s['median']:6.3f} {s['std']:6.3f} "
                  f"{s['max']:6.3f} {s['optimal']:8.0%}")


if __name__ == "__main__":
    main()
