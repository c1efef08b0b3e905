"""``joinlib experiment iflow``: seed 001's simulation study at the digest's small-reproduction scale.

100 five-stream queries arrive one by one on a 64-node transit-stub network (8 stubs × 8) and are
deployed in sequence; each planner runs the whole sequence with its own deployments D (so reuse
depends on its own earlier choices), and every query is compared with the integrated optimum *under
the same D* (digest pitfall 5).  Hierarchical planners run for every ``maxcs``.  Reported per run:
total network usage (Σ marginal costs = Σ per-link usage, checked), per-query cost relative to the
optimum, the fraction of Lemma 1's space examined, planning time, reuses.  Savings of integrated
planning with reuse against plan-then-deploy, and a sensitivity sweep over how much the queries
overlap (fewer base streams: more shared joins).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

from tqdm import tqdm

from joinlib.experiments.iflow_figures import write_figures
from joinlib.multiquery.cost import Deployments
from joinlib.multiquery.errors import MultiQueryError
from joinlib.multiquery.hierarchy import Hierarchy, build_hierarchy
from joinlib.multiquery.planners import PLANNERS, Context, PlannerSpec, plan_exhaustive, plan_optimal
from joinlib.multiquery.search import lemma1
from joinlib.multiquery.streams import Bound, QueryWorkload, generate_workload
from joinlib.multiquery.topology import PhysicalNetwork, load_topology, transit_stub

FLAT = ("optimal", "optimal-noreuse", "ptd-optimal", "ptd-optimal+reuse", "ptd-relaxation")
HIERARCHICAL = ("top-down", "bottom-up", "npc")
BASELINES = ("ptd-optimal", "ptd-relaxation", "ptd-optimal+reuse")
PAPER = {
    "saving_vs_plan_then_deploy": "> 50 percent (Fig. 2: 100 queries over five streams each, 64 nodes; "
                                  "against Relaxation and against optimal placement by exhaustive search)",
    "top_down": "on average suboptimal by only 10 percent while considering less than 1 percent of the search space",
    "bottom_up": "smaller search space than Top-Down, larger suboptimality (no number in the seed text)",
    "npc": "between Top-Down and Bottom-Up (no number in the seed text)",
    "search_space_k5_n64": 3_019_898_880,
}
Step = Callable[[int], None]


@dataclass(frozen=True)
class Scale:
    """The experiment's size; ``QUICK`` is the under-a-minute version with the same JSON keys."""

    queries: int = 100
    k: int = 5
    stubs: int = 8
    per_stub: int = 8
    streams: int = 12
    maxcs: tuple[int, ...] = (4, 8, 16, 32)
    seed: int = 1
    check_exhaustive: int = 100
    sweep_streams: tuple[int, ...] = (8, 10, 12, 15)
    sweep_queries: int = 100


QUICK = Scale(queries=10, check_exhaustive=2, sweep_streams=(8, 12), sweep_queries=8)


