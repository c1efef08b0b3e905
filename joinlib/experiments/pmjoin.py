"""``joinlib experiment pmjoin``: the model sweep of seed 002's Sect. 4 (Figs. 5 and 8).

Everything is computed with the rate model (cost = tuples per second shipped between nodes, as in
the paper's simulator counts; the final result's delivery is not counted), over synthetic per-value
rates (:mod:`.workload`); no data is generated and nothing runs on the engine.

* PMJoin (Fig. 8): 10 streams at 10 nodes, data range 1..1000, SD / DD × CHS / RHS; D from 1 to 1000
  × hash, range and rate-based partitioning, each group planned by STREAMJOINOPT; Simple and the
  exhaustive optimum of the unpartitioned streams (D = 1) beside them.
* Heuristic (Fig. 5): the unpartitioned plan of STREAMJOINOPT against the exhaustive optimum and
  Simple over data ranges 10..100,000, LASW / HASW × SD / DD.
"""
from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from tqdm import tqdm

from joinlib.experiments.parallel import run_all
from joinlib.experiments.pmjoin_figures import write_figures
from joinlib.plan.partition import HashPartition, PartitionFunction, RangePartition
from joinlib.pmjoin.exhaustive import optimal, simple
from joinlib.pmjoin.plan import group_columns, group_costs
from joinlib.pmjoin.ratepart import rate_partition
from joinlib.pmjoin.rates import ValueRates
from joinlib.pmjoin.streamjoinopt import stream_join_opt
from joinlib.pmjoin.tree import tree_cost
from joinlib.pmjoin.workload import Scenario, WorkloadInstance, instance

METHODS = ("hash", "range", "rate")
SCENARIOS = tuple(Scenario(similar, contiguous) for contiguous in (True, False) for similar in (True, False))
WINDOW_ORDERS = ("lasw", "hasw")
PAPER = {
    "fig8": "SD: moderate improvement over D = 1; DD: large savings already at D = 2, more with finer D. "
            "Rate-based partitioning works best except CHS-SD, where range is best for D > 2 (identical "
            "rank vectors under similar Zipf distributions); range is worse than hash under RHS.",
    "fig5": "Simple is flat over the data range; the heuristic and Optimal equal Simple at small ranges and "
            "drop as the range grows (lower selectivity); the heuristic stays very close to Optimal.",
}


@dataclass(frozen=True)
class Scale:
    """The sweep's size; :data:`QUICK` keeps its shape and JSON keys at a fraction of the work."""

    streams: int = 10
    seeds: int = 10
    ds: tuple[int, ...] = (1, 2, 5, 10, 50, 100, 500, 1000)
    data_range: int = 1000
    ranges: tuple[int, ...] = (10, 100, 1000, 10_000, 100_000)
    heuristic_seeds: int = 5
    first_seed: int = 1


QUICK = Scale(streams=8, seeds=2, ds=(1, 2, 10, 100), data_range=200, ranges=(10, 1000, 100_000),
              heuristic_seeds=1)


def partition_for(method: str, d: int, inst: WorkloadInstance, seed: int) -> PartitionFunction:
    if method == "hash":
        return HashPartition(d, seed)
    if method == "range":
        return RangePartition.equal_width(inst.values[0], inst.values[-1], d)
    m = inst.model
    stats = ValueRates(tuple(s.name for s in m.streams), inst.values, tuple(tuple(r) for r in m.lam.tolist()))
    return rate_partition(stats, d, seed)


def pmjoin_task(args: tuple[Scenario, int, tuple[int, ...]]) -> list[dict[str, Any]]:
    """One scenario and seed: every method × D, plus Simple and Optimal at D = 1."""
    scenario, seed, ds = args
    inst = instance(scenario, seed)
    m = inst.model
    base = {"scenario": scenario.name, "seed": seed}
    rows = [{**base, "method": "simple", "d": 1, "cost": tree_cost(simple(m), m), "groups_used": 1},
            {**base, "method": "optimal", "d": 1, "cost": optimal(m)[0], "groups_used": 1}]
    for method in METHODS:
        for d in ds:
            cols = group_columns(m, inst.values, partition_for(method, d, inst, seed))
            rows.append({**base, "method": method, "d": d, "cost": sum(group_costs(m, cols)),
                         "groups_used": sum(1 for c in cols if c)})  # groups with at least one value
    return rows


