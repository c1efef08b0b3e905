"""The gap study of the planners, on random queries after the paper's Table 2.

``python -m joinlib.planner.improved -n 100 -m 4``: cost ratios greedy / exhaustive and
beam / exhaustive per join-graph topology; ``--timing 4,5,6``: planner wall-clock times.
The ``beam`` planner itself ("improved" in the brief) is :mod:`joinlib.planner.beamsearch`.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Iterable, Sequence
from typing import Optional, TypedDict, Unpack

from joinlib.costs import get_model
from joinlib.costs.unit_time import CostModel, plan_cost
from joinlib.data.synthetic import (
    TABLE2,
    TOPOLOGIES,
    QueryOptions,
    SyntheticStats,
    build_query,
    table2_stream,
    topology_edges,
)
from joinlib.model import Query
from joinlib.planner.beamsearch import DEFAULT_WIDTH, beam
from joinlib.planner.exhaustive import exhaustive
from joinlib.planner.greedy import greedy
from joinlib.planner.registry import COST_PLANNERS

improved = beam  # the brief's name for the polynomial planner; registered as "beam"

__all__ = ["TABLE2", "TOPOLOGIES", "DEFAULT_WIDTH", "beam", "improved", "make_query", "random_query",
           "topology_edges", "gap_study", "timing", "main"]

# --- random queries after the paper's Table 2, and the gap study -------------------------
def make_query(stats: Sequence[SyntheticStats], edges: Sequence[tuple[int, int]], *, name: str = "q",
               **kw: Unpack[QueryOptions]) -> Query:
    """:func:`joinlib.data.synthetic.build_query` with the name last (the planner studies' form)."""
    return build_query(name, stats, edges, **kw)


def random_query(rng: random.Random, m: int = 4, topology: str = "complete", **kw: Unpack[QueryOptions]) -> Query:
    """A random m-way query with Table 2 parameters (one site per stream)."""
    stats = [table2_stream(rng) for _ in range(m)]
    return make_query(stats, topology_edges(m, topology, rng), **kw)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 1.0


class GapSummary(TypedDict):
    """Ratios planner cost / exhaustive cost over random queries."""

    mean: float
    median: float
    std: float
    max: float
    optimal: float  # share of the queries where the planner found the optimum


def gap_study(n: int = 100, m: int = 4, width: int = DEFAULT_WIDTH, seed: int = 1,
              topologies: Iterable[str] = TOPOLOGIES, model: Optional[CostModel] = None,
              search: bool = True) -> dict[str, dict[str, GapSummary]]:
    """Greedy / exhaustive and beam / exhaustive cost ratios on random Table 2 queries."""
    model = model or get_model("paper")
    out = {}
    for topo in topologies:
        rng = random.Random(f"{seed}-{topo}")
        g: list[float] = []
        b: list[float] = []
        for _ in range(n):
            q = random_query(rng, m, topo)
            e = plan_cost(q, exhaustive(q, model), model)
            g.append(_ratio(plan_cost(q, greedy(q, model), model), e))
            b.append(_ratio(plan_cost(q, beam(q, model, width, search), model), e))
        out[topo] = {"greedy": _summary(g), "beam": _summary(b)}
    return out


def _summary(xs: list[float]) -> GapSummary:
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs),
            "std": statistics.pstdev(xs), "max": max(xs),
            "optimal": sum(1 for x in xs if x <= 1 + 1e-9) / len(xs)}


def timing(ms: Iterable[int] = (4, 5, 6), topology: str = "complete", seed: int = 1,
           model: Optional[CostModel] = None) -> list[dict[str, float]]:
    """Wall-clock seconds of each planner on one random query per size."""
    model = model or get_model("paper")
    rows = []
    for m in ms:
        q = random_query(random.Random(f"{seed}-{m}"), m, topology)
        row: dict[str, float] = {"m": m}
        for name, fn in COST_PLANNERS.items():
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