def run_sequence(top: PhysicalNetwork, work: QueryWorkload, spec: PlannerSpec, hierarchy: Optional[Hierarchy],
                 step: Step, check_exhaustive: int = 0,
                 compare: bool = True) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Plan and deploy every query of ``work`` in order with ``spec``; (summary, per-query records)."""
    d = Deployments()
    records: list[dict[str, Any]] = []
    exhaustive_ok = True
    for i, q in enumerate(work.queries):
        b = Bound(q, work.catalogue, top.index)
        ctx = Context(top, b, d, hierarchy)
        t0 = time.perf_counter()
        plan = spec.run(ctx)
        ms = (time.perf_counter() - t0) * 1000
        cost = plan.cost(top)
        opt = (plan_optimal(ctx).cost(top) if spec.name != "optimal" else cost) if compare else cost
        if i < check_exhaustive:
            exhaustive_ok &= abs(plan_exhaustive(ctx).cost(top) - opt) <= 1e-6 * max(1.0, opt)
        full = lemma1(len(q.streams), top.n)
        records.append({"query": q.name, "cost": cost, "optimum": opt,
                        "ratio": cost / opt if opt > 0 else (1.0 if cost == 0 else None),
                        "examined": plan.examined, "fraction": plan.examined / full, "ms": round(ms, 3),
                        "reused": len(plan.reused()), "plan": plan.root.text(top)})
        d.deploy(plan, b)
        step(1)
    return _summary(top, spec, hierarchy, d, records, exhaustive_ok if check_exhaustive else None), records


def _summary(top: PhysicalNetwork, spec: PlannerSpec, hierarchy: Optional[Hierarchy], d: Deployments,
             records: list[dict[str, Any]], exhaustive_ok: Optional[bool]) -> dict[str, Any]:
    ratios = sorted(r["ratio"] for r in records if r["ratio"] is not None)
    total = sum(r["cost"] for r in records)
    return {
        "planner": spec.name, "maxcs": hierarchy.maxcs if hierarchy else None,
        "total": total, "total_deployed": d.total_cost(top), "total_link_usage": sum(d.link_usage(top).values()),
        "optimum_total_same_d": sum(r["optimum"] for r in records),
        "ratio_of_totals": total / max(sum(r["optimum"] for r in records), 1e-12),
        "ratio": {"mean": statistics.fmean(ratios), "median": statistics.median(ratios),
                  "p90": ratios[int(0.9 * (len(ratios) - 1))], "max": ratios[-1],
                  "optimal_share": sum(1 for r in ratios if r <= 1 + 1e-9) / len(ratios)},
        "fraction_examined": {"mean": statistics.fmean(r["fraction"] for r in records),
                              "max": max(r["fraction"] for r in records)},
        "plans_examined_mean": statistics.fmean(r["examined"] for r in records),
        "planning_ms_mean": statistics.fmean(r["ms"] for r in records),
        "reuses": d.reuses, "operators": d.operators, "exhaustive_equals_optimal": exhaustive_ok,
    }


def _hierarchy_info(top: PhysicalNetwork, h: Hierarchy) -> dict[str, Any]:
    return {"levels": len(h.levels), "clusters_per_level": [len(lv) for lv in h.levels],
            "largest_cluster": max(len(c.members) for lv in h.levels for c in lv),
            "radius_per_level": [round(h.radius(top, i + 1), 3) for i in range(len(h.levels))]}


def _savings(runs: list[dict[str, Any]], maxcs: Sequence[int]) -> dict[str, Any]:
    tot = {(r["planner"], r["maxcs"]): r["total"] for r in runs}
    out: dict[str, Any] = {"integrated_optimum_vs": {b: 1 - tot[("optimal", None)] / tot[(b, None)] for b in BASELINES},
                           "reuse_share_of_optimum": 1 - tot[("optimal", None)] / tot[("optimal-noreuse", None)]}
    out["top_down_vs"] = {str(m): {b: 1 - tot[("top-down", m)] / tot[(b, None)] for b in BASELINES} for m in maxcs}
    out["total_relative_to_optimal_run"] = {
        f"{p}@{m}" if m else p: t / tot[("optimal", None)] for (p, m), t in tot.items()}
    return out


VARIANTS = {"varied": (0.15, 0.6), "uniform": (0.0, 1.0)}  # (p_filter, p_all_columns) of the generator


def _sweep(top: PhysicalNetwork, scale: Scale, step: Step) -> list[dict[str, Any]]:
    """Savings against plan-then-deploy as the queries overlap more: fewer base streams, and queries that
    all project every column and filter nothing ("uniform") against the default mix ("varied")."""
    out = []
    for variant, (p_filter, p_all) in VARIANTS.items():
        for n in _sweep_streams(top, scale):
            work = generate_workload(top.nodes, scale.sweep_queries, scale.k, n, seed=scale.seed, p_filter=p_filter,
                            p_all_columns=p_all)
            row: dict[str, Any] = {"variant": variant, "streams": n}
            for name in ("optimal", "ptd-optimal", "ptd-relaxation"):
                summ, _ = run_sequence(top, work, PLANNERS[name], None, step, compare=False)
                row[name] = summ["total"]
                row[f"{name}_reuses"] = summ["reuses"]
            row["saving_vs_ptd_optimal"] = 1 - row["optimal"] / row["ptd-optimal"]
            row["saving_vs_ptd_relaxation"] = 1 - row["optimal"] / row["ptd-relaxation"]
            out.append(row)
    return out


def _sweep_streams(top: PhysicalNetwork, scale: Scale) -> list[int]:
    return [n for n in scale.sweep_streams if scale.k <= n <= top.n]


def _bar(total: int, enabled: bool) -> tuple[Step, Callable[[], None]]:
    if not enabled:
        return (lambda n: None), (lambda: None)
    t = tqdm(total=total, unit="query", file=sys.stderr, desc="iflow")

    def step(n: int) -> None:
        t.update(n)

    return step, t.close


def run(scale: Scale, topology: Optional[Path] = None, progress: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole experiment: (report for iflow.json, per-query records for iflow_runs.json)."""
    top = load_topology(topology) if topology else transit_stub(scale.stubs, scale.per_stub, scale.seed)
    if scale.streams > top.n:
        raise MultiQueryError(f"the topology has {top.n} nodes: too few for {scale.streams} base streams")
    work = generate_workload(top.nodes, scale.queries, scale.k, scale.streams, seed=scale.seed)
    hierarchies = {m: build_hierarchy(top, m) for m in scale.maxcs}
    n_sweep = len(_sweep_streams(top, scale)) * len(VARIANTS) * 3 * scale.sweep_queries
    step, close = _bar(scale.queries * (len(FLAT) + len(HIERARCHICAL) * len(scale.maxcs)) + n_sweep, progress)
    runs: list[dict[str, Any]] = []
    records: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for name in FLAT:
            summ, recs = run_sequence(top, work, PLANNERS[name], None, step,
                                      scale.check_exhaustive if name == "optimal" else 0)
            runs.append(summ)
            records[name] = recs
        for m, h in hierarchies.items():
            for name in HIERARCHICAL:
                summ, recs = run_sequence(top, work, PLANNERS[name], h, step)
                runs.append(summ)
                records[f"{name}@{m}"] = recs
        sweep = _sweep(top, scale, step)
    finally:
        close()
    report = {
        "scale": asdict(scale), "topology": {"nodes": top.n, "links": len(top.links),
                                             "source": str(topology) if topology else "transit_stub"},
        "paper": PAPER, "lemma1": {"k": scale.k, "n": top.n, "count": lemma1(scale.k, top.n)},
        "hierarchies": {str(m): _hierarchy_info(top, h) for m, h in hierarchies.items()},
        "runs": runs, "savings": _savings(runs, scale.maxcs), "sweep": sweep,
        "checks": _checks(runs), "seconds": round(time.perf_counter() - started, 1),
    }
    return report, records