def heuristic_task(args: tuple[Scenario, int]) -> dict[str, Any]:
    """One unpartitioned instance: STREAMJOINOPT, Optimal and Simple."""
    scenario, seed = args
    m = instance(scenario, seed).model
    return {"scenario": ("SD" if scenario.similar else "DD"), "windows": scenario.windows.upper(),
            "range": scenario.data_range, "seed": seed, "heuristic": tree_cost(stream_join_opt(m), m),
            "optimal": optimal(m)[0], "simple": tree_cost(simple(m), m)}




def _mean(xs: Iterable[float]) -> float:
    vals = list(xs)
    return statistics.fmean(vals) if vals else float("nan")


def summarise_pmjoin(rows: list[dict[str, Any]], ds: tuple[int, ...]) -> dict[str, Any]:
    """scenario -> method -> D -> {mean cost, mean cost relative to the same seed's D = 1}."""
    out: dict[str, Any] = {}
    for sc in SCENARIOS:
        mine = [r for r in rows if r["scenario"] == sc.name]
        d1 = {r["seed"]: r["cost"] for r in mine if r["method"] == "hash" and r["d"] == 1}
        entry: dict[str, Any] = {}
        for method in METHODS:
            entry[method] = {str(d): {"cost": _mean(r["cost"] for r in mine if r["method"] == method and r["d"] == d),
                                      "relative": _mean(r["cost"] / d1[r["seed"]] for r in mine
                                                        if r["method"] == method and r["d"] == d and d1[r["seed"]])}
                             for d in ds}
        for base in ("simple", "optimal"):
            entry[base] = _mean(r["cost"] for r in mine if r["method"] == base)
        out[sc.name] = entry
    return out


def summarise_heuristic(rows: list[dict[str, Any]], ranges: tuple[int, ...]) -> dict[str, Any]:
    """"LASW-SD" ... -> range -> mean {heuristic, optimal, simple} and heuristic / optimal."""
    out: dict[str, Any] = {}
    for w in WINDOW_ORDERS:
        for sim in ("SD", "DD"):
            key = f"{w.upper()}-{sim}"
            out[key] = {}
            for rng in ranges:
                mine = [r for r in rows if r["windows"] == w.upper() and r["scenario"] == sim and r["range"] == rng]
                out[key][str(rng)] = {k: _mean(r[k] for r in mine) for k in ("heuristic", "optimal", "simple")}
                out[key][str(rng)]["heuristic_over_optimal"] = _mean(
                    r["heuristic"] / r["optimal"] for r in mine if r["optimal"] > 0)
    return out


def checks(pm: dict[str, Any], heur: dict[str, Any], ds: tuple[int, ...]) -> dict[str, Any]:
    """The paper's qualitative claims, computed on the summaries."""
    d2, dmax = str(ds[1]), str(ds[-1])

    def best(sc: str, d: str) -> float:
        return float(min(pm[sc][m][d]["relative"] for m in METHODS))

    ratios = [v["heuristic_over_optimal"] for sc in heur.values() for v in sc.values()]
    rate_best = {f"{sc}@D={d}": min(METHODS, key=lambda m: pm[sc][m][d]["cost"]) for sc in pm for d in map(str, ds[1:])}
    return {
        "dd_saves_more_than_sd_at_d2": all(best(f"DD-{h}", d2) < best(f"SD-{h}", d2) for h in ("CHS", "RHS")),
        "dd_saves_more_than_sd_at_dmax": all(best(f"DD-{h}", dmax) < best(f"SD-{h}", dmax) for h in ("CHS", "RHS")),
        "finest_d_beats_d1_everywhere": all(pm[sc][m][dmax]["relative"] < 1 for sc in pm for m in METHODS),
        "saving_at_dmax": {sc: round(1 - best(sc, dmax), 4) for sc in pm},
        "saving_at_d2": {sc: round(1 - best(sc, d2), 4) for sc in pm},
        "best_method": rate_best,
        "heuristic_over_optimal_mean": _mean(ratios), "heuristic_over_optimal_max": max(ratios),
        "simple_flat_over_ranges": all(len({round(v["simple"], 6) for v in sc.values()}) == 1 for sc in heur.values()),
    }