def _checks(runs: list[dict[str, Any]]) -> dict[str, bool]:
    opt = next(r for r in runs if r["planner"] == "optimal")
    return {
        "exhaustive_equals_optimal": bool(opt["exhaustive_equals_optimal"]),
        "totals_equal_link_usage": all(abs(r["total"] - r["total_link_usage"]) <= 1e-6 * r["total"]
                                       and abs(r["total"] - r["total_deployed"]) <= 1e-6 * r["total"] for r in runs),
        "no_planner_beats_the_optimum": all(r["ratio"]["mean"] >= 1 - 1e-9 and
                                            r["total"] >= r["optimum_total_same_d"] * (1 - 1e-9) for r in runs),
    }


def main(out: Path, scale: Scale, topology: Optional[Path] = None, progress: bool = False) -> dict[str, Any]:
    """Run, write ``out/iflow.json``, ``out/iflow_runs.json`` and the PNGs, print the summary."""
    report, records = run(scale, topology, progress)
    (out / "iflow.json").write_text(json.dumps(report, indent=1))
    (out / "iflow_runs.json").write_text(json.dumps(records, separators=(",", ":")))
    write_figures(report, records, out)
    print(summary(report))
    return report


def summary(report: dict[str, Any]) -> str:
    """The measured figures as a text table beside the paper's (what docs/multiquery.md quotes)."""
    s = report["scale"]
    lines = [f"{s['queries']} queries x {s['k']} streams ({s['streams']} base streams), "
             f"{report['topology']['nodes']} nodes, seed {s['seed']}; Lemma 1: {report['lemma1']['count']:,} "
             f"plans per query; {report['seconds']} s",
             f"{'planner':<20}{'maxcs':>6}{'total usage':>13}{'vs opt run':>11}{'Σ/Σopt':>8}{'ratio mean':>11}"
             f"{'median':>8}{'p90':>8}{'examined':>11}{'ms/query':>9}{'reuses':>7}"]
    rel = report["savings"]["total_relative_to_optimal_run"]
    for r in report["runs"]:
        key = f"{r['planner']}@{r['maxcs']}" if r["maxcs"] else r["planner"]
        lines.append(f"{r['planner']:<20}{r['maxcs'] or '-':>6}{r['total']:>13,.0f}{rel[key]:>11.3f}"
                     f"{r['ratio_of_totals']:>8.3f}{r['ratio']['mean']:>11.3f}{r['ratio']['median']:>8.3f}"
                     f"{r['ratio']['p90']:>8.3f}{r['fraction_examined']['mean']:>11.4%}{r['planning_ms_mean']:>9.1f}"
                     f"{r['reuses']:>7}")
    sv = report["savings"]
    lines.append("integrated optimum with reuse saves, in total network usage: "
                 + ", ".join(f"{v:.1%} vs {k}" for k, v in sv["integrated_optimum_vs"].items())
                 + f"; reuse alone {sv['reuse_share_of_optimum']:.1%} (paper: > 50% vs plan-then-deploy)")
    for row in report["sweep"]:
        lines.append(f"  overlap sweep, {row['variant']}, {row['streams']} base streams: saving "
                     f"{row['saving_vs_ptd_optimal']:.1%} vs ptd-optimal, "
                     f"{row['saving_vs_ptd_relaxation']:.1%} vs ptd-relaxation")
    lines.append("paper, Top-Down: within ~10% of optimal examining < 1% of the space; checks: "
                 + ", ".join(f"{k}={v}" for k, v in report["checks"].items()))
    return "\n".join(lines)


def with_overrides(scale: Scale, queries: Optional[int], maxcs: Optional[tuple[int, ...]],
                   seed: Optional[int]) -> Scale:
    """``scale`` with the command line's --queries / --maxcs / --seed applied."""
    if queries is not None:
        scale = replace(scale, queries=queries, sweep_queries=min(scale.sweep_queries, queries))
    if maxcs is not None:
        scale = replace(scale, maxcs=maxcs)
    if seed is not None:
        scale = replace(scale, seed=seed)
    return scale