def _bar(total: int, enabled: bool, desc: str) -> Callable[[int], Any]:
    if not enabled:
        return lambda n: None
    t = tqdm(total=total, unit="run", file=sys.stderr, desc=desc)
    return t.update


def run(scale: Scale, jobs: int = 1, progress: bool = False) -> dict[str, Any]:
    """The whole sweep as the JSON document ``main`` writes."""
    seeds = range(scale.first_seed, scale.first_seed + scale.seeds)
    scenarios = [Scenario(s.similar, s.contiguous, scale.data_range, scale.streams) for s in SCENARIOS]
    pm_tasks = [(sc, seed, scale.ds) for sc in scenarios for seed in seeds]
    h_seeds = range(scale.first_seed, scale.first_seed + scale.heuristic_seeds)
    h_tasks = [(Scenario(sim, True, rng, scale.streams, w), seed) for w in WINDOW_ORDERS for sim in (True, False)
               for rng in scale.ranges for seed in h_seeds]
    bar = _bar(len(pm_tasks) + len(h_tasks), progress, "pmjoin")
    pm_rows = [r for rows in run_all(pmjoin_task, pm_tasks, jobs, bar) for r in rows]
    h_rows = run_all(heuristic_task, h_tasks, jobs, bar)
    pm, heur = summarise_pmjoin(pm_rows, scale.ds), summarise_heuristic(h_rows, scale.ranges)
    return {"scale": asdict(scale), "paper": PAPER, "checks": checks(pm, heur, scale.ds),
            "pmjoin": pm, "heuristic": heur, "pmjoin_runs": pm_rows, "heuristic_runs": h_rows}


def main(out: Path, scale: Scale, jobs: Optional[int] = None, progress: bool = False) -> dict[str, Any]:
    """Run the sweep; write ``out/pmjoin.json``, ``out/fig8_pmjoin.png``, ``out/fig5_heuristic.png``."""
    doc = run(scale, jobs if jobs is not None else 1, progress)
    (out / "pmjoin.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_figures(doc, out)
    print(summary(doc))
    return doc


def summary(doc: dict[str, Any]) -> str:
    """The measured shapes as text (what docs/pmjoin.md quotes)."""
    sc = doc["scale"]
    lines = [f"{sc['streams']} streams, data range 1..{sc['data_range']}, {sc['seeds']} seeds; cost = tuples/s shipped",
             "PMJoin: mean cost relative to D = 1 (same seed), by D"]
    ds = [str(d) for d in sc["ds"]]
    for name, entry in doc["pmjoin"].items():
        lines.append(f"  {name}  (D = 1: {entry['hash'][ds[0]]['cost']:.1f}; Simple {entry['simple']:.1f}, "
                     f"Optimal {entry['optimal']:.1f})")
        lines.append("    " + f"{'D':<7}" + "".join(f"{d:>8}" for d in ds))
        for m in METHODS:
            lines.append("    " + f"{m:<7}" + "".join(f"{entry[m][d]['relative']:>8.3f}" for d in ds))
    lines.append("Heuristic vs Optimal vs Simple (D = 1), mean tuples/s by data range")
    for name, entry in doc["heuristic"].items():
        cells = ", ".join(f"{r}: {v['heuristic']:.1f} / {v['optimal']:.1f} / {v['simple']:.1f}"
                          for r, v in entry.items())
        lines.append(f"  {name}: {cells}")
    c = doc["checks"]
    lines.append(f"heuristic / optimal: mean {c['heuristic_over_optimal_mean']:.3f}, "
                 f"max {c['heuristic_over_optimal_max']:.3f}; DD saves more than SD at D = 2: "
                 f"{c['dd_saves_more_than_sd_at_d2']}, at the finest D: {c['dd_saves_more_than_sd_at_dmax']}")
    return "\n".join(lines)
